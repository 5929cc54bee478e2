package agent

import (
	"errors"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stackstream/stackstream/services/agent/internal/hotspot"
	"github.com/stackstream/stackstream/services/agent/internal/proc"
	"github.com/stackstream/stackstream/services/agent/internal/python"
	"github.com/stackstream/stackstream/services/agent/internal/sampler"
	"github.com/stackstream/stackstream/services/agent/internal/unwind"
	"github.com/stackstream/stackstream/services/agent/internal/v8"
)

// maxRegistrationsPerTick bounds the processes registered for table
// unwinding per interval: a table is compiled once per binary (libc: 3 ms,
// python3: 7 ms), a process already seen costs its maps and a stat per
// mapping; under churn the rest wait for the next interval (their samples
// are walked with frame pointers meanwhile, counted).
const maxRegistrationsPerTick = 128

// Between ticks, every pollEvery, the processes the BPF program marked (a
// sample of a process not registered, a fork of a registered process, an
// address in no registered mapping, the exec of a registered process) are
// registered, at most maxRegistrationsPerPoll a poll: a new program is
// known within about pollEvery of its first sample rather than at the next
// tick. Under churn the rest wait for the next poll (maxRetry at most; past
// it, their samples bring them back at a tick). A process whose registration
// failed is tried again at the next tick only.
const (
	maxRegistrationsPerPoll = 32
	maxRetry                = 4096
)

// pollEvery is a variable for the test that measures the ticks alone.
var pollEvery = 200 * time.Millisecond

// unwinder registers targeted processes with the BPF unwinder: the tables
// of their files (once per file, shared) and their mappings.
type unwinder struct {
	log      *slog.Logger
	fs       proc.FS
	files    *fileGate
	mapFiles bool
	sampler  *sampler.Sampler
	reg      *unwind.Registry
	m        *unwindMetrics
	python   *python.Resolver
	js       *v8.Resolver // nil: JavaScript frames not walked
	v8       *v8.Detector
	hotspot  *hotspot.Detector // nil: Java frames not walked
	java     *hotspot.Resolver

	registered map[int]uint64 // pid -> start time at registration
	pending    []int          // running at start, registered as the ticks allow
	retry      []int          // marked, not registered yet: past a poll's bound
	failed     map[int]bool   // registration failed this interval: not polled
}

type unwindMetrics struct {
	samples       *prometheus.CounterVec
	registrations *prometheus.CounterVec
	tableBytes    prometheus.Gauge
	budgetBytes   prometheus.Gauge
	tables        prometheus.Gauge
	failed        prometheus.Gauge
	processes     prometheus.Gauge
	mappings      prometheus.Gauge
}

func newUnwindMetrics(reg prometheus.Registerer) *unwindMetrics {
	m := &unwindMetrics{
		samples: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "stackstream_agent_unwind_samples_total", Help: "CPU samples of targeted processes by how their user stack was walked: tables (registered process) or frame_pointers (the kernel's walk: not registered yet, or unwinding off).",
		}, []string{"method"}),
		registrations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "stackstream_agent_unwind_registrations_total", Help: "Processes registered for table unwinding, by result (ok, error, deferred: past the per-interval or per-poll bound).",
		}, []string{"result"}),
		tableBytes: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "stackstream_agent_unwind_table_bytes", Help: "Kernel memory of the unwind rows loaded (8 bytes a row).",
		}),
		budgetBytes: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "stackstream_agent_unwind_table_budget_bytes", Help: "Kernel memory reserved for unwind rows (STACKSTREAM_AGENT_UNWIND_TABLE_BYTES).",
		}),
		tables: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "stackstream_agent_unwind_tables", Help: "Files (and the vDSO) with an unwind table loaded.",
		}),
		failed: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "stackstream_agent_unwind_tables_failed", Help: "Files without a table (no call-frame information, invalid, too large, no room): walked with frame pointers.",
		}),
		processes: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "stackstream_agent_unwind_processes", Help: "Processes registered for table unwinding.",
		}),
		mappings: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "stackstream_agent_unwind_mapping_entries", Help: "Address-range entries of the registered processes' mappings in the BPF LPM trie (STACKSTREAM_AGENT_UNWIND_MAPPINGS at most).",
		}),
	}
	reg.MustRegister(m.samples, m.registrations, m.tableBytes, m.budgetBytes, m.tables, m.failed, m.processes, m.mappings)
	return m
}

// tick registers the targeted processes of this interval's samples, those
// the BPF program marked stale (exec, fork, an address in no registered
// mapping) and, as room allows, those running at start; it forgets the
// processes the agent forgot.
func (u *unwinder) tick(ps *processes, samples []sampler.Sample) {
	clear(u.failed)
	var todo []int
	want := map[int]bool{}
	add := func(pid int) {
		if !want[pid] {
			want[pid] = true
			todo = append(todo, pid)
		}
	}
	for _, s := range samples {
		p := ps.procs[s.PID]
		if p == nil || !p.targeted {
			continue
		}
		if s.Unwound {
			u.m.samples.WithLabelValues("tables").Add(float64(s.Count))
		} else {
			u.m.samples.WithLabelValues("frame_pointers").Add(float64(s.Count))
		}
		if st, ok := u.registered[s.PID]; !ok || st != p.info.StartTime {
			add(s.PID)
		}
	}
	for _, pid := range u.takeMarked(ps) {
		add(pid)
	}
	for len(u.pending) > 0 && len(todo) < maxRegistrationsPerTick {
		pid := u.pending[0]
		u.pending = u.pending[1:]
		if _, ok := u.registered[pid]; !ok {
			add(pid)
		}
	}
	if rest := u.registerAll(ps, todo, maxRegistrationsPerTick); len(rest) > 0 {
		// The next polls take them; past maxRetry, samples bring them back.
		u.m.registrations.WithLabelValues("deferred").Add(float64(len(rest)))
		u.retry = rest[:min(len(rest), maxRetry)]
	}
	for pid, st := range u.registered {
		if p, ok := ps.procs[pid]; !ok || p.info.StartTime != st {
			u.forget(pid)
		}
	}
	stats := u.reg.Stats()
	u.m.tableBytes.Set(float64(stats.RowBytes))
	u.m.tables.Set(float64(stats.Tables))
	u.m.failed.Set(float64(stats.Failed))
	u.m.processes.Set(float64(stats.Processes))
	u.m.mappings.Set(float64(u.sampler.MappingEntries()))
}

// poll registers, between ticks, the processes the BPF program marked
// (new programs, at their exec, before most of their first samples), then
// those running at start.
func (u *unwinder) poll(ps *processes) {
	todo := u.takeMarked(ps)
	// Then those running at start, sooner than the ticks alone would.
	for len(u.pending) > 0 && len(todo) < maxRegistrationsPerPoll {
		pid := u.pending[0]
		u.pending = u.pending[1:]
		if _, ok := u.registered[pid]; !ok {
			todo = append(todo, pid)
		}
	}
	if len(todo) == 0 {
		return
	}
	rest := u.registerAll(ps, todo, maxRegistrationsPerPoll)
	if len(rest) > maxRetry {
		u.m.registrations.WithLabelValues("deferred").Add(float64(len(rest) - maxRetry))
		rest = rest[:maxRetry]
	}
	u.retry = rest
}

// takeMarked returns the processes left over by the last poll, then those
// the BPF program marked since, once each. Every exec on the host is
// marked: the process's identity is read again when it is next needed (its
// comm, executable and maybe its cgroup changed: `sh -c 'echo $$
// >cgroup.procs; exec prog'` may have been read before it joined); it is
// registered now only if it was registered (its mappings are the old
// program's), otherwise at its first sample. So processes that never run
// at a sample (most of a build's) cost their mark only.
func (u *unwinder) takeMarked(ps *processes) []int {
	pids := u.retry
	u.retry = nil
	seen := make(map[int]bool, len(pids))
	for _, pid := range pids {
		seen[pid] = true
	}
	for _, st := range u.sampler.Refresh() {
		if st.Exec {
			delete(ps.procs, st.PID)
			if _, ok := u.registered[st.PID]; !ok && !st.Sampled {
				continue
			}
		}
		if u.failed[st.PID] {
			continue
		}
		if !seen[st.PID] {
			seen[st.PID] = true
			pids = append(pids, st.PID)
		}
	}
	return pids
}

// registerAll registers the targeted processes of todo, at most limit of
// them, and returns those left over.
func (u *unwinder) registerAll(ps *processes, todo []int, limit int) []int {
	n := 0
	for i, pid := range todo {
		if n >= limit {
			return todo[i:]
		}
		p := ps.get(pid, "")
		if !p.targeted || p.info.StartTime == 0 {
			// Excluded (since an exec, maybe), a kernel thread, or gone
			// before it was read.
			if _, ok := u.registered[pid]; ok {
				u.forget(pid)
			}
			continue
		}
		n++
		if err := u.register(pid); errors.Is(err, proc.ErrGone) {
			continue
		} else if err != nil {
			u.m.registrations.WithLabelValues("error").Inc()
			u.log.Debug("register process for unwinding", "pid", pid, "err", err)
			if u.failed == nil {
				u.failed = map[int]bool{}
			}
			u.failed[pid] = true
			continue
		}
		u.registered[pid] = p.info.StartTime
		u.m.registrations.WithLabelValues("ok").Inc()
	}
	return nil
}

// forget unregisters pid: its stacks go back to the kernel's frame-pointer
// walk.
func (u *unwinder) forget(pid int) {
	u.reg.RemoveProcess(pid)
	u.registerPython(pid, nil)
	u.registerV8(pid, nil)
	u.registerHotSpot(pid, nil)
	delete(u.registered, pid)
}

// register reads pid's maps and files off the tick (a file on a hung FUSE
// server blocks), bounded by the file gate, then loads and registers.
func (u *unwinder) register(pid int) error {
	var prepared unwind.Prepared
	var py *python.Process
	var js *v8.Process
	var jvm *hotspot.Process
	var err, jvmErr error
	fs, mapFiles := u.fs, u.mapFiles
	if gerr := u.files.do(procKey(pid), func() {
		prepared, err = u.reg.Prepare(pid, mapFiles)
		if err == nil {
			// Not Python, or a version without a layout: native frames only.
			py, _ = python.Detect(fs, pid, mapFiles)
			if u.v8 != nil {
				// Not node, or a V8 whose metadata the agent cannot use.
				js, _ = u.v8.Detect(fs, pid, mapFiles)
			}
			jvm, jvmErr = u.detectHotSpot(pid)
		}
	}); gerr != nil {
		return gerr
	}
	if err != nil {
		return err
	}
	if err := u.reg.Commit(prepared); err != nil {
		return err
	}
	if err := u.registerPython(pid, py); err != nil {
		return err
	}
	if err := u.registerV8(pid, js); err != nil {
		return err
	}
	if err := u.registerHotSpot(pid, jvm); err != nil {
		return err
	}
	// A JVM still starting: registered again at its next sample.
	return jvmErr
}
