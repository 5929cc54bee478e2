package api

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/stackstream/stackstream/schemas/indices"
	"github.com/stackstream/stackstream/services/query/internal/store"
)

// A top table or a sandwich sums every node of a selection by function; it
// needs no merged tree. A stackSink takes the selection's trees and stacks
// as they are read and sums them on the fly: a fleet day's 6 day trees
// decode in about 0.2 s, while merging them into one tree of 1.29 M nodes
// took 18 s at load 17 (BenchmarkTopDayTrees). Both sums are linear in the
// trees and stacks, so summing them one by one equals summing their merge.
type stackSink interface {
	// tree adds an encoded tree (indices.DecodeTree), a badTreeError when
	// it does not decode.
	tree(b []byte) error
	// stack adds one stack of value v, frames root first with their kinds
	// (nil when all are native); no frames is value without a function.
	stack(v int64, names, kinds []string)
}

// sumSelection hands sel to a sink made by newSink, as selectionTree
// merges it: whole hours from the rollup's trees and the edges' every
// stack, or every stack up to MaxStacks when trees cannot answer (the
// value of those left out as value without a function, truncated). A
// tree that does not decode is logged and the selection is summed per
// stack into a new sink.
func (a *API) sumSelection(ctx context.Context, sel store.Selection, newSink func() stackSink) (sink stackSink, source string, truncated bool, err error) {
	sink = newSink()
	read, ok, err := a.store.Trees(ctx, sel, sink.tree)
	var bad *badTreeError
	if errors.As(err, &bad) {
		slog.Warn("tree does not decode: reading the selection per stack", "err", err)
		sink, ok, err = newSink(), false, nil
	}
	if err != nil {
		return nil, "", false, err
	}
	if ok {
		if err := a.edgeStacks(ctx, read.Edges, sink.stack); err != nil {
			return nil, "", false, err
		}
		return sink, read.Source, false, nil
	}
	st, err := a.store.Stacks(ctx, sel)
	if err != nil {
		return nil, "", false, err
	}
	var sum int64
	for id, v := range st.Values {
		sink.stack(v, st.Frames[id], st.Kinds[id])
		sum += v
	}
	if rest := st.Total - sum; rest > 0 && st.Truncated {
		sink.stack(rest, nil, nil)
	}
	return sink, st.Source, st.Truncated, nil
}

// edgeStacks hands every stack of the edges (store.TreeRead.Edges) to use
// with its names, read 10,000 stacks at a time.
func (a *API) edgeStacks(ctx context.Context, edges []*store.StackValues, use func(v int64, names, kinds []string)) error {
	for _, e := range edges {
		ids := make([]string, 0, len(e.Values))
		for id := range e.Values {
			ids = append(ids, id)
		}
		err := a.store.StackNames(ctx, ids, func(names, kinds map[string][]string) {
			for id, f := range names {
				use(e.Values[id], f, kinds[id])
			}
		})
		if err != nil {
			return fmt.Errorf("read edges: %w", err)
		}
	}
	return nil
}

// topSums sums self and total per function name: self is every node's
// self, total a node's total where no ancestor has the same name (so
// recursion counts once per stack, as a stack's total counts each of its
// functions once).
type topSums struct {
	byName map[string]*fnSum
	total  int64
	fns    []*fnSum // the tree being decoded: per frame
	path   []*fnSum // its functions on the path to the last node
}

type fnSum struct {
	self, total int64
	onPath      int // times on the path being summed
}

func newTopSums() *topSums { return &topSums{byName: map[string]*fnSum{}} }

func (t *topSums) fn(name string) *fnSum {
	f := t.byName[name]
	if f == nil {
		f = &fnSum{}
		t.byName[name] = f
	}
	return f
}

func (t *topSums) Frames(frames []indices.TreeFrame) {
	t.fns = t.fns[:0]
	for _, f := range frames {
		t.fns = append(t.fns, t.fn(f.Name))
	}
}

func (t *topSums) Node(depth int, frame int32, self, total int64) {
	t.unwind(depth - 1)
	f := t.fns[frame]
	f.self += self
	if f.onPath == 0 {
		f.total += total
	}
	f.onPath++
	t.path = append(t.path, f)
}

// unwind leaves depth functions on the path.
func (t *topSums) unwind(depth int) {
	for len(t.path) > depth {
		t.path[len(t.path)-1].onPath--
		t.path = t.path[:len(t.path)-1]
	}
}

func (t *topSums) tree(b []byte) error {
	_, total, err := indices.DecodeTree(b, indices.TreeLimits{}, t)
	t.unwind(0)
	if err != nil {
		return &badTreeError{err}
	}
	t.total += total
	return nil
}

func (t *topSums) stack(v int64, names, _ []string) {
	t.total += v
	if v == 0 || len(names) == 0 {
		return
	}
	for _, n := range names {
		f := t.fn(n)
		if f.onPath == 0 {
			f.total += v
		}
		f.onPath++
		t.path = append(t.path, f)
	}
	t.path[len(t.path)-1].self += v
	t.unwind(0)
}

// functions ranks limit functions (rankFunctions).
func (t *topSums) functions(limit int) []Function {
	return rankFunctions(func(yield func(Function) bool) {
		for name, f := range t.byName {
			if !yield(Function{Name: name, Self: f.self, Total: f.total}) {
				return
			}
		}
	}, t.total, limit)
}
