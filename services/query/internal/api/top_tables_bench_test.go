package api_test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/stackstream/stackstream/pkg/opensearch"
	"github.com/stackstream/stackstream/schemas/indices"
	"github.com/stackstream/stackstream/services/query/internal/api"
	"github.com/stackstream/stackstream/services/query/internal/querytest"
)

// BenchmarkTopDayTables: the top table (limit 100) of the UTC day of the
// fleet of BenchmarkFlameDayTrees (1,000 hosts x 24 h, 6 day trees of
// 41 MB) through the API and the local OpenSearch, from the day function
// tables the compactor writes beside the day trees (after) and, with the
// tables deleted, from the day trees summed as they decode (before), in
// alternated rounds of b.N requests each; both answers are compared.
// It also logs the tables' sizes and one real hour partition tree's.
//
//	STACKSTREAM_BENCH_FLEET_DAY=1 CI=true go test -run '^$' -bench BenchmarkTopDayTables -benchtime 10x -timeout 60m ./internal/api
func BenchmarkTopDayTables(b *testing.B) {
	if os.Getenv("STACKSTREAM_BENCH_FLEET_DAY") == "" {
		b.Skip("set STACKSTREAM_BENCH_FLEET_DAY=1 to index a fleet's day")
	}
	f := benchFleet{hosts: 1000, hours: 24, partitions: 6}
	start := time.Now()
	// One real hour partition tree's table, for its size.
	pt, _ := f.partitionTrees(0)
	hourTable, err := indices.TreeFunctions(pt[0], indices.TreeLimits{})
	if err != nil {
		b.Fatal(err)
	}
	b.Logf("hour partition tree %d KB, %d functions, table %d KB deflated (every function listed)",
		len(pt[0])>>10, hourTable.Functions, len(hourTable.Encode(0))>>10)
	cl, names := querytest.Setup(b)
	day := time.Date(2026, 11, 29, 0, 0, 0, 0, time.UTC)
	dayTrees := make([]indices.TreeBuilder, f.partitions)
	bulk := func(docs []querytest.Doc) {
		for len(docs) > 0 {
			n := min(len(docs), 2000)
			if err := querytest.Bulk(b.Context(), cl, docs[:n]); err != nil {
				b.Fatal(err)
			}
			docs = docs[n:]
		}
	}
	var hourDocs []indices.RollupDoc
	for hr := 0; hr < f.hours; hr++ {
		at := day.Add(time.Duration(hr) * time.Hour)
		hourTotal := make([]int64, f.partitions)
		var docs []querytest.Doc
		for h := 0; h < f.hosts; h++ {
			p := h % f.partitions
			for _, s := range f.hostServices(h) {
				var total int64
				f.stacks(s, h, hr, func(path []indices.TreeFrame, v int64) {
					dayTrees[p].Add(path, v)
					total += v
				})
				hourTotal[p] += total
				docs = append(docs, querytest.Rollup(names, indices.RollupDoc{Timestamp: at, Resolution: indices.ResolutionHour, Kind: indices.KindService,
					Type: "cpu", Service: fmt.Sprintf("svc%d", s), Host: fmt.Sprintf("host-%d", h), Value: total, StackValue: total}))
			}
		}
		// The hour trees are one-node placeholders (as in
		// BenchmarkFlameDayTrees): a whole UTC day is read from its day
		// trees or tables.
		for p := range hourTotal {
			var ph indices.TreeBuilder
			ph.Add([]indices.TreeFrame{{Name: "[hour tree not indexed by the benchmark]"}}, hourTotal[p])
			d := indices.RollupDoc{Timestamp: at, Resolution: indices.ResolutionHour, Kind: indices.KindPartitionTree,
				Type: "cpu", Partition: int32(p), Value: hourTotal[p], Tree: ph.Encode()}
			hourDocs = append(hourDocs, d)
			docs = append(docs, querytest.Rollup(names, d))
		}
		bulk(docs)
	}
	if err := querytest.Refresh(b.Context(), cl, names); err != nil {
		b.Fatal(err)
	}
	var treeDocs, tableDocs []querytest.Doc
	var treeBytes, tableBytes, listed, functions int
	for p := range dayTrees {
		var src []indices.TreeSource
		for _, hd := range hourDocs {
			if int(hd.Partition) == p {
				src = append(src, benchVersion(b, cl, names, hd))
			}
		}
		tree := dayTrees[p].Encode()
		fns, err := indices.TreeFunctions(tree, indices.TreeLimits{})
		if err != nil {
			b.Fatal(err)
		}
		table := fns.Encode(indices.TableFunctions)
		treeBytes, tableBytes = treeBytes+len(tree), tableBytes+len(table)
		listed, functions = listed+min(len(fns.Kept), indices.TableFunctions), functions+fns.Functions
		common := indices.RollupDoc{Timestamp: day, Resolution: indices.ResolutionDay, Type: "cpu", Partition: int32(p), Value: dayTrees[p].Total(), Sources: indices.TreeSources(src)}
		t, tb := common, common
		t.Kind, t.Tree = indices.KindPartitionTree, tree
		tb.Kind, tb.Tree = indices.KindFunctionTable, table
		treeDocs = append(treeDocs, querytest.Rollup(names, t))
		tableDocs = append(tableDocs, querytest.Rollup(names, tb))
	}
	for _, d := range treeDocs {
		bulk([]querytest.Doc{d})
	}
	b.Logf("day trees %d KB; day tables %d KB deflated, listing %d of %d functions; indexed in %s",
		treeBytes>>10, tableBytes>>10, listed, functions, time.Since(start).Round(time.Second))
	base := serve(b, cl, names, api.Options{Timeout: 2 * time.Minute})
	params := url.Values{"from": {day.Format(time.RFC3339)}, "to": {day.Add(24 * time.Hour).Format(time.RFC3339)}, "limit": {"100"}}
	setTables := func(on bool) {
		if on {
			bulk(tableDocs)
		} else {
			for _, d := range tableDocs {
				if status, resp, err := opensearch.Raw(context.Background(), cl, http.MethodDelete, "/"+d.Index+"/_doc/"+d.ID, nil); err != nil || status != http.StatusOK {
					b.Fatalf("delete %s: %d %v %s", d.ID, status, err, resp)
				}
			}
		}
		if err := querytest.Refresh(b.Context(), cl, names); err != nil {
			b.Fatal(err)
		}
	}
	// One sub-benchmark: a benchmark without them runs twice (b.N = 1,
	// then b.N), and the fixture takes minutes.
	b.Run("top", func(b *testing.B) {
		var answers [2]api.TopResponse
		for round := 0; round < 2; round++ {
			for i, tc := range []struct {
				name, source string
				tables       bool
			}{{"tables", "function_tables(days)", true}, {"trees", "partition_trees(days)", false}} {
				setTables(tc.tables)
				getPathB(b, base, "/api/v1/top", params, &answers[i])
				if answers[i].Source != tc.source {
					b.Fatalf("%s: source %q, want %q", tc.name, answers[i].Source, tc.source)
				}
				p50, p99 := timeEndpoint(b, base, "/api/v1/top", params)
				b.Logf("round %d, top of the day from %s: p50 %.1f ms, p99 %.1f ms (%d requests)", round, tc.name, p50, p99, b.N)
				b.ReportMetric(p50, tc.name+"-p50-ms")
				b.ReportMetric(p99, tc.name+"-p99-ms")
			}
			if answers[0].Total != answers[1].Total || !slices.Equal(answers[0].Functions, answers[1].Functions) {
				b.Fatalf("tables and trees differ: total %d and %d", answers[0].Total, answers[1].Total)
			}
		}
	})
}

// BenchmarkTopDayTablesMemory: the query service's own share of the top
// table of the fleet's UTC day (BenchmarkTopDayTables' fleet), in memory:
// from the 6 day tables (decode and prove) and from the 6 day trees
// (summed as decoded: api.TopForBench, as BenchmarkTopDayTrees).
//
//	STACKSTREAM_BENCH_FLEET_DAY=1 go test -run '^$' -bench BenchmarkTopDayTablesMemory -benchtime 3x ./internal/api
func BenchmarkTopDayTablesMemory(b *testing.B) {
	if os.Getenv("STACKSTREAM_BENCH_FLEET_DAY") == "" {
		b.Skip("set STACKSTREAM_BENCH_FLEET_DAY=1 to build a fleet's day")
	}
	f := benchFleet{hosts: 1000, hours: 24, partitions: 6}
	dayTrees := make([]indices.TreeBuilder, f.partitions)
	for hr := 0; hr < f.hours; hr++ {
		for h := 0; h < f.hosts; h++ {
			for _, s := range f.hostServices(h) {
				f.stacks(s, h, hr, dayTrees[h%f.partitions].Add)
			}
		}
	}
	trees := make([][]byte, len(dayTrees))
	tables := make([][]byte, len(dayTrees))
	for p := range dayTrees {
		trees[p] = dayTrees[p].Encode()
		fns, err := indices.TreeFunctions(trees[p], indices.TreeLimits{})
		if err != nil {
			b.Fatal(err)
		}
		tables[p] = fns.Encode(indices.TableFunctions)
	}
	b.Run("tables", func(b *testing.B) {
		for b.Loop() {
			if proven, err := api.TopTablesForBench(tables, 100); err != nil || !proven {
				b.Fatalf("proven %v, %v", proven, err)
			}
		}
	})
	b.Run("trees", func(b *testing.B) {
		for b.Loop() {
			if _, err := api.TopForBench(trees, 100); err != nil {
				b.Fatal(err)
			}
		}
	})
}
