package v8

import (
	"fmt"

	"github.com/stackstream/stackstream/services/agent/internal/pidcache"
)

// Resolver names the JavaScript frames of registered processes: each
// SharedFunctionInfo is read from /proc/PID/mem once and cached per (pid,
// SharedFunctionInfo) in an LRU bounded in entries and bytes.
type Resolver struct {
	procRoot string
	lim      ReadLimits
	cache    *pidcache.Cache[Process, *Function] // nil function: unreadable, remembered so it is not read every interval
}

// Default bounds of the function cache.
const (
	DefaultCacheEntries = 16384
	DefaultCacheBytes   = 16 << 20
)

// NewResolver returns a resolver reading procRoot/PID/mem.
func NewResolver(procRoot string, lim ReadLimits, maxEntries, maxBytes int) *Resolver {
	return &Resolver{procRoot: procRoot, lim: lim, cache: pidcache.New[Process, *Function](maxEntries, maxBytes)}
}

// Add registers a V8 process; a second call replaces the first (an exec)
// and forgets its cached functions.
func (r *Resolver) Add(p *Process) { r.cache.Add(p.PID, p) }

// Remove forgets pid and its cached functions.
func (r *Resolver) Remove(pid int) { r.cache.Remove(pid) }

// Process returns the registered process pid, or nil.
func (r *Resolver) Process(pid int) *Process { return r.cache.Process(pid) }

// Len is the number of cached functions and their bytes.
func (r *Resolver) Len() (entries, bytes int) { return r.cache.Len() }

// Function returns the function of the SharedFunctionInfo at tagged
// pointer sfi in pid, or an error when pid is not registered or the object
// cannot be read (also cached).
func (r *Resolver) Function(pid int, sfi uint64) (*Function, error) {
	var err error
	fn, out := r.cache.Value(pid, sfi, func(p *Process) (*Function, int) {
		var fn *Function
		fn, err = r.read(p, sfi)
		size := 64
		if fn != nil {
			size += len(fn.Name) + len(fn.Script)
		}
		return fn, size
	})
	switch {
	case out == pidcache.Unregistered:
		return nil, fmt.Errorf("pid %d: %w", pid, ErrNotV8)
	case out == pidcache.Hit && fn == nil:
		return nil, fmt.Errorf("%w: SharedFunctionInfo %#x of pid %d unreadable", ErrInvalid, sfi, pid)
	}
	return fn, err
}

func (r *Resolver) read(p *Process, sfi uint64) (*Function, error) {
	f, err := pidcache.OpenMem(r.procRoot, p.PID)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return ReadFunction(f, p.Meta, sfi, r.lim)
}
