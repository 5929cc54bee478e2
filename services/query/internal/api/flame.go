package api

import (
	"context"
	"fmt"
	"net/http"
	"net/url"

	"github.com/stackstream/stackstream/schemas/record"
)

// unit of a profile type's values.
func unit(t record.ProfileType) string {
	if t == record.ProfileCPU {
		return "nanoseconds"
	}
	return "bytes"
}

func (a *API) parseSelection(q url.Values, selParam, fromParam, toParam string) (selection, error) {
	typ, err := parseType(q)
	if err != nil {
		return selection{}, err
	}
	sel, err := parseSelector(q, selParam)
	if err != nil {
		return selection{}, err
	}
	tr, err := parseRange(q, fromParam, toParam, a.opts.Now(), a.opts.MaxRange)
	if err != nil {
		return selection{}, err
	}
	return selection{typ: typ, sel: sel, tr: tr}, nil
}

// merged is a selection's stacks with their frames' names and, for the
// stacks with frames other than native code, their kinds.
type merged struct {
	*stackValues
	frames map[string][]string
	kinds  map[string][]string
}

func (a *API) merge(ctx context.Context, s selection) (*merged, error) {
	sv, err := a.stackValues(ctx, s)
	if err != nil {
		return nil, err
	}
	ids := make([]string, 0, len(sv.values))
	for id := range sv.values {
		ids = append(ids, id)
	}
	frames, kinds, err := a.frames(ctx, ids)
	if err != nil {
		return nil, err
	}
	return &merged{stackValues: sv, frames: frames, kinds: kinds}, nil
}

// tree merges the stacks; the value of stacks left out by MaxStacks hangs
// under the root as "[other]" so the root total is the selection's total.
func (m *merged) tree() *node {
	root := buildTree(m.values, m.frames, m.kinds)
	if rest := m.total - root.total; rest > 0 && m.truncated {
		o := root.child(otherNodes, "")
		o.self += rest
		o.total += rest
		root.total += rest
	}
	return root
}

// FlamegraphResponse is the answer of /api/v1/flamegraph.
type FlamegraphResponse struct {
	Type      string     `json:"type"`
	Unit      string     `json:"unit"`
	Total     int64      `json:"total"`
	Truncated bool       `json:"truncated"`
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
	m, err := a.merge(ctx, s)
	if err != nil {
		return nil, err
	}
	root, pruned := flame(m.tree(), maxNodes)
	return FlamegraphResponse{
		Type: string(s.typ), Unit: unit(s.typ), Total: root.Total, Truncated: m.truncated || pruned,
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
	m, err := a.merge(ctx, s)
	if err != nil {
		return nil, err
	}
	return TopResponse{
		Type: string(s.typ), Unit: unit(s.typ), Total: m.total, Truncated: m.truncated,
		Functions: topFunctions(m.values, m.frames, m.total, limit),
	}, nil
}

// DiffResponse is the answer of /api/v1/diff.
type DiffResponse struct {
	Type         string    `json:"type"`
	Unit         string    `json:"unit"`
	BaseTotal    int64     `json:"base_total"`
	CompareTotal int64     `json:"compare_total"`
	Truncated    bool      `json:"truncated"`
	Root         *DiffNode `json:"root"`
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
	bm, err := a.merge(ctx, base)
	if err != nil {
		return nil, fmt.Errorf("base: %w", err)
	}
	cm, err := a.merge(ctx, compare)
	if err != nil {
		return nil, fmt.Errorf("compare: %w", err)
	}
	bt, ct := bm.tree(), cm.tree()
	root, pruned := diffTree(bt, ct, maxNodes)
	return DiffResponse{
		Type: string(base.typ), Unit: unit(base.typ), BaseTotal: bt.total, CompareTotal: ct.total,
		Truncated: bm.truncated || cm.truncated || pruned, Root: root,
	}, nil
}
