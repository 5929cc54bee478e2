package daytrees

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stackstream/stackstream/pkg/opensearch"
	"github.com/stackstream/stackstream/schemas/indices"
	"github.com/stackstream/stackstream/services/rollup/internal/rolluptest"
)

// fleetMinuteTrees encodes the partition trees of one minute of a
// simulated fleet of hosts shaped like the query's benchmark fleet
// (services/query/internal/api, benchFleet: stackctl loadgen's defaults,
// 6 partitions, 5 services a host, 10 replicas a service, 8 cores at
// 19 Hz; each service 60 base stacks and each host 10 of its own a
// service), as the rollup writes them (sorted, deflated), and the nodes of
// the first.
func fleetMinuteTrees(hosts, partitions int) ([]indices.RollupDoc, int) {
	const period = 52631578 // 19 Hz
	services := max(hosts*5/10, 5)
	trees := make([]indices.TreeBuilder, partitions)
	path := make([]indices.TreeFrame, 7)
	for h := 0; h < hosts; h++ {
		b := &trees[h%partitions]
		for k := 0; k < 5; k++ {
			s := (h/10*5 + k) % services
			stack := func(base int, leaf string, v int64) {
				path[0], path[1], path[2] = indices.TreeFrame{Name: "runtime.goexit"}, indices.TreeFrame{Name: "main.main"}, indices.TreeFrame{Name: "net/http.(*conn).serve"}
				path[3] = indices.TreeFrame{Name: fmt.Sprintf("svc%d/handler%d", s, base%6)}
				path[4] = indices.TreeFrame{Name: fmt.Sprintf("svc%d/logic%d", s, base%20)}
				path[5] = indices.TreeFrame{Name: fmt.Sprintf("lib/codec.f%d", base%9)}
				path[6] = indices.TreeFrame{Name: leaf}
				b.Add(path, v)
			}
			// An hour's 109,440 samples of the service a sixtieth at a
			// time: 1,824 a minute.
			for base := 0; base < 60; base++ {
				stack(base, fmt.Sprintf("svc%d/leaf%d", s, base), int64(base%7+1)*260*period/60)
			}
			for m := 0; m < 10; m++ {
				base := m * 7 % 60
				stack(base, fmt.Sprintf("svc%d/leaf%d+h%d.%d", s, base, h, m), 5*period/60)
			}
		}
	}
	out := make([]indices.RollupDoc, partitions)
	for p := range trees {
		out[p] = indices.RollupDoc{Resolution: indices.ResolutionMinute, Kind: indices.KindPartitionTree, Type: "cpu", Partition: int32(p),
			Value: trees[p].Total(), Tree: indices.Deflate(trees[p].EncodeSorted())}
	}
	return out, trees[0].Nodes()
}

// BenchmarkMinuteHeads: the compactor's CPU (this process: searches,
// JSON, inflating and merging the trees, encoding and writing the head;
// not OpenSearch's) per fleet head of 1,000 simulated hosts, from 6
// partition trees in a real OpenSearch: heads written by ApplyWindows
// after the heads of one resolution were deleted (written/res=1m: 10
// minutes; written/res=10m: one 10-minute window of trees of the same
// shape, what the pass wrote before minute heads), and a pass with every
// head current (current: what the 1-minute pass costs when nothing is
// new, per minute of trees). With STACKSTREAM_BENCH_OPENSEARCH_PID (a
// local OpenSearch's process) it also reports that process's CPU. It logs
// the trees' and heads' bytes on disk (the index force-merged, with and
// without the heads).
func BenchmarkMinuteHeads(b *testing.B) {
	ctx := context.Background()
	cl, names := rolluptest.Rollups(b, "bmh-")
	const minutes = 10
	first := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	trees, nodes := fleetMinuteTrees(1000, 6)
	var treeBytes int
	for _, d := range trees {
		treeBytes += len(d.Tree)
	}
	for m := 0; m <= minutes; m++ {
		for _, d := range trees {
			d.Timestamp = first.Add(time.Duration(m) * time.Minute)
			if m == minutes { // the same trees as the window 12:00's
				d.Timestamp, d.Resolution = first, indices.ResolutionTenMinutes
			}
			raw, _ := json.Marshal(&d)
			status, resp, err := opensearch.Raw(ctx, cl, http.MethodPut, "/"+names.Rollups(d.Timestamp)+"/_doc/"+indices.RollupID(&d), raw)
			if err != nil || status/100 != 2 {
				b.Fatalf("put: %d %v %.300s", status, err, resp)
			}
		}
	}
	index := names.Rollups(first)
	merged := func() int64 {
		b.Helper()
		// A single segment with deleted documents is not merged again
		// by max_num_segments=1: expunge them first.
		for _, q := range []string{"only_expunge_deletes=true", "max_num_segments=1"} {
			if status, resp, err := opensearch.Raw(ctx, cl, http.MethodPost, "/"+index+"/_forcemerge?"+q, nil); err != nil || status != http.StatusOK {
				b.Fatalf("force merge: %d %v %.300s", status, err, resp)
			}
		}
		n, err := opensearch.StoreBytes(ctx, cl, index)
		if err != nil {
			b.Fatal(err)
		}
		return n
	}
	refresh := func() {
		b.Helper()
		if _, _, err := opensearch.Raw(ctx, cl, http.MethodPost, "/"+index+"/_refresh", nil); err != nil {
			b.Fatal(err)
		}
	}
	refresh()
	withTrees := merged()
	c := &Compactor{Client: cl, Names: names, Days: 1, Now: func() time.Time { return first.Add(minutes*time.Minute + 5*time.Minute) }}
	deleteHeads := func(res string) {
		b.Helper()
		if _, err := opensearch.DeleteMatching(ctx, cl, index, kindQuery(indices.KindFleetHead, res, first, first.Add(time.Hour))); err != nil {
			b.Fatal(err)
		}
		refresh()
	}
	// pass runs ApplyWindows, after deleting the heads of resolution res
	// unless it is "", and reports this process's CPU and wall time per
	// unit.
	pass := func(b *testing.B, res string, wantWritten, units int, unit string) {
		var cpu, wall, osCPU time.Duration
		for i := 0; i < b.N; i++ {
			if res != "" {
				b.StopTimer()
				deleteHeads(res)
				b.StartTimer()
			}
			before, osBefore, start := cpuTime(b), serverCPU(b), time.Now()
			n, err := c.ApplyWindows(ctx)
			cpu, wall = cpu+cpuTime(b)-before, wall+time.Since(start)
			osCPU += serverCPU(b) - osBefore
			if err != nil || n != wantWritten {
				b.Fatalf("ApplyWindows wrote %d (%v), want %d", n, err, wantWritten)
			}
			refresh()
		}
		b.ReportMetric(float64(cpu.Milliseconds())/float64(b.N*units), "cpu-ms/"+unit)
		b.ReportMetric(float64(wall.Milliseconds())/float64(b.N*units), "wall-ms/"+unit)
		if osCPU > 0 {
			b.ReportMetric(float64(osCPU.Milliseconds())/float64(b.N*units), "opensearch-cpu-ms/"+unit)
		}
	}
	if n, err := c.ApplyWindows(ctx); err != nil || n != minutes+1 {
		b.Fatalf("first pass wrote %d (%v), want %d", n, err, minutes+1)
	}
	refresh()
	// Rounds alternate the two resolutions on this shared machine.
	for round := 1; round <= 3; round++ {
		b.Run(fmt.Sprintf("written/res=1m/round=%d", round), func(b *testing.B) { pass(b, indices.ResolutionMinute, minutes, minutes, "head") })
		b.Run(fmt.Sprintf("written/res=10m/round=%d", round), func(b *testing.B) { pass(b, indices.ResolutionTenMinutes, 1, 1, "head") })
	}
	b.Run("current", func(b *testing.B) { pass(b, "", 0, minutes, "minute") })
	// The heads alone, as the minute tree retention leaves them, copied
	// to an index of their own (the same template): deleted trees stay on
	// disk as soft deletes until their retention lease moves on.
	raw, _ := json.Marshal(map[string]any{
		"source": map[string]any{"index": index, "query": map[string]any{"term": map[string]any{"kind": indices.KindFleetHead}}},
		"dest":   map[string]any{"index": index + "-heads"},
	})
	if status, resp, err := opensearch.Raw(ctx, cl, http.MethodPost, "/_reindex?refresh=true", raw); err != nil || status != http.StatusOK {
		b.Fatalf("reindex heads: %d %v %.300s", status, err, resp)
	}
	index += "-heads"
	heads := merged()
	var fleet indices.TreeBuilder
	for _, d := range trees {
		if err := fleet.AddTree(d.Tree, indices.TreeLimits{}); err != nil {
			b.Fatal(err)
		}
	}
	head := fleet.EncodeHead(indices.HeadNodes)
	b.Logf("a minute: 6 partition trees of %d nodes (partition 0), %d KB deflated together; fleet tree %d nodes, head %d KB; on disk (force-merged): %d minutes and a window of trees %d KB (%d KB a tree), their heads alone %d KB (%d KB a head)",
		nodes, treeBytes>>10, fleet.Nodes(), len(head)>>10, minutes, withTrees>>10, withTrees/int64(6*(minutes+1))>>10, heads>>10, heads/(minutes+1)>>10)
}

// BenchmarkMinuteHeadMerge: BenchmarkMinuteHeads' heads without
// OpenSearch: merging a minute's 6 deflated partition trees of the
// 1,000-host fleet and encoding the head, the part of a head's CPU that
// is not searching, JSON and writing.
func BenchmarkMinuteHeadMerge(b *testing.B) {
	trees, _ := fleetMinuteTrees(1000, 6)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		var fleet indices.TreeBuilder
		for _, d := range trees {
			if err := fleet.AddTree(d.Tree, indices.TreeLimits{}); err != nil {
				b.Fatal(err)
			}
		}
		fleet.EncodeHead(indices.HeadNodes)
	}
}

// cpuTime is this process's user and system CPU so far.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// serverCPU is the user and system CPU so far of the process
// STACKSTREAM_BENCH_OPENSEARCH_PID names, or 0.
func serverCPU(b *testing.B) time.Duration {
	pid := os.Getenv("STACKSTREAM_BENCH_OPENSEARCH_PID")
	if pid == "" {
		return 0
	}
	raw, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		b.Fatal(err)
	}
	// Fields after the command's closing parenthesis: utime and stime
	// are the 12th and 13th, in clock ticks (100 a second on Linux).
	f := strings.Fields(string(raw[bytes.LastIndexByte(raw, ')')+1:]))
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		b.Fatalf("parse /proc/%s/stat: %v %v", pid, err1, err2)
	}
	return time.Duration(utime+stime) * 10 * time.Millisecond
}
