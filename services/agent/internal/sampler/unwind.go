package sampler

import (
	"errors"
	"fmt"
	"math/bits"
	"sort"
	"time"

	"github.com/cilium/ebpf/ringbuf"

	"github.com/stackstream/stackstream/bpf/profiler"
	"github.com/stackstream/stackstream/services/agent/internal/unwind"
)

// rowRange is a free range of the unwind_rows array.
type rowRange struct{ first, n uint32 }

// rowAllocator hands out contiguous ranges of the unwind_rows array,
// first fit, merging neighbours on free.
type rowAllocator struct {
	free []rowRange // sorted by first, never adjacent
}

func newRowAllocator(capacity uint32) *rowAllocator {
	return &rowAllocator{free: []rowRange{{0, capacity}}}
}

func (a *rowAllocator) alloc(n uint32) (uint32, bool) {
	for i, r := range a.free {
		if r.n < n {
			continue
		}
		first := r.first
		if r.n == n {
			a.free = append(a.free[:i], a.free[i+1:]...)
		} else {
			a.free[i] = rowRange{r.first + n, r.n - n}
		}
		return first, true
	}
	return 0, false
}

func (a *rowAllocator) release(first, n uint32) {
	i := sort.Search(len(a.free), func(i int) bool { return a.free[i].first > first })
	a.free = append(a.free, rowRange{})
	copy(a.free[i+1:], a.free[i:])
	a.free[i] = rowRange{first, n}
	// Merge with the next, then with the previous.
	if i+1 < len(a.free) && a.free[i].first+a.free[i].n == a.free[i+1].first {
		a.free[i].n += a.free[i+1].n
		a.free = append(a.free[:i+1], a.free[i+2:]...)
	}
	if i > 0 && a.free[i-1].first+a.free[i-1].n == a.free[i].first {
		a.free[i-1].n += a.free[i].n
		a.free = append(a.free[:i], a.free[i+1:]...)
	}
}

// LoadRows copies a table into the unwind_rows array and returns the index
// of its first row.
func (s *Sampler) LoadRows(rows []unwind.Row) (uint32, error) {
	if len(rows) == 0 || len(rows) > profiler.MaxTableRows {
		return 0, fmt.Errorf("load %d unwind rows: a table has 1..%d", len(rows), profiler.MaxTableRows)
	}
	s.unwindMu.Lock()
	defer s.unwindMu.Unlock()
	first, ok := s.rows.alloc(uint32(len(rows)))
	if !ok {
		return 0, fmt.Errorf("load %d unwind rows: %w", len(rows), unwind.ErrNoRoom)
	}
	const batch = 1 << 15
	keys := make([]uint32, 0, min(batch, len(rows)))
	for off := 0; off < len(rows); off += batch {
		chunk := rows[off:min(off+batch, len(rows))]
		keys = keys[:0]
		for i := range chunk {
			keys = append(keys, first+uint32(off+i))
		}
		if _, err := s.objs.UnwindRows.BatchUpdate(keys, chunk, nil); err != nil {
			s.rows.release(first, uint32(len(rows)))
			return 0, fmt.Errorf("write unwind rows: %w", err)
		}
	}
	return first, nil
}

// FreeRows returns a table's range to the budget. No registered process may
// name it any more.
func (s *Sampler) FreeRows(first uint32, n int) {
	s.unwindMu.Lock()
	defer s.unwindMu.Unlock()
	s.rows.release(first, uint32(n))
}

// RowCapacity is the number of rows the budget holds.
func (s *Sampler) RowCapacity() int { return int(s.objs.UnwindRows.MaxEntries()) }

// SetProcess registers the executable mappings of pid: from then on its user
// stacks are unwound with tables (and frame pointers where a mapping has
// none). A second call replaces the first.
func (s *Sampler) SetProcess(pid int, mappings []unwind.Mapping) error {
	s.unwindMu.Lock()
	defer s.unwindMu.Unlock()
	old := s.procKeys[pid]
	var keys []profiler.ProfileUnwindMappingKey
	for _, m := range mappings {
		if m.Limit <= m.Start {
			continue
		}
		val := profiler.ProfileUnwindMapping{Bias: m.Bias, FirstRow: m.FirstRow, Rows: m.Rows}
		for _, p := range prefixes(m.Start, m.Limit) {
			k := mappingKey(pid, p.addr, p.bits)
			if err := s.objs.UnwindMappings.Put(k, val); err != nil {
				s.deleteKeys(keys)
				return fmt.Errorf("register mapping %#x-%#x of pid %d: %w", m.Start, m.Limit, pid, err)
			}
			keys = append(keys, k)
		}
	}
	// Entries of the old registration that the new one did not overwrite.
	fresh := make(map[profiler.ProfileUnwindMappingKey]bool, len(keys))
	for _, k := range keys {
		fresh[k] = true
	}
	var stale []profiler.ProfileUnwindMappingKey
	for _, k := range old {
		if !fresh[k] {
			stale = append(stale, k)
		}
	}
	s.deleteKeys(stale)
	s.procKeys[pid] = keys
	if err := s.objs.UnwindProcesses.Put(uint32(pid), uint32(1)); err != nil {
		return fmt.Errorf("register pid %d for unwinding: %w", pid, err)
	}
	return nil
}

// RemoveProcess forgets pid's mappings: its stacks go back to frame pointers.
func (s *Sampler) RemoveProcess(pid int) {
	s.unwindMu.Lock()
	defer s.unwindMu.Unlock()
	s.objs.UnwindProcesses.Delete(uint32(pid))
	s.deleteKeys(s.procKeys[pid])
	delete(s.procKeys, pid)
}

// MappingEntries is the number of LPM trie entries in use.
func (s *Sampler) MappingEntries() int {
	s.unwindMu.Lock()
	defer s.unwindMu.Unlock()
	n := 0
	for _, k := range s.procKeys {
		n += len(k)
	}
	return n
}

func (s *Sampler) deleteKeys(keys []profiler.ProfileUnwindMappingKey) {
	for _, k := range keys {
		s.objs.UnwindMappings.Delete(k)
	}
}

// mappingKey builds an LPM key: pid and address big-endian, as the trie
// compares bytes from the first.
func mappingKey(pid int, addr uint64, addrBits int) profiler.ProfileUnwindMappingKey {
	return profiler.ProfileUnwindMappingKey{
		Prefixlen: uint32(32 + addrBits),
		Pid:       bits.ReverseBytes32(uint32(pid)),
		Addr:      bits.ReverseBytes64(addr),
	}
}

type prefix struct {
	addr uint64
	bits int // leading bits that must match
}

// prefixes covers [start, limit) with the fewest aligned power-of-two blocks.
func prefixes(start, limit uint64) []prefix {
	var out []prefix
	for start < limit {
		size := uint64(1) << 63
		if start != 0 {
			size = start & -start
		}
		for size > limit-start {
			size >>= 1
		}
		out = append(out, prefix{addr: start, bits: 64 - bits.TrailingZeros64(size)})
		start += size
	}
	return out
}

// Stale is a process the BPF program marked: its registration is stale (an
// address in no registered mapping, a fork of a registered process) or missing (Sampled: a sample of a process neither
// registered nor ignored), or its identity changed (Exec: it exec'd a new
// program, registered or not, or moved to another cgroup).
type Stale struct {
	PID           int
	Exec, Sampled bool
}

// Refresh returns the processes marked since the last call and forgets
// them: the caller registers them again.
func (s *Sampler) Refresh() []Stale {
	var pid, why uint32
	var out []Stale
	it := s.objs.UnwindRefresh.Iterate()
	for it.Next(&pid, &why) {
		out = append(out, Stale{PID: int(pid),
			Exec:    why == profiler.RefreshExec || why == profiler.RefreshExecSampled || why == profiler.RefreshCgroup,
			Sampled: why == profiler.RefreshSampled || why == profiler.RefreshExecSampled})
	}
	for _, p := range out {
		s.objs.UnwindRefresh.Delete(uint32(p.PID))
	}
	return out
}

// Marked receives (at most one pending value) when the BPF program has
// marked a process since the last receive: Refresh has work. It fires at
// most once per MarkedGap: under churn the marks of a gap are taken by one
// Refresh.
func (s *Sampler) Marked() <-chan struct{} { return s.marked }

// MarkedGap is the shortest time between two wake-ups of Marked.
const MarkedGap = 200 * time.Millisecond

// watchMarks turns the records of unwind_wakeup into Marked's wake-ups. The
// kernel wakes a reader only when it has read every record before: after a
// wake-up the reader sleeps MarkedGap, then takes what came meanwhile
// without waiting, so a steady stream of marks costs one wake-up a gap.
func (s *Sampler) watchMarks() error {
	r, err := ringbuf.NewReader(s.objs.UnwindWakeup)
	if err != nil {
		return fmt.Errorf("read unwind_wakeup ring buffer: %w", err)
	}
	s.marks, s.marked, s.marksDone = r, make(chan struct{}, 1), make(chan struct{})
	go func() {
		defer close(s.marksDone)
		var rec ringbuf.Record
		for {
			r.SetDeadline(time.Time{})
			if err := r.ReadInto(&rec); errors.Is(err, ringbuf.ErrClosed) {
				return
			}
			select {
			case s.marked <- struct{}{}:
			default:
			}
			time.Sleep(MarkedGap)
			// The records of the gap: the next ReadInto waits for new ones.
			r.SetDeadline(time.Now())
			more := false
			for {
				err := r.ReadInto(&rec)
				if errors.Is(err, ringbuf.ErrClosed) {
					return
				}
				if err != nil {
					break
				}
				more = true
			}
			if more {
				select {
				case s.marked <- struct{}{}:
				default:
				}
			}
		}
	}()
	return nil
}

// Ignore tells the BPF program that pid (read by the agent, not targeted)
// is not to be marked at its samples: until it exec's, or, sticky (the
// agent targets by cgroup alone), across exec's and with the children it
// forks; in both cases until it moves to another cgroup or its pid is
// reused. It reports false when pid's identity changed since it was marked
// (its mark says so): then it is not ignored, it is read again at the next
// Refresh.
func (s *Sampler) Ignore(pid int, sticky bool) bool {
	how := uint32(profiler.IgnoreUntilExec)
	if sticky {
		how = profiler.IgnoreSticky
	}
	if err := s.objs.UnwindIgnored.Put(uint32(pid), how); err != nil {
		return false // full: its samples mark it, as before
	}
	var why uint32
	if err := s.objs.UnwindRefresh.Lookup(uint32(pid), &why); err == nil &&
		(why == profiler.RefreshExec || why == profiler.RefreshExecSampled || why == profiler.RefreshCgroup) {
		s.objs.UnwindIgnored.Delete(uint32(pid))
		return false
	}
	return true
}

// Unignore forgets Ignore(pid).
func (s *Sampler) Unignore(pid int) { s.objs.UnwindIgnored.Delete(uint32(pid)) }

// SetPython names the CPython state of a registered process: its samples'
// eval-loop frames are replaced by the Python frames they run.
func (s *Sampler) SetPython(pid int, p profiler.ProfilePythonProc) error {
	if err := s.objs.PythonProcs.Put(uint32(pid), p); err != nil {
		return fmt.Errorf("register python process %d: %w", pid, err)
	}
	return nil
}

// RemovePython forgets the CPython state of pid.
func (s *Sampler) RemovePython(pid int) { s.objs.PythonProcs.Delete(uint32(pid)) }

// SetV8 names the V8 frame layout of a registered process: its JavaScript
// frames are recorded as such (bpf/profiler/v8.h).
func (s *Sampler) SetV8(pid int, p profiler.ProfileV8Proc) error {
	if err := s.objs.V8Procs.Put(uint32(pid), p); err != nil {
		return fmt.Errorf("register v8 process %d: %w", pid, err)
	}
	return nil
}

// RemoveV8 forgets the V8 layout of pid.
func (s *Sampler) RemoveV8(pid int) { s.objs.V8Procs.Delete(uint32(pid)) }

// SetHotSpot names the code cache layout of a registered JVM: its Java
// frames are recorded as such and unwound (bpf/profiler/hotspot.h).
func (s *Sampler) SetHotSpot(pid int, p profiler.ProfileHotspotProc) error {
	if err := s.objs.HotspotProcs.Put(uint32(pid), p); err != nil {
		return fmt.Errorf("register hotspot process %d: %w", pid, err)
	}
	return nil
}

// RemoveHotSpot forgets the code cache layout of pid.
func (s *Sampler) RemoveHotSpot(pid int) { s.objs.HotspotProcs.Delete(uint32(pid)) }
