package indices

import (
	"errors"
	"math/rand/v2"
	"strings"
	"testing"
)

// headPaths is a decoded head keyed by path, with each path's folded value.
type headPaths struct {
	pathTree
	folded map[string]int64
}

func (h *headPaths) Folded(depth int, total int64) {
	h.folded[strings.Join(h.path[:depth-1], ";")] += total
}

// TestTreeHead: a head keeps the max heaviest nodes of its tree, each with
// its whole tree's self and total, and the folded value of a node is the
// total of its children left out; no node left out is heavier than a node
// kept.
func TestTreeHead(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	funcs := []string{"main", "run", "work", "parse", "write", "read"}
	var b TreeBuilder
	for i := 0; i < 2000; i++ {
		path := make([]TreeFrame, 1+rng.IntN(8))
		for d := range path {
			path[d] = TreeFrame{Name: funcs[rng.IntN(len(funcs))]}
		}
		b.Add(path, int64(rng.IntN(4)+1)*52631578)
	}
	whole, _, wholeTotal, err := decodePaths(t, b.Encode())
	if err != nil {
		t.Fatal(err)
	}
	for _, keep := range []int{1, 10, 300, b.Nodes(), b.Nodes() + 5} {
		h := &headPaths{pathTree: pathTree{self: map[string]int64{}, total: map[string]int64{}}, folded: map[string]int64{}}
		nodes, _, rootTotal, err := DecodeHead(b.EncodeHead(keep), TreeLimits{}, h)
		if err != nil {
			t.Fatal(err)
		}
		if nodes != b.Nodes() || h.nodes != min(keep, b.Nodes()) || rootTotal != wholeTotal {
			t.Fatalf("keep %d: %d of %d nodes kept, root %d; want %d of %d, %d", keep, h.nodes, nodes, rootTotal, min(keep, b.Nodes()), b.Nodes(), wholeTotal)
		}
		lightestKept := int64(1 << 62)
		for k, v := range h.total {
			if whole.total[k] != v || whole.self[k] != h.self[k] {
				t.Fatalf("keep %d %s: total %d self %d, want %d %d", keep, k, v, h.self[k], whole.total[k], whole.self[k])
			}
			lightestKept = min(lightestKept, v)
		}
		for k, v := range whole.total {
			if _, kept := h.total[k]; kept {
				continue
			}
			if v > lightestKept {
				t.Fatalf("keep %d: %s (%d) left out, %d kept", keep, k, v, lightestKept)
			}
			parent := k[:max(strings.LastIndex(k, ";"), 0)]
			if _, kept := h.total[parent]; kept || parent == "" {
				h.folded[parent] -= v
			}
		}
		for k, v := range h.folded {
			if v != 0 {
				t.Fatalf("keep %d: folded under %q is off by %d", keep, k, v)
			}
		}
	}
}

func FuzzDecodeHead(f *testing.F) {
	var b TreeBuilder
	b.Add([]TreeFrame{{Name: "main"}, {Name: "run", Kind: "python"}}, 52631578)
	b.Add([]TreeFrame{{Name: "main"}, {Name: "gc"}}, 2*52631578)
	f.Add(b.EncodeHead(1))
	f.Add(b.EncodeHead(5))
	f.Add([]byte{1, 0, 1, 1, 0, 0, 0, 0, 0})
	lim := TreeLimits{MaxBytes: 1 << 16, MaxNodes: 1 << 12, MaxFrames: 1 << 10, MaxDepth: 64, MaxFrameBytes: 256}
	f.Fuzz(func(t *testing.T, in []byte) {
		h := &headPaths{pathTree: pathTree{self: map[string]int64{}, total: map[string]int64{}}, folded: map[string]int64{}}
		defer func() {
			// A hostile head may repeat a node; pathTree panics on that,
			// which is the visitor's business, not the decoder's.
			if r := recover(); r != nil && !strings.HasPrefix(r.(string), "node ") {
				panic(r)
			}
		}()
		nodes, rs, rt, err := DecodeHead(in, lim, h)
		if err != nil {
			if !errors.Is(err, ErrTreeInvalid) && !errors.Is(err, ErrTreeTooLarge) {
				t.Fatalf("error %v is neither ErrTreeInvalid nor ErrTreeTooLarge", err)
			}
			return
		}
		if rs < 0 || rt < rs || h.nodes > nodes {
			t.Fatalf("root self %d total %d, %d of %d nodes", rs, rt, h.nodes, nodes)
		}
	})
}
