package agent

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/stackstream/stackstream/services/agent/internal/k8s"
)

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

// registerPodMetrics exports the Kubernetes metadata cache's state.
func registerPodMetrics(reg prometheus.Registerer, c *k8s.Cache) {
	reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "stackstream_agent_k8s_pods", Help: "Pods of this node known from the Kubernetes API server.",
		}, func() float64 { return float64(c.Len()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "stackstream_agent_k8s_events_total", Help: "Pod watch events applied.",
		}, func() float64 { return float64(c.Events.Load()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "stackstream_agent_k8s_relists_total", Help: "Full pod lists (at start and after a watch expired).",
		}, func() float64 { return float64(c.Relists.Load()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "stackstream_agent_k8s_errors_total", Help: "Failed or undecodable API server answers (retried with backoff).",
		}, func() float64 { return float64(c.Errors.Load()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "stackstream_agent_k8s_pods_dropped_total", Help: "Pods not kept because the cache was full.",
		}, func() float64 { return float64(c.Overflows.Load()) }),
	)
}
