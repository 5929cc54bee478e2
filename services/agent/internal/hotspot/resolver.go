package hotspot

import (
	"container/list"
	"fmt"
	"os"
	"strconv"
	"sync"
)

// Resolver names the Java frames of registered JVMs: each Method is read
// from /proc/PID/mem once and cached per (pid, Method*) in an LRU bounded
// in entries and bytes. Methods are metadata: they do not move, and a
// class unloaded frees them, so a cached name may outlive its method (a
// reused address names the old method until the entry ages out).
type Resolver struct {
	procRoot string
	lim      ReadLimits

	mu         sync.Mutex
	procs      map[int]*Process
	lru        *list.List // of *cacheEntry, most recent first
	cache      map[cacheKey]*list.Element
	bytes      int
	maxEntries int
	maxBytes   int
}

type cacheKey struct {
	pid    int
	method uint64
}

type cacheEntry struct {
	key  cacheKey
	m    *Method // nil: unreadable, remembered so it is not read every interval
	size int
}

// Default bounds of the method cache.
const (
	DefaultCacheEntries = 65536
	DefaultCacheBytes   = 16 << 20
)

// NewResolver returns a resolver reading procRoot/PID/mem.
func NewResolver(procRoot string, lim ReadLimits, maxEntries, maxBytes int) *Resolver {
	return &Resolver{procRoot: procRoot, lim: lim, procs: map[int]*Process{},
		lru: list.New(), cache: map[cacheKey]*list.Element{}, maxEntries: maxEntries, maxBytes: maxBytes}
}

// Add registers a JVM; a second call replaces the first (an exec) and
// forgets its cached methods.
func (r *Resolver) Add(p *Process) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.procs[p.PID]; ok {
		r.forget(p.PID)
	}
	r.procs[p.PID] = p
}

// Remove forgets pid and its cached methods.
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

// Len is the number of cached methods and their bytes.
func (r *Resolver) Len() (entries, bytes int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.lru.Len(), r.bytes
}

// Method returns the method at address method in pid, or an error when
// pid is not registered or the method cannot be read (also cached).
func (r *Resolver) Method(pid int, method uint64) (*Method, error) {
	k := cacheKey{pid, method}
	r.mu.Lock()
	if e, ok := r.cache[k]; ok {
		r.lru.MoveToFront(e)
		m := e.Value.(*cacheEntry).m
		r.mu.Unlock()
		if m == nil {
			return nil, fmt.Errorf("%w: Method %#x of pid %d unreadable", ErrInvalid, method, pid)
		}
		return m, nil
	}
	p := r.procs[pid]
	r.mu.Unlock()
	if p == nil {
		return nil, fmt.Errorf("pid %d: %w", pid, ErrNotJVM)
	}
	m, err := r.read(p, method)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.procs[pid] != p {
		return m, err // replaced or removed meanwhile: do not cache
	}
	ce := &cacheEntry{key: k, m: m, size: 64}
	if m != nil {
		ce.size += len(m.Class) + len(m.Name) + len(m.Signature) + len(m.File)
	}
	r.cache[k] = r.lru.PushFront(ce)
	r.bytes += ce.size
	for r.lru.Len() > r.maxEntries || r.bytes > r.maxBytes {
		r.drop(r.lru.Back())
	}
	return m, err
}

func (r *Resolver) read(p *Process, method uint64) (*Method, error) {
	f, err := os.Open(r.procRoot + "/" + strconv.Itoa(p.PID) + "/mem")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return ReadMethod(f, p.Layout, method, r.lim)
}
