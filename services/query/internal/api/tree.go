package api

import (
	"cmp"
	"iter"
	"slices"

	"github.com/stackstream/stackstream/services/query/internal/store"
)

// Frames that are no function: samples without a stack, a stack ID the
// stacks index lacks, and what was left out (past MaxStacks or max_nodes).
const (
	noStack      = store.NoStack
	unknownStack = store.UnknownStack
	otherNodes   = "[other]"
)

// node is a call-tree node while merging stacks. Most nodes have one or
// two children: they are a slice, searched linearly, with a map index only
// for nodes with many.
type node struct {
	name string
	// kind is the frame's kind (record.Kind*), "" for native code: a
	// Python function and a C function of one name are two frames.
	kind        string
	self, total int64
	kids        []*node
	index       map[string]*node
	sorted      bool // kids are in answer order
	// In a merge of heads (proof.go): slack bounds what the heads that
	// left the node out may add to its total, open the total of any child
	// of it that is in no piece; keptBy and keptFolded mark the node kept,
	// with its folded value, by the head bound is walking; carry is what
	// the heads that left the node out (and kept its parent) add to the
	// slack and open of it and its descendants.
	slack, open, carry int64
	keptBy             int32
	keptFolded         int64
}

const indexAbove = 8

// indexKey is a child's key in node.index: the name alone for native code.
func indexKey(name, kind string) string {
	if kind == "" {
		return name
	}
	return name + "\x00" + kind
}

func (n *node) child(name, kind string) *node {
	if n.index != nil {
		if c := n.index[indexKey(name, kind)]; c != nil {
			return c
		}
	} else {
		for _, c := range n.kids {
			if c.name == name && c.kind == kind {
				return c
			}
		}
	}
	c := &node{name: name, kind: kind}
	n.kids = append(n.kids, c)
	n.sorted = false
	if n.index != nil {
		n.index[indexKey(name, kind)] = c
	} else if len(n.kids) > indexAbove {
		n.index = make(map[string]*node, 2*len(n.kids))
		for _, k := range n.kids {
			n.index[indexKey(k.name, k.kind)] = k
		}
	}
	return c
}

// buildTree merges the stacks (frames root first) weighted by their values.
// kinds holds the frames' kinds of the stacks that have frames other than
// native ones (see stackFrames).
func buildTree(values map[string]int64, frames, kinds map[string][]string) *node {
	root := &node{name: "total"}
	mergeStacks(root, values, frames, kinds)
	return root
}

// mergeStacks adds the stacks to the tree under root.
func mergeStacks(root *node, values map[string]int64, frames, kinds map[string][]string) {
	for id, v := range values {
		mergeStack(root, v, frames[id], kinds[id])
	}
}

// mergeStack adds one stack of value v (frames root first, their kinds or
// nil when all are native) to the tree under root.
func mergeStack(root *node, v int64, frames, kinds []string) {
	if v == 0 {
		return
	}
	root.total += v
	n := root
	for i, f := range frames {
		kind := ""
		if kinds != nil {
			kind = kinds[i]
		}
		n = n.child(f, kind)
		n.total += v
	}
	n.self += v
}

// FlameNode is one node of the flamegraph answer. Kind is the frame's
// kind (kernel, python, java, js, jit), absent for native code.
type FlameNode struct {
	Name     string       `json:"name"`
	Kind     string       `json:"kind,omitempty"`
	Self     int64        `json:"self"`
	Total    int64        `json:"total"`
	Children []*FlameNode `json:"children"`
}

// keepHeaviest picks at most max nodes below root, heaviest first, and
// counts the nodes left out. A parent is never lighter than its child, so
// the heaviest nodes are found best-first from the root: only the
// children of kept nodes are candidates, the kept set is a tree, and a
// tree of millions of nodes costs what its kept part does. Ties go to the
// shallower node, then to the one found first. keep is nil when nothing
// is left out. all is the tree's node count: countNodes(root), or a
// head's whole tree's.
func keepHeaviest(root *node, max, all int, weight func(*node) float64) (map[*node]bool, int) {
	if all <= max {
		return nil, 0
	}
	keep := make(map[*node]bool, max)
	h := &frontier{}
	push := func(n *node, depth int) {
		for _, c := range sortedChildren(n) {
			h.push(candidate{c, weight(c), depth + 1, h.seq})
			h.seq++
		}
	}
	push(root, 0)
	for len(keep) < max && len(h.items) > 0 {
		c := h.pop()
		keep[c.n] = true
		push(c.n, c.depth)
	}
	return keep, all - len(keep)
}

// countNodes counts the nodes below n.
func countNodes(n *node) int {
	c := len(n.kids)
	for _, k := range n.kids {
		c += countNodes(k)
	}
	return c
}

type candidate struct {
	n          *node
	w          float64
	depth, seq int
}

// frontier is a max-heap of candidates by weight, then shallower, then
// found first.
type frontier struct {
	items []candidate
	seq   int
}

func (f *frontier) less(i, j int) bool {
	a, b := f.items[i], f.items[j]
	if a.w != b.w {
		return a.w > b.w
	}
	// Totals above 2^53 can be equal as weights.
	if a.n.total != b.n.total {
		return a.n.total > b.n.total
	}
	if a.depth != b.depth {
		return a.depth < b.depth
	}
	return a.seq < b.seq
}

func (f *frontier) push(c candidate) {
	f.items = append(f.items, c)
	i := len(f.items) - 1
	for i > 0 {
		p := (i - 1) / 2
		if !f.less(i, p) {
			break
		}
		f.items[i], f.items[p] = f.items[p], f.items[i]
		i = p
	}
}

func (f *frontier) pop() candidate {
	top := f.items[0]
	last := len(f.items) - 1
	f.items[0] = f.items[last]
	f.items = f.items[:last]
	i := 0
	for {
		l, r, m := 2*i+1, 2*i+2, i
		if l < last && f.less(l, m) {
			m = l
		}
		if r < last && f.less(r, m) {
			m = r
		}
		if m == i {
			return top
		}
		f.items[i], f.items[m] = f.items[m], f.items[i]
		i = m
	}
}

// sortedChildren orders children by total, heaviest first, then by name so
// answers are stable; once per node, after the totals are final.
func sortedChildren(n *node) []*node {
	if !n.sorted {
		slices.SortFunc(n.kids, func(x, y *node) int {
			if c := cmp.Compare(y.total, x.total); c != 0 {
				return c
			}
			if c := cmp.Compare(x.name, y.name); c != 0 {
				return c
			}
			return cmp.Compare(x.kind, y.kind)
		})
		n.sorted = true
	}
	return n.kids
}

// flame converts the tree keeping at most maxNodes nodes; the children left
// out of a node are summed into one "[other]" child so totals still add up.
// folded counts those "[other]" children.
func flame(root *node, maxNodes int) (*FlameNode, int) {
	return flameOf(root, maxNodes, countNodes(root))
}

// flameOf is flame of a tree of all nodes, of which root may hold only the
// heaviest (a head, whose nodes' folded values stand for the rest).
func flameOf(root *node, maxNodes, all int) (*FlameNode, int) {
	keep, _ := keepHeaviest(root, maxNodes, all, func(n *node) float64 { return float64(n.total) })
	return flameKept(root, keep)
}

// flameKept converts the nodes of keep (every node when keep is nil). A
// node's "[other]" is its total less its self and its shown children's
// totals: the children it left out, a head's folded value, or the part of
// a merge of heads that no head kept (proveKeep) are all in it, and no
// child's total is needed for what is not shown. folded counts the
// "[other]" children: unlike the number of nodes left out, it is known
// from the shown nodes alone, so a merge of heads gives the same count as
// the merge of the whole trees.
func flameKept(root *node, keep map[*node]bool) (*FlameNode, int) {
	folded := 0
	var conv func(n *node) *FlameNode
	conv = func(n *node) *FlameNode {
		out := &FlameNode{Name: n.name, Kind: n.kind, Self: n.self, Total: n.total, Children: []*FlameNode{}}
		other := n.total - n.self
		for _, c := range sortedChildren(n) {
			if keep != nil && !keep[c] {
				continue
			}
			other -= c.total
			out.Children = append(out.Children, conv(c))
		}
		if other > 0 {
			out.Children = append(out.Children, &FlameNode{Name: otherNodes, Self: other, Total: other, Children: []*FlameNode{}})
			folded++
		}
		return out
	}
	return conv(root), folded
}

// Function is one row of the top answer.
type Function struct {
	Name       string  `json:"name"`
	Self       int64   `json:"self"`
	Total      int64   `json:"total"`
	SelfShare  float64 `json:"self_share"`
	TotalShare float64 `json:"total_share"`
}

// topFunctions sums self (leaf) and total (anywhere on the stack, once per
// stack so recursion is not counted twice) per function.
func topFunctions(values map[string]int64, frames map[string][]string, total int64, limit int) []Function {
	t := newTopSums()
	for id, v := range values {
		t.stack(v, frames[id], nil)
	}
	t.total = total
	return t.functions(limit)
}

// rankFunctions keeps the limit functions of fns that order first (by
// self, then total, then name), in that order, with their shares of
// total. A fleet day has a million functions: a heap of the limit kept so
// far ranks them without sorting them all.
func rankFunctions(fns iter.Seq[Function], total int64, limit int) []Function {
	// kept is a heap whose root is the kept function that orders last.
	var kept []Function
	down := func(i int) {
		for {
			l, r, m := 2*i+1, 2*i+2, i
			if l < len(kept) && rankOrder(kept[l], kept[m]) > 0 {
				m = l
			}
			if r < len(kept) && rankOrder(kept[r], kept[m]) > 0 {
				m = r
			}
			if m == i {
				return
			}
			kept[i], kept[m] = kept[m], kept[i]
			i = m
		}
	}
	for f := range fns {
		switch {
		case len(kept) < limit:
			kept = append(kept, f)
			for i := len(kept) - 1; i > 0 && rankOrder(kept[i], kept[(i-1)/2]) > 0; i = (i - 1) / 2 {
				kept[i], kept[(i-1)/2] = kept[(i-1)/2], kept[i]
			}
		case limit > 0 && rankOrder(f, kept[0]) < 0:
			kept[0] = f
			down(0)
		}
	}
	slices.SortFunc(kept, rankOrder)
	for i := range kept {
		if total > 0 {
			kept[i].SelfShare = float64(kept[i].Self) / float64(total)
			kept[i].TotalShare = float64(kept[i].Total) / float64(total)
		}
	}
	if kept == nil {
		kept = []Function{}
	}
	return kept
}

// rankOrder orders functions by self, then total (both heaviest first),
// then name.
func rankOrder(x, y Function) int {
	if c := cmp.Compare(y.Self, x.Self); c != 0 {
		return c
	}
	if c := cmp.Compare(y.Total, x.Total); c != 0 {
		return c
	}
	return cmp.Compare(x.Name, y.Name)
}
