package api

import (
	"context"
	"net/http"
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
	m, err := a.selectionTree(ctx, s)
	if err != nil {
		return nil, err
	}
	callers, callees := sandwich(m.root, fn)
	cr, f1 := flame(callers, maxNodes)
	ce, f2 := flame(callees, maxNodes)
	return SandwichResponse{
		Type: string(s.Type), Unit: unit(s.Type), Total: m.root.total, Truncated: m.truncated, Folded: f1 + f2,
		Source: m.source, Callers: cr, Callees: ce,
	}, nil
}

// sandwich splits the tree around fn (any kind), as the UI's sandwich view
// does: only the outermost occurrence of fn on each path counts, so
// recursion is counted once. callers' root is fn with its total; each of
// its children is a caller, with the value that passed through it, and a
// node's self is the part of its value whose path stops there (reached the
// tree's root). callees' root is fn with its self, its children fn's
// subtrees merged.
func sandwich(root *node, fn string) (callers, callees *node) {
	callers, callees = &node{name: fn}, &node{name: fn}
	var path []*node
	var walk func(n *node)
	walk = func(n *node) {
		if n != root && n.name == fn {
			if callers.kind == "" {
				callers.kind, callees.kind = n.kind, n.kind
			}
			callers.total += n.total
			cur := callers
			for i := len(path) - 1; i >= 1; i-- {
				cur = cur.child(path[i].name, path[i].kind)
				cur.total += n.total
			}
			cur.self += n.total
			callees.total += n.total
			callees.self += n.self
			for _, c := range n.kids {
				mergeInto(callees, c)
			}
			return // deeper occurrences are inside this one
		}
		path = append(path, n)
		for _, c := range n.kids {
			walk(c)
		}
		path = path[:len(path)-1]
	}
	walk(root)
	// A caller chain's self so far holds fn's value only where the chain
	// reached the root; the callers root's self is what has no caller.
	callers.self = callers.total
	for _, c := range callers.kids {
		callers.self -= c.total
	}
	return callers, callees
}

// mergeInto adds the subtree src under dst, node by node.
func mergeInto(dst, src *node) {
	c := dst.child(src.name, src.kind)
	c.self += src.self
	c.total += src.total
	for _, k := range src.kids {
		mergeInto(c, k)
	}
}
