package pipeline

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/stackstream/stackstream/pkg/telemetry"
	"github.com/stackstream/stackstream/services/symbolizer/internal/source"
	"github.com/stackstream/stackstream/services/symbolizer/internal/symbolize"
)

// Metrics of the symbolizer. Counters move only when a transaction commits,
// so they count what downstream consumers see.
type Metrics struct {
	// Records (outcome: symbolized, dlq), Lag, DLQ (reason) and
	// CommitSeconds (ending a transaction) are every consumer's.
	*telemetry.Consumer
	Frames       *prometheus.CounterVec // source: topic, local, debuginfod, unresolved, presymbolized
	Cache        *prometheus.CounterVec // cache: binary, address; result: hit, miss
	Transactions *prometheus.CounterVec // result: committed, aborted
	Debuginfo    *prometheus.CounterVec // result: applied, bad, rejected
	FetchErrors  *prometheus.CounterVec // source
	Split        prometheus.Counter     // profiles written as several parts
	SplitParts   prometheus.Counter     // records those parts took
	Panics       prometheus.Counter     // panics recovered at the record boundary
	OverBudget   prometheus.Counter     // records whose lookups ran out of time
}

// NewMetrics registers the symbolizer's metrics on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Consumer: telemetry.NewConsumer(reg, "symbolizer", telemetry.ConsumerHelp{
			Records: "Raw profile records processed, by outcome (symbolized, dlq).",
			DLQ:     "Records sent to the DLQ, by reason.",
		}),
		Frames: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "stackstream_symbolizer_frames_total", Help: "Locations written, by the source that resolved them (topic, local, debuginfod), unresolved, or presymbolized.",
		}, []string{"source"}),
		Cache: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "stackstream_symbolizer_cache_requests_total", Help: "Cache lookups: binary (symbol table by build ID, negative entries included) and address (frames by address), by result.",
		}, []string{"cache", "result"}),
		Transactions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "stackstream_symbolizer_transactions_total", Help: "Kafka transactions ended, by result (committed, aborted).",
		}, []string{"result"}),
		Debuginfo: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "stackstream_symbolizer_debuginfo_records_total", Help: "Records read from the debuginfo topic, by result (applied, bad: does not decode or names another build ID, rejected: poorer than the value held).",
		}, []string{"result"}),
		FetchErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "stackstream_symbolizer_source_errors_total", Help: "Failed debug info fetches (not counting plain not-found), by source.",
		}, []string{"source"}),
		Split: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "stackstream_symbolizer_split_profiles_total", Help: "Symbolized profiles too large for one record, written as several parts.",
		}),
		SplitParts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "stackstream_symbolizer_split_parts_total", Help: "Records written for the parts of split profiles.",
		}),
		Panics: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "stackstream_symbolizer_panics_total", Help: "Panics recovered at the record boundary (counted when they happen; the record goes to the DLQ with reason panic).",
		}),
		OverBudget: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "stackstream_symbolizer_lookup_budget_exceeded_total", Help: "Profiles written before every build ID was looked up (STACKSTREAM_SYMBOLIZER_LOOKUP_BUDGET); the frames left keep their addresses.",
		}),
	}
	reg.MustRegister(m.Frames, m.Cache, m.Transactions, m.Debuginfo, m.FetchErrors, m.Split, m.SplitParts, m.Panics, m.OverBudget)
	for _, r := range []string{"hit", "miss"} {
		m.Cache.WithLabelValues("binary", r)
		m.Cache.WithLabelValues("address", r)
	}
	m.Records.WithLabelValues("symbolized")
	m.Records.WithLabelValues("dlq")
	return m
}

// Caches are the symbolizer's caches that grow with the binaries of the
// fleet, as CacheGauges reports them.
type Caches struct {
	Chain         *source.Chain
	Topic         *source.Topic
	MaxTables     int // STACKSTREAM_SYMBOLIZER_MAX_TABLES
	MaxTableBytes int // STACKSTREAM_SYMBOLIZER_MAX_TABLE_BYTES
	TopicBytes    int // STACKSTREAM_SYMBOLIZER_TOPIC_CACHE_BYTES
	MaxMisses     int // STACKSTREAM_SYMBOLIZER_MAX_MISSES
}

// CacheGauges registers on reg what the caches hold and their bounds,
// read at each scrape: tables (symbol tables with their lookup caches),
// debuginfo (the topic's compressed values) and misses (build IDs no
// source had). They are not named *_cache_entries: those of the indexer
// are cleared whole when full, these evict their least recently used.
func CacheGauges(reg prometheus.Registerer, c Caches) {
	maxBytes := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "stackstream_symbolizer_cache_max_bytes", Help: "Byte budget of a cache: tables (STACKSTREAM_SYMBOLIZER_MAX_TABLE_BYTES), debuginfo (STACKSTREAM_SYMBOLIZER_TOPIC_CACHE_BYTES).",
	}, []string{"cache"})
	maxBytes.WithLabelValues("tables").Set(float64(c.MaxTableBytes))
	maxBytes.WithLabelValues("debuginfo").Set(float64(c.TopicBytes))
	maxIDs := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "stackstream_symbolizer_cache_max_build_ids", Help: "Build IDs a cache holds at most: tables (STACKSTREAM_SYMBOLIZER_MAX_TABLES), misses (STACKSTREAM_SYMBOLIZER_MAX_MISSES).",
	}, []string{"cache"})
	maxIDs.WithLabelValues("tables").Set(float64(c.MaxTables))
	maxIDs.WithLabelValues("misses").Set(float64(c.MaxMisses))
	reg.MustRegister(maxBytes, maxIDs)
	gauge := func(name, help, cache string, f func() int) {
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: name, Help: help, ConstLabels: prometheus.Labels{"cache": cache},
		}, func() float64 { return float64(f()) }))
	}
	const (
		heldBytes = "stackstream_symbolizer_cache_bytes"
		bytesHelp = "Estimated bytes a cache holds: tables (symbol tables with their lookup caches, fallbacks included), debuginfo (compressed topic values and markers)."
		heldIDs   = "stackstream_symbolizer_cache_build_ids"
		idsHelp   = "Build IDs a cache holds: tables, debuginfo (topic values), misses (remembered as found nowhere)."
	)
	gauge(heldBytes, bytesHelp, "tables", c.Chain.TableBytes)
	gauge(heldBytes, bytesHelp, "debuginfo", c.Topic.Bytes)
	gauge(heldIDs, idsHelp, "tables", func() int { return c.Chain.Stats().Tables })
	gauge(heldIDs, idsHelp, "debuginfo", c.Topic.Len)
	gauge(heldIDs, idsHelp, "misses", func() int { return c.Chain.Stats().Misses })
}

// ChainMetrics feeds the source chain's cache and error counts.
func (m *Metrics) ChainMetrics() source.Metrics {
	hit, miss := m.Cache.WithLabelValues("binary", "hit"), m.Cache.WithLabelValues("binary", "miss")
	return source.Metrics{
		CacheHit:   hit.Inc,
		CacheMiss:  miss.Inc,
		FetchError: func(s string) { m.FetchErrors.WithLabelValues(s).Inc() },
	}
}

func (m *Metrics) addStats(st symbolize.Stats) {
	for src, n := range st.Resolved {
		m.Frames.WithLabelValues(src).Add(float64(n))
	}
	m.Frames.WithLabelValues(symbolize.SourceUnresolved).Add(float64(st.Unresolved))
	m.Frames.WithLabelValues(symbolize.SourceAlready).Add(float64(st.Already))
	m.Cache.WithLabelValues("address", "hit").Add(float64(st.AddrHits))
	m.Cache.WithLabelValues("address", "miss").Add(float64(st.AddrLookups - st.AddrHits))
	m.OverBudget.Add(float64(st.OverBudget))
}
