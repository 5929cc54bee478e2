package hotspot

import (
	"bytes"
	"container/list"
	"fmt"
	"io"
	"os"
	"strconv"
	"sync"
	"unicode/utf8"
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
	stub string  // a stub's blob name (key.method is then the blob | stubKey)
	size int
}

// stubKey marks the cache keys of stub blobs: no Method* has bit 62 set.
const stubKey = 1 << 62

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

// Stub names the VM's own code at pc in pid's code cache (the blob's name:
// "StubRoutines (1)", "I2C/C2I adapters", "Interpreter"), which the walker
// records as an address; ok is false outside the code cache or when no
// blob is found.
func (r *Resolver) Stub(pid int, pc uint64) (name string, ok bool) {
	r.mu.Lock()
	p := r.procs[pid]
	r.mu.Unlock()
	if p == nil || pc < p.CodeStart || pc >= p.CodeEnd {
		return "", false
	}
	if pc >= p.InterpStart && pc < p.InterpEnd {
		return "Interpreter", true
	}
	f, err := os.Open(r.procRoot + "/" + strconv.Itoa(p.PID) + "/mem")
	if err != nil {
		return "", false
	}
	defer f.Close()
	blob, ok := FindBlob(f, p, pc)
	if !ok {
		return "", false
	}
	k := cacheKey{pid, blob | stubKey}
	r.mu.Lock()
	if e, ok := r.cache[k]; ok {
		r.lru.MoveToFront(e)
		name := e.Value.(*cacheEntry).stub
		r.mu.Unlock()
		return name, name != ""
	}
	r.mu.Unlock()
	name = readCString(f, blob+p.Layout.BlobName, maxStubName)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.procs[pid] != p {
		return name, name != ""
	}
	ce := &cacheEntry{key: k, stub: name, size: 64 + len(name)}
	r.cache[k] = r.lru.PushFront(ce)
	r.bytes += ce.size
	for r.lru.Len() > r.maxEntries || r.bytes > r.maxBytes {
		r.drop(r.lru.Back())
	}
	return name, name != ""
}

// maxStubName bounds a blob's name (HotSpot's are under 64 bytes).
const maxStubName = 128

// maxSegmapSteps bounds the walk back through a segment map, as the BPF
// walker's (HS_SEGMAP_STEPS).
const maxSegmapSteps = 32

// FindBlob returns the CodeBlob holding pc: the heap's segment map walked
// back to the block's start (0: a start, 0xff: free, else segments back).
func FindBlob(mem io.ReaderAt, p *Process, pc uint64) (uint64, bool) {
	for _, h := range p.Heaps {
		if pc < h.Low || pc >= h.High {
			continue
		}
		idx := (pc - h.Low) >> h.Log2Segment
		var b [1]byte
		for range maxSegmapSteps {
			if _, err := mem.ReadAt(b[:], int64(h.Segmap+idx)); err != nil || b[0] == 0xff {
				return 0, false
			}
			if b[0] == 0 {
				return h.Low + idx<<h.Log2Segment + p.Layout.HeapBlock, true
			}
			if idx < uint64(b[0]) {
				return 0, false
			}
			idx -= uint64(b[0])
		}
		return 0, false
	}
	return 0, false
}

// readCString reads the NUL-terminated string the pointer at addr points
// to, at most max bytes of it, or "".
func readCString(mem io.ReaderAt, addr uint64, max int) string {
	r := &memReader{mem: mem}
	s := r.u64(addr)
	if r.err != nil || s < 4096 || s >= 1<<47 {
		return ""
	}
	b := make([]byte, max)
	n, _ := mem.ReadAt(b, int64(s))
	b = b[:n]
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	if !utf8.Valid(b) {
		return ""
	}
	return string(b)
}
