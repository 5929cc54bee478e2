// Package sampler runs the eBPF CPU sampler: it loads the program, attaches
// it to a software CPU clock perf event on every online CPU (and, with
// off-CPU profiling on, to sched_switch: offcpu.go), and drains the idle map
// generation on demand.
package sampler

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/ringbuf"
	"github.com/cilium/ebpf/rlimit"
	"golang.org/x/sys/unix"

	"github.com/stackstream/stackstream/bpf/profiler"
	"github.com/stackstream/stackstream/services/agent/internal/unwind"
)

// Config sizes the sampler.
type Config struct {
	Frequency  int // samples per second per CPU
	CountsSize int // distinct (pid, stacks, comm) keys per generation
	StacksSize int // distinct stacks per generation (each kind)
	// Unwinding with tables: kernel memory for rows (8 bytes each; 0 keeps
	// a single row, i.e. frame pointers only), LPM entries for the mappings
	// of registered processes, and registered processes.
	UnwindTableBytes int
	UnwindMappings   int
	UnwindProcesses  int
	// Off-CPU time (offcpu.go); the zero value is off.
	OffCPU OffCPU
}

// Defaults of the unwinding part of Config.
const (
	DefaultUnwindTableBytes = 64 << 20
	DefaultUnwindMappings   = 1 << 17
	DefaultUnwindProcesses  = 8192
)

// Sample is the count of one (process, user stack, kernel stack).
type Sample struct {
	PID         int
	Comm        string
	User        []uint64 // innermost first; nil when unavailable
	Unwound     bool     // User was unwound with tables (a registered process), not by the kernel's frame-pointer walk
	Kernel      []uint64
	Count       uint64
	PeriodNanos uint64 // CPU time: the sum of sampling periods
}

// Counters are cumulative since start.
type Counters struct {
	Samples           uint64
	UserStackErrors   uint64
	KernelStackErrors uint64
	CountsFull        uint64
	// Unwinding with tables (bpf/profiler/unwind.h).
	UnwindStacks      uint64 // stacks walked with tables
	UnwindComplete    uint64 // ... that reached the outermost frame
	UnwindFPFrames    uint64 // frames stepped with frame pointers: no table
	UnwindNoRow       uint64 // addresses no row covers
	UnwindUnsupported uint64 // rows the unwinder cannot follow
	UnwindSignal      uint64 // signal frames unwound through
	UnwindRBPLost     uint64
	UnwindReadErrors  uint64
	UnwindTruncated   uint64 // deeper than MaxUnwindDepth
	UnwindStacksFull  uint64 // unwound-stack map full
	UnwindNoMapping   uint64 // addresses of registered processes in no registered mapping
	// CPython frames (bpf/profiler/python.h).
	PythonStacks   uint64 // samples of a Python process with a current frame
	PythonFrames   uint64 // Python frames recorded
	PythonNoThread uint64 // samples of a Python process whose thread state was not found
	// JavaScript frames (bpf/profiler/v8.h).
	JSStacks uint64 // samples of a V8 process walked with tables
	JSFrames uint64 // JavaScript frames recorded
	// Java frames (bpf/profiler/hotspot.h).
	JavaStacks uint64 // samples of a HotSpot process walked with tables
	JavaFrames uint64 // Java frames recorded
	JavaNoBlob uint64 // code cache addresses in no blob found
}

// Sampler owns the BPF objects and perf events.
type Sampler struct {
	log   *slog.Logger
	cfg   Config
	objs  profiler.ProfileObjects
	links []link.Link
	fds   []int

	mu         sync.Mutex // serializes Drain
	gen        uint32     // generation currently recording
	countsFull uint64     // CPU and off-CPU samples lost (maps full) at the last drain
	offSamples []Sample   // off-CPU samples of the last drain
	// Stacks of off-CPU blocks that ended a generation after the one they
	// started in, read from its maps while it recorded: deleted at its
	// next drain.
	offDeferred [2]stackRefs

	unwindMu sync.Mutex // the row allocator and the registered processes
	rows     *rowAllocator
	procKeys map[int][]profiler.ProfileUnwindMappingKey

	refreshKeys, refreshWhy []uint32 // Refresh's buffers (unwindMu), the size of unwind_refresh

	marks     *ringbuf.Reader // wake-ups of unwind_wakeup
	marksFile *os.File        // its descriptor in the runtime's poller
	marked    chan struct{}   // one pending wake-up at most
	marksDone chan struct{}   // closed when the reader's goroutine ends
}

// New loads the program and starts sampling on every online CPU.
func New(log *slog.Logger, cfg Config) (*Sampler, error) {
	if cfg.Frequency <= 0 || cfg.Frequency > 10000 {
		return nil, fmt.Errorf("sampling frequency %d Hz: use 1..10000", cfg.Frequency)
	}
	if err := rlimit.RemoveMemlock(); err != nil {
		// Kernels with memcg accounting (5.11+) do not need it; some
		// sandboxes forbid it even for root.
		log.Debug("raise memlock rlimit", "err", err)
	}
	spec, err := profiler.LoadProfile()
	if err != nil {
		return nil, fmt.Errorf("load bpf spec: %w", err)
	}
	for _, name := range []string{profiler.ProfileMapCounts0, profiler.ProfileMapCounts1} {
		spec.Maps[name].MaxEntries = uint32(cfg.CountsSize)
	}
	for _, name := range []string{profiler.ProfileMapStacks0, profiler.ProfileMapStacks1, profiler.ProfileMapUnwoundStacks0, profiler.ProfileMapUnwoundStacks1} {
		spec.Maps[name].MaxEntries = uint32(cfg.StacksSize)
	}
	rows := max(cfg.UnwindTableBytes/unwind.RowBytes, 1)
	if rows > 1<<30 {
		return nil, fmt.Errorf("unwind table budget %d bytes: at most %d", cfg.UnwindTableBytes, (1<<30)*unwind.RowBytes)
	}
	spec.Maps[profiler.ProfileMapUnwindRows].MaxEntries = uint32(rows)
	// The agent writes rows through a memory mapping (LoadRows).
	spec.Maps[profiler.ProfileMapUnwindRows].Flags |= unix.BPF_F_MMAPABLE
	spec.Maps[profiler.ProfileMapUnwindMappings].MaxEntries = uint32(max(cfg.UnwindMappings, 1))
	spec.Maps[profiler.ProfileMapUnwindProcesses].MaxEntries = uint32(max(cfg.UnwindProcesses, 1))
	spec.Maps[profiler.ProfileMapUnwindRefresh].MaxEntries = uint32(max(cfg.UnwindProcesses, 1))
	spec.Maps[profiler.ProfileMapPythonProcs].MaxEntries = uint32(max(cfg.UnwindProcesses, 1))
	spec.Maps[profiler.ProfileMapV8Procs].MaxEntries = uint32(max(cfg.UnwindProcesses, 1))
	spec.Maps[profiler.ProfileMapHotspotProcs].MaxEntries = uint32(max(cfg.UnwindProcesses, 1))
	if err := offCPUSpec(spec, cfg); err != nil {
		return nil, err
	}
	s := &Sampler{log: log, cfg: cfg, rows: newRowAllocator(uint32(rows)), procKeys: map[int][]profiler.ProfileUnwindMappingKey{}}
	if err := spec.LoadAndAssign(&s.objs, nil); err != nil {
		var ve *ebpf.VerifierError
		if errors.As(err, &ve) {
			return nil, fmt.Errorf("load bpf objects: %+v", ve)
		}
		return nil, fmt.Errorf("load bpf objects: %w", err)
	}
	cpus, err := onlineCPUs()
	if err != nil {
		s.Close()
		return nil, err
	}
	for _, cpu := range cpus {
		if err := s.attach(cpu); err != nil {
			s.Close()
			return nil, err
		}
	}
	// exec, fork and cgroup moves mark registrations stale. No link needs
	// tracefs.
	exec, err := link.AttachRawTracepoint(link.RawTracepointOptions{Name: "sched_process_exec", Program: s.objs.UnwindExec})
	if err != nil {
		s.Close()
		return nil, fmt.Errorf("attach bpf program to sched_process_exec: %w", err)
	}
	s.links = append(s.links, exec)
	fork, err := link.AttachTracing(link.TracingOptions{Program: s.objs.UnwindFork})
	if err != nil {
		s.Close()
		return nil, fmt.Errorf("attach bpf program to sched_process_fork: %w", err)
	}
	s.links = append(s.links, fork)
	cg, err := link.AttachTracing(link.TracingOptions{Program: s.objs.UnwindCgroup})
	if err != nil {
		s.Close()
		return nil, fmt.Errorf("attach bpf program to cgroup_attach_task: %w", err)
	}
	s.links = append(s.links, cg)
	if err := s.watchMarks(); err != nil {
		s.Close()
		return nil, err
	}
	if err := s.attachOffCPU(); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

func (s *Sampler) attach(cpu int) error {
	attr := unix.PerfEventAttr{
		Type:   unix.PERF_TYPE_SOFTWARE,
		Config: unix.PERF_COUNT_SW_CPU_CLOCK,
		Size:   uint32(unsafe.Sizeof(unix.PerfEventAttr{})),
		Sample: uint64(s.cfg.Frequency),
		Bits:   unix.PerfBitFreq | unix.PerfBitDisabled,
	}
	fd, err := unix.PerfEventOpen(&attr, -1, cpu, -1, unix.PERF_FLAG_FD_CLOEXEC)
	if err != nil {
		return fmt.Errorf("open cpu-clock perf event on cpu %d: %w", cpu, err)
	}
	s.fds = append(s.fds, fd)
	l, err := link.AttachRawLink(link.RawLinkOptions{Target: fd, Program: s.objs.ProfileCpu, Attach: ebpf.AttachPerfEvent})
	if err != nil {
		return fmt.Errorf("attach bpf program to perf event on cpu %d: %w", cpu, err)
	}
	s.links = append(s.links, l)
	if err := unix.IoctlSetInt(fd, unix.PERF_EVENT_IOC_ENABLE, 0); err != nil {
		return fmt.Errorf("enable perf event on cpu %d: %w", cpu, err)
	}
	return nil
}

// onlineCPUs parses /sys/devices/system/cpu/online ("0-3,5").
func onlineCPUs() ([]int, error) {
	b, err := os.ReadFile("/sys/devices/system/cpu/online")
	if err != nil {
		return nil, fmt.Errorf("read online cpus: %w", err)
	}
	return ParseCPUList(string(b))
}

// ParseCPUList parses a kernel CPU list such as "0-3,5".
func ParseCPUList(s string) ([]int, error) {
	var cpus []int
	for _, part := range strings.Split(strings.TrimSpace(s), ",") {
		if part == "" {
			continue
		}
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil {
			return nil, fmt.Errorf("parse cpu list %q: %w", s, err)
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil {
				return nil, fmt.Errorf("parse cpu list %q: %w", s, err)
			}
		}
		if b < a || b-a > 1<<16 {
			return nil, fmt.Errorf("parse cpu list %q: bad range %q", s, part)
		}
		for c := a; c <= b; c++ {
			cpus = append(cpus, c)
		}
	}
	if len(cpus) == 0 {
		return nil, fmt.Errorf("parse cpu list %q: no cpus", s)
	}
	return cpus, nil
}

// Drain flips the generation and returns the samples of the one that was
// recording, leaving its maps empty for the next flip. It also collects that
// generation's off-CPU samples, which OffCPUSamples hands over.
func (s *Sampler) Drain() (samples []Sample, entries int, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	idle := s.gen
	s.gen ^= 1
	if err := s.objs.Generation.Put(uint32(0), s.gen); err != nil {
		return nil, 0, fmt.Errorf("flip generation: %w", err)
	}
	// A program that read the old generation just before the flip may still
	// be writing; BPF programs run for microseconds.
	time.Sleep(2 * time.Millisecond)
	counts, stacks, unwound := s.objs.Counts0, s.objs.Stacks0, s.objs.UnwoundStacks0
	if idle == 1 {
		counts, stacks, unwound = s.objs.Counts1, s.objs.Stacks1, s.objs.UnwoundStacks1
	}

	var (
		key   profiler.ProfileSampleKey
		val   profiler.ProfileSampleValue
		keys  []profiler.ProfileSampleKey
		cache = map[int32][]uint64{}
	)
	frames := make([]uint64, profiler.MaxStackDepth)
	stack := func(id int32) []uint64 {
		if id < 0 {
			return nil
		}
		if st, ok := cache[id]; ok {
			return st
		}
		var st []uint64
		if err := stacks.Lookup(uint32(id), &frames); err == nil {
			for _, pc := range frames {
				if pc == 0 {
					break
				}
				st = append(st, pc)
			}
		}
		cache[id] = st
		return st
	}
	var us profiler.ProfileUnwoundStack
	unwoundCache := map[uint64][]uint64{}
	unwoundStack := func(hash uint64) []uint64 {
		if st, ok := unwoundCache[hash]; ok {
			return st
		}
		var st []uint64
		if err := unwound.Lookup(hash, &us); err == nil {
			st = append(st, us.Frames[:min(int(us.Len), len(us.Frames))]...)
		}
		unwoundCache[hash] = st
		return st
	}
	it := counts.Iterate()
	for it.Next(&key, &val) {
		keys = append(keys, key)
		user := stack(key.UserStackId)
		if key.UserStackHash != 0 {
			user = unwoundStack(key.UserStackHash)
		}
		samples = append(samples, Sample{
			PID:         int(key.Pid),
			Comm:        commString(key.Comm),
			User:        user,
			Unwound:     key.UserStackHash != 0,
			Kernel:      stack(key.KernelStackId),
			Count:       val.Count,
			PeriodNanos: val.PeriodNs,
		})
	}
	if err := it.Err(); err != nil {
		return samples, len(keys), fmt.Errorf("iterate counts: %w", err)
	}
	if _, err := counts.BatchDelete(keys, nil); err != nil {
		for _, k := range keys {
			counts.Delete(k)
		}
	}
	// Off-CPU blocks still under way, or ended since the flip, keep the
	// stacks they started with.
	var keep stackRefs
	if s.cfg.OffCPU.Probability > 0 {
		var err error
		if s.offSamples, keep, err = s.drainOffCPU(idle, stack, unwoundStack); err != nil {
			return samples, len(keys), err
		}
	}
	for id := range cache {
		if !keep.ids[id] {
			stacks.Delete(uint32(id))
		}
	}
	for h := range unwoundCache {
		if !keep.hashes[h] {
			unwound.Delete(h)
		}
	}
	for id := range s.offDeferred[idle].ids {
		if !keep.ids[id] && id >= 0 {
			stacks.Delete(uint32(id))
		}
	}
	for h := range s.offDeferred[idle].hashes {
		if !keep.hashes[h] {
			unwound.Delete(h)
		}
	}
	s.offDeferred[idle] = stackRefs{}
	// A sample whose count could not be stored (counts map full) left its
	// stacks behind, referenced by no key: clear them, or they would
	// accumulate until no new stack fits.
	lost := uint64(0)
	if c, err := s.Counters(); err == nil {
		lost = c.CountsFull
	}
	if c, err := s.OffCPUCounters(); err == nil {
		lost += c.CountsFull + c.StartsFull
	}
	if lost != s.countsFull {
		s.countsFull = lost
		var id uint32
		var orphans []uint32
		sit := stacks.Iterate()
		for sit.Next(&id, &frames) {
			if !keep.ids[int32(id)] {
				orphans = append(orphans, id)
			}
		}
		for _, id := range orphans {
			stacks.Delete(id)
		}
		var h uint64
		var hashes []uint64
		uit := unwound.Iterate()
		for uit.Next(&h, &us) {
			if !keep.hashes[h] {
				hashes = append(hashes, h)
			}
		}
		for _, h := range hashes {
			unwound.Delete(h)
		}
	}
	return samples, len(keys), nil
}

func commString(c [16]int8) string {
	b := make([]byte, 0, len(c))
	for _, ch := range c {
		if ch == 0 {
			break
		}
		b = append(b, byte(ch))
	}
	return string(bytes.ToValidUTF8(b, []byte("?")))
}

// Counters reads the cumulative counters summed over CPUs.
func (s *Sampler) Counters() (Counters, error) {
	var c Counters
	dst := []*uint64{&c.Samples, &c.UserStackErrors, &c.KernelStackErrors, &c.CountsFull,
		&c.UnwindStacks, &c.UnwindComplete, &c.UnwindFPFrames, &c.UnwindNoRow, &c.UnwindUnsupported,
		&c.UnwindSignal, &c.UnwindRBPLost, &c.UnwindReadErrors, &c.UnwindTruncated, &c.UnwindStacksFull, &c.UnwindNoMapping,
		&c.PythonStacks, &c.PythonFrames, &c.PythonNoThread, &c.JSStacks, &c.JSFrames,
		&c.JavaStacks, &c.JavaFrames, &c.JavaNoBlob}
	for i := range profiler.NumCounters {
		var perCPU []uint64
		if err := s.objs.Counters.Lookup(uint32(i), &perCPU); err != nil {
			return c, fmt.Errorf("read counter %d: %w", i, err)
		}
		for _, v := range perCPU {
			*dst[i] += v
		}
	}
	return c, nil
}

// Close detaches from every CPU and frees the maps.
func (s *Sampler) Close() error {
	var errs []error
	for _, l := range s.links {
		errs = append(errs, l.Close())
	}
	for _, fd := range s.fds {
		errs = append(errs, unix.Close(fd))
	}
	s.links, s.fds = nil, nil
	if s.marks != nil {
		errs = append(errs, s.marks.Close(), s.marksFile.Close())
		<-s.marksDone
		s.marks, s.marksFile = nil, nil
	}
	errs = append(errs, s.objs.Close())
	return errors.Join(errs...)
}
