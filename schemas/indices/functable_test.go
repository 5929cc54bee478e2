package indices

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestFunctionTable: a tree's function table equals the sums of its
// stacks (self at the leaf, total once per stack however often the
// function recurs), in rank order; encoded with every keep it decodes to
// the first keep functions and bounds every function left out.
func TestFunctionTable(t *testing.T) {
	for seed := range 30 {
		r := rand.New(rand.NewPCG(uint64(seed), 7))
		var b TreeBuilder
		want := map[string]*TableFunction{}
		var total int64
		for range 200 {
			n := 1 + r.IntN(6)
			path := make([]TreeFrame, n)
			for i := range path {
				path[i] = TreeFrame{Name: fmt.Sprintf("f%d", r.IntN(15))}
				if r.IntN(4) == 0 {
					path[i].Kind = "kernel" // the same name of another kind is the same function
				}
			}
			v := int64(r.IntN(5)) * 3
			b.Add(path, v)
			total += v
			seen := map[string]bool{}
			for i, f := range path {
				w := want[f.Name]
				if w == nil {
					w = &TableFunction{Name: f.Name}
					want[f.Name] = w
				}
				if !seen[f.Name] {
					w.Total += v
					seen[f.Name] = true
				}
				if i == n-1 {
					w.Self += v
				}
			}
		}
		tree := b.Encode()
		got, err := TreeFunctions(tree, TreeLimits{})
		if err != nil {
			t.Fatal(err)
		}
		var all []TableFunction
		for _, w := range want {
			all = append(all, *w)
		}
		slices.SortFunc(all, RankFunctions)
		if got.Total != total || got.Functions != len(all) || !slices.Equal(got.Kept, all) {
			t.Fatalf("seed %d: table %+v, want total %d, %v", seed, got, total, all)
		}
		for _, keep := range []int{0, 1, 3, len(all) - 1, len(all), len(all) + 5} {
			dec, err := DecodeFunctionTable(got.Encode(keep), TreeLimits{})
			if err != nil {
				t.Fatalf("seed %d keep %d: %v", seed, keep, err)
			}
			n := len(all)
			if keep > 0 && keep < n {
				n = keep
			}
			if dec.Total != total || dec.Functions != len(all) || !slices.Equal(dec.Kept, all[:n]) || dec.Complete() != (n == len(all)) {
				t.Fatalf("seed %d keep %d: decoded %+v", seed, keep, dec)
			}
			var rs, rt int64
			for _, f := range all[n:] {
				rs, rt = max(rs, f.Self), max(rt, f.Total)
			}
			if dec.RestSelf != rs || dec.RestTotal != rt {
				t.Fatalf("seed %d keep %d: rest %d/%d, want %d/%d", seed, keep, dec.RestSelf, dec.RestTotal, rs, rt)
			}
		}
	}
}

// TestFunctionTableInvalid: tables out of order, with a function heavier
// than the tree, a bound heavier than the functions listed, or truncated
// are refused.
func TestFunctionTableInvalid(t *testing.T) {
	ok := &FunctionTable{Total: 10, Functions: 3, Kept: []TableFunction{{"a", 5, 10}, {"b", 3, 4}}, RestSelf: 1, RestTotal: 2}
	if _, err := DecodeFunctionTable(ok.Encode(0), TreeLimits{}); err != nil {
		t.Fatal(err)
	}
	for name, bad := range map[string]*FunctionTable{
		"out of order":   {Total: 10, Functions: 2, Kept: []TableFunction{{"b", 3, 4}, {"a", 5, 10}}},
		"duplicate":      {Total: 10, Functions: 2, Kept: []TableFunction{{"a", 5, 10}, {"a", 5, 10}}},
		"above the tree": {Total: 10, Functions: 1, Kept: []TableFunction{{"a", 5, 11}}},
		"self > total":   {Total: 10, Functions: 1, Kept: []TableFunction{{"a", 6, 5}}},
		"heavy rest":     {Total: 10, Functions: 2, Kept: []TableFunction{{"a", 5, 10}}, RestSelf: 6, RestTotal: 6},
		"rest, complete": {Total: 10, Functions: 1, Kept: []TableFunction{{"a", 5, 10}}, RestSelf: 1, RestTotal: 1},
		"more listed":    {Total: 10, Functions: 1, Kept: []TableFunction{{"a", 5, 10}, {"b", 1, 1}}},
	} {
		if _, err := DecodeFunctionTable(bad.Encode(0), TreeLimits{}); !errors.Is(err, ErrTreeInvalid) {
			t.Errorf("%s: %v, want ErrTreeInvalid", name, err)
		}
	}
	enc := ok.Encode(0)
	body, _ := inflated(enc[1:], 1<<20)
	for cut := range len(body) {
		if _, err := DecodeFunctionTable(deflated(FunctionTableVersion, body[:cut], 6), TreeLimits{}); err == nil {
			t.Errorf("cut at %d of %d bytes: decoded", cut, len(body))
		}
	}
	if _, err := DecodeFunctionTable(enc, TreeLimits{MaxFrames: 2}); !errors.Is(err, ErrTreeTooLarge) {
		t.Errorf("3 functions, limit 2: %v", err)
	}
}
