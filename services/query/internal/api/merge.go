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
	// truncated: stacks were left out before merging (a per-stack read
	// past MaxStacks; never when trees or heads answer, whose edges are
	// merged whole); their value is under "[other]" at the root.
	truncated bool
	source    string
	// nodes is, when root is a head (decodeHead), its whole tree's node
	// count; 0 when root is the whole tree.
	nodes int
	// keep, when set, is the flame graph's nodes proven from a merge of
	// heads (proveKeep): root is not the whole tree, and only they are
	// exact.
	keep map[*node]bool
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
// to MaxStacks. The edges are merged whole, so the tree is exact.
func (a *API) selectionTree(ctx context.Context, sel store.Selection) (*merged, error) {
	m := &treeMerge{root: &node{name: "total"}}
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
	err = a.edgeStacks(ctx, read.Edges, func(v int64, names, kinds []string) { mergeStack(m.root, v, names, kinds) })
	if err != nil {
		return nil, err
	}
	return &merged{root: m.root, source: read.Source}, nil
}

// badTreeError is a tree document that does not decode.
type badTreeError struct{ err error }

func (e *badTreeError) Error() string { return fmt.Sprintf("merge tree: %v", e.err) }
func (e *badTreeError) Unwrap() error { return e.err }

// treeMerge merges encoded trees into root, node by node: each tree's
// frames are resolved once, then each node is looked up among its
// parent's children.
type treeMerge struct {
	root   *node
	frames []indices.TreeFrame
	path   []*node
}

func (m *treeMerge) Frames(f []indices.TreeFrame) { m.frames = f }

func (m *treeMerge) Node(depth int, frame int32, self, total int64) {
	f := m.frames[frame]
	n := m.path[depth-1].child(f.Name, f.Kind)
	n.self += self
	n.total += total
	m.path = append(m.path[:depth], n)
}

func (m *treeMerge) merge(b []byte) error {
	m.path = append(m.path[:0], m.root)
	self, total, err := indices.DecodeTree(b, indices.TreeLimits{}, m)
	if err != nil {
		return &badTreeError{err}
	}
	m.root.self += self
	m.root.total += total
	return nil
}
