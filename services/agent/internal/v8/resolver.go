package v8

import (
	"container/list"
	"fmt"
	"os"
	"strconv"
	"sync"
)

// Resolver names the JavaScript frames of registered processes: each
// SharedFunctionInfo is read from /proc/PID/mem once and cached per (pid,
// SharedFunctionInfo) in an LRU bounded in entries and bytes.
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
	pid int
	sfi uint64
}

type cacheEntry struct {
	key  cacheKey
	fn   *Function // nil: unreadable, remembered so it is not read every interval
	size int
}

// Default bounds of the function cache.
const (
	DefaultCacheEntries = 16384
	DefaultCacheBytes   = 16 << 20
)

// NewResolver returns a resolver reading procRoot/PID/mem.
func NewResolver(procRoot string, lim ReadLimits, maxEntries, maxBytes int) *Resolver {
	return &Resolver{procRoot: procRoot, lim: lim, procs: map[int]*Process{},
		lru: list.New(), cache: map[cacheKey]*list.Element{}, maxEntries: maxEntries, maxBytes: maxBytes}
}

// Add registers a V8 process; a second call replaces the first (an exec)
// and forgets its cached functions.
func (r *Resolver) Add(p *Process) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.procs[p.PID]; ok {
		r.forget(p.PID)
	}
	r.procs[p.PID] = p
}

// Remove forgets pid and its cached functions.
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

// Len is the number of cached functions and their bytes.
func (r *Resolver) Len() (entries, bytes int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.lru.Len(), r.bytes
}

// Function returns the function of the SharedFunctionInfo at tagged
// pointer sfi in pid, or an error when pid is not registered or the object
// cannot be read (also cached).
func (r *Resolver) Function(pid int, sfi uint64) (*Function, error) {
	k := cacheKey{pid, sfi}
	r.mu.Lock()
	if e, ok := r.cache[k]; ok {
		r.lru.MoveToFront(e)
		fn := e.Value.(*cacheEntry).fn
		r.mu.Unlock()
		if fn == nil {
			return nil, fmt.Errorf("%w: SharedFunctionInfo %#x of pid %d unreadable", ErrInvalid, sfi, pid)
		}
		return fn, nil
	}
	p := r.procs[pid]
	r.mu.Unlock()
	if p == nil {
		return nil, fmt.Errorf("pid %d: %w", pid, ErrNotV8)
	}
	fn, err := r.read(p, sfi)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.procs[pid] != p {
		return fn, err // replaced or removed meanwhile: do not cache
	}
	ce := &cacheEntry{key: k, fn: fn, size: 64}
	if fn != nil {
		ce.size += len(fn.Name) + len(fn.Script)
	}
	r.cache[k] = r.lru.PushFront(ce)
	r.bytes += ce.size
	for r.lru.Len() > r.maxEntries || r.bytes > r.maxBytes {
		r.drop(r.lru.Back())
	}
	return fn, err
}

func (r *Resolver) read(p *Process, sfi uint64) (*Function, error) {
	f, err := os.Open(r.procRoot + "/" + strconv.Itoa(p.PID) + "/mem")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return ReadFunction(f, p.Meta, sfi, r.lim)
}
