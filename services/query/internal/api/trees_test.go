package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/opensearch-project/opensearch-go/v4/opensearchapi"

	"github.com/stackstream/stackstream/pkg/opensearch"
	"github.com/stackstream/stackstream/schemas/indices"
	"github.com/stackstream/stackstream/services/query/internal/api"
	"github.com/stackstream/stackstream/services/query/internal/querytest"
)

// bruteTree is the brute-force answer: every stack of the selection summed
// by path ("a;b;c") and by function.
type bruteTree struct {
	nodes     map[string][2]int64 // path -> self, total
	funcs     map[string][2]int64 // function -> self, total (once per stack)
	total     int64
	stacks    map[string]bool
	hostTotal map[string]int64
}

func newBrute() *bruteTree {
	return &bruteTree{nodes: map[string][2]int64{}, funcs: map[string][2]int64{}, stacks: map[string]bool{}, hostTotal: map[string]int64{}}
}

func (b *bruteTree) add(host string, path []string, v int64) {
	b.total += v
	b.hostTotal[host] += v
	b.stacks[strings.Join(path, ";")] = true
	seen := map[string]bool{}
	for i := range path {
		k := strings.Join(path[:i+1], ";")
		n := b.nodes[k]
		n[1] += v
		if i == len(path)-1 {
			n[0] += v
		}
		b.nodes[k] = n
		f := b.funcs[path[i]]
		if !seen[path[i]] {
			seen[path[i]] = true
			f[1] += v
		}
		if i == len(path)-1 {
			f[0] += v
		}
		b.funcs[path[i]] = f
	}
}

// checkTop fails unless top, asked for limit functions, is b's: every
// function's self and total, none truncated.
func (b *bruteTree) checkTop(t *testing.T, top api.TopResponse, limit int) {
	t.Helper()
	if top.Total != b.total || top.Truncated || len(top.Functions) != min(limit, len(b.funcs)) {
		t.Fatalf("total %d truncated %v functions %d, want %d and %d", top.Total, top.Truncated, len(top.Functions), b.total, len(b.funcs))
	}
	for _, fn := range top.Functions {
		if want := b.funcs[fn.Name]; fn.Self != want[0] || fn.Total != want[1] {
			t.Fatalf("%s: self %d total %d, want %d %d", fn.Name, fn.Self, fn.Total, want[0], want[1])
		}
	}
}

// checkDiff fails unless d's totals are b's and c's, untruncated, and
// every node of d has the shares of its path in b and c; an [other] node
// is skipped when skipOther, else it fails. It returns how many nodes it
// checked.
func checkDiff(t *testing.T, d api.DiffResponse, b, c *bruteTree, skipOther bool) int {
	t.Helper()
	if d.Truncated || d.BaseTotal != b.total || d.CompareTotal != c.total {
		t.Fatalf("totals %d %d truncated %v, want %d %d", d.BaseTotal, d.CompareTotal, d.Truncated, b.total, c.total)
	}
	checked := 0
	var walk func(n *api.DiffNode, path string)
	walk = func(n *api.DiffNode, path string) {
		for _, k := range n.Children {
			if k.Name == "[other]" && skipOther {
				continue
			}
			kp := strings.TrimPrefix(path+";"+k.Name, ";")
			wb := float64(b.nodes[kp][1]) / float64(b.total)
			wc := float64(c.nodes[kp][1]) / float64(c.total)
			if k.Name == "[other]" || k.Base != wb || k.Compare != wc {
				t.Fatalf("%s: base %v compare %v, want %v %v", kp, k.Base, k.Compare, wb, wc)
			}
			checked++
			walk(k, kp)
		}
	}
	walk(d.Root, "")
	return checked
}

// treeStack is the i-th stack of a service on a host: host-specific
// leaves under shared modules and functions, the way a fleet's stacks
// differ (stackctl loadgen mutates a recorded corpus per host likewise).
func treeStack(service, host string, i int) []string {
	return []string{"main", service + ".serve", fmt.Sprintf("mod%d", i%40), fmt.Sprintf("fn%d", i%997), fmt.Sprintf("%s.leaf%d", host, i)}
}

// TestTreesExact: a selection with more distinct stacks (56,000) than the
// old per-request limit (50,000) gives exact values for every node the
// flame graph, top table and diff show, compared with a brute-force merge
// of every stack: the whole hour is read from the rollup's trees and the
// minutes around it from the samples.
func TestTreesExact(t *testing.T) {
	cl, names := querytest.Setup(t)
	const perSeries = 7000
	services := []string{"checkout", "api"}
	hosts := []string{"h-0", "h-1", "h-2", "h-3"}
	hour := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC) // now is 12:00
	from, to := hour.Add(-20*time.Minute), hour.Add(110*time.Minute)
	const period = 52631578 // 19 Hz
	all, byHost, byService := newBrute(), map[string]*bruteTree{}, map[string]*bruteTree{}
	var docs []querytest.Doc
	var stacks []indices.RollupDoc
	var partitions [2]indices.TreeBuilder // every service, by partition
	for _, h := range hosts {
		byHost[h] = newBrute()
	}
	for _, svc := range services {
		byService[svc] = newBrute()
		// Service trees: h-0 and h-1 in partition 0, h-2 and h-3 in 1.
		var perPartition [2]indices.TreeBuilder
		for hi, h := range hosts {
			// The settled hour: the rollup's tree and stack documents.
			var b indices.TreeBuilder
			var stackSum int64
			for i := 0; i < perSeries; i++ {
				path := treeStack(svc, h, i)
				v := int64(i%13+1) * period
				frames := make([]indices.TreeFrame, len(path))
				for j, f := range path {
					frames[j] = indices.TreeFrame{Name: f}
				}
				b.Add(frames, v)
				perPartition[hi/2].Add(frames, v)
				partitions[hi/2].Add(frames, v)
				byService[svc].add(h, path, v)
				all.add(h, path, v)
				byHost[h].add(h, path, v)
				stackSum += v
				stacks = append(stacks, indices.RollupDoc{Timestamp: hour, Resolution: indices.ResolutionHour, Kind: indices.KindStack,
					Type: "cpu", Service: svc, Host: h, StackIDs: []string{fmt.Sprintf("%s-%s-%d", svc, h, i)}, Value: v})
			}
			if b.Total() != stackSum {
				t.Fatalf("builder total %d, stacks %d", b.Total(), stackSum)
			}
			// The service document says what the hour's trees add up to.
			docs = append(docs, querytest.Rollup(names, indices.RollupDoc{Timestamp: hour, Resolution: indices.ResolutionHour, Kind: indices.KindService,
				Type: "cpu", Service: svc, Host: h, Value: stackSum, StackValue: stackSum}))
			docs = append(docs, querytest.Rollup(names, indices.RollupDoc{Timestamp: hour, Resolution: indices.ResolutionHour, Kind: indices.KindTree,
				Type: "cpu", Service: svc, Host: h, Value: b.Total(), Tree: b.Encode()}))
			// The 11:00 hour is not settled at 12:00 (its tree may be there, a
			// rollup writes it once the hour is over): read from the samples.
			docs = append(docs, querytest.Rollup(names, indices.RollupDoc{Timestamp: hour.Add(time.Hour), Resolution: indices.ResolutionHour, Kind: indices.KindTree,
				Type: "cpu", Service: svc, Host: h, Value: b.Total(), Tree: b.Encode()}))
			// The edges: samples at 09:45, 11:10 and 11:40 of 300 stacks, half
			// of them the hour's; one at 09:30 outside the range.
			var samples []indices.SampleDoc
			for _, at := range []time.Time{hour.Add(-15 * time.Minute), hour.Add(70 * time.Minute), hour.Add(100 * time.Minute), hour.Add(-30 * time.Minute)} {
				for i := 0; i < 300; i++ {
					path := treeStack(svc, h, i*47%(2*perSeries))
					stackDoc, id := querytest.Stack(names, at, path...)
					docs = append(docs, stackDoc)
					v := int64(i%5+1) * period
					if !at.Before(from) {
						byService[svc].add(h, path, v)
						all.add(h, path, v)
						byHost[h].add(h, path, v)
					}
					samples = append(samples, indices.SampleDoc{Timestamp: at, Type: "cpu", Host: h, Service: svc, StackIDs: []string{id}, Value: v, Count: 1, Labels: map[string]string{"pid": svc}})
				}
			}
			docs = append(docs, querytest.Samples(names, samples...)...)
		}
		for p := range perPartition {
			docs = append(docs, querytest.Rollup(names, indices.RollupDoc{Timestamp: hour, Resolution: indices.ResolutionHour, Kind: indices.KindServiceTree,
				Type: "cpu", Service: svc, Partition: int32(p), Value: perPartition[p].Total(), Tree: perPartition[p].Encode()}))
		}
	}
	for p := range partitions {
		docs = append(docs, querytest.Rollup(names, indices.RollupDoc{Timestamp: hour, Resolution: indices.ResolutionHour, Kind: indices.KindPartitionTree,
			Type: "cpu", Partition: int32(p), Value: partitions[p].Total(), Tree: partitions[p].Encode()}))
	}
	docs = append(docs, querytest.StackRollups(names, stacks)...)
	querytest.Index(t, cl, names, docs)
	if len(all.stacks) <= 50000 {
		t.Fatalf("only %d distinct stacks", len(all.stacks))
	}
	base := serve(t, cl, names, api.Options{})
	params := url.Values{"from": {from.Format(time.RFC3339)}, "to": {to.Format(time.RFC3339)}}

	for _, maxNodes := range []int{100000, 500} {
		t.Run(fmt.Sprintf("flamegraph max_nodes=%d", maxNodes), func(t *testing.T) {
			var f api.FlamegraphResponse
			p := url.Values{"max_nodes": {fmt.Sprint(maxNodes)}}
			for k, v := range params {
				p[k] = v
			}
			get(t, base, "/api/v1/flamegraph", p, &f)
			if f.Source != "partition_trees+samples" || f.Truncated || f.Total != all.total || f.Root.Total != all.total {
				t.Fatalf("source %s truncated %v total %d root %d, want partition_trees+samples, %d", f.Source, f.Truncated, f.Total, f.Root.Total, all.total)
			}
			shown, other := checkFlame(t, all, f.Root, "")
			if shown != min(maxNodes, len(all.nodes)) || f.Folded != other || (f.Folded > 0) != (maxNodes < len(all.nodes)) {
				t.Fatalf("%d nodes shown, %d [other] nodes, folded %d, brute force has %d", shown, other, f.Folded, len(all.nodes))
			}
			t.Logf("%d distinct stacks, %d nodes: %d shown exactly, %d folded into %d exact [other] nodes", len(all.stacks), len(all.nodes), shown, len(all.nodes)-shown, other)
		})
	}

	t.Run("flamegraph of a service", func(t *testing.T) {
		var f api.FlamegraphResponse
		p := url.Values{"max_nodes": {"100000"}, "query": {`{service="checkout"}`}}
		for k, v := range params {
			p[k] = v
		}
		get(t, base, "/api/v1/flamegraph", p, &f)
		want := byService["checkout"]
		if f.Source != "service_trees+samples" || f.Truncated || f.Total != want.total {
			t.Fatalf("source %s truncated %v total %d, want service_trees+samples, %d", f.Source, f.Truncated, f.Total, want.total)
		}
		if shown, other := checkFlame(t, want, f.Root, ""); shown != len(want.nodes) || f.Folded != other || other != 0 {
			t.Fatalf("%d nodes shown, %d [other] nodes, folded %d, want %d shown and none folded", shown, other, f.Folded, len(want.nodes))
		}
	})

	t.Run("sandwich", func(t *testing.T) {
		const fn = "fn5"
		var sw api.SandwichResponse
		p := url.Values{"function": {fn}, "max_nodes": {"100000"}}
		for k, v := range params {
			p[k] = v
		}
		get(t, base, "/api/v1/sandwich", p, &sw)
		// The brute force, from every node of the merged stacks: fn's
		// occurrences (outermost only) give the callers, everything below
		// them the callees.
		callers, callees := map[string][2]int64{}, map[string][2]int64{}
		var fnTotal, fnSelf int64
		for path, v := range all.nodes {
			parts := strings.Split(path, ";")
			i := slices.Index(parts, fn)
			if i < 0 {
				continue
			}
			if i == len(parts)-1 {
				fnTotal += v[1]
				fnSelf += v[0]
				chain := slices.Clone(parts[:i])
				slices.Reverse(chain)
				for j := range chain {
					k := strings.Join(chain[:j+1], ";")
					c := callers[k]
					c[1] += v[1]
					if j == len(chain)-1 {
						c[0] += v[1]
					}
					callers[k] = c
				}
				continue
			}
			k := strings.Join(parts[i+1:], ";")
			c := callees[k]
			callees[k] = [2]int64{c[0] + v[0], c[1] + v[1]}
		}
		if sw.Truncated || sw.Callers.Total != fnTotal || sw.Callees.Total != fnTotal || sw.Callees.Self != fnSelf {
			t.Fatalf("callers %d callees %d self %d truncated %v, want %d and self %d", sw.Callers.Total, sw.Callees.Total, sw.Callees.Self, sw.Truncated, fnTotal, fnSelf)
		}
		for _, side := range []struct {
			root *api.FlameNode
			want map[string][2]int64
		}{{sw.Callers, callers}, {sw.Callees, callees}} {
			got := map[string][2]int64{}
			var walk func(n *api.FlameNode, prefix string)
			walk = func(n *api.FlameNode, prefix string) {
				for _, c := range n.Children {
					k := strings.TrimPrefix(prefix+";"+c.Name, ";")
					got[k] = [2]int64{c.Self, c.Total}
					walk(c, k)
				}
			}
			walk(side.root, "")
			if len(got) != len(side.want) {
				t.Fatalf("%s: %d nodes, want %d", side.root.Name, len(got), len(side.want))
			}
			for k, v := range side.want {
				if got[k] != v {
					t.Fatalf("%s: %v, want %v", k, got[k], v)
				}
			}
		}
	})

	t.Run("top", func(t *testing.T) {
		var top api.TopResponse
		p := url.Values{"limit": {"10000"}}
		for k, v := range params {
			p[k] = v
		}
		get(t, base, "/api/v1/top", p, &top)
		all.checkTop(t, top, 10000)
	})

	t.Run("diff", func(t *testing.T) {
		var d api.DiffResponse
		p := url.Values{"base": {`{host="h-0"}`}, "compare": {`{host="h-1"}`}, "max_nodes": {"100000"}}
		for k, v := range params {
			p[k] = v
		}
		get(t, base, "/api/v1/diff", p, &d)
		b, c := byHost["h-0"], byHost["h-1"] // from host trees
		checked := checkDiff(t, d, b, c, true)
		if checked < 1000 {
			t.Fatalf("only %d diff nodes checked", checked)
		}
	})
}

// TestTreesFallBack: service trees that do not add up to the stack
// documents (a tree left by a rollup that ran with other partitions) are
// not read: the host trees answer, exactly; and without host trees the
// selection is read per stack.
func TestTreesFallBack(t *testing.T) {
	cl, names := querytest.Setup(t)
	hour := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	all := newBrute()
	var docs []querytest.Doc
	var stacks []indices.RollupDoc
	var service indices.TreeBuilder
	for _, h := range []string{"h-0", "h-1"} {
		var b indices.TreeBuilder
		for i := 0; i < 50; i++ {
			path := treeStack("checkout", h, i)
			stackDoc, id := querytest.Stack(names, hour, path...)
			frames := make([]indices.TreeFrame, len(path))
			for j, f := range path {
				frames[j] = indices.TreeFrame{Name: f}
			}
			b.Add(frames, int64(i+1))
			service.Add(frames, int64(i+1))
			all.add(h, path, int64(i+1))
			docs = append(docs, stackDoc)
			stacks = append(stacks, indices.RollupDoc{Timestamp: hour, Resolution: indices.ResolutionHour, Kind: indices.KindStack,
				Type: "cpu", Service: "checkout", Host: h, StackIDs: []string{id}, Value: int64(i + 1)})
		}
		docs = append(docs, querytest.Rollup(names, indices.RollupDoc{Timestamp: hour, Resolution: indices.ResolutionHour, Kind: indices.KindTree,
			Type: "cpu", Service: "checkout", Host: h, Value: b.Total(), Tree: b.Encode()}),
			querytest.Rollup(names, indices.RollupDoc{Timestamp: hour, Resolution: indices.ResolutionHour, Kind: indices.KindService,
				Type: "cpu", Service: "checkout", Host: h, Value: b.Total(), StackValue: b.Total()}))
	}
	for _, p := range []int32{0, 5} { // partition 5: a stale one
		docs = append(docs, querytest.Rollup(names, indices.RollupDoc{Timestamp: hour, Resolution: indices.ResolutionHour, Kind: indices.KindServiceTree,
			Type: "cpu", Service: "checkout", Partition: p, Value: service.Total(), Tree: service.Encode()}))
	}
	docs = append(docs, querytest.StackRollups(names, stacks)...)
	querytest.Index(t, cl, names, docs)
	base := serve(t, cl, names, api.Options{})
	// 8 h: long enough for the rollups (RawMaxRange is 6 h).
	params := url.Values{"from": {hour.Add(-7 * time.Hour).Format(time.RFC3339)}, "to": {hour.Add(time.Hour).Format(time.RFC3339)}}
	var f api.FlamegraphResponse
	get(t, base, "/api/v1/flamegraph", params, &f)
	if f.Source != "trees" || f.Total != all.total {
		t.Fatalf("source %s total %d, want the host trees' %d", f.Source, f.Total, all.total)
	}
	if shown, _ := checkFlame(t, all, f.Root, ""); shown != len(all.nodes) {
		t.Fatalf("%d nodes shown, want %d", shown, len(all.nodes))
	}
	// Without the host trees: per stack, from the hour's stack rollups.
	if err := deleteKind(cl, names, indices.KindTree); err != nil {
		t.Fatal(err)
	}
	get(t, base, "/api/v1/flamegraph", params, &f)
	if f.Source != "rollups" || f.Total != all.total {
		t.Fatalf("source %s total %d, want per stack from the rollups, %d", f.Source, f.Total, all.total)
	}
	if shown, _ := checkFlame(t, all, f.Root, ""); shown != len(all.nodes) {
		t.Fatalf("%d nodes shown, want %d", shown, len(all.nodes))
	}
}

// checkFlame checks every shown node against the brute force: a named node
// by its path, an "[other]" node as what its parent's children left out.
func checkFlame(t *testing.T, all *bruteTree, n *api.FlameNode, path string) (shown, others int) {
	t.Helper()
	var childSum int64
	for _, c := range n.Children {
		if c.Name == "[other]" {
			continue
		}
		childSum += c.Total
	}
	parentSelf := n.Self
	for _, c := range n.Children {
		if c.Name == "[other]" {
			if want := n.Total - parentSelf - childSum; c.Total != want || c.Self != want || want <= 0 {
				t.Fatalf("%s: [other] %d, want %d", path, c.Total, want)
			}
			others++
			continue
		}
		cp := strings.TrimPrefix(path+";"+c.Name, ";")
		if want, ok := all.nodes[cp]; !ok || c.Self != want[0] || c.Total != want[1] {
			t.Fatalf("%s: self %d total %d, want %v", cp, c.Self, c.Total, want)
		}
		shown++
		s, o := checkFlame(t, all, c, cp)
		shown += s
		others += o
	}
	return shown, others
}

// deleteKind deletes the rollup documents of a kind.
func deleteKind(cl *opensearchapi.Client, names indices.Names, kind string) error {
	body, _ := json.Marshal(map[string]any{"query": map[string]any{"term": map[string]any{"kind": kind}}})
	status, resp, err := opensearch.Raw(context.Background(), cl, http.MethodPost, "/"+names.RollupsPattern()+"/_delete_by_query?refresh=true", body)
	if err != nil {
		return err
	}
	if status != http.StatusOK {
		return fmt.Errorf("delete %s documents: HTTP %d: %s", kind, status, resp)
	}
	return nil
}

// TestDayTrees: a fleet's whole days are read from day partition trees
// when they match their hours' versions, and from the hours when an hour
// was rewritten since (a replay with re-symbolized frames): exact either way.
func TestDayTrees(t *testing.T) {
	cl, names := querytest.Setup(t)
	day0 := time.Date(2026, 11, 27, 0, 0, 0, 0, time.UTC)
	hourTree := func(p, h int, suffix string) (indices.RollupDoc, [][]string, []int64) {
		var b indices.TreeBuilder
		var paths [][]string
		var values []int64
		for i := 0; i < 20; i++ {
			path := []string{"main", fmt.Sprintf("f%d", (h+i)%9), fmt.Sprintf("p%d.h%d.%d%s", p, h, i, suffix)}
			frames := make([]indices.TreeFrame, len(path))
			for j, f := range path {
				frames[j] = indices.TreeFrame{Name: f}
			}
			b.Add(frames, int64(i+1))
			paths, values = append(paths, path), append(values, int64(i+1))
		}
		return indices.RollupDoc{Timestamp: day0.Add(time.Duration(h) * time.Hour), Resolution: indices.ResolutionHour, Kind: indices.KindPartitionTree,
			Type: "cpu", Partition: int32(p), Value: b.Total(), Tree: b.Encode()}, paths, values
	}
	brute := func(rewritten int) *bruteTree {
		all := newBrute()
		for p := 0; p < 2; p++ {
			for h := 0; h < 48; h++ {
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
	// The day trees, as the rollup's compactor writes them: the hours'
	// versions read back, their trees merged.
	docs = docs[:0]
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
			}
			docs = append(docs, querytest.Rollup(names, indices.RollupDoc{Timestamp: day0.Add(time.Duration(d) * 24 * time.Hour), Resolution: indices.ResolutionDay,
				Kind: indices.KindPartitionTree, Type: "cpu", Partition: int32(p), Value: b.Total(), Tree: b.Encode(), Sources: indices.TreeSources(src)}))
		}
	}
	querytest.Index(t, cl, names, docs)
	base := serve(t, cl, names, api.Options{})
	params := url.Values{"from": {day0.Format(time.RFC3339)}, "to": {day0.Add(48 * time.Hour).Format(time.RFC3339)}, "max_nodes": {"100000"}}
	check := func(wantSource string, all *bruteTree) {
		t.Helper()
		var f api.FlamegraphResponse
		get(t, base, "/api/v1/flamegraph", params, &f)
		if f.Source != wantSource || f.Total != all.total {
			t.Fatalf("source %s total %d, want %s %d", f.Source, f.Total, wantSource, all.total)
		}
		if shown, _ := checkFlame(t, all, f.Root, ""); shown != len(all.nodes) {
			t.Fatalf("%d nodes shown, want %d", shown, len(all.nodes))
		}
	}
	check("partition_trees(days)", brute(-1))
	// Hour 30 (the second day) of partition 1 rewritten with other names:
	// that day's tree is stale, its hours answer; the first day's tree
	// still does.
	d, _, _ := hourTree(1, 30, "-resymbolized")
	querytest.Index(t, cl, names, []querytest.Doc{querytest.Rollup(names, d)})
	check("partition_trees(days)", brute(30))
	// Both days stale: hours only.
	d, _, _ = hourTree(1, 5, "")
	querytest.Index(t, cl, names, []querytest.Doc{querytest.Rollup(names, d)}) // same content, new version
	check("partition_trees", brute(30))
}

// version reads an indexed rollup document's _seq_no and _primary_term.
func version(t *testing.T, cl *opensearchapi.Client, names indices.Names, d indices.RollupDoc) indices.TreeSource {
	t.Helper()
	id := indices.RollupID(&d)
	status, resp, err := opensearch.Raw(context.Background(), cl, http.MethodGet, "/"+names.Rollups(d.Timestamp)+"/_doc/"+id, nil)
	if err != nil || status != http.StatusOK {
		t.Fatalf("get %s: %d %v %s", id, status, err, resp)
	}
	var out struct {
		SeqNo       int64 `json:"_seq_no"`
		PrimaryTerm int64 `json:"_primary_term"`
	}
	if err := json.Unmarshal(resp, &out); err != nil {
		t.Fatal(err)
	}
	return indices.TreeSource{ID: id, SeqNo: out.SeqNo, PrimaryTerm: out.PrimaryTerm}
}

// TestFleetHead: a fleet day's flame graph with max_nodes up to what the
// day's fleet head keeps is read from the head alone, and is the flame
// graph the hour trees give (same nodes, values, "[other]" values and
// their count); a larger max_nodes, a head older than an hour tree, a selector
// naming a field or a range other than the whole day read the trees.
func TestFleetHead(t *testing.T) {
	cl, names := querytest.Setup(t)
	day := time.Date(2026, 11, 26, 0, 0, 0, 0, time.UTC)
	all := newBrute()
	var docs []querytest.Doc
	var hourDocs []indices.RollupDoc
	var fleet indices.TreeBuilder
	for p := 0; p < 2; p++ {
		for h := 0; h < 24; h++ {
			var b indices.TreeBuilder
			for i := 0; i < 12; i++ {
				path := []string{"main", fmt.Sprintf("f%d", (h+i)%5), fmt.Sprintf("g%d", i%4), fmt.Sprintf("p%d.h%d.%d", p, h, i)}
				frames := make([]indices.TreeFrame, len(path))
				for j, f := range path {
					frames[j] = indices.TreeFrame{Name: f}
				}
				v := int64(i%3 + 1) // equal values: ties at the cut
				b.Add(frames, v)
				fleet.Add(frames, v)
				all.add("", path, v)
			}
			d := indices.RollupDoc{Timestamp: day.Add(time.Duration(h) * time.Hour), Resolution: indices.ResolutionHour, Kind: indices.KindPartitionTree,
				Type: "cpu", Partition: int32(p), Value: b.Total(), Tree: b.Encode()}
			hourDocs = append(hourDocs, d)
			docs = append(docs, querytest.Rollup(names, d), querytest.Rollup(names, indices.RollupDoc{Timestamp: d.Timestamp, Resolution: indices.ResolutionHour,
				Kind: indices.KindService, Type: "cpu", Service: "s", Host: fmt.Sprintf("h-%d", p), Value: d.Value, StackValue: d.Value}))
		}
	}
	querytest.Index(t, cl, names, docs)
	const kept = 30
	writeHead := func() {
		t.Helper()
		var src []indices.TreeSource
		for _, d := range hourDocs {
			src = append(src, version(t, cl, names, d))
		}
		querytest.Index(t, cl, names, []querytest.Doc{querytest.Rollup(names, indices.RollupDoc{Timestamp: day, Resolution: indices.ResolutionDay,
			Kind: indices.KindFleetHead, Type: "cpu", Value: fleet.Total(), Tree: fleet.EncodeHead(kept), Sources: indices.TreeSources(src)})})
	}
	writeHead()
	base := serve(t, cl, names, api.Options{})
	flameOf := func(maxNodes int, query, from, to string) api.FlamegraphResponse {
		t.Helper()
		params := url.Values{"from": {from}, "to": {to}, "max_nodes": {strconv.Itoa(maxNodes)}, "query": {query}}
		var f api.FlamegraphResponse
		get(t, base, "/api/v1/flamegraph", params, &f)
		if f.Total != all.total {
			t.Fatalf("max_nodes %d: total %d, want %d", maxNodes, f.Total, all.total)
		}
		if shown, other := checkFlame(t, all, f.Root, ""); shown != min(maxNodes, len(all.nodes)) || f.Folded != other {
			t.Fatalf("max_nodes %d: %d nodes shown, %d [other] nodes, folded %d", maxNodes, shown, other, f.Folded)
		}
		return f
	}
	from, to := day.Format(time.RFC3339), day.Add(24*time.Hour).Format(time.RFC3339)
	fromHead := map[int]api.FlamegraphResponse{}
	for _, max := range []int{1, 7, 12, kept} {
		f := flameOf(max, "", from, to)
		if f.Source != "fleet_head" || f.Folded == 0 {
			t.Fatalf("max_nodes %d: source %s, %d folded; want fleet_head, some", max, f.Source, f.Folded)
		}
		fromHead[max] = f
	}
	if f := flameOf(kept+1, "", from, to); f.Source == "fleet_head" {
		t.Fatalf("max_nodes %d answered from a head of %d nodes", kept+1, kept)
	}
	// No stack or service tree documents: only the source is checked.
	var sel api.FlamegraphResponse
	get(t, base, "/api/v1/flamegraph", url.Values{"from": {from}, "to": {to}, "max_nodes": {"7"}, "query": {`{service="s"}`}}, &sel)
	if sel.Source == "fleet_head" {
		t.Fatal("a selector naming a service answered from the fleet head")
	}
	if f := flameOf(7, "", from, day.Add(25*time.Hour).Format(time.RFC3339)); f.Source == "fleet_head" {
		t.Fatal("25 h answered from the fleet head")
	}
	// An hour rewritten (same content, a new version): the head is stale
	// and the hour trees answer, with the same flame graphs.
	querytest.Index(t, cl, names, []querytest.Doc{querytest.Rollup(names, hourDocs[5])})
	for max, want := range fromHead {
		got := flameOf(max, "", from, to)
		if got.Source != "partition_trees" || got.Folded != want.Folded || !reflect.DeepEqual(got.Root, want.Root) {
			t.Fatalf("max_nodes %d from %s: folded %d, want %d; the trees differ from the head's", max, got.Source, got.Folded, want.Folded)
		}
	}
	writeHead()
	if f := flameOf(7, "", from, to); f.Source != "fleet_head" {
		t.Fatalf("source %s after the head was rewritten", f.Source)
	}
}
