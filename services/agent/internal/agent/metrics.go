package agent

import "github.com/prometheus/client_golang/prometheus"

type metrics struct {
	samples      prometheus.Counter
	cpuNanos     prometheus.Counter
	untargeted   prometheus.Counter
	bpfCounters  *prometheus.GaugeVec
	mapFill      prometheus.Gauge
	processes    prometheus.Gauge
	intervalTime prometheus.Histogram
	debuginfo    *prometheus.CounterVec
	heapErrors   prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		samples: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "stackstream_agent_samples_total", Help: "CPU samples of targeted processes put into profiles.",
		}),
		cpuNanos: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "stackstream_agent_cpu_nanoseconds_total", Help: "CPU time of targeted processes put into profiles.",
		}),
		untargeted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "stackstream_agent_untargeted_samples_total", Help: "CPU samples of processes the target flags exclude.",
		}),
		bpfCounters: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "stackstream_agent_bpf_events", Help: "Cumulative counters of the BPF program: samples, user_stack_errors, kernel_stack_errors, counts_map_full (lost samples).",
		}, []string{"event"}),
		mapFill: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "stackstream_agent_counts_map_fill_ratio", Help: "Fill of the counts map at the last drain (1 = full, samples lost).",
		}),
		processes: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "stackstream_agent_processes", Help: "Processes the agent remembers.",
		}),
		intervalTime: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "stackstream_agent_interval_seconds", Help: "Time to drain, build and hand over one interval's profiles.",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 8),
		}),
		debuginfo: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "stackstream_agent_debuginfo_total", Help: "Build IDs handled, by result (symbols, too_large, no_symbols, error).",
		}, []string{"result"}),
		heapErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "stackstream_agent_heap_scrape_errors_total", Help: "Heap endpoint scrapes that failed.",
		}),
	}
	reg.MustRegister(m.samples, m.cpuNanos, m.untargeted, m.bpfCounters, m.mapFill, m.processes, m.intervalTime, m.debuginfo, m.heapErrors)
	return m
}
