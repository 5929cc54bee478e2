package python

import (
	"container/list"
	"fmt"
	"os"
	"strconv"
	"sync"
)

// Resolver names the Python frames of registered processes: code objects
// are read from /proc/PID/mem once and cached per (pid, code address) in an
// LRU bounded in entries and bytes.
type Resolver struct {
	procRoot string
	lim      Limits

	mu         sync.Mutex
	procs      map[int]*Process
	lru        *list.List // of *cacheEntry, most recent first
	cache      map[cacheKey]*list.Element
	bytes      int
	maxEntries int
	maxBytes   int
}

type cacheKey struct {
	pid  int
	code uint64
}

type cacheEntry struct {
	key  cacheKey
	code *Code // nil: unreadable, remembered so it is not read every interval
	size int
}

// Default bounds of the code-object cache.
const (
	DefaultCacheEntries = 16384
	DefaultCacheBytes   = 32 << 20
)

// NewResolver returns a resolver reading procRoot/PID/mem.
func NewResolver(procRoot string, lim Limits, maxEntries, maxBytes int) *Resolver {
	return &Resolver{procRoot: procRoot, lim: lim, procs: map[int]*Process{},
		lru: list.New(), cache: map[cacheKey]*list.Element{}, maxEntries: maxEntries, maxBytes: maxBytes}
}

// Add registers a Python process; a second call replaces the first (an
// exec) and forgets its cached code objects.
func (r *Resolver) Add(p *Process) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.procs[p.PID]; ok {
		r.forget(p.PID)
	}
	r.procs[p.PID] = p
}

// Remove forgets pid and its cached code objects.
func (r *Resolver) Remove(pid int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.procs, pid)
	r.forget(pid)
}

func (r *Resolver) forget(pid int) {
	for e := r.lru.Front(); e != nil; {
		next := e.Next()
		if ce := e.Value.(*cacheEntry); ce.key.pid == pid {
			r.drop(e)
		}
		e = next
	}
}

func (r *Resolver) drop(e *list.Element) {
	ce := e.Value.(*cacheEntry)
	r.lru.Remove(e)
	delete(r.cache, ce.key)
	r.bytes -= ce.size
}

// Process returns the registered process pid, or nil.
func (r *Resolver) Process(pid int) *Process {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.procs[pid]
}

// Len is the number of cached code objects and their bytes.
func (r *Resolver) Len() (entries, bytes int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.lru.Len(), r.bytes
}

// Code returns the code object at addr in pid, or an error when pid is not
// registered or the object cannot be read (also cached).
func (r *Resolver) Code(pid int, addr uint64) (*Code, error) {
	k := cacheKey{pid, addr}
	r.mu.Lock()
	if e, ok := r.cache[k]; ok {
		r.lru.MoveToFront(e)
		c := e.Value.(*cacheEntry).code
		r.mu.Unlock()
		if c == nil {
			return nil, fmt.Errorf("%w: code object %#x of pid %d unreadable", ErrInvalid, addr, pid)
		}
		return c, nil
	}
	p := r.procs[pid]
	r.mu.Unlock()
	if p == nil {
		return nil, fmt.Errorf("pid %d: %w", pid, ErrNotPython)
	}
	c, err := r.read(p, addr)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.procs[pid] != p {
		return c, err // replaced or removed meanwhile: do not cache
	}
	ce := &cacheEntry{key: k, code: c, size: 64}
	if c != nil {
		ce.size += len(c.Qualname) + len(c.Filename) + len(c.LineTable)
	}
	r.cache[k] = r.lru.PushFront(ce)
	r.bytes += ce.size
	for r.lru.Len() > r.maxEntries || r.bytes > r.maxBytes {
		r.drop(r.lru.Back())
	}
	return c, err
}

func (r *Resolver) read(p *Process, addr uint64) (*Code, error) {
	f, err := os.Open(r.procRoot + "/" + strconv.Itoa(p.PID) + "/mem")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return ReadCode(f, p, addr, r.lim)
}
