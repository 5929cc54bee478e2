package aggregate

import "github.com/stackstream/stackstream/schemas/indices"

// frameTrie holds the stacks of an hour window for its trees: each distinct
// frame once, and each stack as a node of a prefix tree of frames (root
// first), so the stacks of every host and service of the hour share their
// frames and their common callers. A stack document keeps only its node.
// Holding each stack's own frames instead cost 25 frames of 72 bytes per
// stack and host, most of an hour window's heap at fleet scale
// (TestFleetStateBytes).
type frameTrie struct {
	frames   []indices.Frame
	frameIDs map[indices.Frame]int32
	// nodes[0] is the root (no frame); a node's parent is its caller.
	nodes    []trieNode
	children map[trieNode]int32 // by (parent, frame)
}

type trieNode struct{ parent, frame int32 }

// Charges of a frameTrie (measured by TestFleetStateBytes with a margin):
// a node (its slot and its children entry, with the slack of their
// growth), a distinct frame (its slot and its map entry, likewise) plus
// the bytes of its names.
const (
	trieNodeBytes  = 64
	trieFrameBytes = 400
)

func frameCost(f indices.Frame) int64 {
	return trieFrameBytes + int64(len(f.Function)+len(f.File)+len(f.Binary)+len(f.Kind))
}

func newFrameTrie() *frameTrie {
	return &frameTrie{frameIDs: map[indices.Frame]int32{}, nodes: []trieNode{{}}, children: map[trieNode]int32{}}
}

// insert adds a stack (leaf first, as indices.Frame slices are) and returns
// its node and the bytes it added.
func (t *frameTrie) insert(frames []indices.Frame) (node int32, added int64) {
	for i := len(frames) - 1; i >= 0; i-- {
		f := frames[i]
		id, ok := t.frameIDs[f]
		if !ok {
			id = int32(len(t.frames))
			t.frames = append(t.frames, f)
			t.frameIDs[f] = id
			added += frameCost(f)
		}
		e := trieNode{parent: node, frame: id}
		child, ok := t.children[e]
		if !ok {
			child = int32(len(t.nodes))
			t.nodes = append(t.nodes, e)
			t.children[e] = child
			added += trieNodeBytes
		}
		node = child
	}
	return node, added
}

// cost is what insert would add (an upper bound when t is nil).
func (t *frameTrie) cost(frames []indices.Frame) int64 {
	var n int64
	node, known := int32(0), t != nil
	for i := len(frames) - 1; i >= 0; i-- {
		f := frames[i]
		id, ok := int32(0), false
		if t != nil {
			id, ok = t.frameIDs[f]
		}
		if !ok {
			n += frameCost(f)
		}
		if known && ok {
			node, known = t.children[trieNode{parent: node, frame: id}]
		} else {
			known = false
		}
		if !known {
			n += trieNodeBytes
		}
	}
	return n
}

// appendFrames appends a node's stack, leaf first.
func (t *frameTrie) appendFrames(dst []indices.Frame, node int32) []indices.Frame {
	for ; node != 0; node = t.nodes[node].parent {
		dst = append(dst, t.frames[t.nodes[node].frame])
	}
	return dst
}
