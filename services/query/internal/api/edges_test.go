package api_test

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stackstream/stackstream/schemas/indices"
	"github.com/stackstream/stackstream/services/query/internal/api"
	"github.com/stackstream/stackstream/services/query/internal/querytest"
)

// TestEdgesExact: a range longer than RAW_MAX_RANGE whose whole hours come
// from trees (or hour heads) and whose edges (the minutes before its first
// and after its last whole settled hour) hold far more distinct stacks than
// MaxStacks: every node of the flame graph, top table, sandwich and diff
// equals a brute-force sum of every stack, with nothing truncated; past
// MaxEdgeStacks the request fails with 422 naming the variable instead of
// leaving stacks out.
func TestEdgesExact(t *testing.T) {
	cl, names := querytest.Setup(t)
	// now is 12:00: the hours 05:00-11:00 are settled, 11:00-12:00 is not.
	from, to := time.Date(2026, 11, 30, 4, 20, 0, 0, time.UTC), time.Date(2026, 11, 30, 11, 50, 0, 0, time.UTC)
	hours := []time.Time{from.Add(40 * time.Minute), from.Add(280 * time.Minute)} // 05:00 and 09:00
	services, hosts := []string{"checkout", "api"}, []string{"h-0", "h-1", "h-2"}
	const perMinute, period = 400, 52631578
	all, byHost := newBrute(), map[string]*bruteTree{}
	for _, h := range hosts {
		byHost[h] = newBrute()
	}
	var docs []querytest.Doc
	var minuteStacks []indices.RollupDoc
	stackDocs := map[string]querytest.Doc{}
	for hi, at := range hours {
		var partitions [2]indices.TreeBuilder
		for _, svc := range services {
			for pi, h := range hosts {
				var b indices.TreeBuilder
				for i := 0; i < 300; i++ {
					path := treeStack(svc, h, i+hi*1000)
					v := int64(i%11+1) * period
					frames := make([]indices.TreeFrame, len(path))
					for j, f := range path {
						frames[j] = indices.TreeFrame{Name: f}
					}
					b.Add(frames, v)
					partitions[pi%2].Add(frames, v)
					all.add(h, path, v)
					byHost[h].add(h, path, v)
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
	// The edges: minute stack rollups at 04:30, 04:50, 11:10 and 11:40,
	// 400 stacks per service and host each, most of them seen in one
	// minute only; and at 04:10 and 11:55, outside the range.
	for mi, at := range []time.Time{from.Add(10 * time.Minute), from.Add(30 * time.Minute), from.Add(410 * time.Minute), from.Add(440 * time.Minute),
		from.Add(-10 * time.Minute), to.Add(5 * time.Minute)} {
		inside := !at.Before(from) && at.Before(to)
		for _, svc := range services {
			for _, h := range hosts {
				for i := 0; i < perMinute; i++ {
					path := treeStack(svc, h, 5000+mi*perMinute*3/4+i) // a quarter shared with the next minute
					doc, id := querytest.Stack(names, at, path...)
					stackDocs[id] = doc
					v := int64(i%7+1) * period
					minuteStacks = append(minuteStacks, indices.RollupDoc{Timestamp: at, Resolution: indices.ResolutionMinute, Kind: indices.KindStack,
						Type: "cpu", Service: svc, Host: h, StackIDs: []string{id}, Value: v})
					if inside {
						all.add(h, path, v)
						byHost[h].add(h, path, v)
					}
				}
			}
		}
	}
	for _, d := range stackDocs {
		docs = append(docs, d)
	}
	docs = append(docs, querytest.StackRollups(names, minuteStacks)...)
	querytest.Index(t, cl, names, docs)
	const maxStacks = 1000
	t.Logf("%d distinct stacks in all, MaxStacks %d", len(all.stacks), maxStacks)
	if len(all.stacks) < 4*maxStacks {
		t.Fatalf("only %d distinct stacks: the edges must hold many more than MaxStacks", len(all.stacks))
	}
	base := serve(t, cl, names, api.Options{MaxStacks: maxStacks})
	params := func(extra ...string) url.Values {
		p := url.Values{"from": {from.Format(time.RFC3339)}, "to": {to.Format(time.RFC3339)}}
		for i := 0; i+1 < len(extra); i += 2 {
			p.Set(extra[i], extra[i+1])
		}
		return p
	}

	for _, maxNodes := range []int{100000, 300} {
		t.Run(fmt.Sprintf("flamegraph max_nodes=%d", maxNodes), func(t *testing.T) {
			var f api.FlamegraphResponse
			get(t, base, "/api/v1/flamegraph", params("max_nodes", fmt.Sprint(maxNodes)), &f)
			if f.Source != "partition_trees+rollups" || f.Truncated || f.Total != all.total || f.Root.Total != all.total {
				t.Fatalf("source %s truncated %v total %d root %d, want partition_trees+rollups, %d", f.Source, f.Truncated, f.Total, f.Root.Total, all.total)
			}
			shown, other := checkFlame(t, all, f.Root, "")
			if shown != min(maxNodes, len(all.nodes)) || f.Folded != other {
				t.Fatalf("%d nodes shown, %d [other] nodes, folded %d, brute force has %d", shown, other, f.Folded, len(all.nodes))
			}
		})
	}

	t.Run("top", func(t *testing.T) {
		var top api.TopResponse
		get(t, base, "/api/v1/top", params("limit", "10000"), &top)
		all.checkTop(t, top, 10000)
	})

	t.Run("sandwich", func(t *testing.T) {
		const fn = "fn5"
		var sw api.SandwichResponse
		get(t, base, "/api/v1/sandwich", params("function", fn, "max_nodes", "100000"), &sw)
		if want := all.funcs[fn]; sw.Truncated || sw.Callers.Total != want[1] || sw.Callees.Total != want[1] || sw.Callees.Self != want[0] {
			t.Fatalf("callers %d callees %d self %d truncated %v, want %v", sw.Callers.Total, sw.Callees.Total, sw.Callees.Self, sw.Truncated, want)
		}
	})

	t.Run("diff", func(t *testing.T) {
		var d api.DiffResponse
		get(t, base, "/api/v1/diff", params("base", `{host="h-0"}`, "compare", `{host="h-1"}`, "max_nodes", "100000"), &d)
		b, c := byHost["h-0"], byHost["h-1"]
		checked := checkDiff(t, d, b, c, false)
		if want := len(unionPaths(b, c)); checked != want {
			t.Fatalf("%d diff nodes, want %d", checked, want)
		}
	})

	t.Run("past MaxEdgeStacks", func(t *testing.T) {
		small := serve(t, cl, names, api.Options{MaxStacks: maxStacks, MaxEdgeStacks: maxStacks})
		for _, path := range []string{"/api/v1/flamegraph", "/api/v1/top"} {
			var e errorBody
			if code := get(t, small, path, params(), &e); code != http.StatusUnprocessableEntity || !strings.Contains(e.Error, "STACKSTREAM_QUERY_MAX_EDGE_STACKS") {
				t.Fatalf("%s: HTTP %d %q, want 422 naming STACKSTREAM_QUERY_MAX_EDGE_STACKS", path, code, e.Error)
			}
		}
	})
}

// unionPaths are the node paths of either tree.
func unionPaths(a, b *bruteTree) map[string]bool {
	out := map[string]bool{}
	for k := range a.nodes {
		out[k] = true
	}
	for k := range b.nodes {
		out[k] = true
	}
	return out
}
