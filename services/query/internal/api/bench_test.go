package api

import (
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"testing"
)

// benchStacks is a selection like the benchmark fleet's: 3000 stacks of
// depth 8-24 over 10 services' function pools.
func benchStacks() (map[string]int64, map[string][]string) {
	rng := rand.New(rand.NewPCG(1, 2))
	values := map[string]int64{}
	frames := map[string][]string{}
	for i := 0; i < 3000; i++ {
		svc := i % 10
		f := []string{"runtime.main", "main.main"}
		for d := 6 + rng.IntN(16); d > 0; d-- {
			f = append(f, fmt.Sprintf("svc%d/pkg%d.Func%d", svc, rng.IntN(12), rng.IntN(80)))
		}
		id := fmt.Sprint(i)
		values[id] = int64(1 + rng.IntN(1e9))
		frames[id] = f
	}
	return values, frames
}

// BenchmarkFlamegraphAnswer is the API's own work for a flame graph of 3000
// stacks: merge, prune to 5000 nodes, encode (OpenSearch time excluded).
func BenchmarkFlamegraphAnswer(b *testing.B) {
	values, frames := benchStacks()
	b.ReportAllocs()
	for b.Loop() {
		root, _ := flame(buildTree(values, frames, nil), 5000)
		if err := json.NewEncoder(io.Discard).Encode(root); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkTopFunctions(b *testing.B) {
	values, frames := benchStacks()
	b.ReportAllocs()
	for b.Loop() {
		topFunctions(values, frames, 1, 100)
	}
}
