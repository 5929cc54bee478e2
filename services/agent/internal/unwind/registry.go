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
	FreeRows(first uint32, n int)
	SetProcess(pid int, mappings []Mapping) error
	RemoveProcess(pid int)
}

// ErrNoRoom is what a Loader returns (wrapped) when the row budget has no
// contiguous range left.
var ErrNoRoom = errors.New("unwind row budget exhausted")

// table is a compiled table loaded into the BPF array, shared by every
// process mapping the same file.
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
	Tables    int // files with a table loaded
	Failed    int // files whose table could not be built or loaded
	Processes int
	RowBytes  int // kernel memory of the loaded rows
}

// Registry loads the table of every executable file that registered
// processes map, once per file, and registers each process's mappings.
// Tables no process maps stay loaded until their room is needed.
type Registry struct {
	log    *slog.Logger
	fs     proc.FS
	loader Loader
	lim    Limits

	mu     sync.Mutex
	tables map[proc.FileID]*table
	procs  map[int][]proc.FileID
	clock  uint64
}

// NewRegistry returns an empty registry over loader.
func NewRegistry(log *slog.Logger, fs proc.FS, loader Loader, lim Limits) *Registry {
	return &Registry{log: log, fs: fs, loader: loader, lim: lim,
		tables: map[proc.FileID]*table{}, procs: map[int][]proc.FileID{}}
}

// AddProcess reads pid's executable mappings, loads the tables of their
// files not loaded yet and registers the process. Mappings whose table
// cannot be had (no CFI, no room, unreadable) are registered without one.
func (r *Registry) AddProcess(pid int) error {
	maps, err := r.fs.ReadMaps(pid)
	if err != nil && len(maps) == 0 {
		return fmt.Errorf("read maps of pid %d: %w", pid, err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.clock++
	var ids []proc.FileID
	var out []Mapping
	for _, m := range maps {
		if m.Path == "" || strings.HasPrefix(m.Path, "[") {
			continue // JIT code, the vDSO: frame pointers
		}
		mf, err := r.fs.OpenMapped(pid, m, true)
		if err != nil {
			r.log.Debug("open mapped file", "pid", pid, "path", m.Path, "err", err)
			continue
		}
		t := r.tableOf(mf, m.Path)
		mf.Close()
		t.refs++
		t.used = r.clock
		ids = append(ids, mf.ID)
		if t.err != nil {
			continue
		}
		bias, ok := (&Table{Loads: t.loads}).Bias(m.Start, m.Offset)
		if !ok {
			continue
		}
		out = append(out, Mapping{Start: m.Start, Limit: m.Limit, Bias: bias, FirstRow: t.first, Rows: uint32(t.rows)})
	}
	r.release(r.procs[pid])
	r.procs[pid] = ids
	if err := r.loader.SetProcess(pid, out); err != nil {
		return fmt.Errorf("register pid %d: %w", pid, err)
	}
	return nil
}

// RemoveProcess unregisters pid (it exited): its tables become evictable.
func (r *Registry) RemoveProcess(pid int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.loader.RemoveProcess(pid)
	r.release(r.procs[pid])
	delete(r.procs, pid)
}

func (r *Registry) release(ids []proc.FileID) {
	for _, id := range ids {
		if t := r.tables[id]; t != nil && t.refs > 0 {
			t.refs--
		}
	}
}

// tableOf returns the table of a mapped file, compiling and loading it the
// first time the file is seen.
func (r *Registry) tableOf(mf *proc.MappedFile, path string) *table {
	if t, ok := r.tables[mf.ID]; ok {
		return t
	}
	t := &table{}
	r.tables[mf.ID] = t
	f, err := mf.Open()
	if err != nil {
		t.err = err
		return t
	}
	defer f.Close()
	compiled, err := Compile(f, mf.ID.Size, r.lim)
	if err != nil {
		t.err = err
		r.log.Debug("compile unwind table", "path", path, "err", err)
		return t
	}
	if len(compiled.Rows) == 0 {
		t.err = errors.New("no call-frame information")
		return t
	}
	t.loads = compiled.Loads
	for {
		first, err := r.loader.LoadRows(compiled.Rows)
		if err == nil {
			t.first, t.rows = first, len(compiled.Rows)
			return t
		}
		if !errors.Is(err, ErrNoRoom) || !r.evictOne() {
			t.err = err
			r.log.Debug("load unwind table", "path", path, "rows", len(compiled.Rows), "err", err)
			return t
		}
	}
}

// evictOne frees the least recently used table no process maps.
func (r *Registry) evictOne() bool {
	var victim proc.FileID
	var vt *table
	for id, t := range r.tables {
		if t.refs == 0 && t.rows > 0 && (vt == nil || t.used < vt.used) {
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
