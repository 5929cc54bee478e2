package api

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"

	"github.com/stackstream/stackstream/schemas/indices"
	"github.com/stackstream/stackstream/schemas/record"
	"github.com/stackstream/stackstream/services/query/internal/store"
)

// unit of a profile type's values.
func unit(t record.ProfileType) string {
	if t.Time() {
		return "nanoseconds"
	}
	return "bytes"
}

// stacksTree merges the stacks; the value of stacks left out by MaxStacks
// hangs under the root as "[other]" so the root total is the selection's
// total.
func stacksTree(st *store.Stacks) *node {
	root := &node{name: "total"}
	addStacks(root, st)
	return root
}

// addStacks merges st into the tree under root, with the value of stacks
// left out by MaxStacks under the root's "[other]".
func addStacks(root *node, st *store.Stacks) {
	before := root.total
	mergeStacks(root, st.Values, st.Frames, st.Kinds)
	if rest := st.Total - (root.total - before); rest > 0 && st.Truncated {
		o := root.child(otherNodes, "")
		o.self += rest
		o.total += rest
		root.total += rest
	}
}

// FlamegraphResponse is the answer of /api/v1/flamegraph. Truncated says
// stacks were left out before merging (their value is the root's
// "[other]"); Folded counts the "[other]" nodes holding the children
// below max_nodes, whose values are exact.
type FlamegraphResponse struct {
	Type      string     `json:"type"`
	Unit      string     `json:"unit"`
	Total     int64      `json:"total"`
	Truncated bool       `json:"truncated"`
	Folded    int        `json:"folded"`
	Source    string     `json:"source,omitempty"`
	Root      *FlameNode `json:"root"`
}

func (a *API) handleFlamegraph(ctx context.Context, _ http.ResponseWriter, r *http.Request) (any, error) {
	q := r.URL.Query()
	s, err := a.parseSelection(q, "query", "from", "to")
	if err != nil {
		return nil, err
	}
	maxNodes, err := parseInt(q, "max_nodes", a.opts.MaxNodes, 1, 100000)
	if err != nil {
		return nil, err
	}
	m, err := a.flameTree(ctx, s, maxNodes)
	if err != nil {
		return nil, err
	}
	var root *FlameNode
	var folded int
	if m.keep != nil {
		root, folded = flameKept(m.root, m.keep)
	} else {
		root, folded = flameOf(m.root, maxNodes, m.allNodes())
	}
	return FlamegraphResponse{
		Type: string(s.Type), Unit: unit(s.Type), Total: root.Total, Truncated: m.truncated, Folded: folded,
		Source: m.source, Root: root,
	}, nil
}

// TopResponse is the answer of /api/v1/top.
type TopResponse struct {
	Type      string     `json:"type"`
	Unit      string     `json:"unit"`
	Total     int64      `json:"total"`
	Truncated bool       `json:"truncated,omitempty"`
	Functions []Function `json:"functions"`
	// Source says what answered (topSelection).
	Source string `json:"source,omitempty"`
}

func (a *API) handleTop(ctx context.Context, _ http.ResponseWriter, r *http.Request) (any, error) {
	q := r.URL.Query()
	s, err := a.parseSelection(q, "query", "from", "to")
	if err != nil {
		return nil, err
	}
	limit, err := parseInt(q, "limit", 100, 1, 10000)
	if err != nil {
		return nil, err
	}
	fns, total, source, truncated, err := a.topSelection(ctx, s, limit)
	if err != nil {
		return nil, err
	}
	return TopResponse{
		Type: string(s.Type), Unit: unit(s.Type), Total: total, Truncated: truncated,
		Functions: fns, Source: source,
	}, nil
}

// DiffResponse is the answer of /api/v1/diff. Folded counts the
// "[other]" nodes (since diffs of fleet heads; before, the union nodes
// left out). BaseSource and CompareSource say what answered each side.
type DiffResponse struct {
	Type          string    `json:"type"`
	Unit          string    `json:"unit"`
	BaseTotal     int64     `json:"base_total"`
	CompareTotal  int64     `json:"compare_total"`
	Truncated     bool      `json:"truncated"`
	Folded        int       `json:"folded"`
	BaseSource    string    `json:"base_source,omitempty"`
	CompareSource string    `json:"compare_source,omitempty"`
	Root          *DiffNode `json:"root"`
}

// handleDiff compares two selections: base and compare selectors (query
// when unset), each with its own range (from/to when unset).
func (a *API) handleDiff(ctx context.Context, _ http.ResponseWriter, r *http.Request) (any, error) {
	q := r.URL.Query()
	for _, side := range []string{"base", "compare"} {
		if q.Get(side) == "" {
			q.Set(side, q.Get("query"))
		}
		for _, edge := range []string{"from", "to"} {
			if q.Get(side+"_"+edge) == "" && q.Get(edge) != "" {
				q.Set(side+"_"+edge, q.Get(edge))
			}
		}
	}
	base, err := a.parseSelection(q, "base", "base_from", "base_to")
	if err != nil {
		return nil, err
	}
	compare, err := a.parseSelection(q, "compare", "compare_from", "compare_to")
	if err != nil {
		return nil, err
	}
	maxNodes, err := parseInt(q, "max_nodes", a.opts.MaxNodes, 1, 100000)
	if err != nil {
		return nil, err
	}
	sides := [2]store.Selection{base, compare}
	var ms [2]*merged
	if maxNodes <= indices.HeadNodes {
		// Fleet-wide sides answered by heads: the diff stands when proven
		// from the heads (diffUnion.prove), else the whole trees are read.
		var partial bool
		for i, sel := range sides {
			pm, source, ok, err := a.headsMerge(ctx, sel)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", [2]string{"base", "compare"}[i], err)
			}
			if ok {
				ms[i] = &merged{root: pm.root, source: source}
				partial = partial || len(pm.heads) > 0
			}
		}
		if partial {
			for i, sel := range sides {
				if ms[i] == nil {
					if ms[i], err = a.selectionTree(ctx, sel); err != nil {
						return nil, fmt.Errorf("%s: %w", [2]string{"base", "compare"}[i], err)
					}
				}
			}
			d := newDiffUnion(ms[0].root, ms[1].root)
			if keep, ok := d.prove(maxNodes); ok {
				root, folded := d.convert(keep)
				return a.diffResponse(base, ms, folded, root), nil
			}
			slog.Debug("heads do not prove the diff: reading the trees", "max_nodes", maxNodes)
			ms = [2]*merged{}
		}
	}
	for i, sel := range sides {
		if ms[i] != nil {
			continue // heads that left no node out: the whole tree
		}
		if ms[i], err = a.selectionTree(ctx, sel); err != nil {
			return nil, fmt.Errorf("%s: %w", [2]string{"base", "compare"}[i], err)
		}
	}
	root, folded := diffTree(ms[0].root, ms[1].root, maxNodes)
	return a.diffResponse(base, ms, folded, root), nil
}

func (a *API) diffResponse(base store.Selection, ms [2]*merged, folded int, root *DiffNode) DiffResponse {
	return DiffResponse{
		Type: string(base.Type), Unit: unit(base.Type), BaseTotal: ms[0].root.total, CompareTotal: ms[1].root.total,
		Truncated: ms[0].truncated || ms[1].truncated, Folded: folded, BaseSource: ms[0].source, CompareSource: ms[1].source, Root: root,
	}
}
