package agent

import (
	"strings"
	"time"

	"github.com/google/pprof/profile"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/stackstream/stackstream/services/agent/internal/proc"
	"github.com/stackstream/stackstream/services/agent/internal/sampler"
)

// newOffCPUProfile builds one interval's off-CPU profile: the stacks threads
// switched out at, valued in blocks recorded and nanoseconds blocked
// (estimated: scaled by the inverse of the sampling probability).
func newOffCPUProfile(ps *processes, ks *proc.Kallsyms, start time.Time, dur time.Duration) *cpuProfile {
	c := newCPUProfile(ps, ks, start, dur, 0)
	c.p.SampleType = []*profile.ValueType{{Type: "samples", Unit: "count"}, {Type: "offcpu", Unit: "nanoseconds"}}
	c.p.PeriodType = &profile.ValueType{Type: "offcpu", Unit: "nanoseconds"}
	c.p.DefaultSampleType = "offcpu"
	return c
}

// tracingFrames are the kernel frames of the sched_switch tracepoint's own
// call into the BPF program, innermost in every off-CPU kernel stack.
var tracingFrames = []string{"bpf_prog_", "bpf_trace_run", "__bpf_trace_", "__traceiter_"}

// trimTracing drops the tracepoint's frames from the top of a kernel stack,
// so it starts at the scheduler (__schedule) as the thread left it.
func trimTracing(ks *proc.Kallsyms, kernel []uint64) []uint64 {
	if ks == nil {
		return kernel
	}
	for len(kernel) > 0 {
		name := ks.Resolve(kernel[0])
		tracing := false
		for _, prefix := range tracingFrames {
			if strings.HasPrefix(name, prefix) {
				tracing = true
				break
			}
		}
		if !tracing {
			break
		}
		kernel = kernel[1:]
	}
	return kernel
}

// offCPUSampler is the sampler's off-CPU setting from the agent's.
func (c Config) offCPUSampler() sampler.OffCPU {
	return sampler.OffCPU{Probability: c.OffCPUProbability, MinBlock: c.OffCPUMinBlock, Threads: c.OffCPUThreads}
}

type offCPUMetrics struct {
	blocks prometheus.Counter
	nanos  prometheus.Counter
}

func newOffCPUMetrics(reg prometheus.Registerer) *offCPUMetrics {
	m := &offCPUMetrics{
		blocks: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "stackstream_agent_offcpu_blocks_total", Help: "Off-CPU blocks (recorded switch-outs) of targeted processes put into profiles.",
		}),
		nanos: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "stackstream_agent_offcpu_nanoseconds_total", Help: "Off-CPU time of targeted processes put into profiles, scaled by the inverse of the sampling probability.",
		}),
	}
	reg.MustRegister(m.blocks, m.nanos)
	return m
}

// offCPU builds the interval's off-CPU profile and sets its counters.
func (a *Agent) offCPU(start time.Time, dur time.Duration) (*cpuProfile, []sampler.Sample) {
	samples := a.sampler.OffCPUSamples()
	if c, err := a.sampler.OffCPUCounters(); err == nil {
		for event, v := range map[string]uint64{
			"offcpu_recorded": c.Recorded, "offcpu_blocks": c.Blocks,
			"offcpu_short": c.Short, "offcpu_starts_full": c.StartsFull, "offcpu_counts_full": c.CountsFull,
			"offcpu_stack_errors": c.StackErrors,
		} {
			a.m.bpfCounters.WithLabelValues(event).Set(float64(v))
		}
	}
	off := newOffCPUProfile(a.ps, a.ks, start, dur)
	for _, s := range samples {
		p := a.ps.get(s.PID, s.Comm)
		if !p.targeted {
			continue
		}
		s.Kernel = trimTracing(a.ks, s.Kernel)
		off.add(p, s)
		a.offm.blocks.Add(float64(s.Count))
		a.offm.nanos.Add(float64(s.PeriodNanos))
	}
	return off, samples
}
