package python

import (
	"fmt"

	"github.com/stackstream/stackstream/services/agent/internal/pidcache"
)

// Resolver names the Python frames of registered processes: code objects
// are read from /proc/PID/mem once and cached per (pid, code address) in an
// LRU bounded in entries and bytes.
type Resolver struct {
	procRoot string
	lim      Limits
	cache    *pidcache.Cache[Process, *Code] // nil code: unreadable, remembered so it is not read every interval
}

// Default bounds of the code-object cache.
const (
	DefaultCacheEntries = 16384
	DefaultCacheBytes   = 32 << 20
)

// NewResolver returns a resolver reading procRoot/PID/mem.
func NewResolver(procRoot string, lim Limits, maxEntries, maxBytes int) *Resolver {
	return &Resolver{procRoot: procRoot, lim: lim, cache: pidcache.New[Process, *Code](maxEntries, maxBytes)}
}

// Add registers a Python process; a second call replaces the first (an
// exec) and forgets its cached code objects.
func (r *Resolver) Add(p *Process) { r.cache.Add(p.PID, p) }

// Remove forgets pid and its cached code objects.
func (r *Resolver) Remove(pid int) { r.cache.Remove(pid) }

// Process returns the registered process pid, or nil.
func (r *Resolver) Process(pid int) *Process { return r.cache.Process(pid) }

// Len is the number of cached code objects and their bytes.
func (r *Resolver) Len() (entries, bytes int) { return r.cache.Len() }

// Code returns the code object at addr in pid, or an error when pid is not
// registered or the object cannot be read (also cached).
func (r *Resolver) Code(pid int, addr uint64) (*Code, error) {
	var err error
	c, out := r.cache.Value(pid, addr, func(p *Process) (*Code, int) {
		var c *Code
		c, err = r.read(p, addr)
		size := 64
		if c != nil {
			size += len(c.Qualname) + len(c.Filename) + len(c.LineTable)
		}
		return c, size
	})
	switch {
	case out == pidcache.Unregistered:
		return nil, fmt.Errorf("pid %d: %w", pid, ErrNotPython)
	case out == pidcache.Hit && c == nil:
		return nil, fmt.Errorf("%w: code object %#x of pid %d unreadable", ErrInvalid, addr, pid)
	}
	return c, err
}

func (r *Resolver) read(p *Process, addr uint64) (*Code, error) {
	f, err := pidcache.OpenMem(r.procRoot, p.PID)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return ReadCode(f, p, addr, r.lim)
}
