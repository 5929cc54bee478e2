package agent

import (
	"errors"
	"log/slog"
	"path/filepath"
	"strings"
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

// Between ticks, the processes the BPF program marked (the exec of any
// process not ignored, a sample of a process neither registered nor
// ignored, a fork of a registered process, an executable file it mapped, an
// address of it in no registered mapping) are registered when the BPF
// program wakes the agent (a ring buffer, at most once per pollGap),
// pollSettle after the wake-up: a new program is registered at its exec,
// before its first samples, and a burst of marks costs one poll. At
// most maxRegistrationsPerPoll a poll: under churn the rest wait for the next
// (maxRetry at most; past it, their samples bring them back at a tick). A
// process whose registration failed is tried again at the next tick only.
const (
	maxRegistrationsPerPoll = 32
	maxRetry                = 4096
	pollGap                 = sampler.MarkedGap
)

// At most execRate new programs a second (execBurst at once) are read and
// registered at their exec; past it, a new program is read at its first
// sample, which marks it (as a process neither registered nor ignored): under
// churn most short-lived processes are never sampled, and reading and
// registering every one of them (its identity, maps, LPM entries, then their
// removal) costs more than the samples they would have (the A/B in
// docs/AGENT.md). A variable for the tests.
var (
	execRate  = 10.0
	execBurst = 10.0
)

// pollSettle lets ld.so map a new program's libraries before the agent
// reads its maps (those mapped later mark it again), and gathers a burst of
// marks into one poll. A variable for the test that measures the ticks alone.
var pollSettle = 5 * time.Millisecond

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
	execTokens float64        // exec registrations allowed now (execRate, execBurst)
	execTime   time.Time      // when execTokens was last topped up
	ignored    map[int]uint64 // pid -> start time: not targeted, its samples mark nothing
	pending    []int          // running at start, registered as the ticks allow
	retry      []int          // marked, not registered yet: past a poll's bound
	soon       []int          // new programs whose libraries ld.so had not mapped yet
	early      map[int]int    // pid -> registrations put off for ld.so (maxEarly at most)
	failed     map[int]bool   // registration failed this interval: not polled
	sampled    map[int]bool   // sampled since its last registration: the next one builds new tables
	interp     map[int]bool   // registered with an interpreter walk (Python, V8, HotSpot) once
}

type unwindMetrics struct {
	samples       *prometheus.CounterVec
	registrations *prometheus.CounterVec
	builds        *prometheus.CounterVec
	deferred      prometheus.Counter
	tableBytes    prometheus.Gauge
	budgetBytes   prometheus.Gauge
	tables        prometheus.Gauge
	failed        prometheus.Gauge
	processes     prometheus.Gauge
	ignored       prometheus.Gauge
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
		builds: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "stackstream_agent_unwind_table_builds_total", Help: "Unwind tables made for files first met, by source: compiled, or cache (read from STACKSTREAM_AGENT_UNWIND_CACHE_DIR).",
		}, []string{"source"}),
		deferred: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "stackstream_agent_unwind_tables_deferred_total", Help: "Files first met in a process registered before any sample of it (at its exec, a fork, the agent's start) whose table was put off: their addresses step with frame pointers (bpf_events unwind_no_mapping) until a sample there marks the process and its next registration builds the table.",
		}),
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
		ignored: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "stackstream_agent_unwind_ignored_processes", Help: "Processes read and not targeted whose samples the BPF program does not mark (unwind_ignored, 32,768 at most; their forked children not counted).",
		}),
		mappings: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "stackstream_agent_unwind_mapping_entries", Help: "Address-range entries of the registered processes' mappings in the BPF LPM trie (STACKSTREAM_AGENT_UNWIND_MAPPINGS at most).",
		}),
	}
	reg.MustRegister(m.samples, m.registrations, m.builds, m.deferred, m.tableBytes, m.budgetBytes, m.tables, m.failed, m.processes, m.ignored, m.mappings)
	return m
}

// tick registers the targeted processes of this interval's samples, those
// the BPF program marked stale (exec, fork, an address in no registered
// mapping) and, as room allows, those running at start; it forgets the
// processes the agent forgot.
func (u *unwinder) tick(ps *processes, samples []sampler.Sample) {
	clear(u.failed)
	clear(u.early)
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
			u.markSampled(s.PID)
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
	u.retry = append(u.retry, u.soon...)
	u.soon = nil
	for pid, st := range u.registered {
		if p, ok := ps.procs[pid]; !ok || p.info.StartTime != st {
			u.forget(pid)
		}
	}
	for pid, st := range u.ignored {
		if p, ok := ps.procs[pid]; !ok || p.info.StartTime != st {
			u.sampler.Unignore(pid)
			delete(u.ignored, pid)
		}
	}
	stats := u.reg.Stats()
	u.m.tableBytes.Set(float64(stats.RowBytes))
	u.m.tables.Set(float64(stats.Tables))
	u.m.failed.Set(float64(stats.Failed))
	u.m.processes.Set(float64(stats.Processes))
	u.m.ignored.Set(float64(len(u.ignored)))
	u.m.mappings.Set(float64(u.sampler.MappingEntries()))
}

// poll registers, between ticks, the processes the BPF program marked (new
// programs at their exec, before their first samples), then those running
// at start. It returns when to poll again (0: at the next wake-up).
func (u *unwinder) poll(ps *processes) time.Duration {
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
		if len(u.pending) > 0 {
			return pollGap
		}
		return 0
	}
	rest := u.registerAll(ps, todo, maxRegistrationsPerPoll)
	if len(rest) > maxRetry {
		u.m.registrations.WithLabelValues("deferred").Add(float64(len(rest) - maxRetry))
		rest = rest[:maxRetry]
	}
	u.retry = append(u.soon, rest...)
	soon := len(u.soon) > 0
	u.soon = nil
	switch {
	case soon:
		return pollSettle // ld.so is still mapping a new program's libraries
	case len(u.retry) > 0 || len(u.pending) > 0:
		return pollGap
	}
	return 0
}

// takeMarked returns the processes left over by the last poll, then those
// the BPF program marked since, once each. An exec makes the agent read the
// process's identity again (its comm, executable and maybe its cgroup
// changed: `sh -c 'echo $$ >cgroup.procs; exec prog'`), and register it now
// if it is targeted.
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
			delete(u.ignored, st.PID) // the BPF program forgot it
			if _, ok := u.registered[st.PID]; !ok && !st.Sampled && !u.execToken() {
				continue // read at its first sample
			}
		}
		if u.failed[st.PID] {
			continue
		}
		if st.Sampled || st.Miss {
			u.markSampled(st.PID)
		}
		if !seen[st.PID] {
			seen[st.PID] = true
			pids = append(pids, st.PID)
		}
	}
	return pids
}

// markSampled makes pid's next registration build the tables of the files
// it maps that have none yet: it was sampled (unregistered, or in a mapping
// left out). The set is bounded: a pid dropped from it is deferred again,
// until its next sample there marks it.
func (u *unwinder) markSampled(pid int) {
	if u.sampled == nil || len(u.sampled) >= 2*maxRetry {
		u.sampled = map[int]bool{}
	}
	u.sampled[pid] = true
}

// execToken reports whether one more new program may be registered at its
// exec now.
func (u *unwinder) execToken() bool {
	now := time.Now()
	u.execTokens = min(execBurst, u.execTokens+now.Sub(u.execTime).Seconds()*execRate)
	u.execTime = now
	if u.execTokens < 1 {
		return false
	}
	u.execTokens--
	return true
}

// ignore tells the BPF program that pid, read and not targeted, is not to
// be marked again until it exec's (or, targeting by cgroup alone, until it
// moves to another cgroup; its children are ignored with it).
func (u *unwinder) ignore(ps *processes, p *process) {
	pid := p.info.PID
	if _, ok := u.ignored[pid]; ok {
		return
	}
	// The agent itself is excluded by pid, not by its cgroup.
	sticky := ps.targets.ByCgroupOnly() && pid != ps.targets.ExcludePID
	if !u.sampler.Ignore(pid, sticky) {
		return // exec'd since it was read: the next poll reads it again
	}
	if u.ignored == nil {
		u.ignored = map[int]uint64{}
	}
	u.ignored[pid] = p.info.StartTime
}

// registerAll registers the targeted processes of todo, at most limit of
// them, and returns those left over.
func (u *unwinder) registerAll(ps *processes, todo []int, limit int) []int {
	n := 0
	for i, pid := range todo {
		if n >= limit {
			return todo[i:]
		}
		build := u.sampled[pid]
		delete(u.sampled, pid)
		p := ps.get(pid, "")
		if !p.targeted || p.info.StartTime == 0 {
			// Excluded (since an exec, maybe), a kernel thread, or gone
			// before it was read.
			if _, ok := u.registered[pid]; ok {
				u.forget(pid)
			}
			if !p.targeted && (p.info.StartTime != 0 || ps.targets.ExcludedByPID(pid)) {
				u.ignore(ps, p)
			}
			continue
		}
		n++
		if err := u.register(pid, !build); errors.Is(err, proc.ErrGone) {
			continue
		} else if errors.Is(err, errLoaderBusy) {
			if build {
				u.markSampled(pid)
			}
			u.soon = append(u.soon, pid)
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

// errLoaderBusy: a new program whose libraries ld.so has not mapped yet;
// registered pollSettle later (maxEarly times at most), rather than
// registered now and again when its first sample finds libc unregistered
// (that sample's walk stops at the first libc frame). 100 ms at most: on a
// loaded machine ld.so may take longer than the 25 ms that 5 tries gave (a
// c-O2 sample of the unwinding bench at load 20 ended at libc).
var errLoaderBusy = errors.New("ld.so is mapping the libraries")

const maxEarly = 20

// loaderBusy reports whether ld.so has not mapped a dynamic program's
// libraries yet: the only files mapped executable are ld.so and one other
// (the program).
func loaderBusy(maps []proc.Mapping) bool {
	ld := false
	var other string
	for _, m := range maps {
		if m.Path == "" || strings.HasPrefix(m.Path, "[") {
			continue
		}
		switch base := filepath.Base(m.Path); {
		case strings.HasPrefix(base, "ld-linux") || strings.HasPrefix(base, "ld-musl"):
			ld = true
		case other == "":
			other = m.Path
		case other != m.Path:
			return false
		}
	}
	return ld
}

// forget unregisters pid: its stacks go back to the kernel's frame-pointer
// walk.
func (u *unwinder) forget(pid int) {
	u.reg.RemoveProcess(pid)
	if u.interp[pid] {
		u.registerPython(pid, nil)
		u.registerV8(pid, nil)
		u.registerHotSpot(pid, nil)
	}
	delete(u.interp, pid)
	delete(u.early, pid)
	delete(u.sampled, pid)
	delete(u.registered, pid)
}

// register reads pid's maps and files off the tick (a file on a hung FUSE
// server blocks), bounded by the file gate, then loads and registers. With
// deferNew the tables of files without one are put off (Registry.Prepare):
// pid has not been sampled since its exec or the agent's start.
func (u *unwinder) register(pid int, deferNew bool) error {
	var prepared unwind.Prepared
	var py *python.Process
	var js *v8.Process
	var jvm *hotspot.Process
	var err, jvmErr error
	var busy bool
	fs, mapFiles := u.fs, u.mapFiles
	if gerr := u.files.do(procKey(pid), func() {
		prepared, err = u.reg.Prepare(pid, mapFiles, deferNew)
		if busy = err == nil && loaderBusy(prepared.Maps) && u.early[pid] < maxEarly; busy {
			return
		}
		if err == nil {
			// Not Python, or a version without a layout: native frames only.
			py, _ = python.DetectIn(fs, pid, prepared.Maps, mapFiles)
			if u.v8 != nil {
				// Not node, or a V8 whose metadata the agent cannot use.
				js, _ = u.v8.DetectIn(fs, pid, prepared.Maps, mapFiles)
			}
			jvm, jvmErr = u.detectHotSpot(pid, prepared.Maps)
		}
	}); gerr != nil {
		return gerr
	}
	if err != nil {
		return err
	}
	if busy {
		if u.early == nil {
			u.early = map[int]int{}
		}
		u.early[pid]++
		return errLoaderBusy
	}
	delete(u.early, pid)
	if err := u.reg.Commit(prepared); err != nil {
		return err
	}
	u.m.builds.WithLabelValues("compiled").Add(float64(prepared.Compiled))
	u.m.builds.WithLabelValues("cache").Add(float64(prepared.Cached))
	u.m.deferred.Add(float64(prepared.Deferred))
	if py == nil && js == nil && jvm == nil {
		if !u.interp[pid] {
			// No interpreter, now or before: nothing to tell the walks.
			return jvmErr
		}
		delete(u.interp, pid)
	} else {
		if u.interp == nil {
			u.interp = map[int]bool{}
		}
		u.interp[pid] = true
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
