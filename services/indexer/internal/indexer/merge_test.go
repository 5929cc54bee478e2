package indexer_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stackstream/stackstream/pkg/opensearch"
	"github.com/stackstream/stackstream/services/indexer/internal/indexer"
	"github.com/stackstream/stackstream/services/indexer/internal/indexertest"
)

// TestMergeFinishedDays: a day that ended more than MergeAfter ago is merged
// to one segment; today's and a day that ended just now keep theirs.
func TestMergeFinishedDays(t *testing.T) {
	e := setup(t, 1)
	ctx := context.Background()
	now := time.Date(2026, 11, 30, 0, 30, 0, 0, time.UTC)
	yesterday, earlier := now.AddDate(0, 0, -1), now.AddDate(0, 0, -2)
	for _, d := range []time.Time{earlier, yesterday, now} {
		writeSegments(t, e, e.Names.Samples(d), 3)
	}
	r := &indexer.Retention{Client: e.OS, Names: e.Names, MergeAfter: time.Hour, Now: func() time.Time { return now }}
	merged, err := r.Merge(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Yesterday ended 30 minutes ago: not yet.
	if len(merged) != 1 || merged[0] != e.Names.Samples(earlier) {
		t.Fatalf("merged %v, want only %s", merged, e.Names.Samples(earlier))
	}
	want := map[string]int{e.Names.Samples(earlier): 1, e.Names.Samples(yesterday): 3, e.Names.Samples(now): 3}
	for index, n := range want {
		if got := segments(t, e, index); got != n {
			t.Errorf("%s has %d segments, want %d", index, got, n)
		}
	}
	// Nothing left to merge: a second run does nothing.
	if merged, err := r.Merge(ctx); err != nil || len(merged) != 0 {
		t.Fatalf("second run merged %v (%v)", merged, err)
	}
}

// writeSegments writes n documents into index, each in a segment of its own.
func writeSegments(t *testing.T, e *indexertest.Env, index string, n int) {
	t.Helper()
	for i := range n {
		doc := fmt.Sprintf(`{"@timestamp":"2026-11-28T00:00:00Z","type":"cpu","host":"h","service":"s","value":%d}`, i+1)
		st, body, err := opensearch.Raw(context.Background(), e.OS, http.MethodPut, fmt.Sprintf("/%s/_doc/d%d?refresh=true", index, i), []byte(doc))
		if err != nil || st >= 300 {
			t.Fatalf("write %s: %d %s %v", index, st, body, err)
		}
	}
	if got := segments(t, e, index); got != n {
		t.Fatalf("%s has %d segments after %d refreshed writes", index, got, n)
	}
}

func segments(t *testing.T, e *indexertest.Env, index string) int {
	t.Helper()
	opensearch.Raw(context.Background(), e.OS, http.MethodPost, "/"+index+"/_refresh", nil)
	st, body, err := opensearch.Raw(context.Background(), e.OS, http.MethodGet, "/"+index+"/_stats/segments", nil)
	if err != nil || st != http.StatusOK {
		t.Fatalf("segments of %s: %d %s %v", index, st, body, err)
	}
	var s struct {
		All struct {
			Primaries struct {
				Segments struct {
					Count int `json:"count"`
				} `json:"segments"`
			} `json:"primaries"`
		} `json:"_all"`
	}
	if err := json.Unmarshal(body, &s); err != nil {
		t.Fatal(err)
	}
	return s.All.Primaries.Segments.Count
}
