package api

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/stackstream/stackstream/schemas/indices"
)

// TestFlameFromHead: the flame graph of a head equals the flame graph of
// its whole tree for every max_nodes up to the head's size (same nodes,
// same values, same "[other]" values, same folded count), on trees with
// many equal totals, so ties at the cut are decided as keepHeaviest does.
func TestFlameFromHead(t *testing.T) {
	for seed := uint64(1); seed <= 4; seed++ {
		rng := rand.New(rand.NewPCG(seed, 7))
		var b indices.TreeBuilder
		full := &node{name: "total"}
		names := []string{"main", "run", "a", "b", "c", "d", "e", "f"}
		kinds := []string{"", "", "", "python"}
		for i := 0; i < 400; i++ {
			path := make([]indices.TreeFrame, 1+rng.IntN(6))
			for d := range path {
				path[d] = indices.TreeFrame{Name: names[rng.IntN(len(names))], Kind: kinds[rng.IntN(len(kinds))]}
			}
			v := int64(1 + rng.IntN(3)) // few distinct values: many ties
			b.Add(path, v)
			n := full
			full.total += v
			for _, f := range path {
				n = n.child(f.Name, f.Kind)
				n.total += v
			}
			n.self += v
		}
		all := countNodes(full)
		for _, keep := range []int{1, 5, 40, 200, all} {
			m, kept, err := decodeHead(b.EncodeHead(keep))
			if err != nil {
				t.Fatal(err)
			}
			if m.nodes != all || kept != min(keep, all) {
				t.Fatalf("seed %d head of %d: %d nodes of %d kept, want %d of %d", seed, keep, kept, m.nodes, min(keep, all), all)
			}
			for _, max := range []int{1, 2, 3, 7, 20, 40, 199, 200, all} {
				if max > kept {
					continue
				}
				t.Run(fmt.Sprintf("seed%d/head%d/max%d", seed, keep, max), func(t *testing.T) {
					want, wantFolded := flame(full, max)
					got, gotFolded := flameOf(m.root, max, m.allNodes())
					if gotFolded != wantFolded || !reflect.DeepEqual(got, want) {
						t.Fatalf("folded %d, want %d; trees differ", gotFolded, wantFolded)
					}
				})
			}
		}
	}
}
