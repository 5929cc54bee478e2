package indices

import (
	"bytes"
	"compress/flate"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"runtime"
	"slices"
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

// TestHeadVersions: a head written before heads were deflated (version 1)
// decodes to what its deflated form does; a head inflating past MaxBytes is
// ErrTreeTooLarge, one that does not inflate ErrTreeInvalid.
func TestHeadVersions(t *testing.T) {
	var b TreeBuilder
	for i := 0; i < 50; i++ {
		b.Add([]TreeFrame{{Name: "main"}, {Name: fmt.Sprintf("svc/handler%d", i%7)}, {Name: fmt.Sprintf("svc/leaf%d", i)}}, int64(i%4+1))
	}
	v2 := b.EncodeHead(20)
	body, err := io.ReadAll(flate.NewReader(bytes.NewReader(v2[1:])))
	if err != nil || v2[0] != HeadVersion {
		t.Fatalf("version %d: %v", v2[0], err)
	}
	v1 := append([]byte{headVersionPlain}, body...)
	t.Logf("head of 20 nodes: %d bytes deflated, %d plain", len(v2), len(v1))
	decode := func(enc []byte) ([]string, error) {
		var got []string
		h := &recordHead{visit: func(s string) { got = append(got, s) }}
		nodes, rs, rt, err := DecodeHead(enc, TreeLimits{}, h)
		return append(got, fmt.Sprint(nodes, rs, rt)), err
	}
	want, err := decode(v2)
	if err != nil {
		t.Fatal(err)
	}
	got, err := decode(v1)
	if err != nil || !slices.Equal(got, want) {
		t.Fatalf("version 1: %v, %v; want %v", got, err, want)
	}
	if _, _, _, err := DecodeHead(v2, TreeLimits{MaxBytes: len(body) - 1}, &recordHead{visit: func(string) {}}); !errors.Is(err, ErrTreeTooLarge) {
		t.Fatalf("inflating past MaxBytes: %v", err)
	}
	if _, _, _, err := DecodeHead([]byte{HeadVersion, 0xff, 0x00}, TreeLimits{}, &recordHead{visit: func(string) {}}); !errors.Is(err, ErrTreeInvalid) {
		t.Fatalf("not deflate: %v", err)
	}
}

// recordHead visits a head as strings.
type recordHead struct {
	visit  func(string)
	frames []TreeFrame
}

func (r *recordHead) Frames(f []TreeFrame) { r.frames = f }
func (r *recordHead) Node(depth int, frame int32, self, total int64) {
	r.visit(fmt.Sprint("node", depth, r.frames[frame], self, total))
}
func (r *recordHead) Folded(depth int, total int64) { r.visit(fmt.Sprint("folded", depth, total)) }

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

// BenchmarkFleetHead: what the rollup's lifecycle pass spends on one fleet
// head of 24 h x 1,000 hosts shaped like the query's benchFleet mutations
// (6 partition day trees, 1.2 M distinct leaves): merging the day trees
// and encoding the head, with the heap the merge holds.
func BenchmarkFleetHead(b *testing.B) {
	var parts [][]byte
	for p := 0; p < 6; p++ {
		var t TreeBuilder
		for h := p; h < 1000; h += 6 {
			for s := 0; s < 5; s++ {
				svc := (h/10*5 + s) % 500
				for hr := 0; hr < 24; hr++ {
					for m := 0; m < 10; m++ {
						t.Add([]TreeFrame{{Name: "runtime.goexit"}, {Name: "main.main"}, {Name: "net/http.(*conn).serve"},
							{Name: fmt.Sprintf("svc%d/handler%d", svc, m%6)}, {Name: fmt.Sprintf("svc%d/logic%d", svc, m)},
							{Name: fmt.Sprintf("lib/codec.f%d", m%9)}, {Name: fmt.Sprintf("svc%d/leaf%d+h%d.%d.%d", svc, m, h, hr, m)}}, 5*52631578)
					}
				}
			}
		}
		parts = append(parts, t.Encode())
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		var all TreeBuilder
		for _, p := range parts {
			if err := all.AddTree(p, TreeLimits{}); err != nil {
				b.Fatal(err)
			}
		}
		head := all.EncodeHead(HeadNodes)
		runtime.ReadMemStats(&after)
		b.ReportMetric(float64(after.HeapInuse-before.HeapInuse)/(1<<20), "heap-MB")
		b.ReportMetric(float64(len(head))/1024, "head-KB")
		b.ReportMetric(float64(all.Nodes()), "nodes")
	}
}
