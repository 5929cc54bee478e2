package sampler

import (
	"errors"
	"fmt"
	"math/bits"
	"os"
	"sort"
	"time"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/ringbuf"
	"golang.org/x/sys/unix"

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
// of its first row. The array is memory-mapped (BPF_F_MMAPABLE): the rows
// are copied through a mapping of the pages they fall in, unmapped at once,
// rather than written element by element by the kernel (a 430,000-row table,
// gcc's cc1, took 60-80 ms of the agent's CPU that way).
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
	if err := s.writeRows(first, rows); err != nil {
		s.rows.release(first, uint32(len(rows)))
		return 0, fmt.Errorf("write unwind rows: %w", err)
	}
	return first, nil
}

// writeRows copies rows to unwind_rows from index first on.
func (s *Sampler) writeRows(first uint32, rows []unwind.Row) error {
	page := uint64(os.Getpagesize())
	start := uint64(first) * unwind.RowBytes
	end := start + uint64(len(rows))*unwind.RowBytes
	off := start &^ (page - 1)
	mem, err := unix.Mmap(s.objs.UnwindRows.FD(), int64(off), int(end-off), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return fmt.Errorf("map rows %d..%d: %w", first, uint64(first)+uint64(len(rows)), err)
	}
	src := unsafe.Slice((*byte)(unsafe.Pointer(&rows[0])), len(rows)*unwind.RowBytes)
	copy(mem[start-off:], src)
	return unix.Munmap(mem)
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
	var vals []profiler.ProfileUnwindMapping
	for _, m := range mappings {
		if m.Limit <= m.Start {
			continue
		}
		val := profiler.ProfileUnwindMapping{Bias: m.Bias, FirstRow: m.FirstRow, Rows: m.Rows}
		for _, p := range prefixes(m.Start, m.Limit) {
			keys = append(keys, mappingKey(pid, p.addr, p.bits))
			vals = append(vals, val)
		}
	}
	// One system call for every entry (a process has 20-30).
	if len(keys) > 0 {
		if n, err := s.objs.UnwindMappings.BatchUpdate(keys, vals, nil); err != nil {
			s.deleteKeys(keys[:n])
			return fmt.Errorf("register %d mapping entries of pid %d (%d written): %w", len(keys), pid, n, err)
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

// deleteKeys deletes LPM entries, as many a system call as the kernel takes
// (it stops at a key that is not there: that one is skipped).
func (s *Sampler) deleteKeys(keys []profiler.ProfileUnwindMappingKey) {
	for len(keys) > 0 {
		n, err := s.objs.UnwindMappings.BatchDelete(keys, nil)
		if err == nil {
			return
		}
		keys = keys[min(n+1, len(keys)):]
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

// Stale is a process the BPF program marked: its registration is stale
// (Miss: an address in no registered mapping; a fork of a registered
// process) or missing (Sampled: a sample of a process neither registered nor
// ignored), or its identity changed (Exec: it exec'd a new program,
// registered or not, or moved to another cgroup).
type Stale struct {
	PID                 int
	Exec, Sampled, Miss bool
}

// Refresh returns the processes marked since the last call and forgets
// them: the caller registers them again. The marks are taken in one system
// call (or a few), not three per mark: under churn every exec marks.
func (s *Sampler) Refresh() []Stale {
	s.unwindMu.Lock()
	defer s.unwindMu.Unlock()
	if s.refreshKeys == nil {
		// A buffer for the whole map: a batch must hold a hash bucket.
		n := s.objs.UnwindRefresh.MaxEntries()
		s.refreshKeys, s.refreshWhy = make([]uint32, n), make([]uint32, n)
	}
	var out []Stale
	var cursor ebpf.MapBatchCursor
	for {
		n, err := s.objs.UnwindRefresh.BatchLookupAndDelete(&cursor, s.refreshKeys, s.refreshWhy, nil)
		for i, pid := range s.refreshKeys[:n] {
			why := s.refreshWhy[i]
			out = append(out, Stale{PID: int(pid),
				Exec:    why == profiler.RefreshExec || why == profiler.RefreshExecSampled || why == profiler.RefreshCgroup,
				Sampled: why == profiler.RefreshSampled || why == profiler.RefreshExecSampled,
				Miss:    why == profiler.RefreshMiss})
		}
		if err != nil {
			if !errors.Is(err, ebpf.ErrKeyNotExist) {
				s.log.Warn("take unwind marks", "err", err)
			}
			return out
		}
	}
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
// The wait for a record is the runtime's network poller's (the ring
// buffer's descriptor is pollable), not the ringbuf reader's own blocking
// epoll_wait: a thread blocked in a system call makes the Go runtime's
// monitor thread wake up every 20 us for a millisecond and more after each
// wake-up, which under churn cost more CPU than the agent's own work.
func (s *Sampler) watchMarks() error {
	r, err := ringbuf.NewReader(s.objs.UnwindWakeup)
	if err != nil {
		return fmt.Errorf("read unwind_wakeup ring buffer: %w", err)
	}
	fd, err := unix.FcntlInt(uintptr(s.objs.UnwindWakeup.FD()), unix.F_DUPFD_CLOEXEC, 0)
	if err == nil {
		err = unix.SetNonblock(fd, true)
	}
	if err != nil {
		r.Close()
		return fmt.Errorf("poll unwind_wakeup ring buffer: %w", err)
	}
	f := os.NewFile(uintptr(fd), "unwind_wakeup")
	rc, err := f.SyscallConn()
	if err == nil {
		// Fails (os.ErrNoDeadline) unless the poller took the descriptor.
		err = f.SetReadDeadline(time.Time{})
	}
	if err != nil {
		r.Close()
		f.Close()
		return fmt.Errorf("poll unwind_wakeup ring buffer: %w", err)
	}
	s.marks, s.marksFile, s.marked, s.marksDone = r, f, make(chan struct{}, 1), make(chan struct{})
	// take reads the records there are without waiting: whether it read
	// one, and whether the reader is closed.
	var rec ringbuf.Record
	take := func() (got, closed bool) {
		r.SetDeadline(time.Now())
		err := r.ReadInto(&rec)
		return err == nil, errors.Is(err, ringbuf.ErrClosed)
	}
	go func() {
		defer close(s.marksDone)
		for {
			closed := false
			// Read calls its function again each time the poller reports
			// the descriptor readable, until it returns true.
			if err := rc.Read(func(uintptr) bool {
				var got bool
				got, closed = take()
				return got || closed
			}); err != nil || closed {
				return
			}
			select {
			case s.marked <- struct{}{}:
			default:
			}
			time.Sleep(MarkedGap)
			// The records of the gap: the next wait is for new ones.
			more := false
			for {
				got, closed := take()
				if closed {
					return
				}
				if !got {
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
