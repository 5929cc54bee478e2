package indices

import (
	"cmp"
	"compress/flate"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/stackstream/stackstream/schemas/record"
)

// Pre-merged call trees (rollup kind "tree"): the stacks of one (type,
// service, host, hour) merged by frame name, root first, as the flame graph
// shows them. A query over whole hours merges these trees instead of summing
// every stack and reading each stack's frames, so its cost follows the
// trees' nodes, not the distinct stacks.
//
// Encoding (version 1), every number an unsigned varint:
//
//	byte    version (1)
//	scale   every value below is stored divided by it (their GCD)
//	frames  count, then per frame: name length, name, kind length, kind
//	nodes   count (the root excluded)
//	root    total, self, children
//	node    preorder, per node: frame index, total, self, children
//
// Totals are checked while decoding: a node's total is its self plus its
// children's totals, so a decoded tree is consistent or an error.

// TreeVersion is the first byte of an encoded tree.
const TreeVersion = 1

// TreeVersionDeflated is the first byte of a deflated tree (Deflate): the
// rest of a version 1 tree, deflated (RFC 1951). DecodeTree reads both.
const TreeVersionDeflated = 2

// TreeFrame is a tree node's frame: its name as the flame graph shows it
// and its kind (record.Kind*, "" for native code).
type TreeFrame struct {
	Name, Kind string
}

// FrameName is the name a frame is shown by: its function, or for a frame
// stored without one its binary in brackets.
func FrameName(f Frame) string {
	if f.Function != "" {
		return f.Function
	}
	if f.Binary != "" {
		return "[" + f.Binary + "]"
	}
	return "[unknown]"
}

// TreeFrameOf is the tree frame of a stored frame.
func TreeFrameOf(f Frame) TreeFrame {
	k := f.FrameKind()
	if k == record.KindNative {
		k = ""
	}
	return TreeFrame{Name: FrameName(f), Kind: k}
}

// TreeBuilder merges stacks into a tree. The zero value is ready to use.
type TreeBuilder struct {
	frames []TreeFrame
	index  map[TreeFrame]int32
	nodes  []treeNode // nodes[0] is the root
	// wide are the children of the nodes with more than listedKids, by
	// (parent, frame); a node with fewer is found in its parent's list.
	// Every child in one map was most of building the rollup's trees (a
	// map insert per node, and the map's growth) and half of a tree's
	// memory; most nodes have one or two children.
	wide map[treeEdge]int32
	path []int32
}

type treeNode struct {
	frame, parent      int32
	self, total        int64
	firstKid, nextSibl int32 // 0: none (the root is never a child)
	lastKid            int32
	kids               int32
}

type treeEdge struct{ parent, frame int32 }

// listedKids is how many children a node's list is searched for before
// they go to wide.
const listedKids = 8

func (b *TreeBuilder) init() {
	if b.nodes == nil {
		b.nodes = []treeNode{{frame: -1}}
		b.index = map[TreeFrame]int32{}
		b.wide = map[treeEdge]int32{}
	}
}

// Grow makes room for nodes more nodes and frames more frames, so that a
// caller knowing its tree's size (the rollup builds its trees from a
// prefix tree of its stacks) does not grow the builder by doubling.
func (b *TreeBuilder) Grow(nodes, frames int) {
	b.init()
	b.nodes = slices.Grow(b.nodes, nodes)
	b.frames = slices.Grow(b.frames, frames)
	if len(b.index) == 0 && frames > 0 {
		b.index = make(map[TreeFrame]int32, frames)
	}
}

// AddStack adds value v to the stack of stored frames (leaf first, as the
// stacks index holds them). v may be 0 (the stack is kept); a negative v
// (only a hostile profile has one) is left out, so a tree's values are
// never negative.
func (b *TreeBuilder) AddStack(frames []Frame, v int64) {
	if v < 0 {
		return
	}
	b.init()
	b.path = b.path[:0]
	for i := len(frames) - 1; i >= 0; i-- {
		b.path = append(b.path, b.frame(TreeFrameOf(frames[i])))
	}
	b.add(b.path, v)
}

// Add adds value v to the stack path (root first); a negative v is left
// out.
func (b *TreeBuilder) Add(path []TreeFrame, v int64) {
	if v < 0 {
		return
	}
	b.init()
	b.path = b.path[:0]
	for _, f := range path {
		b.path = append(b.path, b.frame(f))
	}
	b.add(b.path, v)
}

func (b *TreeBuilder) frame(f TreeFrame) int32 {
	i, ok := b.index[f]
	if !ok {
		i = int32(len(b.frames))
		b.frames = append(b.frames, f)
		b.index[f] = i
	}
	return i
}

func (b *TreeBuilder) add(path []int32, v int64) {
	n := int32(0)
	b.nodes[0].total += v
	for _, f := range path {
		c := b.child(n, f)
		b.nodes[c].total += v
		n = c
	}
	b.nodes[n].self += v
}

// child is node n's child of frame f, added when n has none.
func (b *TreeBuilder) child(n, f int32) int32 {
	if b.nodes[n].kids <= listedKids {
		for c := b.nodes[n].firstKid; c != 0; c = b.nodes[c].nextSibl {
			if b.nodes[c].frame == f {
				return c
			}
		}
	} else if c, ok := b.wide[treeEdge{n, f}]; ok {
		return c
	}
	c := int32(len(b.nodes))
	b.nodes = append(b.nodes, treeNode{frame: f, parent: n})
	p := &b.nodes[n]
	if p.firstKid == 0 {
		p.firstKid = c
	} else {
		b.nodes[p.lastKid].nextSibl = c
	}
	p.lastKid = c
	p.kids++
	switch {
	case p.kids == listedKids+1:
		// Too many to search a list: every child goes to wide.
		for k := p.firstKid; k != 0; k = b.nodes[k].nextSibl {
			b.wide[treeEdge{n, b.nodes[k].frame}] = k
		}
	case p.kids > listedKids+1:
		b.wide[treeEdge{n, f}] = c
	}
	return c
}

// Frame is f's index in the tree's frame table, added when new.
func (b *TreeBuilder) Frame(f TreeFrame) int32 {
	b.init()
	return b.frame(f)
}

// Child is node n's child of frame index f (Frame; the root is node 0),
// added when n has none: a caller holding its stacks in a prefix tree of
// its own (the rollup's frame trie) finds a stack's node from its
// caller's, instead of a lookup per frame of every stack. Adding a stack
// as Frame and Child from the root down, then AddValue at its last node,
// encodes to the same bytes as AddStack.
func (b *TreeBuilder) Child(n, f int32) int32 {
	b.init()
	return b.child(n, f)
}

// AddValue adds v to node n's self and to its total and its callers'; a
// negative v is left out, as AddStack leaves it.
func (b *TreeBuilder) AddValue(n int32, v int64) {
	if v < 0 {
		return
	}
	b.init()
	b.nodes[n].self += v
	for ; n != 0; n = b.nodes[n].parent {
		b.nodes[n].total += v
	}
	b.nodes[0].total += v
}

// Total is the sum of the values added.
func (b *TreeBuilder) Total() int64 {
	if b.nodes == nil {
		return 0
	}
	return b.nodes[0].total
}

// Nodes counts the nodes below the root.
func (b *TreeBuilder) Nodes() int { return max(len(b.nodes)-1, 0) }

// scale is the GCD of every value, at least 1.
func (b *TreeBuilder) scale() int64 {
	var scale int64
	for _, n := range b.nodes {
		scale = gcd(scale, n.total)
		scale = gcd(scale, n.self)
	}
	return max(scale, 1)
}

// appendHead appends the version, scale, frame table and node count.
func appendHead(out []byte, scale int64, frames []TreeFrame, nodes int) []byte {
	out = append(out, TreeVersion)
	out = binary.AppendUvarint(out, uint64(scale))
	out = binary.AppendUvarint(out, uint64(len(frames)))
	for _, f := range frames {
		out = binary.AppendUvarint(out, uint64(len(f.Name)))
		out = append(out, f.Name...)
		out = binary.AppendUvarint(out, uint64(len(f.Kind)))
		out = append(out, f.Kind...)
	}
	return binary.AppendUvarint(out, uint64(nodes))
}

// Encode returns the tree in the encoding above: frames and children in
// the order they were added.
func (b *TreeBuilder) Encode() []byte {
	b.init()
	scale := b.scale()
	out := appendHead(make([]byte, 0, 16+len(b.nodes)*6), scale, b.frames, len(b.nodes)-1)
	var walk func(i int32)
	walk = func(i int32) {
		n := &b.nodes[i]
		if i != 0 {
			out = binary.AppendUvarint(out, uint64(n.frame))
		}
		out = binary.AppendUvarint(out, uint64(n.total/scale))
		out = binary.AppendUvarint(out, uint64(n.self/scale))
		kids := 0
		for c := n.firstKid; c != 0; c = b.nodes[c].nextSibl {
			kids++
		}
		out = binary.AppendUvarint(out, uint64(kids))
		for c := n.firstKid; c != 0; c = b.nodes[c].nextSibl {
			walk(c)
		}
	}
	walk(0)
	return out
}

// EncodeSorted returns the tree in the encoding above with every node's
// children in frame (name, kind) order and the frames numbered in the
// order that walk first meets them: the same tree encodes to the same
// bytes whatever order its stacks were added in. The rollup's part-hour
// partition trees (schemas/opensearch.md, "Part-hour documents") sum
// their stacks by node of a trie whose numbering depends on when the
// hour was frozen, not only on the records.
func (b *TreeBuilder) EncodeSorted() []byte {
	b.init()
	// kids[start[n]:start[n+1]] are node n's children.
	start := make([]int32, len(b.nodes)+1)
	for _, n := range b.nodes[1:] {
		start[n.parent+1]++
	}
	for i := 1; i < len(start); i++ {
		start[i] += start[i-1]
	}
	kids := make([]int32, len(b.nodes)-1)
	fill := slices.Clone(start[:len(b.nodes)])
	for i := 1; i < len(b.nodes); i++ {
		p := b.nodes[i].parent
		kids[fill[p]] = int32(i)
		fill[p]++
	}
	byFrame := func(x, y int32) int {
		fx, fy := b.frames[b.nodes[x].frame], b.frames[b.nodes[y].frame]
		return cmp.Or(strings.Compare(fx.Name, fy.Name), strings.Compare(fx.Kind, fy.Kind))
	}
	for n := range b.nodes {
		slices.SortFunc(kids[start[n]:start[n+1]], byFrame)
	}
	// Preorder, and the frames as it meets them.
	order := make([]int32, 0, len(b.nodes))
	remap := make([]int32, len(b.frames))
	for i := range remap {
		remap[i] = -1
	}
	var frames []TreeFrame
	walk := []int32{0}
	for len(walk) > 0 {
		n := walk[len(walk)-1]
		walk = walk[:len(walk)-1]
		order = append(order, n)
		if f := b.nodes[n].frame; n != 0 && remap[f] < 0 {
			remap[f] = int32(len(frames))
			frames = append(frames, b.frames[f])
		}
		for i := start[n+1] - 1; i >= start[n]; i-- {
			walk = append(walk, kids[i])
		}
	}
	scale := b.scale()
	out := appendHead(make([]byte, 0, 16+len(b.nodes)*6), scale, frames, len(b.nodes)-1)
	for _, i := range order {
		n := &b.nodes[i]
		if i != 0 {
			out = binary.AppendUvarint(out, uint64(remap[n.frame]))
		}
		out = binary.AppendUvarint(out, uint64(n.total/scale))
		out = binary.AppendUvarint(out, uint64(n.self/scale))
		out = binary.AppendUvarint(out, uint64(start[i+1]-start[i]))
	}
	return out
}

// Deflate returns a version 1 tree as version 2: the same tree, deflated.
// A tree is mostly its frames' names, which repeat their prefixes; stored
// as base64 in _source, the names compressed poorly (the rollup's part-hour
// partition trees took 165 KB a document on disk for 40 simulated hosts'
// 10 minutes, and their 75 KB deflated). The rollup writes one per
// partition every minute, so it takes the fastest level: on a partition's
// 10-minute tree of the pipeline bench's fleet, 17 ms instead of 45 at
// the default level, 2.7% larger (docs/ROLLUP.md, "Part-hour trees
// deflated at the fastest level").
func Deflate(tree []byte) []byte {
	return deflated(TreeVersionDeflated, tree[1:], flate.BestSpeed)
}

// TreeLimits bound what DecodeTree accepts; checked while decoding, before
// anything is allocated for them. Zero fields take the defaults noted.
type TreeLimits struct {
	MaxBytes      int // encoded size; default 64 MiB
	MaxNodes      int // nodes below the root; default 4,000,000
	MaxFrames     int // distinct frames; default 1,000,000
	MaxDepth      int // default 4096
	MaxFrameBytes int // a frame's name or kind; default 64 KiB
}

func (l TreeLimits) withDefaults() TreeLimits {
	def := func(v, d int) int {
		if v <= 0 {
			return d
		}
		return v
	}
	return TreeLimits{
		MaxBytes: def(l.MaxBytes, 64<<20), MaxNodes: def(l.MaxNodes, 4_000_000), MaxFrames: def(l.MaxFrames, 1_000_000),
		MaxDepth: def(l.MaxDepth, 4096), MaxFrameBytes: def(l.MaxFrameBytes, 64<<10),
	}
}

// Errors of DecodeTree.
var (
	ErrTreeInvalid  = errors.New("invalid tree")
	ErrTreeTooLarge = errors.New("tree too large")
)

// maxTreeValue bounds a value: 2^62 ns is 146 years of CPU, 24 h of about
// 53,000 busy 8-core hosts in one tree (a fleet's day tree has every host
// of a partition); the query sums trees in int64 (2^63).
const maxTreeValue = 1 << 62

// TreeVisitor receives a decoded tree: Frames once, then every node below
// the root in preorder with its depth (1 for the root's children) and its
// index in the frames. Node is called before the node's subtree is checked:
// on an error from DecodeTree, discard what was visited.
type TreeVisitor interface {
	Frames(frames []TreeFrame)
	Node(depth int, frame int32, self, total int64)
}

// DecodeTree reads an encoded tree into v and returns its root's self (the
// value of empty stacks) and total.
func DecodeTree(b []byte, lim TreeLimits, v TreeVisitor) (rootSelf, rootTotal int64, err error) {
	lim = lim.withDefaults()
	if len(b) > lim.MaxBytes {
		return 0, 0, fmt.Errorf("%w: %d bytes, limit %d", ErrTreeTooLarge, len(b), lim.MaxBytes)
	}
	if len(b) > 0 && b[0] == TreeVersionDeflated {
		// Inflated, bounded by the same MaxBytes.
		body, err := inflated(b[1:], lim.MaxBytes-1)
		if err != nil {
			return 0, 0, err
		}
		b = append([]byte{TreeVersion}, body...)
	}
	d := treeDecoder{b: b}
	if len(b) == 0 || b[0] != TreeVersion {
		return 0, 0, fmt.Errorf("%w: not a version %d tree", ErrTreeInvalid, TreeVersion)
	}
	d.off = 1
	scale := d.uvarint()
	if d.err == nil && (scale == 0 || scale > maxTreeValue) {
		return 0, 0, fmt.Errorf("%w: scale %d", ErrTreeInvalid, scale)
	}
	nFrames := d.uvarint()
	// A frame takes at least two bytes, so the count is checked against
	// the bytes left before the table is allocated.
	if d.err == nil && (nFrames > uint64(lim.MaxFrames) || nFrames > uint64(len(b)-d.off)/2) {
		if nFrames > uint64(lim.MaxFrames) {
			return 0, 0, fmt.Errorf("%w: %d frames, limit %d", ErrTreeTooLarge, nFrames, lim.MaxFrames)
		}
		return 0, 0, fmt.Errorf("%w: %d frames in %d bytes", ErrTreeInvalid, nFrames, len(b))
	}
	if d.err != nil {
		return 0, 0, d.err
	}
	frames := make([]TreeFrame, nFrames)
	for i := range frames {
		frames[i].Name = d.str(lim.MaxFrameBytes)
		frames[i].Kind = d.str(lim.MaxFrameBytes)
		if d.err != nil {
			return 0, 0, d.err
		}
	}
	nNodes := d.uvarint()
	// A node takes at least four bytes.
	if d.err == nil && (nNodes > uint64(lim.MaxNodes) || nNodes > uint64(len(b)-d.off)/4) {
		if nNodes > uint64(lim.MaxNodes) {
			return 0, 0, fmt.Errorf("%w: %d nodes, limit %d", ErrTreeTooLarge, nNodes, lim.MaxNodes)
		}
		return 0, 0, fmt.Errorf("%w: %d nodes in %d bytes", ErrTreeInvalid, nNodes, len(b))
	}
	v.Frames(frames)
	// open holds, per node on the current path, its total, what its self
	// and finished children add up to so far, and the children left.
	type open struct {
		total, sum int64
		kids       uint64
	}
	value := func() int64 {
		x := d.uvarint()
		if x > maxTreeValue/scale {
			d.fail("value %d times scale %d too large", x, scale)
			return 0
		}
		return int64(x * scale)
	}
	rootTotal, rootSelf = value(), value()
	stack := []open{{total: rootTotal, sum: rootSelf, kids: d.uvarint()}}
	seen := uint64(0)
	for d.err == nil {
		top := &stack[len(stack)-1]
		if top.kids == 0 {
			if top.sum != top.total {
				d.fail("a node's total %d is not its self and children's %d", top.total, top.sum)
				break
			}
			stack = stack[:len(stack)-1]
			if len(stack) == 0 {
				break
			}
			parent := &stack[len(stack)-1]
			parent.sum += top.total
			if parent.sum > parent.total {
				d.fail("children's totals %d above their parent's %d", parent.sum, parent.total)
			}
			continue
		}
		top.kids--
		if seen == nNodes {
			d.fail("more nodes than the %d declared", nNodes)
			break
		}
		seen++
		f := d.uvarint()
		total, self := value(), value()
		kids := d.uvarint()
		if d.err != nil {
			break
		}
		if f >= nFrames {
			d.fail("frame %d of %d", f, nFrames)
			break
		}
		if self > total {
			d.fail("self %d above total %d", self, total)
			break
		}
		if len(stack) >= lim.MaxDepth {
			return 0, 0, fmt.Errorf("%w: deeper than %d", ErrTreeTooLarge, lim.MaxDepth)
		}
		v.Node(len(stack), int32(f), self, total)
		stack = append(stack, open{total: total, sum: self, kids: kids})
	}
	if d.err != nil {
		return 0, 0, d.err
	}
	if seen != nNodes {
		return 0, 0, fmt.Errorf("%w: %d nodes declared, %d present", ErrTreeInvalid, nNodes, seen)
	}
	if d.off != len(b) {
		return 0, 0, fmt.Errorf("%w: %d bytes after the tree", ErrTreeInvalid, len(b)-d.off)
	}
	return rootSelf, rootTotal, nil
}

type treeDecoder struct {
	b   []byte
	off int
	err error
}

func (d *treeDecoder) fail(format string, args ...any) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: at byte %d: %s", ErrTreeInvalid, d.off, fmt.Sprintf(format, args...))
	}
}

func (d *treeDecoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	x, n := binary.Uvarint(d.b[d.off:])
	if n <= 0 {
		d.fail("bad varint")
		return 0
	}
	d.off += n
	return x
}

func (d *treeDecoder) str(max int) string {
	n := d.uvarint()
	if d.err != nil {
		return ""
	}
	if n > uint64(max) || n > uint64(len(d.b)-d.off) {
		d.fail("string of %d bytes", n)
		return ""
	}
	s := string(d.b[d.off : d.off+int(n)])
	d.off += int(n)
	return s
}
