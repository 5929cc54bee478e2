package pipeline

import (
	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	records      *prometheus.CounterVec
	dlq          *prometheus.CounterVec
	docs         prometheus.Counter
	writeSeconds prometheus.Histogram
	commits      prometheus.Counter
	commitErrors prometheus.Counter
	openWindows  prometheus.Gauge
	lag          *prometheus.GaugeVec
	watermark    *prometheus.GaugeVec
	panics       prometheus.Counter
	stateBytes   prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer) *metrics {
	const ns, sub = "stackstream", "rollup"
	m := &metrics{
		records: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "records_total",
			Help: "Records read, by outcome: added, dlq, skipped (too late, handled before a restart)."}, []string{"outcome"}),
		dlq: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "dlq_total",
			Help: "Records and documents sent to the DLQ, by reason."}, []string{"reason"}),
		docs: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "documents_written_total",
			Help: "Rollup documents acknowledged by OpenSearch (rate = docs/s)."}),
		writeSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: ns, Subsystem: sub, Name: "write_seconds",
			Help: "Time to store one flush of documents, retries included.", Buckets: prometheus.ExponentialBuckets(0.005, 2, 14)}),
		commits: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "commits_total",
			Help: "Offset commits that succeeded."}),
		commitErrors: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "commit_errors_total",
			Help: "Offset commits refused (usually after a rebalance)."}),
		openWindows: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub, Name: "windows_in_memory",
			Help: "Windows held in memory: open, closed and kept for late data, or awaiting a write."}),
		lag: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub, Name: "lag_records",
			Help: "Records behind the partition's high watermark after the last fetch."}, []string{"partition"}),
		watermark: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub, Name: "watermark_seconds",
			Help: "Newest event time seen on the partition (unix seconds)."}, []string{"partition"}),
		panics: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "panics_total",
			Help: "Records whose processing panicked (sent to the DLQ with reason panic): each is a bug to fix."}),
		stateBytes: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub, Name: "state_bytes",
			Help: "Bytes of window state charged against STACKSTREAM_ROLLUP_MAX_STATE_BYTES."}),
	}
	if reg != nil {
		reg.MustRegister(m.records, m.dlq, m.docs, m.writeSeconds, m.commits, m.commitErrors, m.openWindows, m.lag, m.watermark, m.panics, m.stateBytes)
	}
	return m
}
