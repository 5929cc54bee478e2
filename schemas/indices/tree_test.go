package indices

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"strings"
	"testing"
)

// pathTree is a decoded tree keyed by path ("a;b;c", kind after "@"), for
// comparing with a brute-force sum.
type pathTree struct {
	frames []TreeFrame
	path   []string
	self   map[string]int64
	total  map[string]int64
	nodes  int
}

func (p *pathTree) Frames(f []TreeFrame) { p.frames = f }

func (p *pathTree) Node(depth int, frame int32, self, total int64) {
	f := p.frames[frame]
	p.path = append(p.path[:depth-1], f.Name+"@"+f.Kind)
	key := strings.Join(p.path, ";")
	if _, dup := p.total[key]; dup {
		panic("node " + key + " twice")
	}
	p.self[key] += self
	p.total[key] += total
	p.nodes++
}

func decodePaths(t testing.TB, b []byte) (*pathTree, int64, int64, error) {
	t.Helper()
	p := &pathTree{self: map[string]int64{}, total: map[string]int64{}}
	rs, rt, err := DecodeTree(b, TreeLimits{}, p)
	return p, rs, rt, err
}

func TestTreeRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	funcs := []string{"main", "run", "work", "parse", "write", "read", "hash", "gc"}
	kinds := []string{"", "", "", "kernel", "python"}
	var b TreeBuilder
	self, total := map[string]int64{}, map[string]int64{}
	var sum int64
	for i := 0; i < 5000; i++ {
		depth := 1 + rng.IntN(12)
		path := make([]TreeFrame, depth)
		keys := make([]string, depth)
		for d := range path {
			path[d] = TreeFrame{Name: funcs[rng.IntN(len(funcs))], Kind: kinds[rng.IntN(len(kinds))]}
			keys[d] = path[d].Name + "@" + path[d].Kind
		}
		v := int64(rng.IntN(20)+1) * 52631578 // 19 Hz samples
		b.Add(path, v)
		sum += v
		for d := range path {
			total[strings.Join(keys[:d+1], ";")] += v
		}
		self[strings.Join(keys, ";")] += v
	}
	enc := b.Encode()
	p, rs, rt, err := decodePaths(t, enc)
	if err != nil {
		t.Fatal(err)
	}
	if rt != sum || rs != 0 || b.Total() != sum {
		t.Fatalf("root total %d self %d builder %d, want %d and 0", rt, rs, b.Total(), sum)
	}
	if p.nodes != b.Nodes() || p.nodes != len(total) {
		t.Fatalf("%d nodes decoded, builder %d, brute force %d", p.nodes, b.Nodes(), len(total))
	}
	for k, v := range total {
		if p.total[k] != v || p.self[k] != self[k] {
			t.Fatalf("%s: total %d self %d, want %d %d", k, p.total[k], p.self[k], v, self[k])
		}
	}
	t.Logf("%d nodes, %d bytes (%.1f per node)", p.nodes, len(enc), float64(len(enc))/float64(p.nodes))
}

// TestTreeLargeValues: a fleet's day in one tree (1,000 busy 8-core hosts:
// 6.9e17 ns) round-trips.
func TestTreeLargeValues(t *testing.T) {
	var b TreeBuilder
	const day = 1000 * 8 * 86400 * int64(1e9)
	b.Add([]TreeFrame{{Name: "main"}, {Name: "work"}}, day)
	b.Add([]TreeFrame{{Name: "main"}}, 52631578)
	p, _, total, err := decodePaths(t, b.Encode())
	if err != nil || total != day+52631578 || p.total["main@;work@"] != day {
		t.Fatalf("total %d (%v), nodes %v", total, err, p.total)
	}
}

func TestTreeFrames(t *testing.T) {
	var b TreeBuilder
	// Leaf first, as stored; an unnamed frame shows its binary.
	b.AddStack([]Frame{{Binary: "libc.so.6"}, {Function: "read", Binary: "[kernel.kallsyms]", Kind: "kernel"}, {Function: "main"}}, 10)
	b.AddStack(nil, 5)  // no frames: the root's self
	b.AddStack(nil, -3) // negative: left out
	p, rs, rt, err := decodePaths(t, b.Encode())
	if err != nil {
		t.Fatal(err)
	}
	if rs != 5 || rt != 15 {
		t.Fatalf("root self %d total %d, want 5 and 15", rs, rt)
	}
	if got := p.self["main@;read@kernel;[libc.so.6]@"]; got != 10 {
		t.Fatalf("leaf self %d, want 10: %v", got, p.self)
	}
	var empty TreeBuilder
	if _, _, rt, err := decodePaths(t, empty.Encode()); err != nil || rt != 0 {
		t.Fatalf("empty tree: total %d, %v", rt, err)
	}
}

func TestTreeInvalid(t *testing.T) {
	var b TreeBuilder
	b.Add([]TreeFrame{{Name: "a"}, {Name: "b"}}, 4)
	b.Add([]TreeFrame{{Name: "a"}}, 2)
	good := b.Encode()
	// good: version 1, scale 2, 2 frames "a","" "b","", 2 nodes,
	// root 3 0 1, node 0 3 1 1, node 1 2 2 0 (in units of the scale).
	for _, tc := range []struct {
		name string
		b    []byte
		want error
	}{
		{"empty", nil, ErrTreeInvalid},
		{"version", append([]byte{2}, good[1:]...), ErrTreeInvalid},
		{"truncated", good[:len(good)-1], ErrTreeInvalid},
		{"trailing", append(append([]byte{}, good...), 0), ErrTreeInvalid},
		{"zero scale", []byte{1, 0, 0, 0, 0, 0, 0}, ErrTreeInvalid},
		{"huge frame count", []byte{1, 1, 0xff, 0xff, 0xff, 0xff, 0x0f}, ErrTreeTooLarge},
		{"frames past the end", []byte{1, 1, 100, 0}, ErrTreeInvalid},
		{"huge node count", []byte{1, 1, 0, 0xff, 0xff, 0xff, 0xff, 0x0f}, ErrTreeTooLarge},
		{"root total wrong", []byte{1, 1, 0, 0, 5, 4, 0}, ErrTreeInvalid},
		{"more children than nodes", []byte{1, 1, 1, 1, 'a', 0, 0, 1, 1, 1}, ErrTreeInvalid},
		{"frame out of range", []byte{1, 1, 1, 1, 'a', 0, 1, 1, 0, 1, 7, 1, 1, 0}, ErrTreeInvalid},
		{"self above total", []byte{1, 1, 1, 1, 'a', 0, 1, 1, 0, 1, 0, 1, 2, 0}, ErrTreeInvalid},
		{"children above parent", []byte{1, 1, 1, 1, 'a', 0, 1, 1, 0, 1, 0, 2, 2, 0}, ErrTreeInvalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, _, _, err := decodePaths(t, tc.b); !errors.Is(err, tc.want) {
				t.Fatalf("error %v, want %v", err, tc.want)
			}
		})
	}
	t.Run("deeper than the limit", func(t *testing.T) {
		var b TreeBuilder
		path := make([]TreeFrame, 50)
		for i := range path {
			path[i] = TreeFrame{Name: "f"}
		}
		b.Add(path, 1)
		if _, _, err := DecodeTree(b.Encode(), TreeLimits{MaxDepth: 10}, &pathTree{self: map[string]int64{}, total: map[string]int64{}}); !errors.Is(err, ErrTreeTooLarge) {
			t.Fatalf("error %v, want ErrTreeTooLarge", err)
		}
	})
}

// countVisitor counts without holding anything, so the fuzzer measures
// the decoder's own allocation.
type countVisitor struct{ nodes int }

func (c *countVisitor) Frames([]TreeFrame)            {}
func (c *countVisitor) Node(int, int32, int64, int64) { c.nodes++ }

func FuzzDecodeTree(f *testing.F) {
	var b TreeBuilder
	b.Add([]TreeFrame{{Name: "main"}, {Name: "run", Kind: "python"}}, 52631578)
	b.Add([]TreeFrame{{Name: "main"}}, 2*52631578)
	f.Add(b.Encode())
	f.Add([]byte{1, 1, 0, 0, 0, 0, 0})
	f.Add([]byte{1, 1, 0xff, 0xff, 0xff, 0xff, 0x0f})
	lim := TreeLimits{MaxBytes: 1 << 16, MaxNodes: 1 << 12, MaxFrames: 1 << 10, MaxDepth: 64, MaxFrameBytes: 256}
	f.Fuzz(func(t *testing.T, in []byte) {
		var c countVisitor
		rs, rt, err := DecodeTree(in, lim, &c)
		if err != nil {
			if !errors.Is(err, ErrTreeInvalid) && !errors.Is(err, ErrTreeTooLarge) {
				t.Fatalf("error %v is neither ErrTreeInvalid nor ErrTreeTooLarge", err)
			}
			return
		}
		if rs < 0 || rt < rs || c.nodes > lim.MaxNodes {
			t.Fatalf("root self %d total %d, %d nodes", rs, rt, c.nodes)
		}
		// Allocation stays bounded by the input: frames and nodes were
		// checked against the bytes left before anything was made.
		allocs := testing.AllocsPerRun(1, func() { _, _, _ = DecodeTree(in, lim, &c) })
		if allocs > float64(8+2*len(in)) {
			t.Fatalf("%v allocations for %d bytes", allocs, len(in))
		}
	})
}

// TestAddTree: trees added to a builder give the tree of all their stacks,
// a stack of value 0 included (the query's merge of trees keeps it too),
// and TreeSources does not depend on order.
func TestAddTree(t *testing.T) {
	var a, b, both TreeBuilder
	a.Add([]TreeFrame{{Name: "main"}, {Name: "x"}}, 3)
	a.Add([]TreeFrame{{Name: "main"}}, 2)
	a.Add([]TreeFrame{{Name: "main"}, {Name: "idle"}}, 0)
	both.Add([]TreeFrame{{Name: "main"}, {Name: "idle"}}, 0)
	b.Add([]TreeFrame{{Name: "main"}, {Name: "x"}, {Name: "y", Kind: "kernel"}}, 5)
	b.Add(nil, 1)
	both.Add([]TreeFrame{{Name: "main"}, {Name: "x"}}, 3)
	both.Add([]TreeFrame{{Name: "main"}}, 2)
	both.Add([]TreeFrame{{Name: "main"}, {Name: "x"}, {Name: "y", Kind: "kernel"}}, 5)
	both.Add(nil, 1)
	var merged TreeBuilder
	for _, tr := range [][]byte{a.Encode(), b.Encode()} {
		if err := merged.AddTree(tr, TreeLimits{}); err != nil {
			t.Fatal(err)
		}
	}
	got, _, gt, _ := decodePaths(t, merged.Encode())
	want, _, wt, _ := decodePaths(t, both.Encode())
	if gt != wt || len(got.total) != len(want.total) {
		t.Fatalf("merged total %d nodes %v, want %d %v", gt, got.total, wt, want.total)
	}
	for k, v := range want.total {
		if got.total[k] != v || got.self[k] != want.self[k] {
			t.Fatalf("%s: %d/%d, want %d/%d", k, got.self[k], got.total[k], want.self[k], v)
		}
	}
	s1 := TreeSources([]TreeSource{{"a", 1, 1}, {"b", 2, 1}})
	if s2 := TreeSources([]TreeSource{{"b", 2, 1}, {"a", 1, 1}}); s1 != s2 {
		t.Fatal("sources depend on order")
	}
	if s3 := TreeSources([]TreeSource{{"a", 1, 1}, {"b", 3, 1}}); s3 == s1 {
		t.Fatal("a rewritten hour has the same sources")
	}
}

// TestChildAddValue: stacks added as Frame and Child from the root down and
// AddValue at their node encode to the same bytes as AddStack of the
// same stacks in the same order, with nodes found again from a prefix
// already added, a stack of value 0 kept, a negative one left out, and
// an empty stack at the root.
func TestChildAddValue(t *testing.T) {
	stacks := []struct {
		path []TreeFrame // root first
		v    int64
	}{
		{[]TreeFrame{{Name: "main"}, {Name: "a"}, {Name: "b", Kind: "kernel"}}, 3},
		{[]TreeFrame{{Name: "main"}, {Name: "c"}}, 0},
		{[]TreeFrame{{Name: "main"}, {Name: "a"}}, 2},
		{[]TreeFrame{{Name: "main"}, {Name: "neg"}}, -4},
		{nil, 5},
		{[]TreeFrame{{Name: "other"}, {Name: "a"}, {Name: "a"}}, 7},
		{[]TreeFrame{{Name: "main"}, {Name: "a"}, {Name: "b", Kind: "kernel"}}, 1},
	}
	var want, got TreeBuilder
	for _, s := range stacks {
		frames := make([]Frame, len(s.path))
		for i, f := range s.path {
			frames[len(s.path)-1-i] = Frame{Function: f.Name, Kind: f.Kind}
		}
		want.AddStack(frames, s.v)
		if s.v < 0 {
			got.AddValue(0, s.v)
			continue
		}
		n := int32(0)
		for _, f := range s.path {
			n = got.Child(n, got.Frame(f))
		}
		got.AddValue(n, s.v)
	}
	if g, w := got.Encode(), want.Encode(); !bytes.Equal(g, w) {
		t.Fatalf("Child and AddValue encode %x, AddStack %x", g, w)
	}
	if got.Total() != 18 {
		t.Fatalf("total %d, want 18", got.Total())
	}
}

// TestEncodeSorted: the same stacks added in two orders encode to the same
// bytes with EncodeSorted (not with Encode), and decode to the same tree
// as Encode's.
func TestEncodeSorted(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	funcs := []string{"main", "run", "work", "parse", "write", "read", "hash", "gc"}
	kinds := []string{"", "", "kernel", "python"}
	type stack struct {
		path []TreeFrame
		v    int64
	}
	var stacks []stack
	for range 2000 {
		path := make([]TreeFrame, 1+rng.IntN(10))
		for d := range path {
			path[d] = TreeFrame{Name: funcs[rng.IntN(len(funcs))], Kind: kinds[rng.IntN(len(kinds))]}
		}
		stacks = append(stacks, stack{path, int64(rng.IntN(5)) * 10})
	}
	var a, b TreeBuilder
	for i := range stacks {
		a.Add(stacks[i].path, stacks[i].v)
		s := stacks[len(stacks)-1-i]
		b.Add(s.path, s.v)
	}
	if bytes.Equal(a.Encode(), b.Encode()) {
		t.Fatal("Encode gave the same bytes for both orders: the test shows nothing")
	}
	sa, sb := a.EncodeSorted(), b.EncodeSorted()
	if !bytes.Equal(sa, sb) {
		t.Fatal("EncodeSorted differs with the order stacks were added in")
	}
	want, _, wantTotal, err := decodePaths(t, a.Encode())
	if err != nil {
		t.Fatal(err)
	}
	got, _, gotTotal, err := decodePaths(t, sa)
	if err != nil {
		t.Fatal(err)
	}
	if gotTotal != wantTotal || got.nodes != want.nodes {
		t.Fatalf("sorted: %d nodes worth %d, want %d worth %d", got.nodes, gotTotal, want.nodes, wantTotal)
	}
	for k, v := range want.total {
		if got.total[k] != v || got.self[k] != want.self[k] {
			t.Fatalf("%s: total %d self %d, want %d %d", k, got.total[k], got.self[k], v, want.self[k])
		}
	}
	var empty TreeBuilder
	if _, _, total, err := decodePaths(t, empty.EncodeSorted()); err != nil || total != 0 {
		t.Fatalf("empty tree: %d, %v", total, err)
	}
}

// TestDeflate: a deflated tree decodes to the same tree; a deflated body
// that is not deflate, or inflates past MaxBytes, is refused.
func TestDeflate(t *testing.T) {
	var b TreeBuilder
	for i := range 300 {
		b.Add([]TreeFrame{{Name: "github.com/acme/svc/pkg.(*Server).serve"}, {Name: "github.com/acme/svc/pkg.(*Server).handle" + string(rune('a'+i%26))}}, int64(i+1))
	}
	plain := b.EncodeSorted()
	def := Deflate(plain)
	if def[0] != TreeVersionDeflated || len(def) >= len(plain) {
		t.Fatalf("deflated %d bytes (version %d), plain %d", len(def), def[0], len(plain))
	}
	want, ws, wt, err := decodePaths(t, plain)
	if err != nil {
		t.Fatal(err)
	}
	got, gs, gt, err := decodePaths(t, def)
	if err != nil || gs != ws || gt != wt || got.nodes != want.nodes {
		t.Fatalf("deflated: %d nodes, root %d/%d, %v; want %d nodes, %d/%d", got.nodes, gs, gt, err, want.nodes, ws, wt)
	}
	for k, v := range want.total {
		if got.total[k] != v || got.self[k] != want.self[k] {
			t.Fatalf("%s: %d/%d, want %d/%d", k, got.self[k], got.total[k], want.self[k], v)
		}
	}
	if _, _, err := DecodeTree([]byte{TreeVersionDeflated, 0xff, 0x00}, TreeLimits{}, &pathTree{self: map[string]int64{}, total: map[string]int64{}}); !errors.Is(err, ErrTreeInvalid) {
		t.Fatalf("garbage after version 2: %v, want ErrTreeInvalid", err)
	}
	if _, _, err := DecodeTree(def, TreeLimits{MaxBytes: len(plain) - 1}, &pathTree{self: map[string]int64{}, total: map[string]int64{}}); !errors.Is(err, ErrTreeTooLarge) {
		t.Fatalf("inflating past MaxBytes: %v, want ErrTreeTooLarge", err)
	}
	if _, _, err := DecodeTree(def, TreeLimits{MaxBytes: len(plain)}, &pathTree{self: map[string]int64{}, total: map[string]int64{}}); err != nil {
		t.Fatalf("inflating to MaxBytes: %v", err)
	}
}

// TestWideNodes: nodes with more children than a list is searched for
// (listedKids) merge their stacks as a node with few does: the tree
// decodes to the brute-force sums of its paths, each path once, and Grow
// changes nothing of the encoding.
func TestWideNodes(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	want := map[string]int64{}
	var b, grown TreeBuilder
	grown.Grow(1000, 40)
	for range 3000 {
		// Up to 40 children a node, most nodes past listedKids.
		depth := 1 + rng.IntN(4)
		frames := make([]Frame, depth)
		key := ""
		for i := range frames {
			frames[i] = Frame{Function: string(rune('a' + rng.IntN(40)))}
		}
		for i := depth - 1; i >= 0; i-- {
			key += frames[i].Function + "@;"
		}
		v := int64(rng.IntN(5))
		want[strings.TrimSuffix(key, ";")] += v
		b.AddStack(frames, v)
		grown.AddStack(frames, v)
	}
	enc := b.Encode()
	if !bytes.Equal(enc, grown.Encode()) {
		t.Fatal("a builder grown first encodes other bytes")
	}
	got, _, total, err := decodePaths(t, enc)
	if err != nil {
		t.Fatal(err)
	}
	var sum int64
	for k, v := range want {
		if got.self[k] != v {
			t.Errorf("self of %s: %d, want %d", k, got.self[k], v)
		}
		sum += v
	}
	if total != sum {
		t.Errorf("total %d, want %d", total, sum)
	}
	wide := 0
	for _, n := range b.nodes {
		if n.kids > listedKids {
			wide++
		}
	}
	if wide < 10 {
		t.Fatalf("%d nodes with more than %d children: the test does not reach them", wide, listedKids)
	}
}
