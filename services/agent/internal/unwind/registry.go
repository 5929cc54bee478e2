package unwind

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"

	"github.com/stackstream/stackstream/services/agent/internal/proc"
)

// Mapping is one executable mapping of a registered process as the BPF
// unwinder sees it.
type Mapping struct {
	Start, Limit uint64 // [Start, Limit) in the process
	Bias         uint64 // ELF virtual address = address - Bias
	FirstRow     uint32 // index of the table's first row in the BPF array
	Rows         uint32 // 0: no table, unwound with frame pointers
}

// Loader is the BPF side: the sampler's unwind maps.
type Loader interface {
	LoadRows(rows []Row) (first uint32, err error)
	RowCapacity() int
	FreeRows(first uint32, n int)
	SetProcess(pid int, mappings []Mapping) error
	RemoveProcess(pid int)
}

// ErrNoRoom is what a Loader returns (wrapped) when the row budget has no
// contiguous range left.
var ErrNoRoom = errors.New("unwind row budget exhausted")

// table is a compiled table loaded into the BPF array, shared by every
// process mapping a file of its key.
type table struct {
	first uint32
	rows  int
	loads []Load
	refs  int    // registered processes mapping it
	used  uint64 // registry clock at the last reference, for eviction
	err   error  // compile failed or no CFI: the file is unwound with frame pointers
}

// RegistryStats describe what is loaded.
type RegistryStats struct {
	Tables    int // keys (build IDs, files without one) with a table loaded
	Failed    int // keys whose table could not be built or loaded
	Processes int
	RowBytes  int // kernel memory of the loaded rows
}

// Registry loads the table of every executable file that registered
// processes map, once per build ID (Key), and registers each process's
// mappings. Tables no process maps stay loaded until their room is needed.
type Registry struct {
	log    *slog.Logger
	fs     proc.FS
	loader Loader
	lim    Limits
	cache  *DiskCache // nil: every table compiled

	mu     sync.Mutex
	tables map[Key]*table
	files  map[proc.FileID]Key // the key of each file seen, so it is read once
	procs  map[int][]Key
	clock  uint64
}

// NewRegistry returns an empty registry over loader.
func NewRegistry(log *slog.Logger, fs proc.FS, loader Loader, lim Limits) *Registry {
	return &Registry{log: log, fs: fs, loader: loader, lim: lim,
		tables: map[Key]*table{}, files: map[proc.FileID]Key{}, procs: map[int][]Key{}}
}

// UseDiskCache makes Prepare load the tables of build IDs from c before
// compiling them, and store those it compiles there.
func (r *Registry) UseDiskCache(c *DiskCache) { r.cache = c }

// Prepared is what Prepare read of one process: its executable mappings
// and the compiled tables of files the registry had not seen.
type Prepared struct {
	PID int
	// Maps are the process's executable mappings as read: the interpreter
	// detectors look at them too, rather than read them again.
	Maps     []proc.Mapping
	mappings []preparedMapping
	// Compiled counts the tables compiled, Cached those read from the disk
	// cache, Failed the files that could not be opened or compiled (they are
	// unwound with frame pointers), Deferred the new keys put off (Prepare's
	// deferNew).
	Compiled, Cached, Failed, Deferred int
}

type preparedMapping struct {
	m         proc.Mapping
	anonymous bool // no file, or none that could be opened: no table
	id        proc.FileID
	key       Key
	table     *Table // nil: the registry had the key, or it failed (err), or deferred
	deferred  bool   // a new key not built yet: the mapping is left out
	err       error
}

// Prepare reads pid's executable mappings and compiles the tables of the
// keys the registry has not seen: a file seen before costs a stat, a new
// file with the build ID of a loaded table its ELF headers and notes. It
// changes no registry state, so the agent can run it off its tick under a
// time limit (a file on a hung FUSE server blocks). mapFiles opens files
// through /proc/PID/map_files first (proc.OpenMapped).
//
// With deferNew, a key that has no table yet is neither compiled nor read
// from the disk cache: Commit leaves its mappings out, so the BPF walk steps
// over their addresses with frame pointers (counted as unwind_no_mapping)
// and marks the process, whose next registration (without deferNew) builds
// them. Under churn most new programs exit before their first sample: their
// tables are never built.
func (r *Registry) Prepare(pid int, mapFiles, deferNew bool) (Prepared, error) {
	p := Prepared{PID: pid}
	maps, err := r.fs.ReadMaps(pid)
	if err != nil && len(maps) == 0 {
		return p, fmt.Errorf("read maps of pid %d: %w", pid, err)
	}
	p.Maps = maps
	done := map[Key]bool{} // keys compiled (or failed) by this call
	// postpone reports whether k's mappings are left out (deferNew, no
	// table yet), and counts each such key once.
	deferred := map[Key]bool{}
	postpone := func(k Key) bool {
		if deferred[k] {
			return true
		}
		if !deferNew || done[k] || r.has(k) {
			return false
		}
		deferred[k] = true
		p.Deferred++
		return true
	}
	for _, m := range maps {
		if m.Path == vdsoPath {
			id, size, t, err := vdsoTable(r.lim)
			if err != nil || m.Limit-m.Start != size || m.Offset != 0 {
				p.Failed++
				continue
			}
			pm := preparedMapping{m: m, id: id, key: fileKey(id)}
			if !done[pm.key] && !r.has(pm.key) {
				pm.table = t
			}
			done[pm.key] = true
			p.mappings = append(p.mappings, pm)
			continue
		}
		if m.Path == "" || strings.HasPrefix(m.Path, "[") {
			// JIT code, [vsyscall]: registered without a table, so that
			// their addresses step with frame pointers without marking the
			// process stale.
			p.mappings = append(p.mappings, preparedMapping{m: m, anonymous: true})
			continue
		}
		// A file seen before costs one stat (through map_files); only a
		// new one is opened.
		if id, err := r.fs.StatMapped(pid, m, mapFiles); err == nil {
			if k, ok := r.keyOfFile(id); ok && postpone(k) {
				p.mappings = append(p.mappings, preparedMapping{m: m, id: id, key: k, deferred: true})
				continue
			} else if ok && (done[k] || r.has(k)) {
				p.mappings = append(p.mappings, preparedMapping{m: m, id: id, key: k})
				continue
			}
		}
		mf, err := r.fs.OpenMapped(pid, m, mapFiles)
		if err != nil {
			p.Failed++
			p.mappings = append(p.mappings, preparedMapping{m: m, anonymous: true})
			continue
		}
		pm := preparedMapping{m: m, id: mf.ID}
		if k, ok := r.keyOfFile(mf.ID); ok && postpone(k) {
			pm.key, pm.deferred = k, true
		} else if ok && (done[k] || r.has(k)) {
			pm.key = k
		} else {
			// Its key, and its table when the key is new: from the disk
			// cache, or compiled (and then stored there).
			var cached *Table
			pm.key, pm.table, pm.err = compileMapped(mf, r.lim, func(k Key) bool {
				if postpone(k) {
					pm.deferred = true
					return false
				}
				if done[k] || r.has(k) {
					return false
				}
				cached = r.cache.load(k, r.lim)
				return cached == nil
			})
			switch {
			case pm.deferred:
			case cached != nil:
				pm.table = cached
				p.Cached++
			case pm.err != nil && !done[pm.key]:
				p.Failed++
			case pm.table != nil:
				p.Compiled++
				if err := r.cache.store(pm.key, pm.table); err != nil {
					r.log.Debug("store unwind table", "path", m.Path, "err", err)
				}
			}
			done[pm.key] = true
		}
		mf.Close()
		p.mappings = append(p.mappings, pm)
	}
	return p, nil
}

// compileMapped returns the key of a mapped file and, when want(key), its
// table. A file that cannot be read is keyed by its file ID, with the error.
func compileMapped(mf *proc.MappedFile, lim Limits, want func(Key) bool) (Key, *Table, error) {
	f, err := mf.Open()
	if err != nil {
		return fileKey(mf.ID), nil, err
	}
	defer f.Close()
	k, t, err := inspect(f, mf.ID.Size, lim, func(k Key) bool {
		if k == (Key{}) {
			k = fileKey(mf.ID)
		}
		return want(k)
	})
	if k == (Key{}) {
		k = fileKey(mf.ID)
	}
	if err != nil || t == nil {
		return k, nil, err
	}
	if len(t.Rows) == 0 {
		return k, nil, ErrNoCFI
	}
	return k, t, nil
}

// ErrNoCFI: the file has neither .eh_frame nor .debug_frame rows.
var ErrNoCFI = errors.New("no call-frame information")

// has reports whether the registry has a table for k or failed on it.
func (r *Registry) has(k Key) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, ok := r.tables[k]
	return ok
}

// keyOfFile returns the key of a file seen before.
func (r *Registry) keyOfFile(id proc.FileID) (Key, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	k, ok := r.files[id]
	return k, ok
}

// Commit loads the tables Prepare compiled and registers the process's
// mappings. Mappings whose table cannot be had (no CFI, no room) are
// registered without one: frame pointers.
func (r *Registry) Commit(p Prepared) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.clock++
	// The tables this process shares are referenced before new ones are
	// loaded, so that making room never evicts them.
	for _, pm := range p.mappings {
		if t := r.tables[pm.key]; t != nil && !pm.anonymous {
			t.used = r.clock
		}
	}
	var keys []Key
	var out []Mapping
	for _, pm := range p.mappings {
		if pm.anonymous {
			out = append(out, Mapping{Start: pm.m.Start, Limit: pm.m.Limit})
			continue
		}
		if len(r.files) >= maxFiles*4 {
			clear(r.files) // a cache: files are inspected again
		}
		r.files[pm.id] = pm.key
		t := r.tables[pm.key]
		if t == nil && pm.deferred {
			continue // built at the registration after its first sample there
		}
		if t == nil {
			t = r.load(pm)
			if errors.Is(t.err, errEvicted) {
				continue // compiled again at the next registration
			}
			r.tables[pm.key] = t
		}
		t.refs++
		t.used = r.clock
		keys = append(keys, pm.key)
		bias, ok := (&Table{Loads: t.loads}).Bias(pm.m.Start, pm.m.Offset)
		if t.err != nil || !ok {
			// Known, without a table: frame pointers, not a stale process.
			out = append(out, Mapping{Start: pm.m.Start, Limit: pm.m.Limit})
			continue
		}
		out = append(out, Mapping{Start: pm.m.Start, Limit: pm.m.Limit, Bias: bias, FirstRow: t.first, Rows: uint32(t.rows)})
	}
	r.release(r.procs[p.PID])
	r.procs[p.PID] = keys
	if len(r.tables) > maxFiles {
		r.forgetFailed()
	}
	if err := r.loader.SetProcess(p.PID, out); err != nil {
		return fmt.Errorf("register pid %d: %w", p.PID, err)
	}
	return nil
}

// AddProcess is Prepare and Commit in one, for callers that need no time
// limit.
func (r *Registry) AddProcess(pid int) error {
	p, err := r.Prepare(pid, true, false)
	if err != nil {
		return err
	}
	return r.Commit(p)
}

// RemoveProcess unregisters pid (it exited): its tables become evictable.
func (r *Registry) RemoveProcess(pid int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.loader.RemoveProcess(pid)
	r.release(r.procs[pid])
	delete(r.procs, pid)
}

func (r *Registry) release(keys []Key) {
	for _, k := range keys {
		if t := r.tables[k]; t != nil && t.refs > 0 {
			t.refs--
		}
	}
}

// load copies a prepared table into the BPF array, evicting tables no
// process maps while there is no room.
func (r *Registry) load(pm preparedMapping) *table {
	t := &table{err: pm.err}
	if pm.table == nil {
		if t.err == nil {
			// Seen when Prepare ran, evicted since: compiled again next time.
			t.err = errEvicted
		}
		return t
	}
	t.loads = pm.table.Loads
	if len(pm.table.Rows) > r.loader.RowCapacity() {
		t.err = fmt.Errorf("%w: %d rows, the budget holds %d", ErrNoRoom, len(pm.table.Rows), r.loader.RowCapacity())
		return t
	}
	for {
		first, err := r.loader.LoadRows(pm.table.Rows)
		if err == nil {
			t.first, t.rows = first, len(pm.table.Rows)
			return t
		}
		if !errors.Is(err, ErrNoRoom) || !r.evictOne() {
			t.err = err
			r.log.Debug("load unwind table", "path", pm.m.Path, "rows", len(pm.table.Rows), "err", err)
			return t
		}
	}
}

var errEvicted = errors.New("table evicted while the process was prepared")

// maxFiles bounds the files remembered, with or without a table: past it,
// the failures no process maps are forgotten (their files are retried).
const maxFiles = 8192

func (r *Registry) forgetFailed() {
	for id, t := range r.tables {
		if t.err != nil && t.refs == 0 {
			delete(r.tables, id)
		}
	}
}

// evictOne frees the least recently used table no process maps.
func (r *Registry) evictOne() bool {
	var victim Key
	var vt *table
	for id, t := range r.tables {
		if t.refs == 0 && t.rows > 0 && t.used < r.clock && (vt == nil || t.used < vt.used) {
			victim, vt = id, t
		}
	}
	if vt == nil {
		return false
	}
	r.loader.FreeRows(vt.first, vt.rows)
	delete(r.tables, victim)
	return true
}

// Stats reports what is loaded.
func (r *Registry) Stats() RegistryStats {
	r.mu.Lock()
	defer r.mu.Unlock()
	st := RegistryStats{Processes: len(r.procs)}
	for _, t := range r.tables {
		if t.err != nil {
			st.Failed++
			continue
		}
		st.Tables++
		st.RowBytes += t.rows * RowBytes
	}
	return st
}
