package indexer

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/stackstream/stackstream/pkg/bulk"
	"github.com/stackstream/stackstream/pkg/telemetry"
	"github.com/stackstream/stackstream/services/indexer/internal/convert"
)

// Metrics of the indexer; bulk latency and retries are in Bulk.
type Metrics struct {
	// Records (outcome: indexed, dlq), Lag, DLQ (reason: see the Reason
	// constants) and CommitSeconds are every consumer's.
	*telemetry.Consumer
	Decoded  *prometheus.CounterVec // path: fast, general
	Docs     *prometheus.CounterVec // index kind: stacks, samples
	Raw      prometheus.Counter
	Batches  prometheus.Counter
	Commits  *prometheus.CounterVec // result: ok, error
	BatchDur prometheus.Histogram
	InFlight prometheus.Gauge // batches being written
	// CacheEntries and CacheMaxEntries are the bounded caches' fill and
	// bound (cache: stored_stacks, stack_ids, label_sets): the indexer's
	// memory grows while they fill, and stays once each has turned its
	// generations over (pkg/cache).
	CacheEntries, CacheMaxEntries *prometheus.GaugeVec
	// LabelsDropped counts label changes by reason: invalid_key,
	// value_truncated, too_many, service_truncated (see convert.LabelDrops).
	LabelsDropped *prometheus.CounterVec
	Bulk          *bulk.Metrics
}

func (m *Metrics) countLabelDrops(d convert.LabelDrops) {
	for _, c := range []struct {
		reason string
		n      int
	}{{"invalid_key", d.InvalidKey}, {"value_truncated", d.ValueTruncated}, {"too_many", d.TooMany}, {"service_truncated", d.ServiceTruncated}} {
		if c.n > 0 {
			m.LabelsDropped.WithLabelValues(c.reason).Add(float64(c.n))
		}
	}
}

// NewMetrics creates and registers (when reg is not nil) the indexer metrics.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	const ns = "stackstream_indexer"
	m := &Metrics{
		Consumer: telemetry.NewConsumer(reg, "indexer", telemetry.ConsumerHelp{
			Records: "Profile records processed, by outcome (indexed, dlq).",
			DLQ:     "Records sent to the DLQ, by reason (headers, not_gzip, not_pprof, too_large, invalid_profile, time_out_of_range, host_too_long, panic, rejected).",
		}),
		Decoded: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "decoded_records_total",
			Help: "Records decoded, by path: fast (agent- and symbolizer-shaped pprof) or general (anything else, errors included)."}, []string{"path"}),
		Docs: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "documents_total",
			Help: "Documents sent, by kind (stacks, samples)."}, []string{"kind"}),
		Raw: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Name: "raw_samples_total",
			Help: "Raw samples represented by the sample documents written."}),
		Batches: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Name: "batches_total",
			Help: "Batches written and committed."}),
		Commits: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "commits_total",
			Help: "Offset commits, by result."}, []string{"result"}),
		BatchDur: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: ns, Name: "batch_duration_seconds",
			Help: "Time to write, dead-letter and commit one batch.", Buckets: prometheus.ExponentialBuckets(0.01, 2, 14)}),
		InFlight: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Name: "batches_in_flight",
			Help: "Batches being written or waiting for an earlier batch's commit (at most STACKSTREAM_INDEXER_MAX_IN_FLIGHT)."}),
		CacheEntries: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Name: "cache_entries",
			Help: "Entries of a bounded cache (stored_stacks: stack IDs known stored; stack_ids: stack IDs by location hash; label_sets), as of the last batch stored."}, []string{"cache"}),
		CacheMaxEntries: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Name: "cache_max_entries",
			Help: "Entries a bounded cache holds at most, both generations (stored_stacks: STACKSTREAM_INDEXER_STACK_CACHE_SIZE)."}, []string{"cache"}),
		LabelsDropped: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "labels_dropped_total",
			Help: "Labels dropped or cut, once per samples document, by reason (invalid_key, value_truncated, too_many, service_truncated)."}, []string{"reason"}),
		Bulk: bulk.NewMetrics(reg, ns),
	}
	if reg != nil {
		reg.MustRegister(m.Decoded, m.Docs, m.Raw, m.Batches, m.Commits, m.BatchDur, m.InFlight, m.CacheEntries, m.CacheMaxEntries, m.LabelsDropped)
	}
	return m
}
