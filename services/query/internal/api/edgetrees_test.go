package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
	"time"

	"github.com/opensearch-project/opensearch-go/v4/opensearchapi"

	"github.com/stackstream/stackstream/pkg/opensearch"
	"github.com/stackstream/stackstream/schemas/indices"
	"github.com/stackstream/stackstream/services/query/internal/api"
	"github.com/stackstream/stackstream/services/query/internal/querytest"
)

// TestEdgeTreesExact: the edges of a fleet-wide range read from the
// rollups (04:23:30-05:00 and 11:00 to the end) come from the partition
// trees of 10-minute windows and of minutes where their sums match the
// service documents', and per stack elsewhere; the flame graph (every
// node), top table, sandwich and diff equal a brute-force sum of every
// stack in every case: all windows present with the range ending now
// inside a window still filling; ending inside a window that holds data
// after the end; some trees missing or stale; and old data without them.
func TestEdgeTreesExact(t *testing.T) {
	cl, names := querytest.Setup(t)
	day := time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)
	from, end := day.Add(4*time.Hour+23*time.Minute+30*time.Second), day.Add(11*time.Hour+47*time.Minute+20*time.Second)
	services, hosts := []string{"checkout", "api"}, []string{"h-0", "h-1", "h-2"}
	const period = 52631578
	all, h0 := newBrute(), newBrute()
	frames := func(path []string) []indices.TreeFrame {
		out := make([]indices.TreeFrame, len(path))
		for j, f := range path {
			out[j] = indices.TreeFrame{Name: f}
		}
		return out
	}
	var docs []querytest.Doc
	// Settled hours 05:00-11:00 from partition trees (2 partitions) and
	// host trees (the diff's other side).
	for hr := 5; hr < 11; hr++ {
		at := day.Add(time.Duration(hr) * time.Hour)
		var partitions [2]indices.TreeBuilder
		for _, svc := range services {
			for pi, h := range hosts {
				var b indices.TreeBuilder
				for i := 0; i < 40; i++ {
					path := treeStack(svc, h, i+hr*100)
					v := int64(i%5+1) * period
					partitions[pi%2].Add(frames(path), v)
					b.Add(frames(path), v)
					all.add(h, path, v)
					if h == "h-0" {
						h0.add(h, path, v)
					}
				}
				docs = append(docs,
					querytest.Rollup(names, indices.RollupDoc{Timestamp: at, Resolution: indices.ResolutionHour, Kind: indices.KindService,
						Type: "cpu", Service: svc, Host: h, Value: b.Total(), StackValue: b.Total()}),
					querytest.Rollup(names, indices.RollupDoc{Timestamp: at, Resolution: indices.ResolutionHour, Kind: indices.KindTree,
						Type: "cpu", Service: svc, Host: h, Value: b.Total(), Tree: b.Encode()}))
			}
		}
		for p := range partitions {
			docs = append(docs, querytest.Rollup(names, indices.RollupDoc{Timestamp: at, Resolution: indices.ResolutionHour, Kind: indices.KindPartitionTree,
				Type: "cpu", Partition: int32(p), Value: partitions[p].Total(), Tree: partitions[p].Encode()}))
		}
	}
	// Minutes 04:20-05:00 and 11:00-11:48 (the last one holds the end),
	// 25 stacks per service, host and minute, most seen in one minute
	// only; 04:20-04:23 are before the range.
	win := querytest.NewWindowRollups("cpu")
	stackDocs := map[string]querytest.Doc{}
	var minuteStacks []indices.RollupDoc
	addMinute := func(at time.Time, w *querytest.WindowRollups, inside bool) {
		for _, svc := range services {
			for pi, h := range hosts {
				for i := 0; i < 25; i++ {
					path := treeStack(svc, h, 5000+int(at.Unix()/60)%1000*20+i)
					doc, id := querytest.Stack(names, at, path...)
					stackDocs[id] = doc
					v := int64(i%7+1) * period
					minuteStacks = append(minuteStacks, indices.RollupDoc{Timestamp: at, Resolution: indices.ResolutionMinute, Kind: indices.KindStack,
						Type: "cpu", Service: svc, Host: h, StackIDs: []string{id}, Value: v})
					w.Add(at, int32(pi%2), svc, h, frames(path), v)
					if inside {
						all.add(h, path, v)
						if h == "h-0" {
							h0.add(h, path, v)
						}
					}
				}
			}
		}
	}
	for m := day.Add(4*time.Hour + 20*time.Minute); m.Before(day.Add(5 * time.Hour)); m = m.Add(time.Minute) {
		addMinute(m, win, !m.Before(from))
	}
	for m := day.Add(11 * time.Hour); m.Before(day.Add(11*time.Hour + 48*time.Minute)); m = m.Add(time.Minute) {
		addMinute(m, win, true)
	}
	for _, d := range stackDocs {
		docs = append(docs, d)
	}
	docs = append(docs, querytest.StackRollups(names, minuteStacks)...)
	for _, d := range win.Docs() {
		docs = append(docs, querytest.Rollup(names, d))
	}
	querytest.Index(t, cl, names, docs)
	t.Logf("%d distinct stacks, %d nodes, total %d", len(all.stacks), len(all.nodes), all.total)

	check := func(t *testing.T, base string, to time.Time, wantSource string) {
		t.Helper()
		params := func(extra ...string) url.Values {
			p := url.Values{"from": {from.Format(time.RFC3339)}, "to": {to.Format(time.RFC3339)}}
			for i := 0; i+1 < len(extra); i += 2 {
				p.Set(extra[i], extra[i+1])
			}
			return p
		}
		for _, maxNodes := range []int{100000, 50} {
			var f api.FlamegraphResponse
			get(t, base, "/api/v1/flamegraph", params("max_nodes", fmt.Sprint(maxNodes)), &f)
			if f.Source != wantSource || f.Truncated || f.Total != all.total {
				t.Fatalf("max_nodes %d: source %s truncated %v total %d, want %s, %d", maxNodes, f.Source, f.Truncated, f.Total, wantSource, all.total)
			}
			shown, other := checkFlame(t, all, f.Root, "")
			if shown != min(maxNodes, len(all.nodes)) || f.Folded != other {
				t.Fatalf("max_nodes %d: %d nodes shown, %d [other], folded %d, brute force has %d", maxNodes, shown, other, f.Folded, len(all.nodes))
			}
		}
		var top api.TopResponse
		get(t, base, "/api/v1/top", params("limit", "10000"), &top)
		all.checkTop(t, top, 10000)
		const fn = "fn5"
		var sw api.SandwichResponse
		get(t, base, "/api/v1/sandwich", params("function", fn, "max_nodes", "100000"), &sw)
		if want := all.funcs[fn]; sw.Source != wantSource || sw.Callers.Total != want[1] || sw.Callees.Total != want[1] || sw.Callees.Self != want[0] {
			t.Fatalf("sandwich: source %s callers %d callees %d self %d, want %s %v", sw.Source, sw.Callers.Total, sw.Callees.Total, sw.Callees.Self, wantSource, want)
		}
		var d api.DiffResponse
		get(t, base, "/api/v1/diff", params("compare", `{host="h-0"}`, "max_nodes", "100000"), &d)
		if d.BaseSource != wantSource {
			t.Fatalf("diff: base source %s, want %s", d.BaseSource, wantSource)
		}
		if checked, want := checkDiff(t, d, all, h0, false), len(unionPaths(all, h0)); checked != want {
			t.Fatalf("%d diff nodes, want %d", checked, want)
		}
	}

	t.Run("every window, ending now in a window still filling", func(t *testing.T) {
		check(t, serveAt(t, cl, names, end), end, "partition_trees+window_trees")
	})

	// Minutes 11:48 and 11:49 arrive: the window 11:40 holds data after
	// the end, so its tree cannot stand for 11:40-11:47 (read from the
	// minute trees instead).
	later := querytest.NewWindowRollups("cpu")
	minuteStacks = nil
	for m := day.Add(11*time.Hour + 40*time.Minute); m.Before(day.Add(11*time.Hour + 50*time.Minute)); m = m.Add(time.Minute) {
		addMinute(m, later, false)
	}
	docs = querytest.StackRollups(names, minuteStacks[len(minuteStacks)-2*len(services)*len(hosts)*25:])
	for _, d := range stackDocs {
		docs = append(docs, d)
	}
	for _, d := range later.Docs() {
		if d.Resolution == "10m" || !d.Timestamp.Before(day.Add(11*time.Hour+48*time.Minute)) {
			docs = append(docs, querytest.Rollup(names, d))
		}
	}
	querytest.Index(t, cl, names, docs)
	t.Run("ending inside a window with data after the end", func(t *testing.T) {
		check(t, serve(t, cl, names, api.Options{Timeout: 2 * time.Minute}), end, "partition_trees+window_trees")
	})

	// A 10-minute tree missing (04:30, partition 1: its minutes from minute
	// trees), a minute tree stale (04:25, partition 1: per stack), a
	// 10-minute window's service document missing (11:10: minute trees).
	var stale indices.TreeBuilder
	stale.Add([]indices.TreeFrame{{Name: "main"}}, period)
	querytest.Index(t, cl, names, []querytest.Doc{querytest.Rollup(names, indices.RollupDoc{Timestamp: day.Add(4*time.Hour + 25*time.Minute),
		Resolution: "1m", Kind: indices.KindPartitionTree, Type: "cpu", Partition: 1, Value: period, Tree: stale.Encode()})})
	deleteRollups(t, cl, names, map[string]any{"bool": map[string]any{"filter": []any{
		map[string]any{"term": map[string]any{"kind": indices.KindPartitionTree}}, map[string]any{"term": map[string]any{"resolution": "10m"}},
		map[string]any{"term": map[string]any{"partition": 1}},
		map[string]any{"term": map[string]any{"@timestamp": day.Add(4*time.Hour + 30*time.Minute).UnixMilli()}}}}})
	deleteRollups(t, cl, names, map[string]any{"bool": map[string]any{"filter": []any{
		map[string]any{"term": map[string]any{"kind": indices.KindService}}, map[string]any{"term": map[string]any{"resolution": "10m"}},
		map[string]any{"term": map[string]any{"host": "h-1"}},
		map[string]any{"term": map[string]any{"@timestamp": day.Add(11*time.Hour + 10*time.Minute).UnixMilli()}}}}})
	t.Run("some windows missing or stale", func(t *testing.T) {
		check(t, serve(t, cl, names, api.Options{Timeout: 2 * time.Minute}), end, "partition_trees+window_trees+rollups")
	})

	// Old data: no window trees at all.
	deleteRollups(t, cl, names, map[string]any{"bool": map[string]any{"filter": []any{
		map[string]any{"term": map[string]any{"kind": indices.KindPartitionTree}}, map[string]any{"terms": map[string]any{"resolution": []string{"1m", "10m"}}}}}})
	t.Run("old data", func(t *testing.T) {
		check(t, serve(t, cl, names, api.Options{Timeout: 2 * time.Minute}), end, "partition_trees+rollups")
	})
}

// serveAt serves the API with now fixed at at (and, as the other serves
// of TestEdgeTreesExact, a timeout for a machine shared by benchmarks).
func serveAt(t testing.TB, cl *opensearchapi.Client, names indices.Names, at time.Time) string {
	t.Helper()
	srv := httptest.NewServer(api.New(cl, names, api.Options{Now: func() time.Time { return at }, Timeout: 2 * time.Minute}, slog.New(slog.NewTextHandler(io.Discard, nil))))
	t.Cleanup(srv.Close)
	return srv.URL
}

// deleteRollups deletes the rollup documents query selects.
func deleteRollups(t testing.TB, cl *opensearchapi.Client, names indices.Names, query map[string]any) {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"query": query})
	status, resp, err := opensearch.Raw(context.Background(), cl, http.MethodPost, "/"+names.RollupsPattern()+"/_delete_by_query?refresh=true", body)
	if err != nil || status != http.StatusOK {
		t.Fatalf("delete rollups: HTTP %d %v: %s", status, err, resp)
	}
	var out struct {
		Deleted int `json:"deleted"`
	}
	if err := json.Unmarshal(resp, &out); err != nil || out.Deleted == 0 {
		t.Fatalf("delete rollups %v: %s", query, resp)
	}
}
