// Package cache is the one bounded cache of the services: a goroutine-safe
// map in two generations of half the entry and byte budget each. When the
// newer is full it becomes the older and the older is dropped; an entry
// read from the older is moved back to the newer. It fits values that never
// go stale once computed (a stack ID is a hash of its frames), so no finer
// eviction order is worth its bookkeeping, and what is still in use stays
// cached across a turn: one map cleared at its bound had every hot entry
// computed again at once (for the indexer's stored stacks, a burst of
// scripted updates to documents already stored).
package cache

import "sync"

// Bounded holds at most MaxEntries entries and, when maxBytes > 0, about
// maxBytes bytes as the callers size them.
type Bounded[K comparable, V any] struct {
	half, halfBytes int // per generation; halfBytes 0 counts entries only
	mu              sync.RWMutex
	cur, old        map[K]V // an entry is in one of them
	curBytes        int
	oldBytes        int
}

// New returns an empty cache of at most maxEntries entries and, when
// maxBytes > 0, about maxBytes bytes; each generation holds half of both
// (at least one entry).
func New[K comparable, V any](maxEntries, maxBytes int) *Bounded[K, V] {
	return &Bounded[K, V]{half: max(maxEntries/2, 1), halfBytes: max(maxBytes/2, 0), cur: map[K]V{}, old: map[K]V{}}
}

// Get returns the value of k; an entry found in the older generation is
// moved to the newer.
func (c *Bounded[K, V]) Get(k K) (V, bool) {
	c.mu.RLock()
	v, ok := c.cur[k]
	if !ok {
		v, ok = c.old[k]
		if ok {
			c.mu.RUnlock()
			c.mu.Lock()
			c.promote(k)
			c.mu.Unlock()
			return v, true
		}
	}
	c.mu.RUnlock()
	return v, ok
}

// promote moves k from the older generation to the newer, charged the
// older's mean size (sizes are not kept per entry). Another Get may have
// moved it already.
func (c *Bounded[K, V]) promote(k K) {
	v, ok := c.old[k]
	if !ok {
		return
	}
	size := 0
	if c.halfBytes > 0 {
		size = c.oldBytes / len(c.old)
	}
	delete(c.old, k)
	c.oldBytes -= size
	c.put(k, v, size)
}

// Put sets k to v, which holds about size bytes (0 when only entries are
// counted). With a byte budget, a value larger than a quarter of it is not
// kept: it would turn the generations over for one entry.
func (c *Bounded[K, V]) Put(k K, v V, size int) {
	if c.halfBytes > 0 && size > c.halfBytes/2 {
		return
	}
	c.mu.Lock()
	delete(c.old, k) // its bytes stay charged until the generation turns
	c.put(k, v, size)
	c.mu.Unlock()
}

// put sets k in the newer generation, turning the generations over first
// when it is full. c.mu is held.
func (c *Bounded[K, V]) put(k K, v V, size int) {
	if _, ok := c.cur[k]; !ok && (len(c.cur) >= c.half || (c.halfBytes > 0 && c.curBytes+size > c.halfBytes)) {
		clear(c.old) // the map keeps its memory for the next generation
		c.cur, c.old = c.old, c.cur
		c.curBytes, c.oldBytes = 0, c.curBytes
	}
	c.cur[k] = v
	c.curBytes += size
}

// Len is the number of entries.
func (c *Bounded[K, V]) Len() int {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return len(c.cur) + len(c.old)
}
