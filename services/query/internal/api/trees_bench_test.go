package api_test

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/opensearch-project/opensearch-go/v4/opensearchapi"

	"github.com/stackstream/stackstream/pkg/opensearch"
	"github.com/stackstream/stackstream/schemas/indices"
	"github.com/stackstream/stackstream/services/query/internal/api"
	"github.com/stackstream/stackstream/services/query/internal/querytest"
	"github.com/stackstream/stackstream/services/query/internal/store"
)

// benchFleet is a simulated fleet shaped like stackctl loadgen's defaults:
// 5 services per host, 10 replicas per service (so hosts*5/10 services in
// the catalogue), 6 Kafka partitions (stackctl init's default), 8 cores at
// 19 Hz. Each service has 60 base stacks (a shared runtime prefix, then the
// service's handlers, logic, a shared codec library and a leaf), and each
// host varies 10 of them per service and hour (a host-specific leaf, as
// loadgen's mutation does): hosts x 5 x hours x 10 distinct stacks on top
// of the base ones.
type benchFleet struct {
	hosts, hours, partitions int
}

const (
	benchBase     = 60
	benchMutated  = 10
	benchServices = 5
	benchReplicas = 10
)

func (f benchFleet) services() int { return max(f.hosts*benchServices/benchReplicas, benchServices) }

// hostServices are the services host h runs.
func (f benchFleet) hostServices(h int) []int {
	out := make([]int, benchServices)
	for k := range out {
		out[k] = (h/benchReplicas*benchServices + k) % f.services()
	}
	return out
}

// stacks calls add with every stack of service s on host h in hour hr and
// its value (8 cores at 19 Hz: 109,440 samples per service and hour).
func (f benchFleet) stacks(s, h, hr int, add func(path []indices.TreeFrame, v int64)) {
	const period = 52631578
	path := make([]indices.TreeFrame, 7)
	base := func(b int) {
		path[0], path[1], path[2] = indices.TreeFrame{Name: "runtime.goexit"}, indices.TreeFrame{Name: "main.main"}, indices.TreeFrame{Name: "net/http.(*conn).serve"}
		path[3] = indices.TreeFrame{Name: fmt.Sprintf("svc%d/handler%d", s, b%6)}
		path[4] = indices.TreeFrame{Name: fmt.Sprintf("svc%d/logic%d", s, b%20)}
		path[5] = indices.TreeFrame{Name: fmt.Sprintf("lib/codec.f%d", b%9)}
		path[6] = indices.TreeFrame{Name: fmt.Sprintf("svc%d/leaf%d", s, b)}
	}
	for b := 0; b < benchBase; b++ {
		base(b)
		add(path, int64(b%7+1)*260*period)
	}
	for m := 0; m < benchMutated; m++ {
		b := m * 7 % benchBase
		base(b)
		path[6] = indices.TreeFrame{Name: fmt.Sprintf("svc%d/leaf%d+h%d.%d.%d", s, b, h, hr, m)}
		add(path, 5*period)
	}
}

// partitionTrees encodes the partition trees of hour hr, and what the
// service documents of the hour say they add up to.
func (f benchFleet) partitionTrees(hr int) ([][]byte, int64) {
	trees := make([]indices.TreeBuilder, f.partitions)
	var total int64
	for h := 0; h < f.hosts; h++ {
		for _, s := range f.hostServices(h) {
			f.stacks(s, h, hr, func(path []indices.TreeFrame, v int64) {
				trees[h%f.partitions].Add(path, v)
				total += v
			})
		}
	}
	out := make([][]byte, f.partitions)
	for p := range trees {
		out[p] = trees[p].Encode()
	}
	return out, total
}

// index writes the fleet's partition trees and, with hostTrees, its host
// trees, with the service documents that say what they add up to, for
// the hours before hour0 + hours.
func (f benchFleet) index(b *testing.B, names indices.Names, hour0 time.Time, hostTrees bool, write func([]querytest.Doc)) (stacks int) {
	for hr := 0; hr < f.hours; hr++ {
		at := hour0.Add(time.Duration(hr) * time.Hour)
		pt, _ := f.partitionTrees(hr)
		var docs []querytest.Doc
		for p, tree := range pt {
			var v int64
			indicesTotal(tree, &v)
			docs = append(docs, querytest.Rollup(names, indices.RollupDoc{Timestamp: at, Resolution: indices.ResolutionHour, Kind: indices.KindPartitionTree,
				Type: "cpu", Partition: int32(p), Value: v, Tree: tree}))
		}
		write(docs)
		docs = docs[:0]
		for h := 0; h < f.hosts; h++ {
			for _, s := range f.hostServices(h) {
				var tb indices.TreeBuilder
				f.stacks(s, h, hr, func(path []indices.TreeFrame, v int64) { tb.Add(path, v) })
				svc, host := fmt.Sprintf("svc%d", s), fmt.Sprintf("host-%d", h)
				docs = append(docs, querytest.Rollup(names, indices.RollupDoc{Timestamp: at, Resolution: indices.ResolutionHour, Kind: indices.KindService,
					Type: "cpu", Service: svc, Host: host, Value: tb.Total(), StackValue: tb.Total()}))
				if hostTrees {
					docs = append(docs, querytest.Rollup(names, indices.RollupDoc{Timestamp: at, Resolution: indices.ResolutionHour, Kind: indices.KindTree,
						Type: "cpu", Service: svc, Host: host, Value: tb.Total(), Tree: tb.Encode()}))
				}
				stacks += benchMutated
			}
		}
		write(docs)
	}
	return stacks + f.services()*benchBase
}

// indicesTotal reads an encoded tree's total.
func indicesTotal(tree []byte, v *int64) {
	_, *v, _ = indices.DecodeTree(tree, indices.TreeLimits{}, nopVisitor{})
}

type nopVisitor struct{}

func (nopVisitor) Frames([]indices.TreeFrame)    {}
func (nopVisitor) Node(int, int32, int64, int64) {}

// BenchmarkFlameTrees: the flame graph of a fleet's whole settled hours
// through the API and OpenSearch (partition trees scrolled, decoded and
// merged, max_nodes 5000), the two sizes; p50-ms and p99-ms are
// over the b.N requests. Indexing the fleet is outside the timer.
func BenchmarkFlameTrees(b *testing.B) {
	for _, c := range []struct {
		name      string
		fleet     benchFleet
		query     func(f benchFleet) string
		hostTrees bool
	}{
		{"1h_x_100_hosts_fleet", benchFleet{hosts: 100, hours: 1, partitions: 6}, func(benchFleet) string { return "" }, false},
		{"1h_x_100_hosts_listed", benchFleet{hosts: 100, hours: 1, partitions: 6}, listHosts, true},
		{"24h_x_1000_hosts_fleet", benchFleet{hosts: 1000, hours: 24, partitions: 6}, func(benchFleet) string { return "" }, false},
	} {
		b.Run(c.name, func(b *testing.B) {
			if c.fleet.hosts > 100 && os.Getenv("STACKSTREAM_BENCH_FLEET_DAY") == "" {
				// 201 MB of trees to generate and index: minutes of both cores.
				b.Skip("set STACKSTREAM_BENCH_FLEET_DAY=1 to index a fleet's day")
			}
			cl, names := querytest.Setup(b)
			now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
			from := now.Add(-time.Duration(c.fleet.hours+1) * time.Hour)
			start := time.Now()
			stacks := c.fleet.index(b, names, from, c.hostTrees, func(docs []querytest.Doc) {
				// Tree documents are large: bulk them a few at a time.
				for len(docs) > 0 {
					n := min(len(docs), 20)
					if err := querytest.Bulk(b.Context(), cl, docs[:n]); err != nil {
						b.Fatal(err)
					}
					docs = docs[n:]
				}
			})
			if err := querytest.Refresh(b.Context(), cl, names); err != nil {
				b.Fatal(err)
			}
			b.Logf("%d hosts x %d h: %d distinct stacks, indexed in %s", c.fleet.hosts, c.fleet.hours, stacks, time.Since(start).Round(time.Second))
			base := serve(b, cl, names, api.Options{})
			params := url.Values{"from": {from.Format(time.RFC3339)}, "to": {from.Add(time.Duration(c.fleet.hours) * time.Hour).Format(time.RFC3339)}}
			if q := c.query(c.fleet); q != "" {
				params.Set("query", q)
			}
			var f api.FlamegraphResponse
			getB(b, base, params, &f)
			b.Logf("source %s, total %d, %d nodes folded", f.Source, f.Total, f.Folded)
			p50, p99 := timeRequests(b, base, params)
			b.ReportMetric(p50, "p50-ms")
			b.ReportMetric(p99, "p99-ms")
		})
	}
}

// listHosts selects every host by name, so host trees answer.
func listHosts(f benchFleet) string {
	q := `{host=~"`
	for h := 0; h < f.hosts; h++ {
		if h > 0 {
			q += "|"
		}
		q += fmt.Sprintf("host-%d", h)
	}
	return q + `"}`
}

// timeRequests times b.N flame graph requests (the timer reset first) and
// gives their p50 and p99 in milliseconds.
func timeRequests(b *testing.B, base string, params url.Values) (p50, p99 float64) {
	return timeEndpoint(b, base, "/api/v1/flamegraph", params)
}

// timeEndpoint times b.N requests of path (the timer reset first) and
// gives their p50 and p99 in milliseconds.
func timeEndpoint(b *testing.B, base, path string, params url.Values) (p50, p99 float64) {
	times := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		getPathB(b, base, path, params, nil)
		times = append(times, time.Since(t0))
	}
	b.StopTimer()
	slices.Sort(times)
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	return ms(times[len(times)/2]), ms(times[(len(times)*99)/100])
}

func getB(b *testing.B, base string, params url.Values, out *api.FlamegraphResponse) {
	b.Helper()
	if out == nil {
		getPathB(b, base, "/api/v1/flamegraph", params, nil)
		return
	}
	getPathB(b, base, "/api/v1/flamegraph", params, out)
}

// getPathB gets path and decodes its answer into out, when not nil.
func getPathB(b *testing.B, base, path string, params url.Values, out any) {
	b.Helper()
	resp, err := http.Get(base + path + "?" + params.Encode())
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(resp.Body)
		b.Fatalf("HTTP %d: %s", resp.StatusCode, body)
	}
	if out != nil {
		if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
			b.Fatal(err)
		}
		return
	}
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkMergeTrees: decoding and merging the partition trees of a
// fleet's day in memory (no OpenSearch), then folding to max_nodes 5000:
// the query service's own share of BenchmarkFlameTrees.
func BenchmarkMergeTrees(b *testing.B) {
	for _, f := range []benchFleet{{hosts: 100, hours: 1, partitions: 6}, {hosts: 1000, hours: 24, partitions: 6}} {
		b.Run(fmt.Sprintf("%dh_x_%d_hosts", f.hours, f.hosts), func(b *testing.B) {
			var trees [][]byte
			var size int
			for hr := 0; hr < f.hours; hr++ {
				pt, _ := f.partitionTrees(hr)
				for _, t := range pt {
					size += len(t)
				}
				trees = append(trees, pt...)
			}
			b.Logf("%d trees, %d MB encoded", len(trees), size>>20)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, err := api.MergeForBench(trees, 5000); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// hourHeads encodes the fleet's hour heads (every partition of an hour
// merged, indices.HeadNodes kept) of the hours from first until last.
func (f benchFleet) hourHeads(first, last int) [][]byte {
	var out [][]byte
	for hr := first; hr < last; hr++ {
		var b indices.TreeBuilder
		for h := 0; h < f.hosts; h++ {
			for _, s := range f.hostServices(h) {
				f.stacks(s, h, hr, b.Add)
			}
		}
		out = append(out, b.EncodeHead(indices.HeadNodes))
	}
	return out
}

// BenchmarkProveHourHeads: merging the fleet's hour heads of 23 hours (a
// rolling day's whole settled hours) in memory (no OpenSearch), proving
// the flame graph of max_nodes nodes and converting it: the query
// service's own share of a rolling day from hour heads, against
// BenchmarkMergeTrees' 24 h.
func BenchmarkProveHourHeads(b *testing.B) {
	f := benchFleet{hosts: 1000, hours: 23, partitions: 6}
	heads := f.hourHeads(0, f.hours)
	var size int
	for _, h := range heads {
		size += len(h)
	}
	for _, maxNodes := range []int{5000, 20000} {
		b.Run(fmt.Sprintf("23h_x_1000_hosts/max_nodes=%d", maxNodes), func(b *testing.B) {
			proven, err := api.ProveForBench(heads, maxNodes)
			if err != nil {
				b.Fatal(err)
			}
			b.Logf("%d heads, %d KB encoded; proven %v", len(heads), size>>10, proven)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, err := api.ProveForBench(heads, maxNodes); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// windowHeads encodes the partition heads (indices.WindowHeadNodes kept)
// of the edges of now-24h at 00:34:27 the next day, as benchEdges indexes
// them: the minutes 00:35-00:39 and the 10-minute windows 00:40 and 00:50
// (hour 0's stacks), 24:00, 24:10, 24:20 and 24:30 (hour 24's; 24:30
// holds 5 minutes), each minute a sixtieth of its hour.
func (f benchFleet) windowHeads() [][]byte {
	var out [][]byte
	for _, edge := range []struct {
		hr      int
		windows []int64 // minutes per window: 1 for a minute
	}{{0, []int64{1, 1, 1, 1, 1, 10, 10}}, {24, []int64{10, 10, 10, 5}}} {
		minutes := make([]indices.TreeBuilder, f.partitions)
		for h := 0; h < f.hosts; h++ {
			for _, s := range f.hostServices(h) {
				f.stacks(s, h, edge.hr, func(path []indices.TreeFrame, v int64) { minutes[h%f.partitions].Add(path, v/60) })
			}
		}
		for p := range minutes {
			enc := minutes[p].Encode()
			for _, k := range edge.windows {
				var w indices.TreeBuilder
				for range k {
					if err := w.AddTree(enc, indices.TreeLimits{}); err != nil {
						panic(err)
					}
				}
				out = append(out, w.EncodeHead(indices.WindowHeadNodes))
			}
		}
	}
	return out
}

// BenchmarkProveEdgeHeads: BenchmarkProveHourHeads with the edges of a
// literal now-24h from their partition heads (windowHeads: 66 heads),
// merged under the same proof.
func BenchmarkProveEdgeHeads(b *testing.B) {
	f := benchFleet{hosts: 1000, hours: 23, partitions: 6}
	heads := append(f.hourHeads(1, 24), f.windowHeads()...)
	var size int
	for _, h := range heads {
		size += len(h)
	}
	for _, maxNodes := range []int{1000, 2000, 3000, 5000} {
		b.Run(fmt.Sprintf("now-24h_x_1000_hosts/max_nodes=%d", maxNodes), func(b *testing.B) {
			proven, err := api.ProveForBench(heads, maxNodes)
			if err != nil {
				b.Fatal(err)
			}
			b.Logf("%d heads, %d KB encoded; proven %v", len(heads), size>>10, proven)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, err := api.ProveForBench(heads, maxNodes); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// fleetWindowHeads encodes what a literal now-24h at 00:34:27 the next day
// reads of its edges besides the hour heads, as the rollup and its
// compactor write them by default: the fleet heads (indices.HeadNodes
// kept) of the whole 10-minute windows 00:40 and 00:50 (hour 0's stacks)
// and 24:00, 24:10 and 24:20 (hour 24's), each minute a sixtieth of its
// hour; and the fleet heads (indices.HeadNodes kept) of the closed
// minutes outside whole windows: 00:35-00:39 and 24:30-24:31 (24:32 on
// are not yet written).
func (f benchFleet) fleetWindowHeads() [][]byte {
	var out [][]byte
	for _, edge := range []struct {
		hr             int
		windows, loose int // whole 10-minute windows, minutes outside them
	}{{0, 2, 5}, {24, 3, 2}} {
		var minute indices.TreeBuilder
		for h := 0; h < f.hosts; h++ {
			for _, s := range f.hostServices(h) {
				f.stacks(s, h, edge.hr, func(path []indices.TreeFrame, v int64) { minute.Add(path, v/60) })
			}
		}
		enc := minute.Encode()
		var w indices.TreeBuilder
		for range 10 {
			if err := w.AddTree(enc, indices.TreeLimits{}); err != nil {
				panic(err)
			}
		}
		for range edge.windows {
			out = append(out, w.EncodeHead(indices.HeadNodes))
		}
		for range edge.loose {
			out = append(out, minute.EncodeHead(indices.HeadNodes))
		}
	}
	return out
}

// BenchmarkProveFleetWindowHeads: BenchmarkProveHourHeads with the edges
// of a literal now-24h from the fleet's window and minute heads
// (fleetWindowHeads), merged under the same proof.
func BenchmarkProveFleetWindowHeads(b *testing.B) {
	f := benchFleet{hosts: 1000, hours: 23, partitions: 6}
	heads := append(f.hourHeads(1, 24), f.fleetWindowHeads()...)
	var size int
	for _, h := range heads {
		size += len(h)
	}
	for _, maxNodes := range []int{5000, 20000} {
		b.Run(fmt.Sprintf("now-24h_x_1000_hosts/max_nodes=%d", maxNodes), func(b *testing.B) {
			proven, err := api.ProveForBench(heads, maxNodes)
			if err != nil {
				b.Fatal(err)
			}
			b.Logf("%d heads and trees, %d KB encoded; proven %v", len(heads), size>>10, proven)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, err := api.ProveForBench(heads, maxNodes); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	// The same heads decoded before, as the store's head cache keeps
	// them: merging, proving and converting alone.
	decoded := make([]*store.Head, len(heads))
	var held int64
	for i, h := range heads {
		var err error
		if decoded[i], err = store.DecodeHead(h); err != nil {
			b.Fatal(err)
		}
		held += decoded[i].Bytes()
	}
	b.Logf("%d heads decoded hold %d KB", len(decoded), held>>10)
	b.Run("now-24h_x_1000_hosts/decoded/max_nodes=5000", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			if _, err := api.ProveDecodedForBench(decoded, 5000); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkFlameDayTrees: the flame graph of 24 h x 1,000 simulated hosts
// (the fleet above) read from the day partition trees the rollup's
// compactor writes (6 documents, the day's stacks merged per partition),
// then from the fleet head it writes (one document), and a rolling day (23
// whole hours and the minutes around them) from the hour heads it writes
// (23 documents, proveKeep), through the API and
// OpenSearch, with the freshness checks against the hours' versions;
// p50/p99 reported per source. The hour partition trees are indexed as one-node
// placeholders carrying their hour's total (their versions and totals are
// what the request reads of them; indexing 201 MB of real hour trees
// takes minutes of this machine), the service documents in full.
func BenchmarkFlameDayTrees(b *testing.B) {
	if os.Getenv("STACKSTREAM_BENCH_FLEET_DAY") == "" {
		b.Skip("set STACKSTREAM_BENCH_FLEET_DAY=1 to index a fleet's day")
	}
	f := benchFleet{hosts: 1000, hours: 24, partitions: 6}
	cl, names := querytest.Setup(b)
	day := time.Date(2026, 11, 29, 0, 0, 0, 0, time.UTC)
	// With STACKSTREAM_BENCH_FLEET_EDGES=1 only now-24h with its edges is
	// timed (benchEdges), from the hour heads: the day trees and the day's
	// fleet head are left empty (building them is most of the fixture's
	// CPU).
	edges := os.Getenv("STACKSTREAM_BENCH_FLEET_EDGES") != ""
	start := time.Now()
	dayTrees := make([]indices.TreeBuilder, f.partitions)
	var hourDocs []indices.RollupDoc
	bulk := func(docs []querytest.Doc) {
		for len(docs) > 0 {
			n := min(len(docs), 2000)
			if err := querytest.Bulk(b.Context(), cl, docs[:n]); err != nil {
				b.Fatal(err)
			}
			docs = docs[n:]
		}
	}
	var hourHeads [][]byte
	var hourTotals []int64
	for hr := 0; hr < f.hours; hr++ {
		at := day.Add(time.Duration(hr) * time.Hour)
		hourTotal := make([]int64, f.partitions)
		var docs []querytest.Doc
		var hourFleet indices.TreeBuilder
		for h := 0; h < f.hosts; h++ {
			p := h % f.partitions
			for _, s := range f.hostServices(h) {
				var total int64
				f.stacks(s, h, hr, func(path []indices.TreeFrame, v int64) {
					if !edges {
						dayTrees[p].Add(path, v)
					}
					hourFleet.Add(path, v)
					total += v
				})
				hourTotal[p] += total
				docs = append(docs, querytest.Rollup(names, indices.RollupDoc{Timestamp: at, Resolution: indices.ResolutionHour, Kind: indices.KindService,
					Type: "cpu", Service: fmt.Sprintf("svc%d", s), Host: fmt.Sprintf("host-%d", h), Value: total, StackValue: total}))
			}
		}
		for p := range hourTotal {
			var ph indices.TreeBuilder
			ph.Add([]indices.TreeFrame{{Name: "[hour tree not indexed by the benchmark]"}}, hourTotal[p])
			d := indices.RollupDoc{Timestamp: at, Resolution: indices.ResolutionHour, Kind: indices.KindPartitionTree,
				Type: "cpu", Partition: int32(p), Value: hourTotal[p], Tree: ph.Encode()}
			hourDocs = append(hourDocs, d)
			docs = append(docs, querytest.Rollup(names, d))
		}
		hourHeads = append(hourHeads, hourFleet.EncodeHead(indices.HeadNodes))
		hourTotals = append(hourTotals, hourFleet.Total())
		bulk(docs)
	}
	if err := querytest.Refresh(b.Context(), cl, names); err != nil {
		b.Fatal(err)
	}
	var size int
	var docs []querytest.Doc
	for p := range dayTrees {
		var src []indices.TreeSource
		for _, hd := range hourDocs {
			if int(hd.Partition) == p {
				src = append(src, benchVersion(b, cl, names, hd))
			}
		}
		tree := dayTrees[p].Encode()
		size += len(tree)
		docs = append(docs, querytest.Rollup(names, indices.RollupDoc{Timestamp: day, Resolution: indices.ResolutionDay, Kind: indices.KindPartitionTree,
			Type: "cpu", Partition: int32(p), Value: dayTrees[p].Total(), Tree: tree, Sources: indices.TreeSources(src)}))
	}
	// The fleet head, as the compactor writes it: the day trees merged.
	var fleet indices.TreeBuilder
	for p := range dayTrees {
		if err := fleet.AddTree(dayTrees[p].Encode(), indices.TreeLimits{}); err != nil {
			b.Fatal(err)
		}
	}
	var all []indices.TreeSource
	hourSources := make([][]indices.TreeSource, f.hours)
	for _, hd := range hourDocs {
		v := benchVersion(b, cl, names, hd)
		all = append(all, v)
		hr := int(hd.Timestamp.Sub(day) / time.Hour)
		hourSources[hr] = append(hourSources[hr], v)
	}
	// The fleet's hour heads, as the lifecycle pass writes them.
	var headDocs []querytest.Doc
	var headSize int
	for hr, h := range hourHeads {
		headSize += len(h)
		headDocs = append(headDocs, querytest.Rollup(names, indices.RollupDoc{Timestamp: day.Add(time.Duration(hr) * time.Hour), Resolution: indices.ResolutionHour,
			Kind: indices.KindFleetHead, Type: "cpu", Value: hourTotals[hr], Tree: h, Sources: indices.TreeSources(hourSources[hr])}))
	}
	head := fleet.EncodeHead(indices.HeadNodes)
	headDoc := querytest.Rollup(names, indices.RollupDoc{Timestamp: day, Resolution: indices.ResolutionDay, Kind: indices.KindFleetHead,
		Type: "cpu", Value: fleet.Total(), Tree: head, Sources: indices.TreeSources(all)})
	for _, d := range docs {
		if err := querytest.Bulk(b.Context(), cl, []querytest.Doc{d}); err != nil {
			b.Fatal(err)
		}
	}
	if err := querytest.Refresh(b.Context(), cl, names); err != nil {
		b.Fatal(err)
	}
	b.Logf("%d hosts x 24 h, day trees %d MB, fleet tree %d nodes, head %d KB, hour heads %d KB, indexed in %s",
		f.hosts, size>>20, fleet.Nodes(), len(head)>>10, headSize>>10, time.Since(start).Round(time.Second))
	// The day trees take 5-30 s on this shared machine: past the default
	// 30 s timeout the benchmark would stop before the heads are timed.
	base := serve(b, cl, names, api.Options{Timeout: 2 * time.Minute})
	params := url.Values{"from": {day.Format(time.RFC3339)}, "to": {day.Add(24 * time.Hour).Format(time.RFC3339)}}
	// measure times b.N requests answered from want; the metrics are
	// reported at the end (ResetTimer drops those reported before it).
	metrics := map[string]float64{}
	measure := func(params url.Values, want string) {
		var fr api.FlamegraphResponse
		getB(b, base, params, &fr)
		b.Logf("source %s, total %d, %d [other] nodes", fr.Source, fr.Total, fr.Folded)
		if fr.Source != want {
			b.Fatalf("source %s, want %s", fr.Source, want)
		}
		metrics[want+"-p50-ms"], metrics[want+"-p99-ms"] = timeRequests(b, base, params)
		b.Logf("%s: p50 %.1f ms, p99 %.1f ms", want, metrics[want+"-p50-ms"], metrics[want+"-p99-ms"])
	}
	// With STACKSTREAM_BENCH_FLEET_EDGES=1 only now-24h with its edges is
	// timed (benchEdges): indexing them takes many minutes, and a
	// benchmark without sub-benchmarks runs twice (b.N = 1, then b.N).
	if !edges {
		// Without the head (before it exists, or while stale): the day trees.
		measure(params, "partition_trees(days)")
	}
	if err := querytest.Bulk(b.Context(), cl, append(headDocs, headDoc)); err != nil {
		b.Fatal(err)
	}
	if err := querytest.Refresh(b.Context(), cl, names); err != nil {
		b.Fatal(err)
	}
	if edges {
		f.benchEdges(b, cl, names, day, hourTotals, bulk)
		return
	}
	measure(params, "fleet_head")
	// A rolling day, as now-24h at 00:30 the next day: 23 whole hours from
	// their hour heads, the minutes around them from the minute rollups
	// (none in this fleet).
	rolling := url.Values{"from": {day.Add(30 * time.Minute).Format(time.RFC3339)}, "to": {day.Add(24*time.Hour + 30*time.Minute).Format(time.RFC3339)}}
	measure(rolling, "fleet_hour_heads+rollups")
	// Top, sandwich and diff of the UTC day need every node: the day
	// trees answer them.
	measureEndpoint := func(name, path string, p url.Values) {
		var src struct {
			Source        string `json:"source"`
			BaseSource    string `json:"base_source"`
			CompareSource string `json:"compare_source"`
		}
		getPathB(b, base, path, p, &src)
		metrics[name+"-p50-ms"], metrics[name+"-p99-ms"] = timeEndpoint(b, base, path, p)
		b.Logf("%s (source %q, base %q, compare %q): p50 %.1f ms, p99 %.1f ms", name, src.Source, src.BaseSource, src.CompareSource,
			metrics[name+"-p50-ms"], metrics[name+"-p99-ms"])
	}
	withParams := func(extra ...string) url.Values {
		p := url.Values{}
		for k, v := range params {
			p[k] = v
		}
		for i := 0; i+1 < len(extra); i += 2 {
			p.Set(extra[i], extra[i+1])
		}
		return p
	}
	measureEndpoint("top-day", "/api/v1/top", withParams("limit", "100"))
	measureEndpoint("sandwich-day", "/api/v1/sandwich", withParams("function", "lib/codec.f3"))
	measureEndpoint("diff-day", "/api/v1/diff", withParams()) // the day against itself: both sides read
	for k, v := range metrics {
		b.ReportMetric(v, k)
	}
	b.Log("set STACKSTREAM_BENCH_FLEET_EDGES=1 to time now-24h with its edges")
}

// benchEdges times the literal now-24h at 00:34:27 the next day (hours
// 01:00-24:00 from the hour heads) with its edges as the rollup and its
// compactor write them by default (indexEdges): the whole 10-minute
// windows 00:40, 00:50, 24:00, 24:10 and 24:20 from the fleet's window
// heads, the minutes 00:35-00:39 and 24:30-24:31 (the window 24:30 is
// still open, 24:32 on not yet written) from the fleet's minute heads
// (fresh by value for the first, whose trees are deleted, by sources for
// the others), 24:32-24:34 per stack (nothing written); the range
// 00:40-24:30 (every edge from window heads, nothing per stack), to see
// what the loose minutes cost; and now-24h with the minute heads deleted
// (as before them: 00:35-00:39 per stack, 24:30-24:31 from their minute
// trees). Alternated, two rounds; each checks the source and that the
// total is exact; p50 and p99 of b.N requests.
func (f benchFleet) benchEdges(b *testing.B, cl *opensearchapi.Client, names indices.Names, day time.Time, hourTotals []int64, bulk func([]querytest.Doc)) {
	start := time.Now()
	at := day.Add(24*time.Hour + 34*time.Minute + 27*time.Second)
	minuteTotals, minuteHeads := f.indexEdges(b, cl, names, day, at.Add(-24*time.Hour), bulk)
	if err := querytest.Refresh(b.Context(), cl, names); err != nil {
		b.Fatal(err)
	}
	var hours int64
	for _, t := range hourTotals[1:] {
		hours += t
	}
	sum := func(from, to time.Time) int64 {
		var v int64
		for m, x := range minuteTotals {
			if !m.Before(from) && m.Before(to) {
				v += x
			}
		}
		return v
	}
	b.Logf("edges indexed in %s", time.Since(start).Round(time.Second))
	// Each case is timed on a service of its own, started for it: its
	// first request (checked) finds the head cache empty, the b.N timed
	// after it find the heads it decoded (none with headCache -1).
	serve := func(headCache int64) *httptest.Server {
		return httptest.NewServer(api.New(cl, names, api.Options{Now: func() time.Time { return at }, Timeout: 2 * time.Minute, HeadCacheBytes: headCache},
			slog.New(slog.NewTextHandler(io.Discard, nil))))
	}
	aligned := [2]time.Time{day.Add(40 * time.Minute), day.Add(24*time.Hour + 30*time.Minute)}
	cases := []struct {
		name, source string
		params       url.Values
		total        int64
		heads        bool  // with the fleet minute heads
		headCache    int64 // api.Options.HeadCacheBytes: 0 the default, -1 none
	}{
		{"now-24h", "fleet_hour_heads+fleet_window_heads+fleet_minute_heads+rollups", url.Values{"from": {"now-24h"}, "to": {"now"}},
			hours + sum(at.Add(-24*time.Hour), at), true, 0},
		{"now-24h_no_head_cache", "fleet_hour_heads+fleet_window_heads+fleet_minute_heads+rollups", url.Values{"from": {"now-24h"}, "to": {"now"}},
			hours + sum(at.Add(-24*time.Hour), at), true, -1},
		{"00:40-24:30", "fleet_hour_heads+fleet_window_heads", url.Values{"from": {aligned[0].Format(time.RFC3339)}, "to": {aligned[1].Format(time.RFC3339)}},
			hours + sum(aligned[0], aligned[1]), true, 0},
		{"now-24h_without_minute_heads", "fleet_hour_heads+fleet_window_heads+window_trees+rollups", url.Values{"from": {"now-24h"}, "to": {"now"}},
			hours + sum(at.Add(-24*time.Hour), at), false, 0},
	}
	withHeads := true
	for round := 1; round <= 2; round++ {
		for _, c := range cases {
			if c.heads != withHeads {
				if c.heads {
					bulk(minuteHeads)
				} else {
					deleteRollups(b, cl, names, map[string]any{"bool": map[string]any{"filter": []any{
						map[string]any{"term": map[string]any{"kind": indices.KindFleetHead}}, map[string]any{"term": map[string]any{"resolution": indices.ResolutionMinute}}}}})
				}
				if err := querytest.Refresh(b.Context(), cl, names); err != nil {
					b.Fatal(err)
				}
				withHeads = c.heads
			}
			c.params.Set("max_nodes", "5000")
			b.Run(fmt.Sprintf("round%d/%s/max_nodes=5000", round, c.name), func(b *testing.B) {
				srv := serve(c.headCache)
				defer srv.Close()
				var fr api.FlamegraphResponse
				t0 := time.Now()
				getB(b, srv.URL, c.params, &fr)
				first := time.Since(t0)
				if fr.Source != c.source || fr.Total != c.total || fr.Truncated {
					b.Fatalf("%s: source %s total %d truncated %v, want %s %d", c.name, fr.Source, fr.Total, fr.Truncated, c.source, c.total)
				}
				cpu0 := processCPU()
				p50, p99 := timeRequests(b, srv.URL, c.params)
				cpu := float64((processCPU() - cpu0).Microseconds()) / 1000 / float64(b.N)
				b.ReportMetric(p50, "p50-ms")
				b.ReportMetric(p99, "p99-ms")
				b.ReportMetric(float64(first.Microseconds())/1000, "first-ms")
				b.ReportMetric(cpu, "cpu-ms/req")
				b.Logf("%s, max_nodes 5000, %s (exact total), %d [other] nodes: first request %.1f ms, then p50 %.1f ms, p99 %.1f ms, %.1f ms of this process's CPU per request (load %s)",
					c.name, fr.Source, fr.Folded, float64(first.Microseconds())/1000, p50, p99, cpu, loadAverage())
			})
		}
	}
}

// processCPU is the CPU time (user and system) this process has used:
// the service under test runs in it, so its difference over requests is
// the query's CPU (and the benchmark client's, decoding the answers),
// whatever else loads the machine.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// loadAverage is the machine's 1-, 5- and 15-minute load averages.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

func benchVersion(b *testing.B, cl *opensearchapi.Client, names indices.Names, d indices.RollupDoc) indices.TreeSource {
	b.Helper()
	id := indices.RollupID(&d)
	status, resp, err := opensearch.Raw(b.Context(), cl, http.MethodGet, "/"+names.Rollups(d.Timestamp)+"/_doc/"+id, nil)
	if err != nil || status != http.StatusOK {
		b.Fatalf("get %s: %d %v %.200s", id, status, err, resp)
	}
	var out struct {
		SeqNo       int64 `json:"_seq_no"`
		PrimaryTerm int64 `json:"_primary_term"`
	}
	if err := json.Unmarshal(resp, &out); err != nil {
		b.Fatal(err)
	}
	return indices.TreeSource{ID: id, SeqNo: out.SeqNo, PrimaryTerm: out.PrimaryTerm}
}

// indexEdges writes what the rollup and its compactor write by default
// (no partition heads) for the minutes of day 00:30-01:00
// (hour 0's stacks) and of the next day 00:00-00:32 (hour 24's; the
// window 00:30 is still open at 00:34:27, its minutes 00:32 on not yet
// closed) that a range starting at from reads, each minute a sixtieth of
// its hour's values: the minute service documents; per whole 10-minute
// window its service documents, its partition trees and the fleet's head
// of the window (the trees merged, with their versions as sources); for
// the minutes outside whole windows the minute stack rollups and the
// stacks' documents, the fleet's head of each minute and, for the minutes
// of the last benchMinuteTreeRetention before from+24h only, the minute
// partition trees (older ones are deleted after their heads are written:
// their heads' sources name trees that are gone). Every minute of an hour
// holds the same stacks, so trees are built per hour and scaled. It
// returns each minute's total and the minute heads' documents.
func (f benchFleet) indexEdges(b *testing.B, cl *opensearchapi.Client, names indices.Names, day, from time.Time, bulk func([]querytest.Doc)) (totals map[time.Time]int64, minuteHeads []querytest.Doc) {
	totals = map[time.Time]int64{}
	now := from.Add(24 * time.Hour)
	var heads []querytest.Doc
	var headBytes int
	for _, edge := range []struct {
		hr      int
		first   time.Time
		minutes int
	}{{0, day.Add(30 * time.Minute), 30}, {24, day.Add(24 * time.Hour), 32}} {
		// Whole windows (10 minutes from from on, all written) and the
		// minutes outside them.
		var windows, minutes, loose []time.Time
		count := map[time.Time]int{}
		for m := 0; m < edge.minutes; m++ {
			at := edge.first.Add(time.Duration(m) * time.Minute)
			if !at.Before(from) {
				minutes = append(minutes, at)
				count[at.Truncate(10*time.Minute)]++
			}
		}
		for _, at := range minutes {
			w := at.Truncate(10 * time.Minute)
			switch {
			case count[w] < 10 || w.Before(from):
				loose = append(loose, at)
			case at.Equal(w):
				windows = append(windows, w)
			}
		}
		windowTrees := make([]indices.TreeBuilder, f.partitions)
		minuteTrees := make([]indices.TreeBuilder, f.partitions)
		stackDocs := map[string]querytest.Doc{}
		for h := 0; h < f.hosts; h++ {
			var docs []querytest.Doc
			p := h % f.partitions
			for _, s := range f.hostServices(h) {
				var value int64
				var ids []string
				var values []int64
				f.stacks(s, h, edge.hr, func(path []indices.TreeFrame, v int64) {
					value += v / 60
					windowTrees[p].Add(path, 10*(v/60))
					if len(loose) == 0 {
						return
					}
					minuteTrees[p].Add(path, v/60)
					fns := make([]string, len(path))
					for i, fr := range path {
						fns[i] = fr.Name
					}
					doc, id := querytest.Stack(names, from, fns...)
					stackDocs[id] = doc
					ids = append(ids, id)
					values = append(values, v/60)
				})
				svc, host := fmt.Sprintf("svc%d", s), fmt.Sprintf("host-%d", h)
				for _, at := range minutes {
					totals[at] += value
					docs = append(docs, querytest.Rollup(names, indices.RollupDoc{Timestamp: at, Resolution: indices.ResolutionMinute,
						Kind: indices.KindService, Type: "cpu", Service: svc, Host: host, Value: value, StackValue: value}))
				}
				for _, at := range loose {
					d := indices.RollupDoc{Timestamp: at, Resolution: indices.ResolutionMinute, Kind: indices.KindStacks, Type: "cpu",
						Service: svc, Host: host, Value: value}
					if err := d.SetStacks(ids, values); err != nil {
						b.Fatal(err)
					}
					docs = append(docs, querytest.Rollup(names, d))
				}
				for _, w := range windows {
					docs = append(docs, querytest.Rollup(names, indices.RollupDoc{Timestamp: w, Resolution: "10m",
						Kind: indices.KindService, Type: "cpu", Service: svc, Host: host, Value: 10 * value, StackValue: 10 * value}))
				}
			}
			bulk(docs)
		}
		var docs []querytest.Doc
		for _, d := range stackDocs {
			docs = append(docs, d)
		}
		bulk(docs)
		var fleet indices.TreeBuilder
		var trees []indices.RollupDoc
		for p := range windowTrees {
			enc := windowTrees[p].Encode()
			if err := fleet.AddTree(enc, indices.TreeLimits{}); err != nil {
				b.Fatal(err)
			}
			for _, w := range windows {
				d := indices.RollupDoc{Timestamp: w, Resolution: "10m", Kind: indices.KindPartitionTree, Type: "cpu", Partition: int32(p),
					Value: windowTrees[p].Total(), Tree: indices.Deflate(enc)}
				trees = append(trees, d)
				bulk([]querytest.Doc{querytest.Rollup(names, d)}) // about 2 MB each
			}
		}
		if err := querytest.Refresh(b.Context(), cl, names); err != nil {
			b.Fatal(err)
		}
		head := fleet.EncodeHead(indices.HeadNodes)
		for _, w := range windows {
			var src []indices.TreeSource
			for _, d := range trees {
				if d.Timestamp.Equal(w) {
					src = append(src, benchVersion(b, cl, names, d))
				}
			}
			headBytes += len(head)
			heads = append(heads, querytest.Rollup(names, indices.RollupDoc{Timestamp: w, Resolution: "10m", Kind: indices.KindFleetHead, Type: "cpu",
				Value: fleet.Total(), Tree: head, Sources: indices.TreeSources(src)}))
		}
		b.Logf("edge from %s: %d whole windows (a partition tree %d nodes), %d loose minutes (%d stacks), fleet window head %d KB of %d nodes",
			edge.first.Format("15:04"), len(windows), windowTrees[0].Nodes(), len(loose), len(stackDocs), len(head)>>10, fleet.Nodes())
		if len(loose) == 0 {
			continue
		}
		var minuteFleet indices.TreeBuilder
		encoded := make([][]byte, f.partitions)
		for p := range minuteTrees {
			encoded[p] = minuteTrees[p].Encode()
			if err := minuteFleet.AddTree(encoded[p], indices.TreeLimits{}); err != nil {
				b.Fatal(err)
			}
		}
		minuteHead := minuteFleet.EncodeHead(indices.HeadNodes)
		kept := 0
		for _, m := range loose {
			var src []indices.TreeSource
			if now.Sub(m) <= benchMinuteTreeRetention {
				kept++
				for p := range minuteTrees {
					d := indices.RollupDoc{Timestamp: m, Resolution: indices.ResolutionMinute, Kind: indices.KindPartitionTree, Type: "cpu", Partition: int32(p),
						Value: minuteTrees[p].Total(), Tree: indices.Deflate(encoded[p])}
					bulk([]querytest.Doc{querytest.Rollup(names, d)})
					src = append(src, benchVersion(b, cl, names, d))
				}
			}
			headBytes += len(minuteHead)
			minuteHeads = append(minuteHeads, querytest.Rollup(names, indices.RollupDoc{Timestamp: m, Resolution: indices.ResolutionMinute, Kind: indices.KindFleetHead,
				Type: "cpu", Value: minuteFleet.Total(), Tree: minuteHead, Sources: indices.TreeSources(src)}))
		}
		b.Logf("edge from %s: %d fleet minute heads of %d KB, %d minutes with their %d partition trees kept", edge.first.Format("15:04"),
			len(loose), len(minuteHead)>>10, kept, f.partitions)
	}
	bulk(append(heads, minuteHeads...))
	b.Logf("%d fleet window and %d minute heads, %d KB", len(heads), len(minuteHeads), headBytes>>10)
	return totals, minuteHeads
}

// benchMinuteTreeRetention is the rollup's default minute tree retention
// (STACKSTREAM_ROLLUP_MINUTE_TREE_RETENTION): older minutes keep their
// fleet heads, not their partition trees.
const benchMinuteTreeRetention = 2 * time.Hour

// BenchmarkTopDayTrees: the query service's own share of a top table of
// the fleet's UTC day (the fleet of BenchmarkFlameDayTrees) read from its
// 6 day partition trees, in memory: decoding alone, decoding and merging
// them into one tree then summing it by function (before topSums), and
// summing them by function as they decode (topSums, as /top does).
func BenchmarkTopDayTrees(b *testing.B) {
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
	var size int
	for p := range dayTrees {
		trees[p] = dayTrees[p].Encode()
		size += len(trees[p])
	}
	b.Logf("%d day trees, %d MB encoded", len(trees), size>>20)
	b.Run("decode", func(b *testing.B) {
		for b.Loop() {
			for _, t := range trees {
				if _, _, err := indices.DecodeTree(t, indices.TreeLimits{}, nopVisitor{}); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
	b.Run("merge_then_top", func(b *testing.B) { // before topSums
		for b.Loop() {
			if _, err := api.MergeTopForBench(trees, 100); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("top_sums", func(b *testing.B) {
		for b.Loop() {
			if _, err := api.TopForBench(trees, 100); err != nil {
				b.Fatal(err)
			}
		}
	})
}
