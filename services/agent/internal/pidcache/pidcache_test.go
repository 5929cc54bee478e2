package pidcache

import "testing"

type proc struct{ name string }

func TestValue(t *testing.T) {
	c := New[proc, string](2, 1<<20)
	reads := 0
	read := func(s string) func(*proc) (string, int) {
		return func(p *proc) (string, int) { reads++; return p.name + s, 10 }
	}
	if _, o := c.Value(1, 0x10, read("a")); o != Unregistered || reads != 0 {
		t.Fatalf("unregistered pid: outcome %v, %d reads", o, reads)
	}
	c.Add(1, &proc{"p1:"})
	if v, o := c.Value(1, 0x10, read("a")); v != "p1:a" || o != Read {
		t.Fatalf("first read: %q %v", v, o)
	}
	if v, o := c.Value(1, 0x10, read("b")); v != "p1:a" || o != Hit || reads != 1 {
		t.Fatalf("second lookup: %q %v after %d reads, want the cached value", v, o, reads)
	}
	// Two more values: the least recently used goes past maxEntries.
	c.Value(1, 0x20, read("c"))
	c.Value(1, 0x30, read("d"))
	if n, b := c.Len(); n != 2 || b != 20 {
		t.Fatalf("Len = %d, %d; want 2 entries of 20 bytes", n, b)
	}
	if _, o := c.Value(1, 0x10, read("a")); o != Read {
		t.Fatalf("evicted value: outcome %v, want a new read", o)
	}
	// An exec replaces the process and forgets its values.
	c.Add(1, &proc{"p1'"})
	if v, o := c.Value(1, 0x30, read("d")); v != "p1'd" || o != Read {
		t.Fatalf("after exec: %q %v", v, o)
	}
	c.Remove(1)
	if n, b := c.Len(); n != 0 || b != 0 || c.Process(1) != nil {
		t.Fatalf("after Remove: %d entries, %d bytes, process %v", n, b, c.Process(1))
	}
}

func TestByteBound(t *testing.T) {
	c := New[proc, string](100, 25)
	c.Add(7, &proc{})
	for a := uint64(0); a < 5; a++ {
		c.Value(7, a, func(*proc) (string, int) { return "", 10 })
	}
	if n, b := c.Len(); n != 2 || b != 20 {
		t.Fatalf("Len = %d, %d; want 2 entries, 20 bytes (bound 25)", n, b)
	}
}

func TestNotCachedWhenReplacedWhileReading(t *testing.T) {
	c := New[proc, string](10, 1<<20)
	c.Add(3, &proc{"old"})
	v, o := c.Value(3, 1, func(p *proc) (string, int) {
		c.Add(3, &proc{"new"}) // an exec while the old image was read
		return p.name, 1
	})
	if v != "old" || o != Read {
		t.Fatalf("%q %v", v, o)
	}
	if n, _ := c.Len(); n != 0 {
		t.Fatalf("a value of the replaced process was cached")
	}
}
