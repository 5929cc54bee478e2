// Package cache is the one bounded cache of the services: a goroutine-safe
// map dropped whole when it reaches its entry or byte budget. It fits values
// that never go stale once computed (a stack ID is a hash of its frames), so
// no eviction order is worth its bookkeeping: clearing is cheap, bounds
// memory, and the next records fill the cache with what is hot again.
package cache

import "sync"

// Bounded holds at most MaxEntries entries and, when maxBytes > 0, about
// maxBytes bytes as the callers size them.
type Bounded[K comparable, V any] struct {
	maxEntries, maxBytes int
	mu                   sync.RWMutex
	m                    map[K]V
	bytes                int
}

// New returns an empty cache of at most maxEntries entries (at least 1) and,
// when maxBytes > 0, about maxBytes bytes.
func New[K comparable, V any](maxEntries, maxBytes int) *Bounded[K, V] {
	return &Bounded[K, V]{maxEntries: max(maxEntries, 1), maxBytes: maxBytes, m: map[K]V{}}
}

// Get returns the value of k.
func (c *Bounded[K, V]) Get(k K) (V, bool) {
	c.mu.RLock()
	v, ok := c.m[k]
	c.mu.RUnlock()
	return v, ok
}

// Put sets k to v, which holds about size bytes (0 when only entries are
// counted). A full cache is cleared first. With a byte budget, a value
// larger than a quarter of it is not kept: it would flush the others.
func (c *Bounded[K, V]) Put(k K, v V, size int) {
	if c.maxBytes > 0 && size > c.maxBytes/4 {
		return
	}
	c.mu.Lock()
	if len(c.m) >= c.maxEntries || (c.maxBytes > 0 && c.bytes+size > c.maxBytes) {
		clear(c.m)
		c.bytes = 0
	}
	c.m[k] = v
	c.bytes += size
	c.mu.Unlock()
}

// Len is the number of entries.
func (c *Bounded[K, V]) Len() int {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return len(c.m)
}
