package bulk

import "github.com/prometheus/client_golang/prometheus"

// Metrics count what a Writer does. Register them once per process with
// NewMetrics and share them between Writers.
type Metrics struct {
	Docs     *prometheus.CounterVec // outcome: stored, existed (409 on create), rejected
	Requests prometheus.Counter
	Bytes    prometheus.Counter
	Retries  prometheus.Counter
	Failures *prometheus.CounterVec // reason: connection, http_<status>, item_transient
	Latency  prometheus.Histogram
	Splits   prometheus.Counter // requests split after OpenSearch refused them whole (413, 400, ...)
}

// NewMetrics creates the metrics under namespace (e.g. "stackstream_indexer")
// and registers them with reg when it is not nil.
func NewMetrics(reg prometheus.Registerer, namespace string) *Metrics {
	m := &Metrics{
		Docs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Subsystem: "bulk", Name: "documents_total",
			Help: "Documents written, by outcome (stored, existed, rejected).",
		}, []string{"outcome"}),
		Requests: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: namespace, Subsystem: "bulk", Name: "requests_total",
			Help: "Bulk requests that got an answer.",
		}),
		Bytes: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: namespace, Subsystem: "bulk", Name: "request_bytes_total",
			Help: "Bytes of bulk request bodies sent.",
		}),
		Retries: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: namespace, Subsystem: "bulk", Name: "retries_total",
			Help: "Bulk requests sent again after a transient failure.",
		}),
		Failures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Subsystem: "bulk", Name: "transient_failures_total",
			Help: "Transient failures, by reason (connection, http_<status>, item_transient).",
		}, []string{"reason"}),
		Splits: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: namespace, Subsystem: "bulk", Name: "splits_total",
			Help: "Bulk requests split in halves because OpenSearch refused them whole (413 too large, 400, another 4xx).",
		}),
		Latency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: namespace, Subsystem: "bulk", Name: "request_duration_seconds",
			Help:    "Latency of bulk requests.",
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 14),
		}),
	}
	if reg != nil {
		reg.MustRegister(m.Docs, m.Requests, m.Bytes, m.Retries, m.Failures, m.Latency, m.Splits)
	}
	return m
}

func nopMetrics() *Metrics { return NewMetrics(nil, "") }
