package api

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/stackstream/stackstream/schemas/indices"
)

// TestProveKeep: merges of heads of random hours (heads of several sizes,
// some hours as whole trees, as an hour without a head or an edge is read)
// prove a flame graph only when it is the flame graph of the merged whole
// trees: the same nodes in the same order, the same self, total and
// "[other]" values, the same folded count. The hours share heavy paths and
// add light ones, with few distinct values, so ties at every cut are
// common; many proofs must succeed, and every one is checked.
func TestProveKeep(t *testing.T) {
	proven, refused := 0, 0
	for seed := uint64(1); seed <= 40; seed++ {
		rng := rand.New(rand.NewPCG(seed, 15))
		full, pieces := randomHours(rng, 2+rng.IntN(10), "h")
		all := countNodes(full)
		headSize := []int{10, 40, 120, 100000}[rng.IntN(4)]
		pm := mergePieces(t, rng, pieces, headSize)
		for _, max := range []int{1, 2, 5, 10, 20, 40, 80, all, all + 1} {
			keep, ok := proveKeep(pm.root, max)
			if !ok {
				refused++
				continue
			}
			proven++
			t.Run(fmt.Sprintf("seed%d/head%d/max%d", seed, headSize, max), func(t *testing.T) {
				want, wantFolded := flame(full, max)
				got, gotFolded := flameKept(pm.root, keep)
				if gotFolded != wantFolded || !reflect.DeepEqual(got, want) {
					t.Fatalf("folded %d, want %d; trees differ", gotFolded, wantFolded)
				}
			})
		}
	}
	t.Logf("%d flame graphs proven from heads and equal to the whole trees', %d refused", proven, refused)
	if proven < 50 {
		t.Fatalf("only %d flame graphs proven of %d", proven, proven+refused)
	}
}

// randomHours are hours of random stacks, as pieces to merge and merged
// whole (full): they share heavy paths and add light ones named after tag
// and the hour, with few distinct values, so ties at every cut are common.
func randomHours(rng *rand.Rand, hours int, tag string) (full *node, pieces []indices.TreeBuilder) {
	names := []string{"main", "run", "a", "b", "c", "d", "e", "f", "g"}
	kinds := []string{"", "", "", "python"}
	randPath := func(depth int) []indices.TreeFrame {
		path := make([]indices.TreeFrame, depth)
		for d := range path {
			path[d] = indices.TreeFrame{Name: names[rng.IntN(len(names))], Kind: kinds[rng.IntN(len(kinds))]}
		}
		return path
	}
	shared := make([][]indices.TreeFrame, 30)
	for i := range shared {
		shared[i] = randPath(1 + rng.IntN(4))
	}
	full = &node{name: "total"}
	add := func(b *indices.TreeBuilder, path []indices.TreeFrame, v int64) {
		b.Add(path, v)
		n := full
		full.total += v
		for _, f := range path {
			n = n.child(f.Name, f.Kind)
			n.total += v
		}
		n.self += v
	}
	for h := 0; h < hours; h++ {
		var b indices.TreeBuilder
		for _, p := range shared {
			if rng.IntN(4) > 0 {
				add(&b, p, int64(10*(1+rng.IntN(3))))
			}
		}
		for i := 0; i < 60; i++ {
			path := append(randPath(1+rng.IntN(3)), indices.TreeFrame{Name: fmt.Sprintf("leaf.%s%d.%d", tag, h, rng.IntN(20))})
			add(&b, path, int64(1+rng.IntN(2)))
		}
		if rng.IntN(8) == 0 {
			add(&b, nil, 3) // a stack without frames: the root's self
		}
		pieces = append(pieces, b)
	}
	return full, pieces
}

// mergePieces merges the pieces as heads of headSize nodes, one in five as
// a whole tree (an hour without a head, an edge), and bounds the merge.
func mergePieces(t *testing.T, rng *rand.Rand, pieces []indices.TreeBuilder, headSize int) *pieceMerge {
	t.Helper()
	pm := newPieceMerge()
	for h := range pieces {
		var err error
		if rng.IntN(5) == 0 {
			err = pm.merge(pieces[h].Encode())
		} else {
			err = pm.mergeHead(pieces[h].EncodeHead(headSize))
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	pm.bound()
	return pm
}

// TestProveDiff: diffs of two merges of random hours' heads (or of a merge
// of heads and a whole tree) are proven only when they are the diff of the
// whole trees: the same union nodes in the same order, the same shares and
// "[other]" shares, the same folded count.
func TestProveDiff(t *testing.T) {
	proven, refused := 0, 0
	for seed := uint64(1); seed <= 40; seed++ {
		rng := rand.New(rand.NewPCG(seed, 16))
		fullB, piecesB := randomHours(rng, 2+rng.IntN(8), "b")
		fullC, piecesC := randomHours(rng, 2+rng.IntN(8), "c")
		headSize := []int{10, 40, 120, 100000}[rng.IntN(4)]
		b := mergePieces(t, rng, piecesB, headSize)
		var c *node
		if rng.IntN(4) == 0 {
			c = fullC // a side without heads: its whole tree
		} else {
			c = mergePieces(t, rng, piecesC, headSize).root
		}
		all := countNodes(newDiffUnion(fullB, fullC).root)
		for _, max := range []int{1, 2, 5, 10, 20, 40, 80, all, all + 1} {
			d := newDiffUnion(b.root, c)
			keep, ok := d.prove(max)
			if !ok {
				refused++
				continue
			}
			proven++
			t.Run(fmt.Sprintf("seed%d/head%d/max%d", seed, headSize, max), func(t *testing.T) {
				want, wantFolded := diffTree(fullB, fullC, max)
				got, gotFolded := d.convert(keep)
				if gotFolded != wantFolded || !reflect.DeepEqual(got, want) {
					t.Fatalf("folded %d, want %d; diffs differ", gotFolded, wantFolded)
				}
			})
		}
	}
	t.Logf("%d diffs proven from heads and equal to the whole trees', %d refused", proven, refused)
	if proven < 50 {
		t.Fatalf("only %d diffs proven of %d", proven, proven+refused)
	}
}

// TestProveKeepRefuses: a node every head left out, light in each hour but
// heavier than a kept node once the hours are summed, is in the merged
// trees' flame graph and in no head: the proof must refuse, and a whole
// tree for one of the hours does not change that.
func TestProveKeepRefuses(t *testing.T) {
	for _, wholeHour := range []bool{false, true} {
		t.Run(fmt.Sprintf("whole_hour_%v", wholeHour), func(t *testing.T) {
			pm := newPieceMerge()
			for h := 0; h < 10; h++ {
				var b indices.TreeBuilder
				b.Add([]indices.TreeFrame{{Name: "main"}, {Name: fmt.Sprintf("only.h%d", h)}}, 20)
				b.Add([]indices.TreeFrame{{Name: "main"}, {Name: "everywhere"}}, 9)
				b.Add([]indices.TreeFrame{{Name: "main"}, {Name: "big"}}, 100)
				enc := b.EncodeHead(3) // main, big, only.hN: "everywhere" left out
				var err error
				if wholeHour && h == 0 {
					err = pm.merge(b.Encode())
				} else {
					err = pm.mergeHead(enc)
				}
				if err != nil {
					t.Fatal(err)
				}
			}
			pm.bound()
			// The trees' third node is "everywhere" (90), not an only.hN (20).
			if _, ok := proveKeep(pm.root, 3); ok {
				t.Fatal("a flame graph missing a node all heads left out was proven")
			}
			if keep, ok := proveKeep(pm.root, 2); !ok || len(keep) != 2 {
				t.Fatal("main and big are not proven")
			}
		})
	}
}
