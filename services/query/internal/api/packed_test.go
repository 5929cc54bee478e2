package api_test

import (
	"net/url"
	"testing"
	"time"

	"github.com/stackstream/stackstream/schemas/indices"
	"github.com/stackstream/stackstream/services/query/internal/api"
	"github.com/stackstream/stackstream/services/query/internal/querytest"
)

// TestPackedAndOldSamples reads a samples document packing two stacks and
// samples without a stack next to one written before stack_values existed
// (one stack ID, its value in value): flame graph, truncation past
// MaxStacks and a function's series take each stack's own value.
func TestPackedAndOldSamples(t *testing.T) {
	cl, names := querytest.Setup(t)
	workDoc, work := querytest.Stack(names, now.Add(-2*time.Hour), "main.main", "main.work")
	idleDoc, idle := querytest.Stack(names, now.Add(-2*time.Hour), "main.main", "main.idle")
	packed := indices.SampleDoc{Timestamp: now.Add(-10 * time.Minute), Type: "cpu", Host: "h", Service: "s", Value: 160}
	if err := packed.SetStacks([]string{work, idle}, []int64{100, 50}); err != nil { // and 10 without a stack
		t.Fatal(err)
	}
	old := indices.SampleDoc{Timestamp: now.Add(-40 * time.Minute), Type: "cpu", Host: "h", Service: "s", StackIDs: []string{work}, Value: 7}
	querytest.Index(t, cl, names, []querytest.Doc{workDoc, idleDoc, querytest.Sample(names, packed), querytest.Sample(names, old)})
	base := serve(t, cl, names, api.Options{})

	t.Run("flamegraph", func(t *testing.T) {
		var f api.FlamegraphResponse
		get(t, base, "/api/v1/flamegraph", nil, &f)
		got := map[string]int64{}
		for _, c := range f.Root.Children {
			got[c.Name] = c.Total
			for _, cc := range c.Children {
				got[c.Name+";"+cc.Name] = cc.Total
			}
		}
		want := map[string]int64{"main.main": 157, "main.main;main.work": 107, "main.main;main.idle": 50, "[no stack]": 10}
		if f.Total != 167 || f.Truncated || f.Source != "samples" || len(got) != len(want) {
			t.Fatalf("total %d truncated %v source %s nodes %v, want 167 from samples: %v", f.Total, f.Truncated, f.Source, got, want)
		}
		for k, v := range want {
			if got[k] != v {
				t.Fatalf("nodes %v, want %v", got, want)
			}
		}
	})

	t.Run("past max stacks", func(t *testing.T) {
		var f api.FlamegraphResponse
		get(t, serve(t, cl, names, api.Options{MaxStacks: 1}), "/api/v1/flamegraph", nil, &f)
		if f.Total != 167 || !f.Truncated || len(f.Root.Children) != 2 ||
			f.Root.Children[0].Name != "main.main" || f.Root.Children[0].Total != 107 ||
			f.Root.Children[1].Name != "[other]" || f.Root.Children[1].Total != 60 {
			t.Fatalf("total %d truncated %v children %+v, want main.main 107 and [other] 60", f.Total, f.Truncated, f.Root.Children)
		}
	})

	t.Run("function series", func(t *testing.T) {
		for fn, want := range map[string][][2]float64{
			"main.work": {{float64(now.Add(-40 * time.Minute).UnixMilli()), 7}, {float64(now.Add(-10 * time.Minute).UnixMilli()), 100}},
			"main.idle": {{float64(now.Add(-10 * time.Minute).UnixMilli()), 50}},
		} {
			var s api.SeriesResponse
			get(t, base, "/api/v1/series", url.Values{"function": {fn}, "step": {"1m"}}, &s)
			if s.Source != "samples" || len(s.Series) != 1 || len(s.Series[0].Points) != len(want) {
				t.Fatalf("%s: series %+v, want %v", fn, s, want)
			}
			for i, p := range s.Series[0].Points {
				if p[0] != want[i][0] || !near(p[1]*float64(time.Minute), want[i][1]) {
					t.Fatalf("%s: point %d = [%v, %v ns], want %v", fn, i, p[0], p[1]*float64(time.Minute), want[i])
				}
			}
		}
	})
}
