package api_test

import (
	"fmt"
	"net/http"
	"net/url"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stackstream/stackstream/pkg/opensearch"
	"github.com/stackstream/stackstream/schemas/indices"
	"github.com/stackstream/stackstream/services/query/internal/api"
	"github.com/stackstream/stackstream/services/query/internal/querytest"
)

// TestFleetHourHeads: a fleet-wide range that is not one whole UTC day
// (6 whole hours and the minutes around them) is answered from the fleet's
// hour heads when their merge proves the flame graph, and that answer is
// the one the hour partition trees give with no head at all: the same
// nodes, values, "[other]" values and folded count, for every max_nodes,
// with one hour's head stale (its hour read as whole trees) and with all
// fresh. A max_nodes the heads cannot prove reads the trees.
func TestFleetHourHeads(t *testing.T) {
	cl, names := querytest.Setup(t)
	day := time.Date(2026, 11, 25, 0, 0, 0, 0, time.UTC)
	const hours, first = 6, 3
	all := newBrute()
	var docs []querytest.Doc
	hourDocs := map[int][]indices.RollupDoc{}
	fleet := make([]indices.TreeBuilder, hours)
	for p := 0; p < 2; p++ {
		for h := 0; h < hours; h++ {
			var b indices.TreeBuilder
			for i := 0; i < 12; i++ {
				path := []string{"main", fmt.Sprintf("f%d", (h+i)%5), fmt.Sprintf("g%d", i%4), fmt.Sprintf("p%d.h%d.%d", p, h, i%(3+h))}
				frames := make([]indices.TreeFrame, len(path))
				for j, f := range path {
					frames[j] = indices.TreeFrame{Name: f}
				}
				v := int64(i%3 + 1) // equal values: ties at the cut
				b.Add(frames, v)
				fleet[h].Add(frames, v)
				all.add("", path, v)
			}
			d := indices.RollupDoc{Timestamp: day.Add(time.Duration(first+h) * time.Hour), Resolution: indices.ResolutionHour, Kind: indices.KindPartitionTree,
				Type: "cpu", Partition: int32(p), Value: b.Total(), Tree: b.Encode()}
			hourDocs[h] = append(hourDocs[h], d)
			docs = append(docs, querytest.Rollup(names, d), querytest.Rollup(names, indices.RollupDoc{Timestamp: d.Timestamp, Resolution: indices.ResolutionHour,
				Kind: indices.KindService, Type: "cpu", Service: "s", Host: fmt.Sprintf("h-%d", p), Value: d.Value, StackValue: d.Value}))
		}
	}
	querytest.Index(t, cl, names, docs)
	// Heads of 10 nodes of each hour's ~30: the per-hour leaves are left
	// out, main and the f and g nodes mostly kept.
	writeHead := func(h int) {
		t.Helper()
		var src []indices.TreeSource
		for _, d := range hourDocs[h] {
			src = append(src, version(t, cl, names, d))
		}
		querytest.Index(t, cl, names, []querytest.Doc{querytest.Rollup(names, indices.RollupDoc{Timestamp: day.Add(time.Duration(first+h) * time.Hour),
			Resolution: indices.ResolutionHour, Kind: indices.KindFleetHead, Type: "cpu", Value: fleet[h].Total(), Tree: fleet[h].EncodeHead(10), Sources: indices.TreeSources(src)})})
	}
	for h := 0; h < hours; h++ {
		writeHead(h)
	}
	base := serve(t, cl, names, api.Options{})
	from := day.Add(first*time.Hour - 20*time.Minute).Format(time.RFC3339)
	to := day.Add((first+hours)*time.Hour + 20*time.Minute).Format(time.RFC3339)
	flame := func(maxNodes int) api.FlamegraphResponse {
		t.Helper()
		var f api.FlamegraphResponse
		get(t, base, "/api/v1/flamegraph", url.Values{"from": {from}, "to": {to}, "max_nodes": {strconv.Itoa(maxNodes)}}, &f)
		if f.Total != all.total {
			t.Fatalf("max_nodes %d: total %d, want %d", maxNodes, f.Total, all.total)
		}
		if shown, other := checkFlame(t, all, f.Root, ""); shown != min(maxNodes, len(all.nodes)) || f.Folded != other {
			t.Fatalf("max_nodes %d: %d nodes shown, %d [other] nodes, folded %d", maxNodes, shown, other, f.Folded)
		}
		return f
	}
	maxes := []int{1, 2, 4, 6, 8, 12, 20, len(all.nodes)}
	answers := func() map[int]api.FlamegraphResponse {
		out := map[int]api.FlamegraphResponse{}
		for _, max := range maxes {
			out[max] = flame(max)
		}
		return out
	}
	// Diffs of the first three hours (and the minutes before) against the
	// whole range.
	mid := day.Add((first+3)*time.Hour + 20*time.Minute).Format(time.RFC3339)
	diff := func(maxNodes int) api.DiffResponse {
		t.Helper()
		var d api.DiffResponse
		get(t, base, "/api/v1/diff", url.Values{"base_from": {from}, "base_to": {mid}, "compare_from": {from}, "compare_to": {to},
			"max_nodes": {strconv.Itoa(maxNodes)}}, &d)
		if d.CompareTotal != all.total {
			t.Fatalf("diff max_nodes %d: compare total %d, want %d", maxNodes, d.CompareTotal, all.total)
		}
		return d
	}
	diffs := func() map[int]api.DiffResponse {
		out := map[int]api.DiffResponse{}
		for _, max := range maxes {
			out[max] = diff(max)
		}
		return out
	}
	fresh, freshDiffs := answers(), diffs()
	// Hour 2 rewritten (same content, a new version): its head is stale
	// and its partition trees are merged with the other hours' heads.
	querytest.Index(t, cl, names, []querytest.Doc{querytest.Rollup(names, hourDocs[2][1])})
	stale, staleDiffs := answers(), diffs()
	// No head at all: the partition trees.
	status, resp, err := opensearch.Raw(t.Context(), cl, http.MethodPost, "/"+names.Rollups(day)+"/_delete_by_query?refresh=true",
		[]byte(`{"query":{"term":{"kind":"`+indices.KindFleetHead+`"}}}`))
	if err != nil || status != http.StatusOK {
		t.Fatalf("delete heads: %d %v %s", status, err, resp)
	}
	fromHeads := 0
	for _, max := range maxes {
		want := flame(max)
		if !strings.HasPrefix(want.Source, "partition_trees") {
			t.Fatalf("max_nodes %d without heads: source %s", max, want.Source)
		}
		for name, got := range map[string]api.FlamegraphResponse{"fresh heads": fresh[max], "hour 2 stale": stale[max]} {
			if strings.HasPrefix(got.Source, "fleet_hour_heads") {
				fromHeads++
			}
			if got.Folded != want.Folded || !reflect.DeepEqual(got.Root, want.Root) {
				t.Fatalf("max_nodes %d, %s, from %s: folded %d, want %d; the flame graph differs from the trees'", max, name, got.Source, got.Folded, want.Folded)
			}
		}
		t.Logf("max_nodes %d: %s, with hour 2 stale %s; %d [other] nodes", max, fresh[max].Source, stale[max].Source, want.Folded)
	}
	if fromHeads == 0 {
		t.Fatal("no flame graph was answered from the hour heads")
	}
	diffsFromHeads := 0
	for _, max := range maxes {
		want := diff(max)
		if strings.HasPrefix(want.BaseSource, "fleet_hour_heads") || strings.HasPrefix(want.CompareSource, "fleet_hour_heads") {
			t.Fatalf("diff max_nodes %d without heads: sources %s, %s", max, want.BaseSource, want.CompareSource)
		}
		for name, got := range map[string]api.DiffResponse{"fresh heads": freshDiffs[max], "hour 2 stale": staleDiffs[max]} {
			if strings.HasPrefix(got.BaseSource, "fleet_hour_heads") {
				diffsFromHeads++
			}
			if got.Folded != want.Folded || got.BaseTotal != want.BaseTotal || !reflect.DeepEqual(got.Root, want.Root) {
				t.Fatalf("diff max_nodes %d, %s, from %s and %s: folded %d, want %d; the diff differs from the trees'", max, name, got.BaseSource, got.CompareSource, got.Folded, want.Folded)
			}
		}
		t.Logf("diff max_nodes %d: %s / %s, with hour 2 stale %s / %s", max, freshDiffs[max].BaseSource, freshDiffs[max].CompareSource, staleDiffs[max].BaseSource, staleDiffs[max].CompareSource)
	}
	if diffsFromHeads == 0 {
		t.Fatal("no diff was answered from the hour heads")
	}
	if s := fresh[len(all.nodes)].Source; strings.HasPrefix(s, "fleet_hour_heads") {
		t.Fatalf("every node answered from heads that left nodes out (%s)", s)
	}
}
