package api_test

import (
	"fmt"
	"net/url"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/opensearch-project/opensearch-go/v4/opensearchapi"
	"github.com/stackstream/stackstream/schemas/indices"
	"github.com/stackstream/stackstream/services/query/internal/api"
	"github.com/stackstream/stackstream/services/query/internal/querytest"
)

// TestWindowHeadsExact: a fleet-wide range whose settled hours come from
// hour heads reads its edges from the partition heads of its minutes and
// 10-minute windows where their sums match the service documents' (and
// the window holding the end holds nothing after it), under the proof;
// every flame graph equals the one the whole trees give (the same range
// with every head deleted) and the brute-force sums: with every window
// present and the range ending in a window still filling; after minutes
// arrive in that window past the end (its head is refused, its minutes'
// heads answer); with a 10-minute head missing and a minute head stale
// (their trees answer). Small heads (12 nodes an hour, 8 a window) make
// some max_nodes unprovable: those read the trees, with the same answer.
func TestWindowHeadsExact(t *testing.T) {
	cl, names := querytest.Setup(t)
	day := time.Date(2026, 11, 27, 0, 0, 0, 0, time.UTC)
	from, end := day.Add(4*time.Hour+23*time.Minute+30*time.Second), day.Add(11*time.Hour+47*time.Minute+20*time.Second)
	hosts := []string{"h-0", "h-1", "h-2", "h-3"}
	all := newBrute()
	frames, stack := treeFrames, headStack
	headDocs := headedHours(t, cl, names, day, hosts, all)
	var docs []querytest.Doc
	// Minutes 04:20-05:00 and 11:00-11:48 (04:20-04:23 before the range).
	win := querytest.NewWindowRollups("cpu")
	win.HeadNodes = 8
	addMinute := func(at time.Time, w *querytest.WindowRollups, inside bool) {
		for pi, h := range hosts {
			for i := 0; i < 6; i++ {
				path, v := stack(h, at.Unix()/60, i)
				w.Add(at, int32(pi%2), "s", h, frames(path), v)
				if inside {
					all.add(h, path, v)
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
	for _, d := range win.Docs() {
		q := querytest.Rollup(names, d)
		if d.Kind == indices.KindPartitionHead {
			headDocs = append(headDocs, q)
			continue
		}
		docs = append(docs, q)
	}
	querytest.Index(t, cl, names, append(docs, headDocs...))
	t.Logf("%d nodes, total %d", len(all.nodes), all.total)

	maxes := []int{1, 2, 3, 5, 8, 12, 20, len(all.nodes)}
	params := func(maxNodes int) url.Values {
		return url.Values{"from": {from.Format(time.RFC3339)}, "to": {end.Format(time.RFC3339)}, "max_nodes": {fmt.Sprint(maxNodes)}}
	}
	flame := func(t *testing.T, base string, maxNodes int) api.FlamegraphResponse {
		t.Helper()
		var f api.FlamegraphResponse
		get(t, base, "/api/v1/flamegraph", params(maxNodes), &f)
		if f.Truncated || f.Total != all.total {
			t.Fatalf("max_nodes %d: source %s truncated %v total %d, want %d", maxNodes, f.Source, f.Truncated, f.Total, all.total)
		}
		if shown, other := checkFlame(t, all, f.Root, ""); shown != min(maxNodes, len(all.nodes)) || f.Folded != other {
			t.Fatalf("max_nodes %d: %d nodes shown, %d [other], folded %d", maxNodes, shown, other, f.Folded)
		}
		return f
	}
	// check answers every max_nodes with the heads, then again with every
	// head deleted (the trees), compares them, and puts the heads back.
	check := func(t *testing.T, wantHeads string) {
		t.Helper()
		base := serveAt(t, cl, names, end)
		withHeads := map[int]api.FlamegraphResponse{}
		fromHeads := 0
		for _, max := range maxes {
			f := flame(t, base, max)
			withHeads[max] = f
			switch {
			case f.Source == wantHeads:
				fromHeads++
			case !strings.HasPrefix(f.Source, "partition_trees"):
				t.Fatalf("max_nodes %d: source %s, want %s or the trees", max, f.Source, wantHeads)
			}
		}
		if fromHeads == 0 {
			t.Fatalf("no flame graph answered from %s", wantHeads)
		}
		deleteRollups(t, cl, names, map[string]any{"terms": map[string]any{"kind": []string{indices.KindPartitionHead, indices.KindFleetHead}}})
		for _, max := range maxes {
			want := flame(t, base, max)
			if !strings.HasPrefix(want.Source, "partition_trees") {
				t.Fatalf("max_nodes %d without heads: source %s", max, want.Source)
			}
			if got := withHeads[max]; got.Folded != want.Folded || !reflect.DeepEqual(got.Root, want.Root) {
				t.Fatalf("max_nodes %d from %s: folded %d, want %d; the flame graph differs from the trees'", max, got.Source, got.Folded, want.Folded)
			}
			t.Logf("max_nodes %d: %s", max, withHeads[max].Source)
		}
		querytest.Index(t, cl, names, headDocs)
	}

	t.Run("every window, ending now in a window still filling", func(t *testing.T) {
		check(t, "fleet_hour_heads+window_heads")
	})

	// Minutes 11:48 and 11:49 arrive: the window 11:40 (tree and head)
	// holds data after the end, so it cannot stand for 11:40-11:47, whose
	// minute heads answer.
	later := querytest.NewWindowRollups("cpu")
	later.HeadNodes = win.HeadNodes
	for m := day.Add(11*time.Hour + 40*time.Minute); m.Before(day.Add(11*time.Hour + 50*time.Minute)); m = m.Add(time.Minute) {
		addMinute(m, later, false)
	}
	docs = docs[:0]
	for _, d := range later.Docs() {
		if d.Resolution != "10m" && d.Timestamp.Before(day.Add(11*time.Hour+48*time.Minute)) {
			continue
		}
		q := querytest.Rollup(names, d)
		docs = append(docs, q)
		if d.Kind == indices.KindPartitionHead {
			headDocs = append(headDocs, q) // the same _id: replaces the old head when put back
		}
	}
	querytest.Index(t, cl, names, docs)
	t.Run("ending inside a window with data after the end", func(t *testing.T) {
		check(t, "fleet_hour_heads+window_heads")
	})

	// The 10-minute head of 04:30 in partition 1 missing (its trees
	// answer) and the minute head of 04:25 in partition 1 stale (its value
	// is not its minute's: the minute trees answer).
	var stale indices.TreeBuilder
	stale.Add([]indices.TreeFrame{{Name: "main"}}, 1000)
	staleHead := querytest.Rollup(names, indices.RollupDoc{Timestamp: day.Add(4*time.Hour + 25*time.Minute), Resolution: "1m",
		Kind: indices.KindPartitionHead, Type: "cpu", Partition: 1, Value: 1000, Tree: stale.EncodeHead(8)})
	missing := querytest.Rollup(names, indices.RollupDoc{Timestamp: day.Add(4*time.Hour + 30*time.Minute), Resolution: "10m",
		Kind: indices.KindPartitionHead, Type: "cpu", Partition: 1})
	var kept []querytest.Doc
	for _, d := range headDocs {
		switch d.ID {
		case missing.ID:
		case staleHead.ID:
			kept = append(kept, staleHead)
		default:
			kept = append(kept, d)
		}
	}
	if len(kept) != len(headDocs)-1 {
		t.Fatalf("%d heads kept of %d", len(kept), len(headDocs))
	}
	headDocs = kept
	deleteRollups(t, cl, names, map[string]any{"terms": map[string]any{"kind": []string{indices.KindPartitionHead}}})
	querytest.Index(t, cl, names, headDocs)
	t.Run("a head missing, a head stale", func(t *testing.T) {
		check(t, "fleet_hour_heads+window_heads+window_trees")
	})
}

// treeFrames are the tree frames of a path of function names.
func treeFrames(path []string) []indices.TreeFrame {
	out := make([]indices.TreeFrame, len(path))
	for j, f := range path {
		out[j] = indices.TreeFrame{Name: f}
	}
	return out
}

// headStack is stack i of host h at minute m in the window-head tests:
// heavy shared prefixes (main, 5 f and 4 g nodes), leaves per host and
// minute, few distinct values so ties fall at every cut.
func headStack(h string, m int64, i int) ([]string, int64) {
	return []string{"main", fmt.Sprintf("f%d", i%5), fmt.Sprintf("g%d", (i+int(m))%4), fmt.Sprintf("%s.%d.leaf%d", h, m%7, i)}, int64(i%3+1) * 1000
}

// headedHours indexes the settled hours 05:00-11:00 of day for hosts
// (15 stacks each, hosts alternating over two partitions): each host's
// hour service document and each partition's hour tree, added to all; it
// returns, not indexed, the fleet's hour heads (12 nodes) with the trees'
// versions as their sources.
func headedHours(t *testing.T, cl *opensearchapi.Client, names indices.Names, day time.Time, hosts []string, all *bruteTree) []querytest.Doc {
	t.Helper()
	var docs, headDocs []querytest.Doc
	for hr := 5; hr < 11; hr++ {
		at := day.Add(time.Duration(hr) * time.Hour)
		var partitions [2]indices.TreeBuilder
		var fleet indices.TreeBuilder
		for pi, h := range hosts {
			var b indices.TreeBuilder
			for i := 0; i < 15; i++ {
				path, v := headStack(h, int64(hr*60), i)
				v *= 60
				partitions[pi%2].Add(treeFrames(path), v)
				fleet.Add(treeFrames(path), v)
				b.Add(treeFrames(path), v)
				all.add(h, path, v)
			}
			docs = append(docs, querytest.Rollup(names, indices.RollupDoc{Timestamp: at, Resolution: indices.ResolutionHour, Kind: indices.KindService,
				Type: "cpu", Service: "s", Host: h, Value: b.Total(), StackValue: b.Total()}))
		}
		var ds []indices.RollupDoc
		for p := range partitions {
			d := indices.RollupDoc{Timestamp: at, Resolution: indices.ResolutionHour, Kind: indices.KindPartitionTree,
				Type: "cpu", Partition: int32(p), Value: partitions[p].Total(), Tree: partitions[p].Encode()}
			ds = append(ds, d)
			docs = append(docs, querytest.Rollup(names, d))
		}
		querytest.Index(t, cl, names, docs)
		docs = docs[:0]
		src := []indices.TreeSource{version(t, cl, names, ds[0]), version(t, cl, names, ds[1])}
		headDocs = append(headDocs, querytest.Rollup(names, indices.RollupDoc{Timestamp: at, Resolution: indices.ResolutionHour,
			Kind: indices.KindFleetHead, Type: "cpu", Value: fleet.Total(), Tree: fleet.EncodeHead(12), Sources: indices.TreeSources(src)}))
	}
	return headDocs
}
