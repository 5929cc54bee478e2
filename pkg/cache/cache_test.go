package cache

import (
	"strconv"
	"sync"
	"testing"
)

func TestBoundedTurnsGenerations(t *testing.T) {
	tests := []struct {
		name                 string
		maxEntries, maxBytes int
		puts                 []int // sizes of the values put under keys 0, 1, ...
		wantKeys             []int // keys left
	}{
		{"under budget", 4, 0, []int{0, 0, 0, 0}, []int{0, 1, 2, 3}},
		{"entries full: the older half dropped", 4, 0, []int{0, 0, 0, 0, 0}, []int{2, 3, 4}},
		{"bytes full", 10, 100, []int{20, 20, 20, 20, 20, 20}, []int{2, 3, 4, 5}},
		{"bytes exactly at budget", 10, 100, []int{25, 25, 25, 25}, []int{0, 1, 2, 3}},
		{"oversized value not kept", 10, 100, []int{10, 26, 10}, []int{0, 2}},
		{"no byte budget keeps any size", 10, 0, []int{1 << 30}, []int{0}},
		{"one entry", 1, 0, []int{0, 0, 0}, []int{1, 2}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := New[int, string](tt.maxEntries, tt.maxBytes)
			for k, size := range tt.puts {
				c.Put(k, strconv.Itoa(k), size)
			}
			if c.Len() != len(tt.wantKeys) {
				t.Fatalf("Len = %d, want %d", c.Len(), len(tt.wantKeys))
			}
			for _, k := range tt.wantKeys {
				if v, ok := c.peek(k); !ok || v != strconv.Itoa(k) {
					t.Errorf("key %d = %q, %v", k, v, ok)
				}
			}
		})
	}
}

// peek is Get without moving the entry: a Get that turns the generations
// over would drop keys still to be checked.
func (c *Bounded[K, V]) peek(k K) (V, bool) {
	if v, ok := c.cur[k]; ok {
		return v, true
	}
	v, ok := c.old[k]
	return v, ok
}

// An entry read between turns stays; one not read is dropped at the second
// turn after its put.
func TestBoundedKeepsWhatIsRead(t *testing.T) {
	c := New[int, int](4, 40)
	c.Put(-1, -1, 10)
	for i := range 100 {
		c.Put(i, i, 10)
		if v, ok := c.Get(-1); !ok || v != -1 {
			t.Fatalf("after put %d: Get(hot) = %d, %v", i, v, ok)
		}
		if c.Len() > 4 || c.curBytes > 20 || c.oldBytes > 20 {
			t.Fatalf("after put %d: %d entries, %d + %d bytes over the budget", i, c.Len(), c.curBytes, c.oldBytes)
		}
	}
	if _, ok := c.Get(0); ok {
		t.Fatal("a key never read again is still cached after 100 puts")
	}
}

func TestBoundedReplaceCountsEntryOnce(t *testing.T) {
	c := New[string, int](4, 0)
	c.Put("a", 1, 0)
	c.Put("b", 1, 0)
	c.Put("c", 1, 0) // a and b older
	c.Put("b", 2, 0) // moved to the newer
	if v, ok := c.Get("b"); !ok || v != 2 || c.Len() != 3 {
		t.Fatalf("Get(b) = %d, %v; Len %d", v, ok, c.Len())
	}
}

// Run with -race: readers and writers at once, as the indexer's workers do.
func TestBoundedConcurrent(t *testing.T) {
	c := New[int, int](100, 1000)
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 10000 {
				k := (i * (w + 1)) % 300
				if v, ok := c.Get(k); ok && v != k {
					t.Errorf("Get(%d) = %d", k, v)
					return
				}
				c.Put(k, k, 5)
			}
		}()
	}
	wg.Wait()
	if c.Len() > 100 || c.curBytes > 500 || c.oldBytes > 500 {
		t.Fatalf("Len = %d, bytes %d + %d: over the budget", c.Len(), c.curBytes, c.oldBytes)
	}
}

func BenchmarkBoundedGet(b *testing.B) {
	c := New[uint64, int](1<<16, 0)
	for i := range uint64(1 << 10) {
		c.Put(i, int(i), 0)
	}
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		c.Get(uint64(i) & (1<<10 - 1))
	}
}
