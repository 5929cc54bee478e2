package api

import (
	"context"
	"errors"
	"log/slog"

	"github.com/stackstream/stackstream/schemas/indices"
	"github.com/stackstream/stackstream/services/query/internal/store"
)

// topSelection is the top table of sel: for a fleet-wide selection, from
// the rollup's function tables (store.FunctionTables) when their sums
// prove the first limit functions (topTables.prove), else summed from the
// trees and stacks as they are read (sumSelection). source says what
// answered.
func (a *API) topSelection(ctx context.Context, sel store.Selection, limit int) (fns []Function, total int64, source string, truncated bool, err error) {
	tt := &topTables{exact: newTopSums()}
	read, ok, err := a.store.FunctionTables(ctx, sel, tt.table, tt.exact.tree)
	var bad *badTreeError
	switch {
	case errors.As(err, &bad):
		slog.Warn("function table or tree does not decode: summing the trees", "err", err)
		ok = false
	case err != nil:
		return nil, 0, "", false, err
	}
	if ok {
		if err := a.edgeStacks(ctx, read.Edges, tt.exact.stack); err != nil {
			return nil, 0, "", false, err
		}
		if fns, total, proven := tt.prove(limit); proven {
			return fns, total, read.Source, false, nil
		}
	}
	sink, source, truncated, err := a.sumSelection(ctx, sel, func() stackSink { return newTopSums() })
	if err != nil {
		return nil, 0, "", false, err
	}
	t := sink.(*topSums)
	return t.functions(limit), t.total, source, truncated, nil
}

// topTables sums function tables (indices.FunctionTable) with exact sums
// of the trees and stacks that stand for missing tables and the edges. A
// table lists its heaviest functions and bounds the self of the others.
type topTables struct {
	exact  *topSums
	tables []*indices.FunctionTable
}

func (t *topTables) table(b []byte) error {
	ft, err := indices.DecodeFunctionTable(b, indices.TreeLimits{})
	if err != nil {
		return &badTreeError{err}
	}
	t.tables = append(t.tables, ft)
	return nil
}

// tableSum is a function's sums over the pieces that list it, and over the
// tables that do not list it, how many and the bound on its self there.
type tableSum struct {
	self, total int64
	listedBy    int   // incomplete tables that list it
	listedRest  int64 // their bounds on the rest's self
}

// prove returns the first limit functions in rank order (rankFunctions)
// and the total, when the sums prove them: every function shown is exact
// (every table that does not list every function lists it), and every
// function that is not exact, or that no piece lists, has a self that
// cannot reach the last one shown (its sum plus the bounds of the tables
// that left it out, strictly below). Otherwise proven is false.
func (t *topTables) prove(limit int) (fns []Function, total int64, proven bool) {
	sums := make(map[string]*tableSum, len(t.exact.byName))
	get := func(name string) *tableSum {
		s := sums[name]
		if s == nil {
			s = &tableSum{}
			sums[name] = s
		}
		return s
	}
	for name, f := range t.exact.byName {
		s := get(name)
		s.self, s.total = f.self, f.total
	}
	total = t.exact.total
	incomplete := 0
	var rest int64 // the bounds of every incomplete table
	for _, ft := range t.tables {
		total += ft.Total
		complete := ft.Complete()
		if !complete {
			incomplete++
			rest += ft.RestSelf
		}
		for _, f := range ft.Kept {
			s := get(f.Name)
			s.self += f.Self
			s.total += f.Total
			if !complete {
				s.listedBy++
				s.listedRest += ft.RestSelf
			}
		}
	}
	fns = rankFunctions(func(yield func(Function) bool) {
		for name, s := range sums {
			if s.listedBy == incomplete && !yield(Function{Name: name, Self: s.self, Total: s.total}) {
				return
			}
		}
	}, total, limit)
	if incomplete == 0 {
		return fns, total, true // every function is exact
	}
	if len(fns) < limit {
		return nil, 0, false // inexact functions could fill the table
	}
	last := fns[len(fns)-1].Self
	if rest >= last {
		return nil, 0, false // a function no table lists could reach it
	}
	for _, s := range sums {
		if s.listedBy < incomplete && s.self+rest-s.listedRest >= last {
			return nil, 0, false
		}
	}
	return fns, total, true
}
