package cache

import (
	"strconv"
	"sync"
	"testing"
)

func TestBoundedClearsWhenFull(t *testing.T) {
	tests := []struct {
		name                 string
		maxEntries, maxBytes int
		puts                 []int // sizes of the values put under keys 0, 1, ...
		wantKeys             []int // keys left
	}{
		{"under budget", 3, 0, []int{0, 0, 0}, []int{0, 1, 2}},
		{"entries full", 3, 0, []int{0, 0, 0, 0}, []int{3}},
		{"bytes full", 10, 100, []int{20, 20, 20, 20, 20, 20}, []int{5}},
		{"bytes exactly at budget", 10, 100, []int{25, 25, 25, 25}, []int{0, 1, 2, 3}},
		{"oversized value not kept", 10, 100, []int{10, 26, 10}, []int{0, 2}},
		{"no byte budget keeps any size", 10, 0, []int{1 << 30}, []int{0}},
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
				if v, ok := c.Get(k); !ok || v != strconv.Itoa(k) {
					t.Errorf("Get(%d) = %q, %v", k, v, ok)
				}
			}
		})
	}
}

func TestBoundedReplaceCountsEntryOnce(t *testing.T) {
	c := New[string, int](2, 0)
	c.Put("a", 1, 0)
	c.Put("b", 1, 0)
	c.Put("b", 2, 0) // full: the cache is cleared, then b set
	if v, ok := c.Get("b"); !ok || v != 2 || c.Len() != 1 {
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
	if c.Len() > 100 {
		t.Fatalf("Len = %d over the budget", c.Len())
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
