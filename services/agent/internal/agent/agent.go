// Package agent turns the sampler's counts into pprof records every interval:
// CPU (eBPF samples), off-CPU (time blocked, eBPF sched_switch), memory (RSS
// per process) and heap (scraped endpoints), plus the debuginfo of every new
// binary.
package agent

import (
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"runtime"
	"runtime/debug"
	"time"

	"github.com/google/pprof/profile"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/stackstream/stackstream/schemas/debuginfo"
	"github.com/stackstream/stackstream/schemas/record"
	"github.com/stackstream/stackstream/services/agent/internal/elfinfo"
	"github.com/stackstream/stackstream/services/agent/internal/heap"
	"github.com/stackstream/stackstream/services/agent/internal/hotspot"
	"github.com/stackstream/stackstream/services/agent/internal/k8s"
	"github.com/stackstream/stackstream/services/agent/internal/proc"
	"github.com/stackstream/stackstream/services/agent/internal/publish"
	"github.com/stackstream/stackstream/services/agent/internal/python"
	"github.com/stackstream/stackstream/services/agent/internal/sampler"
	"github.com/stackstream/stackstream/services/agent/internal/unwind"
	"github.com/stackstream/stackstream/services/agent/internal/v8"
)

// Record kinds, the label of the publisher metrics.
const (
	kindDebuginfo = "debuginfo"
)

// Deps are what the agent is given rather than builds.
type Deps struct {
	Log           *slog.Logger
	Registry      prometheus.Registerer
	Publisher     *publish.Publisher
	Topics        record.Topics
	KnownBuildIDs map[string]bool // already on the debuginfo topic
	Version       string
	Now           func() time.Time

	noMapFiles bool // tests: open mapped files by path only, as without CAP_SYS_ADMIN
}

// Agent samples and publishes until its context ends.
type Agent struct {
	cfg        Config
	d          Deps
	m          *metrics
	offm       *offCPUMetrics // nil: off-CPU profiling off
	sampler    *sampler.Sampler
	unwind     *unwinder  // nil: frame pointers only
	pods       *k8s.Cache // nil: no Kubernetes metadata
	ks         *proc.Kallsyms
	ps         *processes
	heaps      []heap.Target
	allocs     *heap.Allocs // the last scrape's allocation counts, by endpoint
	heapLimits heap.Limits
	http       *http.Client
	known      map[string]bool
	last       time.Time
	pageSize   int64
}

// New loads the BPF program and starts sampling.
func New(cfg Config, d Deps) (*Agent, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.HostID == "" {
		h, err := os.Hostname()
		if err != nil {
			return nil, fmt.Errorf("read hostname (set STACKSTREAM_AGENT_HOST_ID): %w", err)
		}
		cfg.HostID = h
	}
	if d.Now == nil {
		d.Now = time.Now
	}
	targets, err := proc.NewTargets(cfg.PIDs, cfg.SystemdUnits, cfg.Cgroups, cfg.Comm, os.Getpid())
	if err != nil {
		return nil, fmt.Errorf("STACKSTREAM_AGENT_COMM: %w", err)
	}
	heaps, err := heap.ParseTargets(cfg.HeapEndpoints)
	if err != nil {
		return nil, fmt.Errorf("STACKSTREAM_AGENT_HEAP_ENDPOINTS: %w", err)
	}
	fs := proc.FS{Root: cfg.ProcRoot}
	a := &Agent{
		cfg: cfg, d: d, m: newMetrics(d.Registry), ps: newProcesses(fs, targets, newFileGate(cfg.FileTimeout, d.Now)), heaps: heaps,
		heapLimits: cfg.heapLimits(),
		allocs:     heap.NewAllocs(),
		http:       heap.NewClient(cfg.heapLimits()),
		known:      map[string]bool{},
		pageSize:   int64(os.Getpagesize()),
	}
	a.ps.mapFiles = !d.noMapFiles
	if kc, ok, err := cfg.kubernetes(); err != nil {
		return nil, err
	} else if ok {
		if a.pods, err = k8s.New(kc, d.Log); err != nil {
			return nil, fmt.Errorf("STACKSTREAM_AGENT_KUBERNETES: %w", err)
		}
		a.ps.pods = a.pods
		registerPodMetrics(d.Registry, a.pods)
	}
	if cfg.PerfMaps {
		javaEvery := time.Duration(0)
		if cfg.JavaPerfMap {
			javaEvery = cfg.JavaPerfMapInterval
		}
		a.ps.jit = newJITFrames(d.Log, fs, a.ps.files, d.Now, d.Registry, javaEvery)
	}
	for id := range d.KnownBuildIDs {
		a.known[id] = true
	}
	if f, err := os.Open(cfg.ProcRoot + "/kallsyms"); err == nil {
		a.ks, err = proc.ParseKallsyms(f)
		f.Close()
		if err != nil {
			d.Log.Warn("kernel frames stay unnamed", "err", err)
		}
	} else {
		d.Log.Warn("kernel frames stay unnamed", "err", err)
	}
	if runtime.GOARCH != "amd64" && runtime.GOARCH != "arm64" && cfg.UnwindTableBytes > 0 {
		// The tables' rules (CFA, return address, PLT and signal frames)
		// are x86-64's and arm64's; elsewhere the kernel's frame-pointer
		// walk runs.
		d.Log.Warn("unwind tables are x86-64 and arm64 only: walking user stacks with frame pointers", "arch", runtime.GOARCH)
		cfg.UnwindTableBytes, a.cfg.UnwindTableBytes = 0, 0
	}
	scfg := sampler.Config{Frequency: cfg.Frequency, CountsSize: cfg.CountsMapSize, StacksSize: cfg.StacksMapSize, OffCPU: cfg.offCPUSampler()}
	if cfg.UnwindTableBytes > 0 {
		scfg.UnwindTableBytes, scfg.UnwindMappings, scfg.UnwindProcesses = cfg.UnwindTableBytes, cfg.UnwindMappings, cfg.UnwindProcesses
	}
	a.sampler, err = sampler.New(d.Log, scfg)
	if err != nil && cfg.UnwindTableBytes > 0 {
		// The rows are allocated at load: a kernel charging them to
		// RLIMIT_MEMLOCK (before 5.11) or a tight memory cgroup refuses
		// them. Profiling with frame pointers beats not profiling.
		d.Log.Warn("unwind tables refused, walking user stacks with frame pointers only", "unwind_table_bytes", cfg.UnwindTableBytes, "err", err)
		cfg.UnwindTableBytes = 0
		a.cfg.UnwindTableBytes = 0
		a.sampler, err = sampler.New(d.Log, sampler.Config{Frequency: cfg.Frequency, CountsSize: cfg.CountsMapSize, StacksSize: cfg.StacksMapSize, OffCPU: cfg.offCPUSampler()})
	}
	if err != nil {
		return nil, err
	}
	if cfg.OffCPUProbability > 0 {
		a.offm = newOffCPUMetrics(d.Registry)
	}
	if cfg.UnwindTableBytes > 0 {
		a.unwind = &unwinder{log: d.Log, fs: fs, files: a.ps.files, mapFiles: a.ps.mapFiles, sampler: a.sampler,
			m: newUnwindMetrics(d.Registry), registered: map[int]uint64{}}
		a.unwind.reg = unwind.NewRegistry(d.Log, fs, a.sampler, unwind.DefaultLimits)
		if cfg.UnwindCacheDir != "" {
			// Without it every table is compiled at first sight, as before.
			if c, err := unwind.OpenDiskCache(cfg.UnwindCacheDir, cfg.UnwindCacheBytes); err != nil {
				d.Log.Warn("unwind table cache off", "dir", cfg.UnwindCacheDir, "err", err)
			} else {
				a.unwind.reg.UseDiskCache(c)
			}
		}
		a.unwind.python = python.NewResolver(cfg.ProcRoot, python.DefaultLimits, python.DefaultCacheEntries, python.DefaultCacheBytes)
		a.ps.python = a.unwind.python
		a.unwind.v8 = v8.NewDetector(v8.DefaultFileLimits)
		a.unwind.js = v8.NewResolver(cfg.ProcRoot, v8.DefaultReadLimits, v8.DefaultCacheEntries, v8.DefaultCacheBytes)
		a.ps.js = a.unwind.js
		a.unwind.hotspot = hotspot.NewDetector(hotspot.DefaultTableLimits)
		a.unwind.java = hotspot.NewResolver(cfg.ProcRoot, hotspot.DefaultReadLimits, hotspot.DefaultCacheEntries, hotspot.DefaultCacheBytes)
		a.ps.java = a.unwind.java
		if a.ps.jit != nil {
			a.ps.jit.named = a.unwind.javaNamed
		}
		a.unwind.m.budgetBytes.Set(float64(a.sampler.RowCapacity() * unwind.RowBytes))
		// Processes running now are registered over the first intervals,
		// before most of their samples.
		a.unwind.pending, _ = fs.PIDs()
	}
	a.last = d.Now()
	return a, nil
}

// Run builds and publishes profiles every interval until ctx ends, then
// publishes the last partial interval.
func (a *Agent) Run(ctx context.Context) error {
	if a.pods != nil {
		podsCtx, stop := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { a.pods.Run(podsCtx); close(done) }()
		defer func() { stop(); <-done }()
	}
	t := time.NewTicker(a.cfg.Interval)
	defer t.Stop()
	// Marked processes are registered between ticks, when the BPF program
	// wakes the agent; the processes running at start first.
	var marked <-chan struct{}
	var poll <-chan time.Time
	var pt *time.Timer
	due := time.Now().Add(pollSettle) // of the next poll
	if a.unwind != nil {
		marked = a.sampler.Marked()
		pt = time.NewTimer(pollSettle)
		defer pt.Stop()
		poll = pt.C
	}
	a.d.Log.Info("profiling", "host", a.cfg.HostID, "frequency_hz", a.cfg.Frequency, "interval", a.cfg.Interval,
		"all_processes", a.ps.targets.All())
	for {
		select {
		case <-ctx.Done():
			// The context is gone; give the last interval its own.
			a.Tick(context.WithoutCancel(ctx))
			return nil
		case <-t.C:
			a.Tick(ctx)
		case <-marked:
			// Sooner than a poll already due for the processes at start.
			if now := time.Now(); poll == nil || now.Add(pollSettle).Before(due) {
				pt.Reset(pollSettle)
				poll, due = pt.C, now.Add(pollSettle)
			}
		case <-poll:
			poll = nil
			if d := a.unwind.poll(a.ps); d > 0 {
				pt.Reset(d)
				poll, due = pt.C, time.Now().Add(d)
			}
		}
	}
}

// Tick drains the sampler and publishes one interval's profiles.
func (a *Agent) Tick(ctx context.Context) {
	begin := time.Now()
	now := a.d.Now()
	// Wall-clock arithmetic, so one profile ends exactly where the next
	// starts (a monotonic Sub would differ by nanoseconds).
	start, dur := a.last, time.Duration(now.UnixNano()-a.last.UnixNano())
	a.last = now
	a.ps.interval++

	samples, entries, err := a.sampler.Drain()
	if err != nil {
		a.d.Log.Error("drain samples", "err", err)
	}
	a.m.mapFill.Set(float64(entries) / float64(a.cfg.CountsMapSize))
	if c, err := a.sampler.Counters(); err == nil {
		a.m.bpfCounters.WithLabelValues("samples").Set(float64(c.Samples))
		a.m.bpfCounters.WithLabelValues("user_stack_errors").Set(float64(c.UserStackErrors))
		a.m.bpfCounters.WithLabelValues("kernel_stack_errors").Set(float64(c.KernelStackErrors))
		a.m.bpfCounters.WithLabelValues("counts_map_full").Set(float64(c.CountsFull))
		for event, v := range map[string]uint64{
			"unwind_stacks": c.UnwindStacks, "unwind_complete": c.UnwindComplete, "unwind_fp_frames": c.UnwindFPFrames,
			"unwind_no_row": c.UnwindNoRow, "unwind_no_mapping": c.UnwindNoMapping, "unwind_unsupported": c.UnwindUnsupported,
			"unwind_signal_frames": c.UnwindSignal, "unwind_rbp_lost": c.UnwindRBPLost, "unwind_read_errors": c.UnwindReadErrors,
			"unwind_truncated": c.UnwindTruncated, "unwind_stacks_full": c.UnwindStacksFull,
			"python_stacks": c.PythonStacks, "python_frames": c.PythonFrames, "python_no_thread": c.PythonNoThread,
			"js_stacks": c.JSStacks, "js_frames": c.JSFrames,
			"java_stacks": c.JavaStacks, "java_frames": c.JavaFrames, "java_no_blob": c.JavaNoBlob,
		} {
			a.m.bpfCounters.WithLabelValues(event).Set(float64(v))
		}
	}

	cpu := newCPUProfile(a.ps, a.ks, start, dur, int64(time.Second)/int64(a.cfg.Frequency))
	for _, s := range samples {
		p := a.ps.get(s.PID, s.Comm)
		if !p.targeted {
			a.m.untargeted.Add(float64(s.Count))
			continue
		}
		cpu.add(p, s)
		a.m.samples.Add(float64(s.Count))
		a.m.cpuNanos.Add(float64(s.PeriodNanos))
	}
	var off *cpuProfile
	var offSamples []sampler.Sample
	if a.offm != nil {
		off, offSamples = a.offCPU(start, dur)
		for b := range off.binaries {
			cpu.binaries[b] = true
		}
	}
	// The profiles are held (off this goroutine) until the debuginfo of the
	// binaries they introduce is acknowledged: a symbolizer reading them
	// then finds their symbols on the debuginfo topic.
	published := 0
	var acks []*publish.Ack
	for b := range cpu.binaries {
		read, ack := a.publishDebuginfo(b)
		if read {
			published++
		}
		if ack != nil {
			acks = append(acks, ack)
		}
	}
	if len(cpu.p.Sample) > 0 {
		a.publishProfile(record.ProfileCPU, cpu.p, acks)
	}
	if off != nil && len(off.p.Sample) > 0 {
		a.publishProfile(record.ProfileOffCPU, off.p, acks)
	}
	if a.cfg.Memory {
		if mem := a.memory(start, dur); len(mem.Sample) > 0 {
			a.publishProfile(record.ProfileMemory, mem, nil)
		}
	}
	for _, t := range a.heaps {
		p, err := heap.Scrape(ctx, a.http, t, a.heapLimits)
		if err != nil {
			a.m.heapErrors.Inc()
			a.d.Log.Warn("scrape heap profile", "service", t.Service, "url", t.URL, "err", err)
			continue
		}
		a.publishProfile(record.ProfileHeap, p, nil)
		// The allocation counts of a Go heap profile run from the process's
		// start: what was allocated since the last scrape is the alloc profile.
		if d, err := a.allocs.Delta(t.URL, p); err != nil {
			a.d.Log.Warn("allocations of heap profile", "service", t.Service, "url", t.URL, "err", err)
		} else if d != nil && len(d.Sample) > 0 {
			a.publishProfile(record.ProfileAlloc, d, nil)
		}
	}
	a.ps.sweep(3)
	// Unwinding first: a JVM whose Java frames its own tables name from
	// this interval on is not asked for a perf map.
	if a.unwind != nil {
		// Processes seen only blocked are registered too; their blocks are
		// not CPU samples for the unwinder's sample counts.
		registered := samples
		for _, s := range offSamples {
			s.Count = 0
			registered = append(registered, s)
		}
		a.unwind.tick(a.ps, registered)
	}
	if a.ps.jit != nil {
		a.ps.jit.tick(a.ps, samples)
	}
	a.m.processes.Set(float64(len(a.ps.procs)))
	a.d.Publisher.LogDrops()
	a.m.intervalTime.Observe(time.Since(begin).Seconds())
	if published > 0 || a.ps.interval == 1 {
		// Reading a binary's symbols and the start-up (kallsyms) leave tens
		// of MiB of garbage; hand it back now rather than keep it as RSS.
		debug.FreeOSMemory()
	}
}

// memory returns the RSS of every targeted process.
func (a *Agent) memory(start time.Time, dur time.Duration) *profile.Profile {
	p := memoryProfile(start, dur)
	pids, err := a.ps.fs.PIDs()
	if err != nil {
		a.d.Log.Error("list processes", "err", err)
		return p
	}
	for _, pid := range pids {
		pr, rssPages, err := a.ps.refresh(pid)
		if err != nil || !pr.targeted || pr.info.StartTime == 0 || rssPages <= 0 {
			continue // exited, or a kernel thread
		}
		p.Sample = append(p.Sample, &profile.Sample{Value: []int64{rssPages * a.pageSize}, Label: wrapLabels(pr.labels)})
	}
	return p
}

// publishProfile publishes p once the records of after are answered;
// profiles keep their order whatever they wait for.
func (a *Agent) publishProfile(typ record.ProfileType, p *profile.Profile, after []*publish.Ack) {
	recs, err := a.profileRecords(typ, p, maxProfileRecordBytes)
	if err != nil {
		a.d.Log.Error("encode profile", "type", typ, "err", err)
		return
	}
	for _, r := range recs {
		a.d.Publisher.PublishAfter(string(typ), r, after)
	}
}

// profileRecords encodes p into records of at most limit value bytes. The
// parts of a split interval share its time, so each carries record.HeaderPart:
// downstream, a process present in two parts must get two sample documents,
// not one that the later part overwrites.
func (a *Agent) profileRecords(typ record.ProfileType, p *profile.Profile, limit int) ([]*kgo.Record, error) {
	values, err := encodeBounded(p, limit)
	if err != nil {
		return nil, err
	}
	recs := make([]*kgo.Record, 0, len(values))
	for i, value := range values {
		headers := record.Meta{Type: typ, Host: a.cfg.HostID, AgentVersion: a.d.Version}.Headers()
		if len(values) > 1 {
			headers = append(headers, kgo.RecordHeader{Key: record.HeaderPart, Value: []byte(record.SubPart("", i))})
		}
		recs = append(recs, &kgo.Record{Topic: a.d.Topics.ProfilesRaw, Key: []byte(a.cfg.HostID), Value: value, Headers: headers})
	}
	return recs, nil
}

// maxProfileRecordBytes keeps a profile record under Kafka's default
// max.message.bytes (1 MiB) with room for the key, headers and batch framing.
const maxProfileRecordBytes = 900 << 10

// encodeBounded encodes p, split by samples into as many profiles of the same
// interval as needed for each to stay within limit bytes: a busy host's
// interval must not be refused whole by the broker. Consumers add up samples,
// so parts are equivalent to the whole.
func encodeBounded(p *profile.Profile, limit int) ([][]byte, error) {
	value, err := encodeProfile(p)
	if err != nil {
		return nil, err
	}
	if len(value) <= limit || len(p.Sample) < 2 {
		return [][]byte{value}, nil
	}
	half := len(p.Sample) / 2
	var out [][]byte
	for _, samples := range [][]*profile.Sample{p.Sample[:half], p.Sample[half:]} {
		part := &profile.Profile{
			SampleType: p.SampleType, DefaultSampleType: p.DefaultSampleType,
			PeriodType: p.PeriodType, Period: p.Period,
			TimeNanos: p.TimeNanos, DurationNanos: p.DurationNanos,
			Sample: samples, Location: p.Location, Function: p.Function, Mapping: p.Mapping,
		}
		// Compact drops the locations, functions and mappings the other
		// half alone used; it copies, so p is left as it is.
		values, err := encodeBounded(part.Compact(), limit)
		if err != nil {
			return nil, err
		}
		out = append(out, values...)
	}
	return out, nil
}

// publishDebuginfo sends the symbols of b once per build ID, and reports
// whether it read the binary and the answer to the record it published (nil
// when none).
func (a *Agent) publishDebuginfo(b *binary) (read bool, ack *publish.Ack) {
	if a.known[b.buildID] {
		return false, nil
	}
	a.known[b.buildID] = true
	type extracted struct {
		d   *debuginfo.File
		err error
	}
	fs, src, mapFiles := a.ps.fs, *b, a.ps.mapFiles
	r, err := gated(a.ps.files, b.mapping.Dev, func() extracted {
		d, err := extract(fs, src, mapFiles, elfinfo.DefaultLimits)
		return extracted{d, err}
	})
	if err == nil {
		err = r.err
	}
	d := r.d
	if errors.Is(err, elfinfo.ErrTooLarge) {
		// Its symbols would not fit a debuginfo value: say so, as for an
		// encoding over the bound.
		a.m.debuginfo.WithLabelValues("too_large").Inc()
		a.d.Log.Debug("publish debuginfo", "path", b.path, "build_id", b.buildID, "result", "too_large", "err", err)
		return true, a.d.Publisher.Publish(kindDebuginfo, &kgo.Record{Topic: a.d.Topics.Debuginfo, Key: []byte(b.buildID), Value: debuginfo.Marker(b.buildID, debuginfo.KindTooLarge)})
	}
	if err != nil {
		// Not retried: a file that cannot be read now (deleted, malformed)
		// would fail and log every interval.
		a.m.debuginfo.WithLabelValues("error").Inc()
		a.d.Log.Warn("extract debuginfo", "path", b.path, "build_id", b.buildID, "err", err)
		return true, nil
	}
	// The ELF and pclntab tables read above are garbage now: collect them
	// before encoding allocates its own, so the two do not add up in RSS.
	runtime.GC()
	value, kind, err := elfinfo.Encode(d)
	if err != nil {
		a.m.debuginfo.WithLabelValues("error").Inc()
		a.d.Log.Error("encode debuginfo", "path", b.path, "err", err)
		return true, nil
	}
	result := map[debuginfo.Kind]string{debuginfo.KindSymbols: "symbols", debuginfo.KindNoSymbols: "no_symbols", debuginfo.KindTooLarge: "too_large"}[kind]
	a.m.debuginfo.WithLabelValues(result).Inc()
	a.d.Log.Debug("publish debuginfo", "path", b.path, "build_id", b.buildID, "result", result, "symbols", len(d.Symbols), "bytes", len(value))
	return true, a.d.Publisher.Publish(kindDebuginfo, &kgo.Record{Topic: a.d.Topics.Debuginfo, Key: []byte(b.buildID), Value: value})
}

// Close stops sampling.
func (a *Agent) Close() error { return a.sampler.Close() }

// encodeProfile writes p as gzip pprof like record.EncodeProfile, at the
// fastest gzip level: the agent compresses every interval and the value is
// small; the default level cost about a tenth of the agent's CPU.
func encodeProfile(p *profile.Profile) ([]byte, error) {
	return record.EncodeProfileLevel(p, gzip.BestSpeed)
}
