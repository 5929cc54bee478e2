package indices

import (
	"bytes"
	"cmp"
	"compress/flate"
	"container/heap"
	"encoding/binary"
	"fmt"
	"io"
	"slices"
)

// Tree heads (rollup kind "fleet_head", resolution 1d): the heaviest nodes
// of a settled day's whole-fleet tree (every partition's day tree merged),
// with the value of each kept node's other children as one exact folded
// value. A flame graph folds a tree to its max_nodes heaviest nodes; the
// first k of a head are the first k of its whole tree, so a fleet day's
// flame graph with max_nodes <= HeadNodes reads one small document instead
// of millions of nodes, and every value it shows is the whole tree's.
//
// "Heaviest first" is the query's order (services/query/internal/api
// keepHeaviest): best-first from the root by total, heavier first, then
// shallower, then found first, where a node's children are found in the
// order total (heavier first), name, kind.
//
// Encoding (version 2), numbers unsigned varints:
//
//	byte    head version (2)
//	body    deflated (RFC 1951):
//	  nodes the whole tree's node count (the root excluded)
//	  tree  a tree (tree.go) of the kept nodes whose last frame is the
//	        folded marker: a marker child of a node carries the total of
//	        the node's children left out, and has no children itself
//
// Version 1 is the body not deflated; DecodeHead reads both. Deflate
// because a head is read whole by every request it answers (a rolling day
// reads 23 hour heads) and is mostly its frames' names, which repeat their
// prefixes: for 1,000 simulated hosts it makes a head a fraction of its
// size, so OpenSearch loads and sends that much less.

// HeadVersion is the first byte of an encoded head.
const HeadVersion = 2

// headVersionPlain is the first byte of a head written before heads were
// deflated.
const headVersionPlain = 1

// HeadNodes is the number of nodes a fleet head keeps: four times the
// query's default max_nodes (5000).
const HeadNodes = 20000

// KindFleetHead is the rollup kind of a fleet day tree's head.
const KindFleetHead = "fleet_head"

// headMarker names the folded marker frame in an encoded head; only its
// position (last in the frame table) makes it the marker.
var headMarker = TreeFrame{Name: "[other]", Kind: "folded"}

// EncodeHead returns the head of the tree keeping at most max nodes.
func (b *TreeBuilder) EncodeHead(max int) []byte {
	b.init()
	keep, parent := b.heaviest(max)
	// Kept children per kept node, heaviest first.
	kids := make(map[int32][]int32, len(keep))
	for _, c := range keep {
		p := parent[c]
		kids[p] = append(kids[p], c)
	}
	folded := func(n int32) int64 {
		v := b.nodes[n].total - b.nodes[n].self
		for _, c := range kids[n] {
			v -= b.nodes[c].total
		}
		return v
	}
	var scale int64
	frameIndex := map[int32]int32{}
	var frames []TreeFrame
	for _, n := range append([]int32{0}, keep...) {
		scale = gcd(gcd(gcd(scale, b.nodes[n].total), b.nodes[n].self), folded(n))
		if f := b.nodes[n].frame; n != 0 {
			if _, ok := frameIndex[f]; !ok {
				frameIndex[f] = int32(len(frames))
				frames = append(frames, b.frames[f])
			}
		}
	}
	if scale <= 0 {
		scale = 1
	}
	marker := int32(len(frames))
	frames = append(frames, headMarker)
	markers := 0
	for _, n := range append([]int32{0}, keep...) {
		if folded(n) > 0 {
			markers++
		}
	}
	out := binary.AppendUvarint(nil, uint64(b.Nodes()))
	out = append(out, TreeVersion)
	out = binary.AppendUvarint(out, uint64(scale))
	out = binary.AppendUvarint(out, uint64(len(frames)))
	for _, f := range frames {
		out = binary.AppendUvarint(out, uint64(len(f.Name)))
		out = append(out, f.Name...)
		out = binary.AppendUvarint(out, uint64(len(f.Kind)))
		out = append(out, f.Kind...)
	}
	out = binary.AppendUvarint(out, uint64(len(keep)+markers))
	var walk func(n int32)
	walk = func(n int32) {
		node := &b.nodes[n]
		if n != 0 {
			out = binary.AppendUvarint(out, uint64(frameIndex[node.frame]))
		}
		out = binary.AppendUvarint(out, uint64(node.total/scale))
		out = binary.AppendUvarint(out, uint64(node.self/scale))
		f := folded(n)
		k := len(kids[n])
		if f > 0 {
			k++
		}
		out = binary.AppendUvarint(out, uint64(k))
		for _, c := range kids[n] {
			walk(c)
		}
		if f > 0 {
			out = binary.AppendUvarint(out, uint64(marker))
			out = binary.AppendUvarint(out, uint64(f/scale))
			out = binary.AppendUvarint(out, uint64(f/scale))
			out = binary.AppendUvarint(out, 0)
		}
	}
	walk(0)
	return deflated(HeadVersion, out, flate.DefaultCompression)
}

// deflated is version followed by body deflated at level.
func deflated(version byte, body []byte, level int) []byte {
	var buf bytes.Buffer
	buf.WriteByte(version)
	w, err := flate.NewWriter(&buf, level)
	if err != nil {
		panic(err) // only for a bad level
	}
	// Writes to a bytes.Buffer do not fail.
	_, _ = w.Write(body)
	_ = w.Close()
	return buf.Bytes()
}

// inflated is a deflated body, refused past limit bytes: one byte past
// the limit is enough to refuse it.
func inflated(b []byte, limit int) ([]byte, error) {
	body, err := io.ReadAll(io.LimitReader(flate.NewReader(bytes.NewReader(b)), int64(limit)+1))
	if err != nil {
		return nil, fmt.Errorf("%w: inflate: %v", ErrTreeInvalid, err)
	}
	if len(body) > limit {
		return nil, fmt.Errorf("%w: more than %d bytes inflated", ErrTreeTooLarge, limit)
	}
	return body, nil
}

// heaviest returns the first max nodes below the root in the heaviest
// first order, and every node's parent.
func (b *TreeBuilder) heaviest(max int) (keep, parent []int32) {
	parent = make([]int32, len(b.nodes))
	for i := range b.nodes {
		for c := b.nodes[i].firstKid; c != 0; c = b.nodes[c].nextSibl {
			parent[c] = int32(i)
		}
	}
	h := &headFrontier{}
	var kids []int32
	push := func(n int32, depth int) {
		kids = kids[:0]
		for c := b.nodes[n].firstKid; c != 0; c = b.nodes[c].nextSibl {
			kids = append(kids, c)
		}
		slices.SortFunc(kids, func(x, y int32) int {
			if c := cmp.Compare(b.nodes[y].total, b.nodes[x].total); c != 0 {
				return c
			}
			fx, fy := b.frames[b.nodes[x].frame], b.frames[b.nodes[y].frame]
			if c := cmp.Compare(fx.Name, fy.Name); c != 0 {
				return c
			}
			return cmp.Compare(fx.Kind, fy.Kind)
		})
		for _, c := range kids {
			heap.Push(h, headCandidate{n: c, total: b.nodes[c].total, depth: depth + 1, seq: h.seq})
			h.seq++
		}
	}
	push(0, 0)
	for len(keep) < max && h.Len() > 0 {
		c := heap.Pop(h).(headCandidate)
		keep = append(keep, c.n)
		push(c.n, c.depth)
	}
	return keep, parent
}

type headCandidate struct {
	n          int32
	total      int64
	depth, seq int
}

type headFrontier struct {
	items []headCandidate
	seq   int
}

func (f *headFrontier) Len() int { return len(f.items) }
func (f *headFrontier) Less(i, j int) bool {
	a, b := f.items[i], f.items[j]
	if a.total != b.total {
		return a.total > b.total
	}
	if a.depth != b.depth {
		return a.depth < b.depth
	}
	return a.seq < b.seq
}
func (f *headFrontier) Swap(i, j int) { f.items[i], f.items[j] = f.items[j], f.items[i] }
func (f *headFrontier) Push(x any)    { f.items = append(f.items, x.(headCandidate)) }
func (f *headFrontier) Pop() any {
	x := f.items[len(f.items)-1]
	f.items = f.items[:len(f.items)-1]
	return x
}

// HeadVisitor receives a decoded head: Frames (without the marker) and
// Node as a TreeVisitor does, and Folded for a node's children left out,
// with the depth they would have.
type HeadVisitor interface {
	TreeVisitor
	Folded(depth int, total int64)
}

// DecodeHead reads an encoded head into v and returns the whole tree's
// node count and the root's self and total. On an error, discard what was
// visited.
func DecodeHead(b []byte, lim TreeLimits, v HeadVisitor) (nodes int, rootSelf, rootTotal int64, err error) {
	if len(b) == 0 || (b[0] != HeadVersion && b[0] != headVersionPlain) {
		return 0, 0, 0, fmt.Errorf("%w: not a version %d head", ErrTreeInvalid, HeadVersion)
	}
	body := b[1:]
	if b[0] == HeadVersion {
		// Inflated, a head is bounded as a tree is.
		if body, err = inflated(b[1:], lim.withDefaults().MaxBytes); err != nil {
			return 0, 0, 0, err
		}
	}
	n, k := binary.Uvarint(body)
	if k <= 0 || n > maxTreeValue {
		return 0, 0, 0, fmt.Errorf("%w: bad node count", ErrTreeInvalid)
	}
	hv := &headVisitor{v: v}
	rootSelf, rootTotal, err = DecodeTree(body[k:], lim, hv)
	if err == nil {
		err = hv.err
	}
	if err == nil && uint64(hv.kept) > n {
		err = fmt.Errorf("%w: %d nodes kept of %d", ErrTreeInvalid, hv.kept, n)
	}
	if err != nil {
		return 0, 0, 0, err
	}
	return int(n), rootSelf, rootTotal, nil
}

type headVisitor struct {
	v           HeadVisitor
	marker      int32
	markerDepth int // of the last marker, 0 after a node
	kept        int
	err         error
}

func (h *headVisitor) Frames(f []TreeFrame) {
	h.marker = int32(len(f)) - 1
	if h.marker < 0 {
		h.err = fmt.Errorf("%w: a head without its marker frame", ErrTreeInvalid)
		h.v.Frames(nil)
		return
	}
	h.v.Frames(f[:h.marker])
}

func (h *headVisitor) Node(depth int, frame int32, self, total int64) {
	if h.err != nil {
		return
	}
	if h.markerDepth > 0 && depth > h.markerDepth {
		h.err = fmt.Errorf("%w: a folded marker with children", ErrTreeInvalid)
		return
	}
	if frame == h.marker {
		h.markerDepth = depth
		h.v.Folded(depth, total)
		return
	}
	h.markerDepth = 0
	h.kept++
	h.v.Node(depth, frame, self, total)
}
