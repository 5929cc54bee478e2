package api

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stackstream/stackstream/schemas/indices"
)

// TestProveTopTables: random stacks (shared heavy leaves, leaves of one
// piece, recursion) split between 2-8 trees, summed as function tables
// listing 1 to all of their functions, and a few stacks summed exactly
// (the edges); for limits 1 to all, every top table proven equals the
// brute-force top of every stack, and some are refused. It fails when
// the bound of a function some tables left out is dropped from the proof
// (a function heavier than the last one shown, left out by one table, is
// then missed).
func TestProveTopTables(t *testing.T) {
	proven, refused := 0, 0
	for seed := uint64(1); seed <= 40; seed++ {
		rng := rand.New(rand.NewPCG(seed, 5))
		all := newTopSums()
		tt := &topTables{exact: newTopSums()}
		pieces := 2 + rng.IntN(7)
		trees := make([]indices.TreeBuilder, pieces)
		for i := 0; i < 300; i++ {
			depth := 1 + rng.IntN(5)
			names := make([]string, depth)
			for d := range names {
				names[d] = fmt.Sprintf("f%d", rng.IntN(6))
			}
			p := rng.IntN(pieces + 1)
			switch rng.IntN(3) {
			case 0:
				names[depth-1] = fmt.Sprintf("shared%d", rng.IntN(8))
			case 1:
				names[depth-1] = fmt.Sprintf("own%d.%d", p, rng.IntN(20))
			}
			v := int64(1 + rng.IntN(9))
			all.stack(v, names, nil)
			if p == pieces {
				tt.exact.stack(v, names, nil)
				continue
			}
			frames := make([]indices.TreeFrame, depth)
			for d, n := range names {
				frames[d].Name = n
			}
			trees[p].Add(frames, v)
		}
		for p := range trees {
			fns, err := indices.TreeFunctions(trees[p].Encode(), indices.TreeLimits{})
			if err != nil {
				t.Fatal(err)
			}
			keep := 1 + rng.IntN(len(fns.Kept)+2)
			if err := tt.table(fns.Encode(keep)); err != nil {
				t.Fatal(err)
			}
		}
		n := len(all.byName)
		for _, limit := range []int{1, 2, 3, 5, 8, 13, n - 1, n, n + 3} {
			if limit < 1 {
				continue
			}
			got, total, ok := tt.prove(limit)
			if !ok {
				refused++
				continue
			}
			proven++
			want := all.functions(limit)
			if total != all.total || !slices.Equal(got, want) {
				t.Fatalf("seed %d limit %d: proven\n%v\ntotal %d, want\n%v\ntotal %d", seed, limit, got, total, want, all.total)
			}
		}
	}
	t.Logf("%d top tables proven, %d refused", proven, refused)
	if proven == 0 || refused == 0 {
		t.Fatalf("%d proven, %d refused: the cases do not exercise the proof", proven, refused)
	}
}
