package indexer_test

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/stackstream/stackstream/services/indexer/internal/indexer"
)

// TestCacheGauges: once a corpus is indexed, the stored-stack cache's gauge
// holds its distinct stacks, the fast path's caches hold entries, and each
// cache's bound is set (the pipeline bench's soak reads them beside RSS).
func TestCacheGauges(t *testing.T) {
	e := setup(t, 2)
	recs, want, err := smallCorpus(5).Build()
	if err != nil {
		t.Fatal(err)
	}
	e.Produce(t, recs)
	r := start(t, e, e.URL, func(o *indexer.Options) { o.StackCacheSize = 5000 })
	e.WaitCaughtUp(t, 2*time.Minute)
	entries := func(cache string) float64 { return testutil.ToFloat64(r.metrics.CacheEntries.WithLabelValues(cache)) }
	// The last batch's stacks are remembered once its write is reaped,
	// just after its commit.
	deadline := time.Now().Add(10 * time.Second)
	for entries("stored_stacks") != float64(len(want.Value)) && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	tests := []struct {
		cache      string
		minEntries float64
		max        float64
	}{
		{"stored_stacks", float64(len(want.Value)), 5000},
		{"stack_ids", 1, 1 << 18},
		{"label_sets", 1, 1 << 14},
	}
	for _, tt := range tests {
		t.Run(tt.cache, func(t *testing.T) {
			got, bound := entries(tt.cache), testutil.ToFloat64(r.metrics.CacheMaxEntries.WithLabelValues(tt.cache))
			if got < tt.minEntries || got > bound || bound != tt.max {
				t.Fatalf("%s: %v entries of %v, want at least %v of %v", tt.cache, got, bound, tt.minEntries, tt.max)
			}
		})
	}
	if got := entries("stored_stacks"); got != float64(len(want.Value)) {
		t.Fatalf("stored_stacks: %v entries, want the corpus's %d distinct stacks", got, len(want.Value))
	}
}
