package hotspot

import (
	"bytes"
	"fmt"
	"io"
	"unicode/utf8"

	"github.com/stackstream/stackstream/services/agent/internal/pidcache"
)

// Resolver names the Java frames of registered JVMs: each Method is read
// from /proc/PID/mem once and cached per (pid, Method*) in an LRU bounded
// in entries and bytes. Methods are metadata: they do not move, and a
// class unloaded frees them, so a cached name may outlive its method (a
// reused address names the old method until the entry ages out).
type Resolver struct {
	procRoot string
	lim      ReadLimits
	cache    *pidcache.Cache[Process, cached]
}

// cached is a method (nil: unreadable, remembered so it is not read every
// interval) or, under a key with stubKey set, a stub blob's name.
type cached struct {
	m    *Method
	stub string
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
	return &Resolver{procRoot: procRoot, lim: lim, cache: pidcache.New[Process, cached](maxEntries, maxBytes)}
}

// Add registers a JVM; a second call replaces the first (an exec) and
// forgets its cached methods.
func (r *Resolver) Add(p *Process) { r.cache.Add(p.PID, p) }

// Remove forgets pid and its cached methods.
func (r *Resolver) Remove(pid int) { r.cache.Remove(pid) }

// Process returns the registered process pid, or nil.
func (r *Resolver) Process(pid int) *Process { return r.cache.Process(pid) }

// Len is the number of cached methods and their bytes.
func (r *Resolver) Len() (entries, bytes int) { return r.cache.Len() }

// Method returns the method at address method in pid, or an error when
// pid is not registered or the method cannot be read (also cached).
func (r *Resolver) Method(pid int, method uint64) (*Method, error) {
	var err error
	c, out := r.cache.Value(pid, method, func(p *Process) (cached, int) {
		var m *Method
		m, err = r.read(p, method)
		size := 64
		if m != nil {
			size += len(m.Class) + len(m.Name) + len(m.Signature) + len(m.File)
		}
		return cached{m: m}, size
	})
	switch {
	case out == pidcache.Unregistered:
		return nil, fmt.Errorf("pid %d: %w", pid, ErrNotJVM)
	case out == pidcache.Hit && c.m == nil:
		return nil, fmt.Errorf("%w: Method %#x of pid %d unreadable", ErrInvalid, method, pid)
	}
	return c.m, err
}

func (r *Resolver) read(p *Process, method uint64) (*Method, error) {
	f, err := pidcache.OpenMem(r.procRoot, p.PID)
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
	p := r.cache.Process(pid)
	if p == nil || pc < p.CodeStart || pc >= p.CodeEnd {
		return "", false
	}
	if pc >= p.InterpStart && pc < p.InterpEnd {
		return "Interpreter", true
	}
	f, err := pidcache.OpenMem(r.procRoot, p.PID)
	if err != nil {
		return "", false
	}
	defer f.Close()
	blob, ok := FindBlob(f, p, pc)
	if !ok {
		return "", false
	}
	c, _ := r.cache.Value(pid, blob|stubKey, func(p *Process) (cached, int) {
		name := readCString(f, blob+p.Layout.BlobName, maxStubName)
		return cached{stub: name}, 64 + len(name)
	})
	return c.stub, c.stub != ""
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
