package api

import (
	"math"

	"github.com/stackstream/stackstream/schemas/indices"
	"github.com/stackstream/stackstream/services/query/internal/store"
)

// A fleet-wide range's whole hours can be read as the fleet's hour heads
// (store.FleetHourHeads: per hour, the heaviest nodes of the whole fleet's
// hour tree with the value of the children each kept node left out),
// merged with whole trees (hours without a fresh head, the edges' stacks).
// Merged heads are not the merged trees: a node every head left out, or
// one a head left out while another kept it, has a total the merge does not
// know. Each head bounds it: a node a head left out is no heavier there
// than the lightest node the head kept (heads keep nodes heaviest first),
// nor than the folded value of its nearest kept ancestor. proveKeep runs
// the flame graph's choice of nodes (keepHeaviest) on the merge and keeps
// the answer only when those bounds show the merged trees would make the
// same choice with the same values; the caller reads the whole trees
// otherwise.

// pieceMerge merges heads and whole trees into one tree, remembering per
// head the nodes it kept.
type pieceMerge struct {
	treeMerge
	heads []*headPiece // the heads that left nodes out
}

// headPiece is a merged head: the nodes it kept (the root first) with the
// value of their children it left out, and the lightest total it kept.
type headPiece struct {
	kept  []keptNode
	least int64
	at    []int // the index in kept of each node on the decoder's path
}

type keptNode struct {
	n      *node
	folded int64
}

func newPieceMerge() *pieceMerge {
	return &pieceMerge{treeMerge: treeMerge{root: &node{name: "total"}}}
}

// mergeHead merges an encoded head (indices.DecodeHead).
func (pm *pieceMerge) mergeHead(b []byte) error {
	h, err := store.DecodeHead(b)
	if err != nil {
		return &badTreeError{err}
	}
	return pm.mergeDecoded(h)
}

// mergeDecoded merges a decoded head (store.Head: from the store's cache
// of decoded heads, or decoded as read).
func (pm *pieceMerge) mergeDecoded(h *store.Head) error {
	p := &headPiece{kept: []keptNode{{n: pm.root}}, least: math.MaxInt64, at: []int{0}}
	pm.path = append(pm.path[:0], pm.root)
	nodes, self, total := h.Visit(&headMerge{m: &pm.treeMerge, p: p})
	pm.root.self += self
	pm.root.total += total
	if len(p.kept)-1 < nodes {
		p.at = nil
		pm.heads = append(pm.heads, p)
	}
	return nil
}

// headMerge is the visitor of mergeHead.
type headMerge struct {
	m *treeMerge
	p *headPiece
}

func (h *headMerge) Frames(f []indices.TreeFrame) { h.m.Frames(f) }

func (h *headMerge) Node(depth int, frame int32, self, total int64) {
	h.m.Node(depth, frame, self, total)
	h.p.kept = append(h.p.kept, keptNode{n: h.m.path[depth]})
	h.p.at = append(h.p.at[:depth], len(h.p.kept)-1)
	h.p.least = min(h.p.least, total)
}

func (h *headMerge) Folded(depth int, total int64) { h.p.kept[h.p.at[depth-1]].folded += total }

// bound sets every node's slack and open from the heads that left nodes
// out: in a head, a node it kept has children left out of at most the
// lighter of the head's lightest kept total and the node's folded value;
// a node it left out has at most its nearest kept ancestor's bound, and so
// have its children. Each head visits its kept nodes and their children
// (a head keeps a connected top of the tree), leaving its bound on the
// children it left out (carry); one walk then adds to every node the
// carries of its own and its ancestors: time in the heads' kept nodes
// plus one walk of the merge, not a walk of the merge per head.
func (pm *pieceMerge) bound() {
	for i, p := range pm.heads {
		mark := int32(i + 1)
		for _, k := range p.kept {
			k.n.keptBy, k.n.keptFolded = mark, k.folded
		}
		for _, k := range p.kept {
			b := min(p.least, k.folded)
			k.n.open += b
			if b == 0 {
				continue
			}
			for _, c := range k.n.kids {
				if c.keptBy != mark {
					c.carry += b
				}
			}
		}
	}
	var walk func(n *node, carry int64)
	walk = func(n *node, carry int64) {
		carry += n.carry
		n.slack += carry
		n.open += carry
		for _, c := range n.kids {
			walk(c, carry)
		}
	}
	walk(pm.root, 0)
}

// proveKeep is keepHeaviest's choice of maxNodes nodes over the merged trees,
// found from a merge of heads after bound, and whether it is proven. The
// nodes with an exact total (no slack) are chosen as keepHeaviest chooses;
// a node with slack and a child no piece holds are unknowns, bounded by
// their slack and open. The choice is the merged trees' when every chosen
// node is exact and heavier than every unknown's bound: the trees'
// frontier then holds the same exact candidates in the same relative order
// (their children are sorted by exact totals) and pops them before any
// unknown. Unknowns of value 0 may exist whenever a head left a node out,
// so a choice ending at total 0, or ending with fewer than maxNodes nodes, is
// not proven.
func proveKeep(root *node, maxNodes int) (map[*node]bool, bool) {
	keep := make(map[*node]bool, maxNodes)
	h := &frontier{}
	var unknown int64
	push := func(n *node, depth int) {
		unknown = max(unknown, n.open)
		for _, c := range sortedChildren(n) {
			if c.slack > 0 {
				unknown = max(unknown, c.total+c.slack)
				continue
			}
			h.push(candidate{c, float64(c.total), depth + 1, h.seq})
			h.seq++
		}
	}
	push(root, 0)
	last := int64(0)
	for len(keep) < maxNodes && len(h.items) > 0 {
		c := h.pop()
		keep[c.n] = true
		last = c.n.total
		push(c.n, c.depth)
	}
	return keep, len(keep) == maxNodes && last > unknown
}
