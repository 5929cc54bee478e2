package api

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"

	"github.com/stackstream/stackstream/schemas/indices"
)

// TestSums: the top table and sandwich summed from trees and stacks one by
// one (topSums, sandwichSums) equal those of the merged tree (the way they
// were computed before: a walk of the whole merge), for random stacks with
// recursion, frames of two kinds and stacks without frames, some in
// encoded trees and some as stacks.
func TestSums(t *testing.T) {
	names := []string{"main", "a", "b", "c", "rec"}
	for seed := uint64(1); seed <= 30; seed++ {
		rng := rand.New(rand.NewPCG(seed, 17))
		merged := &node{name: "total"}
		var trees [3]indices.TreeBuilder
		top, sws := newTopSums(), map[string]*sandwichSums{}
		for _, fn := range names {
			sws[fn] = newSandwichSums(fn)
		}
		type stack struct {
			v            int64
			names, kinds []string
		}
		var stacks []stack
		for i := 0; i < 200; i++ {
			depth := rng.IntN(7)
			st := stack{v: int64(1 + rng.IntN(5)), names: make([]string, depth)}
			frames := make([]indices.TreeFrame, depth)
			for d := range depth {
				st.names[d] = names[rng.IntN(len(names))]
				frames[d].Name = st.names[d]
				if rng.IntN(6) == 0 {
					if st.kinds == nil {
						st.kinds = make([]string, depth)
					}
					st.kinds[d], frames[d].Kind = "python", "python"
				}
			}
			mergeStack(merged, st.v, st.names, st.kinds)
			if k := rng.IntN(4); k < 3 {
				trees[k].Add(frames, st.v)
			} else {
				stacks = append(stacks, st)
			}
		}
		for k := range trees {
			b := trees[k].Encode()
			if err := top.tree(b); err != nil {
				t.Fatal(err)
			}
			for _, sw := range sws {
				if err := sw.tree(b); err != nil {
					t.Fatal(err)
				}
			}
		}
		for _, st := range stacks {
			top.stack(st.v, st.names, st.kinds)
			for _, sw := range sws {
				sw.stack(st.v, st.names, st.kinds)
			}
		}
		t.Run(fmt.Sprintf("seed%d", seed), func(t *testing.T) {
			if top.total != merged.total {
				t.Fatalf("total %d, want %d", top.total, merged.total)
			}
			for _, limit := range []int{1, 3, 100} {
				if got, want := top.functions(limit), walkTop(merged, limit); !reflect.DeepEqual(got, want) {
					t.Fatalf("top %d\n got %+v\nwant %+v", limit, got, want)
				}
			}
			for fn, sw := range sws {
				gotCallers, gotCallees := sw.result()
				wantCallers, wantCallees := walkSandwich(merged, fn)
				for _, side := range [][2]*node{{gotCallers, wantCallers}, {gotCallees, wantCallees}} {
					g, _ := flame(side[0], 100000)
					w, _ := flame(side[1], 100000)
					if !reflect.DeepEqual(g, w) {
						t.Fatalf("sandwich of %s: %s differs", fn, side[1].name)
					}
				}
			}
		})
	}
}

// walkTop is the top table of a merged tree, walked.
func walkTop(root *node, limit int) []Function {
	byName := map[string]*Function{}
	onPath := map[string]int{}
	var walk func(n *node)
	walk = func(n *node) {
		for _, c := range n.kids {
			f := byName[c.name]
			if f == nil {
				f = &Function{Name: c.name}
				byName[c.name] = f
			}
			f.Self += c.self
			if onPath[c.name] == 0 {
				f.Total += c.total
			}
			onPath[c.name]++
			walk(c)
			onPath[c.name]--
		}
	}
	walk(root)
	// The whole list sorted, then cut: the ranking before the heap.
	out := make([]Function, 0, len(byName))
	for _, f := range byName {
		if root.total > 0 {
			f.SelfShare = float64(f.Self) / float64(root.total)
			f.TotalShare = float64(f.Total) / float64(root.total)
		}
		out = append(out, *f)
	}
	slices.SortFunc(out, rankOrder)
	return out[:min(limit, len(out))]
}

// walkSandwich is the sandwich of fn in a merged tree, walked: the
// outermost occurrences of fn give the callers, their subtrees merged the
// callees.
func walkSandwich(root *node, fn string) (callers, callees *node) {
	callers, callees = &node{name: fn}, &node{name: fn}
	var path []*node
	var merge func(dst, src *node)
	merge = func(dst, src *node) {
		c := dst.child(src.name, src.kind)
		c.self += src.self
		c.total += src.total
		for _, k := range src.kids {
			merge(c, k)
		}
	}
	var walk func(n *node)
	walk = func(n *node) {
		if n != root && n.name == fn {
			if callers.kind == "" {
				callers.kind, callees.kind = n.kind, n.kind
			}
			callers.total += n.total
			cur := callers
			for i := len(path) - 1; i >= 1; i-- {
				cur = cur.child(path[i].name, path[i].kind)
				cur.total += n.total
			}
			cur.self += n.total
			callees.total += n.total
			callees.self += n.self
			for _, c := range n.kids {
				merge(callees, c)
			}
			return
		}
		path = append(path, n)
		for _, c := range n.kids {
			walk(c)
		}
		path = path[:len(path)-1]
	}
	walk(root)
	callers.self = callers.total
	for _, c := range callers.kids {
		callers.self -= c.total
	}
	return callers, callees
}
