package pipeline

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/stackstream/stackstream/pkg/telemetry"
	"github.com/stackstream/stackstream/services/rollup/internal/aggregate"
)

type metrics struct {
	// records (outcome: added, dlq, skipped), lag, dlq (reason) and
	// commit_seconds are every consumer's.
	*telemetry.Consumer
	docs         prometheus.Counter
	writeSeconds prometheus.Histogram
	commits      prometheus.Counter
	commitErrors prometheus.Counter
	openWindows  prometheus.Gauge
	watermark    *prometheus.GaugeVec
	panics       prometheus.Counter
	stateBytes   prometheus.Gauge
	cacheBytes   prometheus.Gauge
	// cacheEvents counts the stack cache's aggregate.CacheStats, added
	// from cacheSeen, the stats last exported.
	cacheEvents *prometheus.CounterVec
	cacheSeen   aggregate.CacheStats
	// hourWrites and hourWriteSeconds: the ended hours written in the
	// background (hourwrite.go).
	hourWrites       prometheus.Gauge
	hourWriteSeconds prometheus.Histogram
	// snapshotSeconds, snapshotBytes and restores: the partitions' state
	// stored and restored (snapshots.go).
	snapshotSeconds prometheus.Histogram
	snapshotBytes   prometheus.Counter
	restores        *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	const ns, sub = "stackstream", "rollup"
	m := &metrics{
		Consumer: telemetry.NewConsumer(reg, sub, telemetry.ConsumerHelp{
			Records: "Records read, by outcome: added, dlq, skipped (too late, handled before a restart).",
			DLQ:     "Records and documents sent to the DLQ, by reason.",
		}),
		docs: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "documents_written_total",
			Help: "Rollup documents acknowledged by OpenSearch (rate = docs/s)."}),
		writeSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: ns, Subsystem: sub, Name: "write_seconds",
			Help: "Time to store one chunk of a flush (up to 16 MiB of documents), retries included.", Buckets: prometheus.ExponentialBuckets(0.005, 2, 14)}),
		commits: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "commits_total",
			Help: "Offset commits that succeeded."}),
		commitErrors: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "commit_errors_total",
			Help: "Offset commits refused (usually after a rebalance)."}),
		openWindows: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub, Name: "windows_in_memory",
			Help: "Windows held in memory: open, closed and kept for late data, or awaiting a write."}),
		watermark: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub, Name: "watermark_seconds",
			Help: "Newest event time seen on the partition (unix seconds)."}, []string{"partition"}),
		panics: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "panics_total",
			Help: "Records whose processing panicked (sent to the DLQ with reason panic): each is a bug to fix."}),
		stateBytes: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub, Name: "state_bytes",
			Help: "Bytes of window state and stack cache charged against STACKSTREAM_ROLLUP_MAX_STATE_BYTES."}),
		cacheBytes: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub, Name: "stack_cache_bytes",
			Help: "The part of state_bytes that is the stack cache (dropped first when the budget is full)."}),
		cacheEvents: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "stack_cache_events_total",
			Help: "The stack cache's work, by event: built (a stack named and hashed, not found in the cache), gave_way (stacks dropped for the window state), reset (the whole cache dropped, its frames too). Builds near the profiles' stacks and growing resets mean a state budget too small for the fleet."}, []string{"event"}),
		hourWrites: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub, Name: "hour_writes_in_flight",
			Help: "Ended hours being written in the background (at most one per partition)."}),
		hourWriteSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: ns, Subsystem: sub, Name: "hour_write_seconds",
			Help: "Time to store an ended hour in the background, while consumption goes on.", Buckets: prometheus.ExponentialBuckets(0.05, 2, 14)}),
		snapshotSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: ns, Subsystem: sub, Name: "snapshot_seconds",
			Help: "Time to encode a partition's state and produce it to the state topic.", Buckets: prometheus.ExponentialBuckets(0.005, 2, 14)}),
		snapshotBytes: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "snapshot_bytes_total",
			Help: "Bytes of partition state produced to the state topic."}),
		restores: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "restores_total",
			Help: "Partitions assigned with a snapshot named by their commit, by outcome: restored (read on from the snapshot), failed (read again from the commit)."}, []string{"outcome"}),
	}
	if reg != nil {
		reg.MustRegister(m.docs, m.writeSeconds, m.commits, m.commitErrors, m.openWindows, m.watermark, m.panics, m.stateBytes, m.cacheBytes, m.cacheEvents,
			m.hourWrites, m.hourWriteSeconds, m.snapshotSeconds, m.snapshotBytes, m.restores)
	}
	return m
}

// observeCache adds what the stack cache did since the last call.
func (m *metrics) observeCache(s aggregate.CacheStats) {
	m.cacheEvents.WithLabelValues("built").Add(float64(s.Built - m.cacheSeen.Built))
	m.cacheEvents.WithLabelValues("gave_way").Add(float64(s.GaveWay - m.cacheSeen.GaveWay))
	m.cacheEvents.WithLabelValues("reset").Add(float64(s.Resets - m.cacheSeen.Resets))
	m.cacheSeen = s
}
