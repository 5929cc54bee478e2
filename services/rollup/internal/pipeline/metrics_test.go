package pipeline

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/stackstream/stackstream/services/rollup/internal/aggregate"
)

// TestObserveCache: the stack cache's counts are exported as counters that
// add what the cache did between two commits, never twice.
func TestObserveCache(t *testing.T) {
	m := newMetrics(prometheus.NewRegistry())
	m.observeCache(aggregate.CacheStats{Built: 5, GaveWay: 1})
	m.observeCache(aggregate.CacheStats{Built: 7, GaveWay: 3, Resets: 1})
	m.observeCache(aggregate.CacheStats{Built: 7, GaveWay: 3, Resets: 1})
	for event, want := range map[string]float64{"built": 7, "gave_way": 3, "reset": 1} {
		if got := testutil.ToFloat64(m.cacheEvents.WithLabelValues(event)); got != want {
			t.Errorf("stack_cache_events_total{event=%q} = %v, want %v", event, got, want)
		}
	}
}
