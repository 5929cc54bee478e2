package aggregate

import (
	"slices"
	"unsafe"
	"weak"

	"github.com/stackstream/stackstream/schemas/indices"
	"github.com/stackstream/stackstream/schemas/record"
)

// frameTrie holds the stacks of an hour window for its trees: each distinct
// frame once, and each stack as a node of a prefix tree of frames (root
// first), so the stacks of every host and service of the hour share their
// frames and their common callers. A stack keeps only its node (in the
// hour's stack table, stackdocs.go).
// Holding each stack's own frames instead cost 25 frames of 72 bytes per
// stack and host, most of an hour window's heap at fleet scale
// (TestFleetStateBytes).
type frameTrie struct {
	// frameTable numbers the trie's frames.
	frameTable
	// fromTable is the table of the stacks' frames inserted (the stack
	// cache's, stackFrames), and fromIDs[i] is its frame i's ID here plus
	// one (0: not looked up yet): a frame is looked up by name once per
	// trie and table, not for every frame of every stack inserted (two
	// thirds of an insert, and a twelfth of the rollup's CPU in the
	// pipeline bench, until 2026-12-01). Its 4 bytes a frame of the table
	// are charged with the table's frames (frameCost), which covers a
	// slot in each live trie of the instance; a table dropped from the
	// cache is let go at the trie's next insert.
	fromTable weak.Pointer[frameTable]
	fromIDs   []int32
	// nodes[0] is the root (no frame); a node's parent is its caller.
	nodes []trieNode
	// branches are the children that do not directly follow their parent
	// in nodes, by (parent, frame); a child that does (nodes[n+1] with
	// parent n: the next frame of the stack that added n, or of one that
	// extended the stack ending at n) is found there. A stack new to the
	// trie adds its frames below the node where it leaves the known ones as
	// a run of nodes, each the next one's parent, so one entry a stack is
	// mapped, not one a node. Until 2026-12-03 every node had links (its
	// first child and next sibling, 8 bytes) and the children after a
	// node's eighth were mapped: at the end of an hour of 200 loadgen hosts
	// 87% of the live tries' 7.5 M nodes were their parent's only child.
	branches map[trieNode]int32
	// frozen: the maps are dropped (freeze), and stacks inserted since go
	// to late, whose node n is node base+n-1 here.
	frozen bool
	late   *frameTrie
	base   int32
	// bytes is what the trie is charged.
	bytes int64
}

type trieNode struct{ parent, frame int32 }

// Charges of a frameTrie (measured by TestFleetStateBytes with a margin):
// a node (its 8-byte slot, and a quarter more when a large slice has just
// grown; 24 until its links went, 2026-12-03, 32 until the links' copy of
// the frame went, 2026-12-02), and trieBranchBytes more for a node in
// branches (a map slot of 12 bytes, at the load of a map just grown); a
// frame, trieFrameCost. Until 2026-12-02 every node was charged 64 bytes:
// at 200 pipeline-bench hosts, whose nodes were 19 bytes each held, the
// live tries were half the charge at 2.2 times their heap. A distinct
// frame of the stack cache's table is charged frameCost: trieFrameBytes
// (its slot and its map entries, likewise, and a fromIDs slot in each
// live trie) plus the bytes of its names. A stack holds nothing of its
// own, only its nodes: until 2026-12-02 the trie held its stacks' nodes
// by ID as well (48 bytes charged a stack); the hour's stack table
// (stackdocs.go) now numbers them once.
const (
	trieNodeBytes   = 12
	trieBranchBytes = 32
	trieFrameBytes  = 400
)

func frameCost(f indices.Frame) int64 {
	return trieFrameBytes + frameNames(f)
}

func frameNames(f indices.Frame) int64 {
	return int64(len(f.Function) + len(f.File) + len(f.Binary) + len(f.Kind))
}

// What a frame new to a trie adds besides its names, charged instead of
// trieFrameBytes since 2026-12-02 (the trie's frames were most of its
// overcharge at fleet scale: TestFleetStateBytes): its slot in the trie's
// frames (72 bytes, doubled for the slack of a small slice's growth) and
// its entry in named (24-byte slots) or other (80-byte ones), at the 7/16
// load of a map just grown. The stack cache's table charges frameCost,
// above both, which covers the tries' fromIDs as well.
const (
	trieNamedFrameBytes = 2*72 + 64
	trieOtherFrameBytes = 2*72 + 192
)

// trieFrameCost is what frame f, new to a trie, adds to it.
func trieFrameCost(f indices.Frame) int64 {
	if isNamed(f) {
		return trieNamedFrameBytes + frameNames(f)
	}
	return trieOtherFrameBytes + frameNames(f)
}

// trieFrame is what an hour's trees and function documents read of a
// frame: its function (else its binary, the name a tree shows) and its
// kind as a tree has it (indices.TreeFrameOf). Frames that differ only in
// file, line or binary (a function called from several lines, a new build
// of the same code) are one trie frame, so their stacks share nodes: in the
// 50-host soak the trie's nodes were a third of the rollup's heap.
func trieFrame(f indices.Frame) indices.Frame {
	// The kind as indices.TreeFrameOf has it, without its name: for a
	// frame without a function that is a string built per call.
	k := f.FrameKind()
	if k == record.KindNative {
		k = ""
	}
	t := indices.Frame{Function: f.Function, Kind: k}
	if f.Function == "" {
		t.Binary = f.Binary
	}
	return t
}

func newFrameTrie() *frameTrie {
	return &frameTrie{
		frameTable: frameTable{named: map[string]int32{}, other: map[indices.Frame]int32{}},
		nodes:      []trieNode{{}},
		branches:   map[trieNode]int32{},
	}
}

// insert adds a stack (its frames leaf first, as indices.Frame slices
// are) and returns its node and the bytes it added. The frames may come
// from any table (the stack cache's, one it dropped).
func (t *frameTrie) insert(frames stackFrames) (int32, int64) {
	if t.frozen {
		if t.late == nil {
			t.late = newFrameTrie()
		}
		n, added := t.late.insert(frames)
		if n == 0 {
			return 0, added
		}
		return t.base + n - 1, added
	}
	node, added := t.insertFrames(frames)
	t.bytes += added
	return node, added
}

// freeze drops what only inserting reads: the maps, and the slack of the
// slices. A late stack inserted after is held by a live trie of its own,
// so its frames are not shared with the frozen ones (the trees read the
// same frames either way). It returns the change of the trie's charge:
// a node, a frame and its names in exactly sized slices.
func (t *frameTrie) freeze() int64 {
	if t.frozen {
		return 0
	}
	t.nodes, t.frames = slices.Clone(t.nodes), slices.Clone(t.frames)
	t.named, t.other, t.fromIDs, t.branches = nil, nil, nil, nil
	t.fromTable = weak.Pointer[frameTable]{}
	t.frozen, t.base = true, int32(len(t.nodes))
	n := int64(cap(t.nodes))*int64(unsafe.Sizeof(trieNode{})) + int64(cap(t.frames))*int64(unsafe.Sizeof(indices.Frame{}))
	for _, f := range t.frames {
		n += int64(len(f.Function) + len(f.File) + len(f.Binary) + len(f.Kind))
	}
	delta := n - t.bytes
	t.bytes = n
	return delta
}

func (t *frameTrie) insertFrames(frames stackFrames) (node int32, added int64) {
	t.slots(frames.table)
	for i := len(frames.ids) - 1; i >= 0; i-- {
		from := frames.ids[i]
		id := t.fromIDs[from] - 1
		if id < 0 {
			f := frames.table.frames[from]
			var ok bool
			if id, ok = t.lookup(f); !ok {
				id = t.add(f)
				added += trieFrameCost(f)
			}
			t.fromIDs[from] = id + 1
		}
		child := t.child(node, id)
		if child == 0 {
			var branch bool
			child, branch = t.addChild(node, id)
			added += trieNodeBytes
			if branch {
				added += trieBranchBytes
			}
		}
		node = child
	}
	return node, added
}

// slots makes fromIDs the slots of table's frames, one for each.
func (t *frameTrie) slots(table *frameTable) {
	if t.fromTable != table.self {
		t.fromIDs, t.fromTable = nil, table.self
	}
	if n := len(table.frames); n > len(t.fromIDs) {
		// Its length is its capacity: the slots past the table's
		// frames are zero, not looked up yet.
		t.fromIDs = slices.Grow(t.fromIDs, n-len(t.fromIDs))
		t.fromIDs = t.fromIDs[:cap(t.fromIDs)]
	}
}

// child is parent's child of frame (0: none).
func (t *frameTrie) child(parent, frame int32) int32 {
	if n := parent + 1; int(n) < len(t.nodes) && t.nodes[n] == (trieNode{parent: parent, frame: frame}) {
		return n
	}
	return t.branches[trieNode{parent: parent, frame: frame}]
}

// branchAt reports whether a child new to parent would be a branch: not
// the node that directly follows it.
func (t *frameTrie) branchAt(parent int32) bool {
	return int(parent) != len(t.nodes)-1
}

// addChild adds a node of frame under parent, and reports whether it is
// a branch.
func (t *frameTrie) addChild(parent, frame int32) (int32, bool) {
	c := int32(len(t.nodes))
	branch := t.branchAt(parent)
	if branch {
		t.branches[trieNode{parent: parent, frame: frame}] = c
	}
	t.nodes = append(t.nodes, trieNode{parent: parent, frame: frame})
	return c, branch
}

// cost is what insert would add; when t is nil, an upper bound for any
// trie (the stack cache's trieBound: frames charged frameCost).
func (t *frameTrie) cost(frames stackFrames) int64 {
	if t != nil && t.frozen {
		return t.late.cost(frames)
	}
	var n int64
	node, known := int32(0), t != nil
	mapped := t != nil && t.fromTable == frames.table.self
	for i := len(frames.ids) - 1; i >= 0; i-- {
		from := frames.ids[i]
		id, ok := int32(0), false
		if mapped && int(from) < len(t.fromIDs) && t.fromIDs[from] != 0 {
			id, ok = t.fromIDs[from]-1, true
		}
		if !ok && t != nil {
			id, ok = t.lookup(frames.table.frames[from])
		}
		if !ok && t == nil {
			n += frameCost(frames.table.frames[from])
		} else if !ok {
			n += trieFrameCost(frames.table.frames[from])
		}
		if !known {
			// Under a node new to t (the run of nodes it starts), or any
			// node of any trie.
			n += trieNodeBytes
			if t == nil {
				n += trieBranchBytes
			}
			continue
		}
		if ok {
			if c := t.child(node, id); c != 0 {
				node = c
				continue
			}
		}
		known = false
		n += trieNodeBytes
		if t.branchAt(node) {
			n += trieBranchBytes
		}
	}
	return n
}

// appendFrames appends a node's stack, leaf first, as trieFrame has it.
func (t *frameTrie) appendFrames(dst []indices.Frame, node int32) []indices.Frame {
	if t.frozen && node >= t.base {
		return t.late.appendFrames(dst, node-t.base+1)
	}
	for ; node != 0; node = t.nodes[node].parent {
		dst = append(dst, t.frames[t.nodes[node].frame])
	}
	return dst
}

// nodeAt is a node's parent and frame, as appendFrames numbers them
// across a frozen trie and its late one: a late frame's ID comes after the
// frozen trie's frames.
func (t *frameTrie) nodeAt(node int32) (parent, frame int32) {
	if t.frozen && node >= t.base {
		n := t.late.nodes[node-t.base+1]
		if n.parent != 0 {
			n.parent += t.base - 1
		}
		return n.parent, n.frame + int32(len(t.frames))
	}
	n := t.nodes[node]
	return n.parent, n.frame
}

// frameAt is the frame of an ID nodeAt returned.
func (t *frameTrie) frameAt(id int32) *indices.Frame {
	if int(id) >= len(t.frames) {
		return &t.late.frames[int(id)-len(t.frames)]
	}
	return &t.frames[id]
}

// counts are how many node and frame IDs nodeAt can return.
func (t *frameTrie) counts() (nodes, frames int) {
	nodes, frames = len(t.nodes), len(t.frames)
	if t.frozen && t.late != nil {
		nodes += len(t.late.nodes) - 1
		frames += len(t.late.frames)
	}
	return nodes, frames
}
