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
func TestFleetWindowHeadsExact(t *testing.T) {
	cl, names := querytest.Setup(t)
	day := time.Date(2026, 11, 26, 0, 0, 0, 0, time.UTC)
	from, end := day.Add(4*time.Hour+23*time.Minute+30*time.Second), day.Add(11*time.Hour+47*time.Minute+20*time.Second)
	hosts := []string{"h-0", "h-1", "h-2", "h-3"}
	all := newBrute()
	frames, stack := treeFrames, headStack
	headDocs := headedHours(t, cl, names, day, hosts, all)
	// Minutes 04:20-05:00 and 11:00-11:48 (04:20-04:23 before the range),
	// with minute trees; the partition heads the rollup writes beside them
	// when configured are left out.
	win := querytest.NewWindowRollups("cpu")
	addMinute := func(at time.Time, inside bool) {
		for pi, h := range hosts {
			for i := 0; i < 6; i++ {
				path, v := stack(h, at.Unix()/60, i)
				win.Add(at, int32(pi%2), "s", h, frames(path), v)
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
	windowDocs := func(keep func(indices.RollupDoc) bool) []querytest.Doc {
		var out []querytest.Doc
		for _, d := range win.Docs() {
			if d.Kind != indices.KindPartitionHead && keep(d) {
				out = append(out, querytest.Rollup(names, d))
			}
		}
		return out
	}
	querytest.Index(t, cl, names, windowDocs(func(indices.RollupDoc) bool { return true }))
	// The fleet's head of each 10-minute window (8 nodes), as the
	// compactor writes them.
	var windowHeads []querytest.Doc
	for _, d := range win.Docs() {
		if d.Kind == indices.KindPartitionTree && d.Resolution == indices.ResolutionTenMinutes && d.Partition == 0 {
			windowHeads = append(windowHeads, fleetWindowHead(t, cl, names, win, d.Timestamp))
		}
	}
	querytest.Index(t, cl, names, append(headDocs, windowHeads...))
	t.Logf("%d nodes, total %d, %d window heads", len(all.nodes), all.total, len(windowHeads))

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
	// 11:40-11:47 (the window holding the end has its tree, but minutes
	// are what it holds before the end only when nothing comes after: it
	// does, until 11:47) from minute trees.
	t.Run("fresh window heads", func(t *testing.T) {
		check(t, "fleet_hour_heads+fleet_window_heads+window_trees")
	})

	// A late profile of h-0 (partition 0) at 11:15: the rollup rewrites
	// the window 11:10's and the minute 11:15's partition trees and service
	// documents; the compactor has not yet rewritten the window's head.
	late := day.Add(11*time.Hour + 15*time.Minute)
	path := []string{"main", "late", "h-0.late"}
	win.Add(late, 0, "s", "h-0", frames(path), 7777000)
	all.add("h-0", path, 7777000)
	querytest.Index(t, cl, names, windowDocs(func(d indices.RollupDoc) bool {
		return d.Timestamp.Equal(late) || d.Timestamp.Equal(late.Truncate(10*time.Minute)) && d.Resolution == indices.ResolutionTenMinutes
	}))
	t.Run("a stale window head", func(t *testing.T) {
		check(t, "fleet_hour_heads+fleet_window_heads+window_trees")
	})
	// The compactor's next pass: the head is fresh again.
	for i, d := range windowHeads {
		if d.ID == fleetWindowHead(t, cl, names, win, late.Truncate(10*time.Minute)).ID {
			windowHeads[i] = fleetWindowHead(t, cl, names, win, late.Truncate(10*time.Minute))
		}
	}
	querytest.Index(t, cl, names, windowHeads)
	t.Run("the window head rewritten", func(t *testing.T) {
		check(t, "fleet_hour_heads+fleet_window_heads+window_trees")
	})
}

// fleetWindowHead is the fleet head (8 nodes) of the 10-minute window at w
// as the rollup's compactor writes it: the window's partition trees of
// win merged, with the versions of those indexed as sources.
func fleetWindowHead(t *testing.T, cl *opensearchapi.Client, names indices.Names, win *querytest.WindowRollups, w time.Time) querytest.Doc {
	t.Helper()
	var fleet indices.TreeBuilder
	var src []indices.TreeSource
	for _, d := range win.Docs() {
		if d.Kind == indices.KindPartitionTree && d.Resolution == indices.ResolutionTenMinutes && d.Timestamp.Equal(w) {
			if err := fleet.AddTree(d.Tree, indices.TreeLimits{}); err != nil {
				t.Fatal(err)
			}
			src = append(src, version(t, cl, names, d))
		}
	}
	return querytest.Rollup(names, indices.RollupDoc{Timestamp: w, Resolution: indices.ResolutionTenMinutes, Kind: indices.KindFleetHead,
		Type: "cpu", Value: fleet.Total(), Tree: fleet.EncodeHead(8), Sources: indices.TreeSources(src)})
}
