package api_test

import (
	"fmt"
	"net/url"
	"testing"
	"time"

	"github.com/stackstream/stackstream/schemas/indices"
	"github.com/stackstream/stackstream/services/query/internal/api"
	"github.com/stackstream/stackstream/services/query/internal/querytest"
)

// TestTopTables (real OpenSearch): 2 partitions x 48 hours of partition
// trees (recursion, leaves shared by every hour and leaves of one hour)
// with their hour function tables (sources: the tree's digest) and the day
// tables of both days (sources: the hours' versions), as the rollup
// writes them. The top table of both days is read from the day tables, of
// 03:00-40:00 from the hour tables, each equal to the brute-force sums of
// every stack. With tables listing every function any limit is exact;
// with tables listing 8 functions limit 3 is proven from them and limit
// 10000 is refused and read from the trees. An hour tree rewritten with
// other names (a replay of re-symbolized profiles) leaves its hour table
// and its day's table stale: the top table reads that hour's tree and the
// other day's table, and equals the sums with the new names (a stale
// table accepted would give the old names).
func TestTopTables(t *testing.T) {
	cl, names := querytest.Setup(t)
	day0 := time.Date(2026, 11, 26, 0, 0, 0, 0, time.UTC)
	hourTree := func(p, h int, suffix string) (indices.RollupDoc, [][]string, []int64) {
		var b indices.TreeBuilder
		var paths [][]string
		var values []int64
		for i := 0; i < 30; i++ {
			f := fmt.Sprintf("f%d", (h+i)%9)
			path := []string{"main", f, fmt.Sprintf("g%d", i%4)}
			if i%5 == 0 {
				path = append(path, f) // recursion: counted once in f's total
			}
			leaf := fmt.Sprintf("shared.%d", i%6)
			if i%2 == 1 {
				leaf = fmt.Sprintf("p%d.h%d.%d", p, h, i)
			}
			path = append(path, leaf+suffix)
			frames := make([]indices.TreeFrame, len(path))
			for j, f := range path {
				frames[j] = indices.TreeFrame{Name: f}
			}
			b.Add(frames, int64(i+1))
			paths, values = append(paths, path), append(values, int64(i+1))
		}
		tree := b.Encode()
		return indices.RollupDoc{Timestamp: day0.Add(time.Duration(h) * time.Hour), Resolution: indices.ResolutionHour, Kind: indices.KindPartitionTree,
			Type: "cpu", Partition: int32(p), Value: b.Total(), Tree: tree, Digest: indices.TreeDigest(tree)}, paths, values
	}
	brute := func(from, to, rewritten int) *bruteTree {
		all := newBrute()
		for p := 0; p < 2; p++ {
			for h := from; h < to; h++ {
				suffix := ""
				if p == 1 && h == rewritten {
					suffix = "-resymbolized"
				}
				_, paths, values := hourTree(p, h, suffix)
				for i := range paths {
					all.add("", paths[i], values[i])
				}
			}
		}
		return all
	}
	table := func(d indices.RollupDoc, keep int, sources string) querytest.Doc {
		t.Helper()
		fns, err := indices.TreeFunctions(d.Tree, indices.TreeLimits{})
		if err != nil {
			t.Fatal(err)
		}
		return querytest.Rollup(names, indices.RollupDoc{Timestamp: d.Timestamp, Resolution: d.Resolution, Kind: indices.KindFunctionTable,
			Type: d.Type, Partition: d.Partition, Value: fns.Total, Tree: fns.Encode(keep), Sources: sources})
	}
	var docs []querytest.Doc
	hourDocs := map[[2]int]indices.RollupDoc{}
	for p := 0; p < 2; p++ {
		for h := 0; h < 48; h++ {
			d, _, _ := hourTree(p, h, "")
			hourDocs[[2]int{p, h}] = d
			docs = append(docs, querytest.Rollup(names, d), querytest.Rollup(names, indices.RollupDoc{Timestamp: d.Timestamp, Resolution: indices.ResolutionHour,
				Kind: indices.KindService, Type: "cpu", Service: "s", Host: fmt.Sprintf("h-%d", p), Value: d.Value, StackValue: d.Value}))
		}
	}
	querytest.Index(t, cl, names, docs)
	// The tables, as the rollup writes them, listing keep functions.
	writeTables := func(keep int) {
		t.Helper()
		var docs []querytest.Doc
		for p := 0; p < 2; p++ {
			for d := 0; d < 2; d++ {
				var b indices.TreeBuilder
				var src []indices.TreeSource
				for h := 24 * d; h < 24*(d+1); h++ {
					hd := hourDocs[[2]int{p, h}]
					if err := b.AddTree(hd.Tree, indices.TreeLimits{}); err != nil {
						t.Fatal(err)
					}
					src = append(src, version(t, cl, names, hd))
					docs = append(docs, table(hd, keep, hd.Digest))
				}
				day := indices.RollupDoc{Timestamp: day0.Add(time.Duration(d) * 24 * time.Hour), Resolution: indices.ResolutionDay,
					Kind: indices.KindPartitionTree, Type: "cpu", Partition: int32(p), Value: b.Total(), Tree: b.Encode(), Sources: indices.TreeSources(src)}
				docs = append(docs, querytest.Rollup(names, day), table(day, keep, day.Sources))
			}
		}
		querytest.Index(t, cl, names, docs)
	}
	base := serve(t, cl, names, api.Options{})
	check := func(from, to, rewritten, limit int, wantSource string) {
		t.Helper()
		params := url.Values{"from": {day0.Add(time.Duration(from) * time.Hour).Format(time.RFC3339)},
			"to": {day0.Add(time.Duration(to) * time.Hour).Format(time.RFC3339)}, "limit": {fmt.Sprint(limit)}}
		var top api.TopResponse
		get(t, base, "/api/v1/top", params, &top)
		brute(from, to, rewritten).checkTop(t, top, limit)
		if top.Source != wantSource {
			t.Fatalf("%d-%d h, limit %d: source %q, want %q", from, to, limit, top.Source, wantSource)
		}
	}
	// No table yet (hours written before tables): the trees answer.
	check(0, 48, -1, 3, "partition_trees")
	writeTables(0)
	for _, limit := range []int{1, 3, 10000} {
		check(0, 48, -1, limit, "function_tables(days)")
		check(3, 40, -1, limit, "function_tables")
	}
	writeTables(8)
	check(0, 48, -1, 3, "function_tables(days)")
	check(3, 40, -1, 3, "function_tables")
	check(0, 48, -1, 10000, "partition_trees(days)")
	check(3, 40, -1, 10000, "partition_trees")
	writeTables(0)
	// Hour 30 of partition 1 replayed with other names: its hour table
	// and the second day's table are stale.
	d, _, _ := hourTree(1, 30, "-resymbolized")
	querytest.Index(t, cl, names, []querytest.Doc{querytest.Rollup(names, d)})
	for _, limit := range []int{1, 10000} {
		check(0, 48, 30, limit, "function_tables(days)+partition_trees")
		check(3, 40, 30, limit, "function_tables+partition_trees")
	}
}
