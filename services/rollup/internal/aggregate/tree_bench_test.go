package aggregate

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stackstream/stackstream/schemas/indices"
	"github.com/stackstream/stackstream/schemas/record"
)

// treeBenchState is one partition's share of the pipeline bench's part A
// fleet (200 hosts, 68,536 distinct stacks, 6 partitions): hosts hosts,
// each running stacksPerHost of trieBenchStacks' stacks (drawn from a
// pool, so hosts share most of them), in an hour window, its 10-minute
// window and a minute window, as Add leaves them (every stack in the
// hour's trie, the minute's documents with their nodes, the 10-minute
// window's values by node).
func treeBenchState(hosts, stacksPerHost, pool int) (p *Partition, hour, ten, minute *window) {
	cfg := testConfig()
	// The service's default: no window heads (minute trees on).
	cfg.HeadMinNodes = math.MaxInt
	p = NewPartition(cfg, Checkpoint{})
	stacks := trieBenchStacks(pool)
	start := t0.UnixNano()
	hour = &window{key: windowKey{indices.ResolutionHour, start}, series: map[seriesKey]*series{}, serviceTrees: map[serviceKey]*docState{}, trie: newFrameTrie(), table: newStackTable()}
	ten = &window{key: windowKey{indices.ResolutionTenMinutes, start}, series: map[seriesKey]*series{}, serviceTrees: map[serviceKey]*docState{}, trie: hour.trie, table: hour.table}
	minute = &window{key: windowKey{indices.ResolutionMinute, start}, series: map[seriesKey]*series{}, serviceTrees: map[serviceKey]*docState{}, trie: hour.trie, table: hour.table}
	typ := string(record.ProfileCPU)
	values := &nodeValues{}
	ten.values = map[string]*nodeValues{typ: values}
	rng := rand.New(rand.NewPCG(7, 8))
	for h := range hosts {
		k := seriesKey{kind: indices.KindStack, typ: typ, service: fmt.Sprintf("svc-%d", h%5), host: fmt.Sprintf("host-%d", h)}
		hs := &series{stack: true, stacks: map[int32]int64{}, tree: &docState{}}
		ms := &series{stack: true, stacks: map[int32]int64{}}
		for range stacksPerHost {
			// Skewed: a few stacks run on most hosts.
			s := stacks[int(float64(pool)*rng.Float64()*rng.Float64())]
			n, isNew := hour.table.number(s.key)
			if isNew {
				hour.table.stacks[n].node, _ = hour.trie.insert(s.frames)
			}
			v := int64(1+rng.IntN(50)) * 52631578
			for _, ws := range []*series{hs, ms} {
				ws.stacks[n] += v
				ws.sums.a += v
				ws.sums.b++
			}
			values.add(hour.table.stacks[n].node, v)
		}
		hour.series[k], minute.series[k] = hs, ms
		hour.serviceTrees[serviceKey{indices.KindServiceTree, typ, k.service}] = &docState{}
	}
	hour.serviceTrees[serviceKey{indices.KindPartitionTree, typ, ""}] = &docState{}
	for _, w := range []*window{ten, minute} {
		w.serviceTrees[serviceKey{indices.KindPartitionTree, typ, ""}] = &docState{}
	}
	return p, hour, ten, minute
}

// BenchmarkTrees builds and encodes the trees of treeBenchState's windows
// as a flush does: a 10-minute and a minute partition tree (with minute
// trees on, every minute builds one per partition and type), and an
// hour's host, service and partition trees (with the partition tree's
// function table). 33 hosts of 2,000 stacks each from 60,000: about one
// partition of part A.
func BenchmarkTrees(b *testing.B) {
	p, hour, ten, minute := treeBenchState(33, 2000, 60_000)
	start := time.Unix(0, hour.key.start).UTC()
	index := p.cfg.Names.Rollups(start)
	k := serviceKey{indices.KindPartitionTree, string(record.ProfileCPU), ""}
	for _, bc := range []struct {
		name  string
		build func() []Pending
	}{
		{"window=10m", func() []Pending { return p.appendPartTree(nil, ten, start, index, k, ten.serviceTrees[k]) }},
		{"window=1m", func() []Pending { return p.appendPartTree(nil, minute, start, index, k, minute.serviceTrees[k]) }},
		{"window=1h", func() []Pending {
			var out []Pending
			for sk, ws := range hour.series {
				out = append(out, p.treePending(hour, start, index, sk, ws))
			}
			for tk, ds := range hour.serviceTrees {
				out = p.appendServiceTree(out, hour, start, index, tk, ds)
			}
			return out
		}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			docs := 0
			b.ReportAllocs()
			cpu := cpuTime()
			for b.Loop() {
				out := bc.build()
				docs = len(out)
			}
			b.ReportMetric(float64(cpuTime()-cpu)/float64(b.N)/1e6, "cpu-ms/op")
			b.ReportMetric(float64(docs), "docs/op")
		})
	}
	nodes, _ := hour.trie.counts()
	b.Logf("trie nodes %d", nodes)
}
