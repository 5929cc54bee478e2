package api_test

import (
	"net/url"
	"testing"
	"time"

	"github.com/stackstream/stackstream/schemas/indices"
	"github.com/stackstream/stackstream/services/query/internal/api"
	"github.com/stackstream/stackstream/services/query/internal/querytest"
)

// TestUnknownStack: samples whose stack the stacks index does not hold (the
// indexer writes stacks and samples separately) still count, under one
// "[unknown stack]" frame, and a missing stacks index is no error.
func TestUnknownStack(t *testing.T) {
	cl, names := querytest.Setup(t)
	querytest.Index(t, cl, names, querytest.Samples(names,
		indices.SampleDoc{Timestamp: now.Add(-10 * time.Minute), Type: "cpu", Host: "h", Service: "s", StackIDs: []string{"no-such-stack"}, Value: 42}))
	base := serve(t, cl, names, api.Options{})
	var f api.FlamegraphResponse
	get(t, base, "/api/v1/flamegraph", url.Values{}, &f)
	if f.Total != 42 || len(f.Root.Children) != 1 || f.Root.Children[0].Name != "[unknown stack]" || f.Root.Children[0].Self != 42 {
		t.Fatalf("flame graph %+v, want one [unknown stack] node of 42", f.Root)
	}
}
