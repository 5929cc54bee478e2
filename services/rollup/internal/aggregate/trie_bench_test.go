package aggregate

import (
	"encoding/base64"
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"
	"time"

	"github.com/stackstream/stackstream/schemas/indices"
)

// BenchmarkTrieInsert inserts stacks new to an hour's trie that already
// holds trieBenchHeld stacks, as loadgen's fleet brings them (about 19 new
// stacks a profile into a trie of hundreds of thousands of nodes in the
// pipeline bench's part A): stacks 10 to 40 frames deep of 5 services'
// functions, each a base stack of its service with its leaf-most 1 to 4
// frames drawn again, and a host's own leaf on one in five. BenchmarkFleet
// does not reach this path: its stacks are all in the trie after the
// first minute.
func BenchmarkTrieInsert(b *testing.B) {
	const trieBenchHeld = 100_000
	stacks := trieBenchStacks(trieBenchHeld + 50_000)
	held, fresh := stacks[:trieBenchHeld], stacks[trieBenchHeld:]
	fill := func() *frameTrie {
		t := newFrameTrie()
		for _, s := range held {
			t.insert(s.frames)
		}
		return t
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	t := fill()
	runtime.GC()
	runtime.ReadMemStats(&after)
	// What the filled trie holds, by the heap after a collection: its
	// frames, nodes and maps, per node (reported last: ResetTimer drops
	// metrics reported before it).
	nodes, heldBytes := len(t.nodes), float64(int64(after.HeapAlloc)-int64(before.HeapAlloc))/float64(len(t.nodes))
	b.ReportAllocs()
	b.ResetTimer()
	var cpu time.Duration
	start := cpuTime()
	for i := 0; b.Loop(); i++ {
		if i%len(fresh) == 0 && i > 0 {
			b.StopTimer()
			cpu += cpuTime() - start
			t = fill()
			start = cpuTime()
			b.StartTimer()
		}
		s := fresh[i%len(fresh)]
		t.insert(s.frames)
	}
	cpu += cpuTime() - start
	b.ReportMetric(float64(cpu)/float64(b.N), "cpu-ns/stack")
	b.ReportMetric(float64(nodes), "nodes")
	b.ReportMetric(heldBytes, "held-B/node")
}

type benchStack struct {
	id     string
	key    stackKey
	frames stackFrames
}

func trieBenchStacks(n int) []benchStack {
	rng := rand.New(rand.NewPCG(5, 6))
	const services, bases, functions = 5, 400, 3000
	names := make([][]string, services)
	for s := range names {
		for i := range functions {
			names[s] = append(names[s], fmt.Sprintf("github.com/acme/svc%d/pkg%d.(*Server).handle%d", s, i%40, i))
		}
	}
	base := make([][][]string, services)
	for s := range base {
		for range bases {
			var st []string // root first
			for range 10 + rng.IntN(31) {
				st = append(st, names[s][rng.IntN(functions/10)])
			}
			base[s] = append(base[s], st)
		}
	}
	out := make([]benchStack, 0, n)
	table := newFrameTable()
	for range n {
		s := rng.IntN(services)
		st := base[s][rng.IntN(bases)]
		cut := max(len(st)-1-rng.IntN(4), 1)
		frames := make([]indices.Frame, 0, len(st)+1)
		if rng.IntN(5) == 0 {
			frames = append(frames, indices.Frame{Function: fmt.Sprintf("host%d.only%d", rng.IntN(200), rng.IntN(20))})
		}
		for range len(st) - cut {
			frames = append(frames, indices.Frame{Function: names[s][rng.IntN(functions)], File: "x.go", Line: int64(rng.IntN(500))})
		}
		for i := cut - 1; i >= 0; i-- {
			frames = append(frames, indices.Frame{Function: st[i], File: "x.go", Line: 10})
		}
		ids, _ := table.stackFrames(frames)
		id := indices.StackID(frames)
		var key stackKey
		if _, err := base64.RawURLEncoding.Decode(key[:], []byte(id)); err != nil {
			panic(err)
		}
		out = append(out, benchStack{id: id, key: key, frames: ids})
	}
	return out
}
