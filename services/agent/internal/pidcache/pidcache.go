// Package pidcache holds what the agent reads from registered processes'
// memory to name their language frames (CPython code objects, V8 functions,
// HotSpot methods): the processes, and the values read per (pid, address)
// in an LRU bounded in entries and bytes.
package pidcache

import (
	"container/list"
	"os"
	"strconv"
	"sync"
)

// Cache is the registered processes of type P and the values of type V read
// from them. It is safe for concurrent use; reads run outside its lock.
type Cache[P, V any] struct {
	mu         sync.Mutex
	procs      map[int]*P
	lru        *list.List // of *entry[V], most recent first
	index      map[key]*list.Element
	bytes      int
	maxEntries int
	maxBytes   int
}

type key struct {
	pid  int
	addr uint64
}

type entry[V any] struct {
	key   key
	value V
	size  int
}

// New returns a cache holding at most maxEntries values and maxBytes of
// their sizes.
func New[P, V any](maxEntries, maxBytes int) *Cache[P, V] {
	return &Cache[P, V]{procs: map[int]*P{}, lru: list.New(), index: map[key]*list.Element{},
		maxEntries: maxEntries, maxBytes: maxBytes}
}

// Add registers p as process pid; a second call replaces the first (an
// exec) and forgets the values read from it.
func (c *Cache[P, V]) Add(pid int, p *P) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.procs[pid]; ok {
		c.forget(pid)
	}
	c.procs[pid] = p
}

// Remove forgets pid and the values read from it.
func (c *Cache[P, V]) Remove(pid int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.procs, pid)
	c.forget(pid)
}

func (c *Cache[P, V]) forget(pid int) {
	for e := c.lru.Front(); e != nil; {
		next := e.Next()
		if e.Value.(*entry[V]).key.pid == pid {
			c.drop(e)
		}
		e = next
	}
}

func (c *Cache[P, V]) drop(e *list.Element) {
	ce := e.Value.(*entry[V])
	c.lru.Remove(e)
	delete(c.index, ce.key)
	c.bytes -= ce.size
}

// Process returns the registered process pid, or nil.
func (c *Cache[P, V]) Process(pid int) *P {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.procs[pid]
}

// Len is the number of cached values and the sum of their sizes.
func (c *Cache[P, V]) Len() (entries, bytes int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lru.Len(), c.bytes
}

// Outcome says where Value's answer came from.
type Outcome int

const (
	Hit          Outcome = iota // cached
	Read                        // read now (and cached unless pid changed meanwhile)
	Unregistered                // pid is not registered: nothing read
)

// Value returns the value for (pid, addr): cached, or read by read from
// the registered process (outside the lock) and cached with the size read
// gives, unless pid was replaced or removed while it read. The least
// recently used values go past the bounds.
func (c *Cache[P, V]) Value(pid int, addr uint64, read func(*P) (value V, size int)) (V, Outcome) {
	k := key{pid, addr}
	c.mu.Lock()
	if e, ok := c.index[k]; ok {
		c.lru.MoveToFront(e)
		v := e.Value.(*entry[V]).value
		c.mu.Unlock()
		return v, Hit
	}
	p := c.procs[pid]
	c.mu.Unlock()
	if p == nil {
		var zero V
		return zero, Unregistered
	}
	v, size := read(p)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.procs[pid] != p {
		return v, Read // replaced or removed meanwhile: not cached
	}
	c.index[k] = c.lru.PushFront(&entry[V]{key: k, value: v, size: size})
	c.bytes += size
	for c.lru.Len() > c.maxEntries || c.bytes > c.maxBytes {
		c.drop(c.lru.Back())
	}
	return v, Read
}

// OpenMem opens procRoot/PID/mem, the memory the values are read from.
func OpenMem(procRoot string, pid int) (*os.File, error) {
	return os.Open(procRoot + "/" + strconv.Itoa(pid) + "/mem")
}
