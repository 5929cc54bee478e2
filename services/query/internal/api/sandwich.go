package api

import (
	"context"
	"net/http"

	"github.com/stackstream/stackstream/schemas/indices"
)

// SandwichResponse is the answer of /api/v1/sandwich: the callers of a
// function (a tree rooted at it whose children are its callers, their
// children the callers' callers) and its callees (its subtrees merged),
// computed from the whole merged tree, so every node shown is exact even
// where the flame graph folds the function's nodes into "[other]". Folded
// counts the "[other]" nodes of both sides.
type SandwichResponse struct {
	Type      string     `json:"type"`
	Unit      string     `json:"unit"`
	Total     int64      `json:"total"`
	Truncated bool       `json:"truncated"`
	Folded    int        `json:"folded"`
	Source    string     `json:"source,omitempty"`
	Callers   *FlameNode `json:"callers"`
	Callees   *FlameNode `json:"callees"`
}

func (a *API) handleSandwich(ctx context.Context, _ http.ResponseWriter, r *http.Request) (any, error) {
	q := r.URL.Query()
	fn := q.Get("function")
	if fn == "" || len(fn) > 1024 {
		return nil, badParam("function", "want a function name of 1 to 1024 bytes")
	}
	s, err := a.parseSelection(q, "query", "from", "to")
	if err != nil {
		return nil, err
	}
	maxNodes, err := parseInt(q, "max_nodes", a.opts.MaxNodes, 1, 100000)
	if err != nil {
		return nil, err
	}
	sink, source, truncated, err := a.sumSelection(ctx, s, func() stackSink { return newSandwichSums(fn) })
	if err != nil {
		return nil, err
	}
	sw := sink.(*sandwichSums)
	callers, callees := sw.result()
	cr, f1 := flame(callers, maxNodes)
	ce, f2 := flame(callees, maxNodes)
	return SandwichResponse{
		Type: string(s.Type), Unit: unit(s.Type), Total: sw.total, Truncated: truncated, Folded: f1 + f2,
		Source: source, Callers: cr, Callees: ce,
	}, nil
}

// sandwichSums splits the selection around fn (any kind), as the UI's
// sandwich view does: only the outermost occurrence of fn on each path
// counts, so recursion is counted once. callers' root is fn with its
// total; each of its children is a caller, with the value that passed
// through it, and a node's self is the part of its value whose path stops
// there (reached the tree's root). callees' root is fn with its self, its
// children fn's subtrees merged.
type sandwichSums struct {
	fn               string
	callers, callees *node
	total            int64
	frames           []indices.TreeFrame // the tree being decoded
	path             []indices.TreeFrame // its frames on the path to the last node
	inside           int                 // the depth of the fn occurrence the last node is in, 0 outside
	calleePath       []*node             // the callees' nodes on the path from that occurrence
}

func newSandwichSums(fn string) *sandwichSums {
	return &sandwichSums{fn: fn, callers: &node{name: fn}, callees: &node{name: fn}}
}

func (s *sandwichSums) Frames(frames []indices.TreeFrame) { s.frames = frames }

func (s *sandwichSums) Node(depth int, frame int32, self, total int64) {
	f := s.frames[frame]
	s.path = s.path[:depth-1]
	if s.inside >= depth {
		s.inside = 0
	}
	switch {
	case s.inside > 0:
		rel := depth - s.inside
		c := s.calleePath[rel-1].child(f.Name, f.Kind)
		c.self += self
		c.total += total
		s.calleePath = append(s.calleePath[:rel], c)
	case f.Name == s.fn:
		s.occurrence(f.Kind, self, total)
		s.inside = depth
		s.calleePath = append(s.calleePath[:0], s.callees)
	}
	s.path = append(s.path, f)
}

// occurrence adds an outermost node of fn, called through s.path.
func (s *sandwichSums) occurrence(kind string, self, total int64) {
	if s.callers.kind == "" {
		s.callers.kind, s.callees.kind = kind, kind
	}
	s.callers.total += total
	cur := s.callers
	for i := len(s.path) - 1; i >= 0; i-- {
		cur = cur.child(s.path[i].Name, s.path[i].Kind)
		cur.total += total
	}
	cur.self += total
	s.callees.total += total
	s.callees.self += self
}

func (s *sandwichSums) tree(b []byte) error {
	_, total, err := indices.DecodeTree(b, indices.TreeLimits{}, s)
	s.path, s.inside = s.path[:0], 0
	if err != nil {
		return &badTreeError{err}
	}
	s.total += total
	return nil
}

func (s *sandwichSums) stack(v int64, names, kinds []string) {
	s.total += v
	if v == 0 {
		return
	}
	kind := func(i int) string {
		if kinds == nil {
			return ""
		}
		return kinds[i]
	}
	at := -1
	for i, n := range names {
		if n == s.fn {
			at = i
			break
		}
	}
	if at < 0 {
		return
	}
	s.path = s.path[:0]
	for i := range at {
		s.path = append(s.path, indices.TreeFrame{Name: names[i], Kind: kind(i)})
	}
	var self int64
	if at == len(names)-1 {
		self = v
	}
	s.occurrence(kind(at), self, v)
	cur := s.callees
	for i := at + 1; i < len(names); i++ {
		cur = cur.child(names[i], kind(i))
		cur.total += v
	}
	if cur != s.callees {
		cur.self += v
	}
	s.path = s.path[:0]
}

// result is the callers and callees trees. A caller chain's self so far
// holds fn's value only where the chain reached the root; the callers
// root's self is what has no caller.
func (s *sandwichSums) result() (callers, callees *node) {
	s.callers.self = s.callers.total
	for _, c := range s.callers.kids {
		s.callers.self -= c.total
	}
	return s.callers, s.callees
}
