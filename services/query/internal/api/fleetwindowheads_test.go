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

// TestFleetWindowHeadsExact: a fleet-wide range whose settled hours come
// from hour heads reads the whole 10-minute windows of its edges from the
// fleet's window heads (one per window: its partition trees merged, with
// their versions as sources, as the rollup's compactor writes them) under
// the proof, and the minutes around them from minute trees; every flame
// graph equals the brute-force sums and the one the whole trees give (the
// same range with every head deleted). Then a late profile rewrites one
// window's partition tree (and its minute's tree and service documents,
// as the rollup does) without its head being rewritten: the stale head
// must not answer (its window is read from its trees), and the answers
// still equal the brute force. Small heads (12 nodes an hour, 8 a window)
// make some max_nodes unprovable: those read the trees, with the same
// answer.
//
// The minutes outside whole 10-minute windows (04:24-04:29 at the start,
// 11:40-11:47 in the window still open at the end) come from the fleet's
// minute heads as the compactor writes them (every settled minute but the
// newest, 11:47, whose head is not yet written: it is read from its
// trees): fresh by their sources while the minute trees are kept, fresh
// by their value (the minute's stack_value) once the trees are deleted
// after their retention; a head whose sources or value differ is not
// read (its minute is read from its trees, or per stack).
func TestFleetWindowHeadsExact(t *testing.T) {
	cl, names := querytest.Setup(t)
	day := time.Date(2026, 11, 26, 0, 0, 0, 0, time.UTC)
	from, end := day.Add(4*time.Hour+23*time.Minute+30*time.Second), day.Add(11*time.Hour+47*time.Minute+20*time.Second)
	hosts := []string{"h-0", "h-1", "h-2", "h-3"}
	all := newBrute()
	frames, stack := treeFrames, headStack
	headDocs := headedHours(t, cl, names, day, hosts, all)
	// Minutes 04:20-05:00 and 11:00-11:48 (04:20-04:23 before the range),
	// with minute trees and minute stack rollups; the partition heads the
	// rollup writes beside them when configured are left out, and so is
	// the window 11:40 (still open at 11:47:20: the rollup writes a
	// window's trees when it closes).
	win := querytest.NewWindowRollups("cpu")
	var stackDocs []querytest.Doc
	var minuteStacks []indices.RollupDoc
	addStack := func(at time.Time, partition int32, h string, path []string, v int64) {
		win.Add(at, partition, "s", h, frames(path), v)
		doc, id := querytest.Stack(names, at, path...)
		stackDocs = append(stackDocs, doc)
		minuteStacks = append(minuteStacks, indices.RollupDoc{Timestamp: at, Resolution: indices.ResolutionMinute, Kind: indices.KindStack,
			Type: "cpu", Service: "s", Host: h, StackIDs: []string{id}, Value: v})
	}
	addMinute := func(at time.Time, inside bool) {
		for pi, h := range hosts {
			for i := 0; i < 6; i++ {
				path, v := stack(h, at.Unix()/60, i)
				addStack(at, int32(pi%2), h, path, v)
				if inside {
					all.add(h, path, v)
				}
			}
		}
	}
	for m := day.Add(4*time.Hour + 20*time.Minute); m.Before(day.Add(5 * time.Hour)); m = m.Add(time.Minute) {
		addMinute(m, !m.Before(from))
	}
	for m := day.Add(11 * time.Hour); m.Before(day.Add(11*time.Hour + 48*time.Minute)); m = m.Add(time.Minute) {
		addMinute(m, true)
	}
	openWindow := day.Add(11*time.Hour + 40*time.Minute)
	newest := day.Add(11*time.Hour + 47*time.Minute)
	windowDocs := func(keep func(indices.RollupDoc) bool) []querytest.Doc {
		var out []querytest.Doc
		for _, d := range win.Docs() {
			if d.Kind != indices.KindPartitionHead && !(d.Resolution == indices.ResolutionTenMinutes && d.Timestamp.Equal(openWindow)) && keep(d) {
				out = append(out, querytest.Rollup(names, d))
			}
		}
		return out
	}
	querytest.Index(t, cl, names, append(append(windowDocs(func(indices.RollupDoc) bool { return true }), stackDocs...),
		querytest.StackRollups(names, minuteStacks)...))
	// The fleet's head of each closed 10-minute window and of each minute
	// but the newest (8 nodes), as the compactor writes them.
	var windowHeads []querytest.Doc
	for _, d := range win.Docs() {
		if d.Kind == indices.KindPartitionTree && d.Partition == 0 && !d.Timestamp.Equal(openWindow) && !d.Timestamp.Equal(newest) {
			windowHeads = append(windowHeads, fleetWindowHead(t, cl, names, win, d.Resolution, d.Timestamp))
		}
	}
	querytest.Index(t, cl, names, append(headDocs, windowHeads...))
	t.Logf("%d nodes, total %d, %d window and minute heads", len(all.nodes), all.total, len(windowHeads))

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
		deleteRollups(t, cl, names, map[string]any{"terms": map[string]any{"kind": []string{indices.KindFleetHead}}})
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
		querytest.Index(t, cl, names, append(headDocs, windowHeads...))
	}

	// 04:30-05:00 and 11:00-11:40 from window heads; 04:24-04:29 and
	// 11:40-11:46 from minute heads; 11:47 (no head yet) from its trees.
	const fromHeads = "fleet_hour_heads+fleet_window_heads+fleet_minute_heads+window_trees"
	t.Run("fresh window and minute heads", func(t *testing.T) {
		check(t, fromHeads)
	})

	// Late profiles of h-0 (partition 0) at 11:15 and 11:42: the rollup
	// rewrites the window 11:10's and the minutes' partition trees and
	// service documents; the compactor has not yet rewritten their heads.
	// The minute 11:42 is read from its trees.
	type window struct {
		res string
		at  time.Time
	}
	var rewritten []window
	for _, late := range []time.Time{day.Add(11*time.Hour + 15*time.Minute), day.Add(11*time.Hour + 42*time.Minute)} {
		path := []string{"main", "late", "h-0.late" + late.Format("1504")}
		addStack(late, 0, "h-0", path, 7777000)
		all.add("h-0", path, 7777000)
		var h0 []indices.RollupDoc // the minute's stacks of h-0, packed again
		for _, d := range minuteStacks {
			if d.Timestamp.Equal(late) && d.Host == "h-0" {
				h0 = append(h0, d)
			}
		}
		docs := windowDocs(func(d indices.RollupDoc) bool {
			return d.Timestamp.Equal(late) || d.Timestamp.Equal(late.Truncate(10*time.Minute)) && d.Resolution == indices.ResolutionTenMinutes
		})
		querytest.Index(t, cl, names, append(append(docs, stackDocs[len(stackDocs)-1]), querytest.StackRollups(names, h0)...))
		rewritten = append(rewritten, window{indices.ResolutionMinute, late})
		if w := late.Truncate(10 * time.Minute); !w.Equal(openWindow) {
			rewritten = append(rewritten, window{indices.ResolutionTenMinutes, w})
		}
	}
	t.Run("a stale window head and a stale minute head", func(t *testing.T) {
		check(t, fromHeads)
	})
	// The compactor's next pass: the heads are fresh again.
	rewrite := func(d querytest.Doc) querytest.Doc {
		for _, w := range rewritten {
			if h := fleetWindowHead(t, cl, names, win, w.res, w.at); h.ID == d.ID {
				return h
			}
		}
		return d
	}
	for i, d := range windowHeads {
		windowHeads[i] = rewrite(d)
	}
	querytest.Index(t, cl, names, windowHeads)
	t.Run("the heads rewritten", func(t *testing.T) {
		check(t, fromHeads)
	})

	// The minute trees of 04:20-04:29 deleted after their retention: those
	// minutes' heads are fresh by their value (the minutes' stack_value);
	// the trees of a refused proof read them per stack.
	deleteRollups(t, cl, names, map[string]any{"bool": map[string]any{"filter": []any{
		map[string]any{"term": map[string]any{"kind": indices.KindPartitionTree}},
		map[string]any{"term": map[string]any{"resolution": indices.ResolutionMinute}},
		map[string]any{"range": map[string]any{"@timestamp": map[string]any{"lt": day.Add(4*time.Hour + 30*time.Minute).Format(time.RFC3339)}}}}}})
	t.Run("minute trees deleted, heads fresh by value", func(t *testing.T) {
		check(t, fromHeads)
	})

	// The head of 04:25 was written from partition 0's tree alone (the
	// other not yet visible) and its trees deleted before the next pass:
	// its value is not the minute's stack_value, so the minute is read per
	// stack.
	short := day.Add(4*time.Hour + 25*time.Minute)
	var p0 indices.TreeBuilder
	for _, d := range win.Docs() {
		if d.Kind == indices.KindPartitionTree && d.Resolution == indices.ResolutionMinute && d.Timestamp.Equal(short) && d.Partition == 0 {
			if err := p0.AddTree(d.Tree, indices.TreeLimits{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	bad := querytest.Rollup(names, indices.RollupDoc{Timestamp: short, Resolution: indices.ResolutionMinute, Kind: indices.KindFleetHead,
		Type: "cpu", Value: p0.Total(), Tree: p0.EncodeHead(8), Sources: "written before partition 1's tree"})
	for i, d := range windowHeads {
		if d.ID == bad.ID {
			windowHeads[i] = bad
		}
	}
	querytest.Index(t, cl, names, windowHeads)
	t.Run("a minute head refused by its value", func(t *testing.T) {
		check(t, fromHeads+"+rollups")
	})
}

// fleetWindowHead is the fleet head (8 nodes) of the window of resolution
// res (10m or 1m) at w as the rollup's compactor writes it: the window's
// partition trees of win merged, with the versions of those indexed as
// sources.
func fleetWindowHead(t *testing.T, cl *opensearchapi.Client, names indices.Names, win *querytest.WindowRollups, res string, w time.Time) querytest.Doc {
	t.Helper()
	var fleet indices.TreeBuilder
	var src []indices.TreeSource
	for _, d := range win.Docs() {
		if d.Kind == indices.KindPartitionTree && d.Resolution == res && d.Timestamp.Equal(w) {
			if err := fleet.AddTree(d.Tree, indices.TreeLimits{}); err != nil {
				t.Fatal(err)
			}
			src = append(src, version(t, cl, names, d))
		}
	}
	return querytest.Rollup(names, indices.RollupDoc{Timestamp: w, Resolution: res, Kind: indices.KindFleetHead,
		Type: "cpu", Value: fleet.Total(), Tree: fleet.EncodeHead(8), Sources: indices.TreeSources(src)})
}
