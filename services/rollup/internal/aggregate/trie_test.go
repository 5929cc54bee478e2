package aggregate

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stackstream/stackstream/schemas/indices"
)

// TestFrameTrieRandom: random stacks over few frames (deep shared
// prefixes, stacks that extend or stop inside others, in any order) read
// back as inserted, one node per distinct stack, one node per distinct
// prefix, cost what insert adds, and a mapped branch only where
// a stack leaves the nodes directly following its known part.
func TestFrameTrieRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	table := newFrameTable()
	for round := range 20 {
		tr := newFrameTrie()
		byStack := map[string]int32{}
		prefixes := map[string]bool{}
		var stacks [][]indices.Frame
		for range 2000 {
			var st []indices.Frame
			if len(stacks) > 0 && rng.IntN(3) == 0 {
				// A stack of before, cut or extended at its leaf.
				st = slices.Clone(stacks[rng.IntN(len(stacks))])
				if rng.IntN(2) == 0 && len(st) > 0 {
					st = st[rng.IntN(len(st)):]
				}
			}
			for range rng.IntN(6) {
				st = append([]indices.Frame{{Function: fmt.Sprintf("f%d", rng.IntN(4+round))}}, st...)
			}
			stacks = append(stacks, st)
			frames, _ := table.stackFrames(st)
			want := tr.cost(frames)
			// cost counts a frame new to the trie at each of its places
			// in the stack (a bound); exact when none is new.
			known := true
			for _, f := range st {
				if _, ok := tr.lookup(trieFrame(f)); !ok {
					known = false
				}
			}
			node, added := tr.insert(frames)
			if added > want || known && added != want {
				t.Fatalf("round %d: cost %d, insert added %d", round, want, added)
			}
			key := fmt.Sprint(st)
			if n, ok := byStack[key]; ok && n != node {
				t.Fatalf("round %d: stack %s at node %d and %d", round, key, n, node)
			}
			byStack[key] = node
			for i := range st {
				prefixes[fmt.Sprint(st[i:])] = true
			}
			got := tr.appendFrames(nil, node)
			if len(got) != len(st) {
				t.Fatalf("round %d: read back %v, want %v", round, got, st)
			}
			for i := range st {
				if got[i].Function != st[i].Function {
					t.Fatalf("round %d: read back %v, want %v", round, got, st)
				}
			}
		}
		if len(tr.nodes) != 1+len(prefixes) {
			t.Errorf("round %d: %d nodes for %d distinct prefixes", round, len(tr.nodes)-1, len(prefixes))
		}
		// Distinct stacks, distinct nodes.
		seen := map[int32]string{}
		for key, n := range byStack {
			if other, ok := seen[n]; ok {
				t.Fatalf("round %d: stacks %s and %s at node %d", round, key, other, n)
			}
			seen[n] = key
		}
		// Every branch is a node not directly after its parent, and every
		// such node is a branch.
		branches := 0
		for n := 1; n < len(tr.nodes); n++ {
			nd := tr.nodes[n]
			_, mapped := tr.branches[nd]
			if mapped != (int(nd.parent) != n-1) {
				t.Fatalf("round %d: node %d (parent %d) mapped %v", round, n, nd.parent, mapped)
			}
			if mapped {
				branches++
			}
		}
		if branches != len(tr.branches) || branches > len(byStack) {
			t.Errorf("round %d: %d branches mapped, %d found, %d stacks", round, len(tr.branches), branches, len(byStack))
		}
	}
}
