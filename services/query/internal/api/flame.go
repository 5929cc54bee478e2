package api

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/google/pprof/profile"

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

// sampleType names the pprof sample type of a profile type.
func sampleType(t record.ProfileType) *profile.ValueType {
	switch t {
	case record.ProfileCPU:
		return &profile.ValueType{Type: "cpu", Unit: "nanoseconds"}
	case record.ProfileMemory:
		return &profile.ValueType{Type: "rss", Unit: "bytes"}
	case record.ProfileHeap:
		return &profile.ValueType{Type: "inuse_space", Unit: "bytes"}
	default:
		return &profile.ValueType{Type: "alloc_space", Unit: "bytes"}
	}
}

// toProfile turns the merged selection into a pprof profile: one sample
// per stack, one function and location per distinct name.
func toProfile(m *merged, s selection) *profile.Profile {
	st := sampleType(s.typ)
	p := &profile.Profile{
		SampleType:    []*profile.ValueType{st},
		PeriodType:    st,
		Period:        1,
		TimeNanos:     s.tr.From.UnixNano(),
		DurationNanos: int64(s.tr.Duration()),
	}
	locs := map[string]*profile.Location{}
	loc := func(name string) *profile.Location {
		if l := locs[name]; l != nil {
			return l
		}
		fn := &profile.Function{ID: uint64(len(p.Function) + 1), Name: name, SystemName: name}
		p.Function = append(p.Function, fn)
		l := &profile.Location{ID: uint64(len(p.Location) + 1), Line: []profile.Line{{Function: fn}}}
		p.Location = append(p.Location, l)
		locs[name] = l
		return l
	}
	add := func(frames []string, v int64) {
		smp := &profile.Sample{Value: []int64{v}}
		for i := len(frames) - 1; i >= 0; i-- { // pprof wants leaf first
			smp.Location = append(smp.Location, loc(frames[i]))
		}
		p.Sample = append(p.Sample, smp)
	}
	var kept int64
	for id, v := range m.values {
		if v != 0 {
			add(m.frames[id], v)
			kept += v
		}
	}
	if rest := m.total - kept; rest > 0 && m.truncated {
		add([]string{otherNodes}, rest)
	}
	return p
}

func (a *API) handlePprof(ctx context.Context, w http.ResponseWriter, r *http.Request) (any, error) {
	s, err := a.parseSelection(r.URL.Query(), "query", "from", "to")
	if err != nil {
		return nil, err
	}
	m, err := a.merge(ctx, s)
	if err != nil {
		return nil, err
	}
	p := toProfile(m, s)
	if err := p.CheckValid(); err != nil {
		return nil, fmt.Errorf("build pprof profile: %w", err)
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Disposition", fmt.Sprintf(`attachment; filename="stackstream-%s-%s.pb.gz"`, s.typ, s.tr.From.UTC().Format(time.RFC3339)))
	if m.truncated {
		w.Header().Set("X-Stackstream-Truncated", "true")
	}
	// Write gzips; an error here is a client gone away: nothing to answer.
	if err := p.Write(w); err != nil {
		a.logger.Debug("write pprof answer", "err", err)
	}
	return nil, nil
}
