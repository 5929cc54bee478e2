package agent

import (
	"context"
	"errors"
	"io/fs"
	"log/slog"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/google/pprof/profile"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/stackstream/stackstream/schemas/record"
	"github.com/stackstream/stackstream/services/agent/internal/javaattach"
	"github.com/stackstream/stackstream/services/agent/internal/perfmap"
	"github.com/stackstream/stackstream/services/agent/internal/proc"
	"github.com/stackstream/stackstream/services/agent/internal/sampler"
)

// Bounds of the perf map cache: the tables of at most maxJITProcesses
// processes and maxJITBytes in all; past either, the least recently used
// processes' tables are dropped (read again when next needed).
const (
	maxJITProcesses = 1024
	maxJITBytes     = 64 << 20
	// maxAttachesInFlight bounds the JVMs being asked at once (each waits
	// up to javaAttachWait for its listener).
	maxAttachesInFlight = 4
	javaAttachWait      = 10 * time.Second
	javaAttachBackoff   = time.Hour // the longest wait after failures
)

// jitFrames names code in anonymous executable mappings from the process's
// perf map (/tmp/perf-PID.map inside its root, PID as it sees itself), and
// asks JVMs to write theirs (jcmd Compiler.perfmap through the attach
// mechanism) when they are first sampled and every javaEvery after.
type jitFrames struct {
	log   *slog.Logger
	fs    proc.FS
	files *fileGate
	lim   perfmap.Limits
	now   func() time.Time
	m     *jitMetrics

	procs map[int]*jitProcess

	javaEvery time.Duration // 0: JVMs are not asked
	inFlight  int
	results   chan attachResult

	// named reports JVMs whose Java frames their own tables name (hotspot):
	// not asked. nil: all are.
	named func(pid int) bool
}

// jitProcess is one process's perf map and attach state.
type jitProcess struct {
	start     uint64 // the process's start time: a reused PID is another process
	status    proc.Status
	statusOK  bool
	runtime   perfmap.Runtime
	runtimeOf uint64 // the process's mapsRead the runtime was decided from
	reader    *perfmap.Reader
	checked   uint64 // interval+1 of the last read
	used      uint64 // interval of the last lookup
	loggedErr bool

	nextAttach time.Time
	failures   int
	attaching  bool
	attachOff  bool // never signal again: no handler, or no listener came
}

type attachResult struct {
	pid   int
	start uint64
	err   error
}

type jitMetrics struct {
	processes prometheus.Gauge
	bytes     prometheus.Gauge
	entries   prometheus.Gauge
	frames    *prometheus.CounterVec
	attaches  *prometheus.CounterVec
}

func newJITMetrics(reg prometheus.Registerer) *jitMetrics {
	m := &jitMetrics{
		processes: prometheus.NewGauge(prometheus.GaugeOpts{Name: "stackstream_agent_perfmap_processes", Help: "Processes whose perf map is held."}),
		bytes:     prometheus.NewGauge(prometheus.GaugeOpts{Name: "stackstream_agent_perfmap_bytes", Help: "Memory of the perf map tables held."}),
		entries:   prometheus.NewGauge(prometheus.GaugeOpts{Name: "stackstream_agent_perfmap_entries", Help: "Entries of the perf map tables held."}),
		frames: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "stackstream_agent_perfmap_locations_total",
			Help: "Locations in anonymous executable memory by result: named (by kind: java, js, python, jit) or unnamed."}, []string{"result"}),
		attaches: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "stackstream_agent_java_perfmap_requests_total",
			Help: "Compiler.perfmap requests to JVMs by result (ok, error, off: the JVM will not be signalled again)."}, []string{"result"}),
	}
	reg.MustRegister(m.processes, m.bytes, m.entries, m.frames, m.attaches)
	return m
}

func newJITFrames(log *slog.Logger, fs proc.FS, files *fileGate, now func() time.Time, reg prometheus.Registerer, javaEvery time.Duration) *jitFrames {
	return &jitFrames{log: log, fs: fs, files: files, lim: perfmap.DefaultLimits, now: now, m: newJITMetrics(reg),
		procs: map[int]*jitProcess{}, javaEvery: javaEvery, results: make(chan attachResult, maxAttachesInFlight)}
}

// jitCandidate says whether code at an address of mapping m may be named
// from a perf map: no mapping at all (created since maps were read),
// anonymous executable memory, or a memfd (double-mapped JIT code).
func jitCandidate(m *mapping) bool {
	if m == nil {
		return true
	}
	if m.file != nil {
		return strings.HasPrefix(m.Path, "/memfd:")
	}
	return m.Path == "" || strings.HasPrefix(m.Path, "[anon")
}

// process returns the state of p, creating it.
func (j *jitFrames) process(ps *processes, p *process) *jitProcess {
	jp := j.procs[p.info.PID]
	if jp == nil || jp.start != p.info.StartTime {
		if jp == nil && len(j.procs) >= maxJITProcesses {
			j.evict(ps.interval, len(j.procs)-maxJITProcesses+1, 0)
		}
		jp = &jitProcess{start: p.info.StartTime, reader: perfmap.NewReader(j.lim)}
		j.procs[p.info.PID] = jp
		if st, err := j.fs.ReadStatus(p.info.PID); err == nil {
			jp.status, jp.statusOK = st, true
		}
	}
	if jp.runtimeOf != p.mapsRead {
		jp.runtimeOf = p.mapsRead
		jp.runtime = runtimeOf(p)
	}
	jp.used = ps.interval
	return jp
}

// runtimeOf tells HotSpot (libjvm.so mapped) and node from the rest.
func runtimeOf(p *process) perfmap.Runtime {
	for _, m := range p.maps {
		switch base := filepath.Base(m.Path); {
		case base == "libjvm.so":
			return perfmap.RuntimeJava
		case strings.HasPrefix(base, "libnode.so"):
			return perfmap.RuntimeNode
		}
	}
	if base := filepath.Base(p.info.Executable); base == "node" || base == "nodejs" {
		return perfmap.RuntimeNode
	}
	return perfmap.RuntimeUnknown
}

// frame names pc of p from its perf map, reading what was appended to it at
// most once per interval when pc is not covered yet.
func (j *jitFrames) frame(ps *processes, p *process, pc uint64) (perfmap.Frame, bool) {
	if p.info.StartTime == 0 {
		return perfmap.Frame{}, false
	}
	jp := j.process(ps, p)
	name, ok := jp.reader.Lookup(pc)
	if !ok && jp.checked != ps.interval+1 && jp.statusOK {
		jp.checked = ps.interval + 1
		j.read(p.info.PID, jp)
		name, ok = jp.reader.Lookup(pc)
	}
	if !ok {
		j.m.frames.WithLabelValues("unnamed").Inc()
		return perfmap.Frame{}, false
	}
	f := perfmap.Symbolize(jp.runtime, name)
	j.m.frames.WithLabelValues(kindName(f.Kind)).Inc()
	return f, true
}

// read reads what is new in the perf map of pid, off the tick (a /tmp on a
// hung FUSE server blocks) through the file gate; the chunk is parsed here.
func (j *jitFrames) read(pid int, jp *jitProcess) {
	type result struct {
		c   perfmap.Chunk
		err error
	}
	fsys, st, state, lim := j.fs, jp.status, jp.reader.State(), j.lim
	path := "/tmp/perf-" + strconv.Itoa(st.NSPid) + ".map"
	r, err := gated(j.files, procKey(pid), func() result {
		f, err := fsys.OpenInRoot(pid, path, st)
		if err != nil {
			return result{err: err}
		}
		defer f.Close()
		c, err := perfmap.ReadChunk(f, state, lim)
		return result{c, err}
	})
	if err == nil {
		err = r.err
	}
	if err == nil {
		_, err = jp.reader.Apply(r.c)
	}
	if err != nil && !errors.Is(err, fs.ErrNotExist) && !jp.loggedErr {
		// Once per process: a map over its bound stays so.
		jp.loggedErr = true
		j.log.Debug("read perf map", "pid", pid, "path", path, "err", err)
	}
}

func kindName(k perfmap.Kind) string {
	switch k {
	case perfmap.KindJava:
		return record.KindJava
	case perfmap.KindJS:
		return record.KindJS
	case perfmap.KindPython:
		return record.KindPython
	}
	return record.KindJIT
}

func mappingFileOf(k perfmap.Kind) string {
	switch k {
	case perfmap.KindJava:
		return record.MappingJava
	case perfmap.KindJS:
		return record.MappingJS
	case perfmap.KindPython:
		return record.MappingPython
	}
	return record.MappingJIT
}

// tick applies the answers of JVMs, asks the JVMs sampled this interval
// whose perf map is due, and forgets processes the agent forgot.
func (j *jitFrames) tick(ps *processes, samples []sampler.Sample) {
	for done := false; !done; {
		select {
		case r := <-j.results:
			j.inFlight--
			j.answered(r)
		default:
			done = true
		}
	}
	if j.javaEvery > 0 {
		now := j.now()
		seen := map[int]bool{}
		for _, s := range samples {
			if seen[s.PID] {
				continue
			}
			seen[s.PID] = true
			p := ps.procs[s.PID]
			if p == nil || !p.targeted || p.info.StartTime == 0 || j.inFlight >= maxAttachesInFlight {
				continue
			}
			if _, known := j.procs[s.PID]; !known && runtimeOf(p) != perfmap.RuntimeJava {
				continue // not a JVM: no state kept for it
			}
			jp := j.process(ps, p)
			if jp.runtime != perfmap.RuntimeJava || !jp.statusOK || jp.attaching || jp.attachOff || now.Before(jp.nextAttach) ||
				(j.named != nil && j.named(s.PID)) {
				continue
			}
			j.attach(s.PID, jp)
		}
	}
	for pid, jp := range j.procs {
		if p, ok := ps.procs[pid]; !ok || p.info.StartTime != jp.start {
			delete(j.procs, pid)
		}
	}
	j.evict(ps.interval, 0, maxJITBytes)
	var bytes int64
	entries := 0
	for _, jp := range j.procs {
		bytes += jp.reader.Table().Bytes()
		entries += jp.reader.Table().Len()
	}
	j.m.processes.Set(float64(len(j.procs)))
	j.m.bytes.Set(float64(bytes))
	j.m.entries.Set(float64(entries))
}

// attach asks the JVM pid for its perf map on another goroutine; the
// answer is applied by a later tick.
func (j *jitFrames) attach(pid int, jp *jitProcess) {
	jp.attaching = true
	j.inFlight++
	t := javaattach.Target{PID: pid, StartTime: jp.start, Status: jp.status}
	opts := javaattach.Options{ProcRoot: j.fs.Root, Wait: javaAttachWait, Timeout: javaAttachWait, Poll: 50 * time.Millisecond}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*javaAttachWait+time.Second)
		defer cancel()
		_, err := javaattach.PerfMap(ctx, t, opts)
		j.results <- attachResult{pid: pid, start: t.StartTime, err: err}
	}()
}

func (j *jitFrames) answered(r attachResult) {
	jp := j.procs[r.pid]
	if jp == nil || jp.start != r.start {
		return
	}
	jp.attaching = false
	now := j.now()
	switch {
	case r.err == nil:
		j.m.attaches.WithLabelValues("ok").Inc()
		// Compiler.perfmap rewrites the file whole: read it again.
		jp.reader.Reset()
		jp.checked = 0
		jp.failures = 0
		jp.nextAttach = now.Add(j.javaEvery)
	case errors.Is(r.err, javaattach.ErrNoHandler) || errors.Is(r.err, javaattach.ErrNoListener):
		// Another signal would print a thread dump (attach disabled) or
		// kill the process (-Xrs): never again.
		j.m.attaches.WithLabelValues("off").Inc()
		jp.attachOff = true
		j.log.Info("java perf map unavailable, its JIT frames stay unnamed", "pid", r.pid, "err", r.err)
	default:
		j.m.attaches.WithLabelValues("error").Inc()
		jp.failures++
		wait := j.javaEvery << min(jp.failures, 10)
		jp.nextAttach = now.Add(min(wait, javaAttachBackoff))
		j.log.Debug("request java perf map", "pid", r.pid, "failures", jp.failures, "err", r.err)
	}
}

// evict drops at least n processes' tables, then more until the tables
// hold at most maxBytes (0: no byte bound), least recently used first; a
// process used this interval is kept.
func (j *jitFrames) evict(interval uint64, n int, maxBytes int64) {
	var total int64
	for _, jp := range j.procs {
		total += jp.reader.Table().Bytes()
	}
	for n > 0 || (maxBytes > 0 && total > maxBytes) {
		victim, oldest := -1, interval
		for pid, jp := range j.procs {
			if jp.used < oldest && !jp.attaching {
				victim, oldest = pid, jp.used
			}
		}
		if victim < 0 {
			return
		}
		total -= j.procs[victim].reader.Table().Bytes()
		delete(j.procs, victim)
		n--
	}
}

// jitLocations are the perf map locations of one profile: one mapping per
// pseudo-file, one location per (process, address).
type jitLocations struct {
	mappings  map[string]*profile.Mapping
	locs      map[jitLocKey]*profile.Location
	functions map[perfmap.Frame]*profile.Function
}

type jitLocKey struct {
	pid  int
	addr uint64
}

// jitLocation is the named location of pc when it is JIT code its
// process's perf map covers, nil otherwise.
func (c *cpuProfile) jitLocation(p *process, m *mapping, pc uint64) *profile.Location {
	j := c.ps.jit
	if j == nil || !jitCandidate(m) {
		return nil
	}
	k := jitLocKey{p.info.PID, pc}
	if loc, ok := c.jit.locs[k]; ok {
		return loc
	}
	f, ok := j.frame(c.ps, p, pc)
	if !ok {
		return nil
	}
	if c.jit.locs == nil {
		c.jit = jitLocations{mappings: map[string]*profile.Mapping{}, locs: map[jitLocKey]*profile.Location{}, functions: map[perfmap.Frame]*profile.Function{}}
	}
	file := mappingFileOf(f.Kind)
	pm := c.jit.mappings[file]
	if pm == nil {
		pm = &profile.Mapping{ID: uint64(len(c.p.Mapping) + 1), File: file, HasFunctions: true, HasFilenames: true, HasLineNumbers: true}
		c.jit.mappings[file] = pm
		c.p.Mapping = append(c.p.Mapping, pm)
	}
	fk := perfmap.Frame{Kind: f.Kind, Function: f.Function, SystemName: f.SystemName, File: f.File}
	fn := c.jit.functions[fk]
	if fn == nil {
		fn = &profile.Function{ID: uint64(len(c.p.Function) + 1), Name: f.Function, SystemName: f.SystemName, Filename: f.File}
		c.jit.functions[fk] = fn
		c.p.Function = append(c.p.Function, fn)
	}
	loc := &profile.Location{ID: uint64(len(c.p.Location) + 1), Mapping: pm, Address: pc,
		Line: []profile.Line{{Function: fn, Line: f.Line, Column: f.Column}}}
	c.jit.locs[k] = loc
	c.p.Location = append(c.p.Location, loc)
	return loc
}
