package api

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/stackstream/stackstream/schemas/indices"
	"github.com/stackstream/stackstream/services/query/internal/store"
)

// merged is a selection's call tree with how it was read.
type merged struct {
	root *node
	// truncated: stacks were left out before merging (an edge past
	// MaxStacks, or a per-stack read past it); their value is under
	// "[other]" at the root.
	truncated bool
	source    string
	// nodes is, when root is a head (decodeHead), its whole tree's node
	// count; 0 when root is the whole tree.
	nodes int
}

// allNodes counts the nodes of m's whole tree.
func (m *merged) allNodes() int {
	if m.nodes > 0 {
		return m.nodes
	}
	return countNodes(m.root)
}

// selectionTree merges a selection's call tree: whole hours from the
// rollup's pre-merged trees and the minutes around them per stack
// (store.Trees), or every stack when trees cannot answer. A tree that does
// not decode sends the selection to the per-stack path, which is exact up
// to MaxStacks.
func (a *API) selectionTree(ctx context.Context, sel store.Selection) (*merged, error) {
	m := newTreeMerge()
	read, ok, err := a.store.Trees(ctx, sel, m.merge)
	var bad *badTreeError
	if errors.As(err, &bad) {
		slog.Warn("tree does not decode: reading the selection per stack", "err", err)
		ok, err = false, nil
	}
	if err != nil {
		return nil, err
	}
	if !ok {
		st, err := a.store.Stacks(ctx, sel)
		if err != nil {
			return nil, err
		}
		return &merged{root: stacksTree(st), truncated: st.Truncated, source: st.Source}, nil
	}
	root := m.tree()
	for _, e := range read.Edges {
		addStacks(root, e)
	}
	return &merged{root: root, truncated: read.Truncated(), source: read.Source}, nil
}

// badTreeError is a tree document that does not decode.
type badTreeError struct{ err error }

func (e *badTreeError) Error() string { return fmt.Sprintf("merge tree: %v", e.err) }
func (e *badTreeError) Unwrap() error { return e.err }

// treeMerge merges encoded trees node by node into an arena: frames are
// interned once per tree, a node's child is found by (parent, frame) in
// one map, and no node is allocated on its own; tree converts the arena
// to nodes once every tree is in.
type treeMerge struct {
	frames []int32 // the current tree's frames, as interned IDs
	intern map[indices.TreeFrame]int32
	names  []indices.TreeFrame // by interned ID
	nodes  []arenaNode         // nodes[0] is the root
	kids   map[uint64]int32    // parent<<32 | frame -> node
	path   []int32
}

type arenaNode struct {
	frame       int32
	parent      int32
	self, total int64
}

func newTreeMerge() *treeMerge {
	return &treeMerge{intern: map[indices.TreeFrame]int32{}, nodes: []arenaNode{{frame: -1}}, kids: map[uint64]int32{}}
}

func (m *treeMerge) Frames(f []indices.TreeFrame) {
	m.frames = m.frames[:0]
	for _, tf := range f {
		id, ok := m.intern[tf]
		if !ok {
			id = int32(len(m.names))
			m.names = append(m.names, tf)
			m.intern[tf] = id
		}
		m.frames = append(m.frames, id)
	}
}

func (m *treeMerge) Node(depth int, frame int32, self, total int64) {
	p := m.path[depth-1]
	f := m.frames[frame]
	k := uint64(p)<<32 | uint64(uint32(f))
	c, ok := m.kids[k]
	if !ok {
		c = int32(len(m.nodes))
		m.nodes = append(m.nodes, arenaNode{frame: f, parent: p})
		m.kids[k] = c
	}
	m.nodes[c].self += self
	m.nodes[c].total += total
	m.path = append(m.path[:depth], c)
}

func (m *treeMerge) merge(b []byte) error {
	m.path = append(m.path[:0], 0)
	self, total, err := indices.DecodeTree(b, indices.TreeLimits{}, m)
	if err != nil {
		return &badTreeError{err}
	}
	m.nodes[0].self += self
	m.nodes[0].total += total
	return nil
}

// tree is the merged tree as nodes, allocated in one slice, each node's
// children in one slice cut from another.
func (m *treeMerge) tree() *node {
	out := make([]node, len(m.nodes))
	counts := make([]int32, len(m.nodes))
	for i := 1; i < len(m.nodes); i++ {
		counts[m.nodes[i].parent]++
	}
	ptrs := make([]*node, len(m.nodes)-1)
	next := 0
	for i := range out {
		a := &m.nodes[i]
		out[i].self, out[i].total = a.self, a.total
		if i == 0 {
			out[i].name = "total"
		} else {
			out[i].name, out[i].kind = m.names[a.frame].Name, m.names[a.frame].Kind
		}
		out[i].kids = ptrs[next : next : next+int(counts[i])]
		next += int(counts[i])
	}
	for i := 1; i < len(m.nodes); i++ {
		p := &out[m.nodes[i].parent]
		p.kids = append(p.kids, &out[i])
	}
	return &out[0]
}

// topFromTree sums self and total per function name over a merged tree:
// self is every node's self, total a node's total where no ancestor has
// the same name (so recursion counts once per stack, as a stack's total
// counts each of its functions once). "[other]" (stacks left out) is not a
// function.
func topFromTree(root *node, total int64, limit int) []Function {
	byName := map[string]*Function{}
	onPath := map[string]int{}
	var walk func(n *node)
	walk = func(n *node) {
		for _, c := range n.kids {
			if c.name == otherNodes {
				continue
			}
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
	return rankFunctions(byName, total, limit)
}
