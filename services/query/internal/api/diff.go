package api

// DiffNode is one node of the diff answer: base and compare are shares of
// their own selection's total.
type DiffNode struct {
	Name     string      `json:"name"`
	Kind     string      `json:"kind,omitempty"`
	Base     float64     `json:"base"`
	Compare  float64     `json:"compare"`
	Children []*DiffNode `json:"children"`
}

// diffUnion is two trees merged by path: each union node remembers its
// node on either side (nil where that side has none). Union nodes' totals
// are their weight (the larger of their two shares) in billionths, which
// only orders and prunes them.
type diffUnion struct {
	root                    *node
	sides                   map[*node]diffPair
	baseTotal, compareTotal int64
}

type diffPair struct{ b, c *node }

func newDiffUnion(base, compare *node) *diffUnion {
	d := &diffUnion{root: &node{name: "total"}, sides: map[*node]diffPair{}, baseTotal: base.total, compareTotal: compare.total}
	var walk func(u, n *node, isBase bool)
	walk = func(u, n *node, isBase bool) {
		p := d.sides[u]
		if isBase {
			p.b = n
		} else {
			p.c = n
		}
		d.sides[u] = p
		for _, c := range n.kids {
			walk(u.child(c.name, c.kind), c, isBase)
		}
	}
	walk(d.root, base, true)
	walk(d.root, compare, false)
	for u := range d.sides {
		u.total = int64(d.weight(u) * 1e9)
	}
	return d
}

// shareOf is v as a share of total (0 of an empty side).
func shareOf(v, total int64) float64 {
	if total == 0 {
		return 0
	}
	return float64(v) / float64(total)
}

func nodeTotal(n *node) int64 {
	if n == nil {
		return 0
	}
	return n.total
}

// weight orders union nodes: the larger of the node's two shares.
func (d *diffUnion) weight(u *node) float64 {
	p := d.sides[u]
	return max(shareOf(nodeTotal(p.b), d.baseTotal), shareOf(nodeTotal(p.c), d.compareTotal))
}

// diffTree merges two whole trees by path, keeps the maxNodes heaviest
// union nodes and normalizes each side to its total.
func diffTree(base, compare *node, maxNodes int) (*DiffNode, int) {
	d := newDiffUnion(base, compare)
	keep, _ := keepHeaviest(d.root, maxNodes, countNodes(d.root), d.weight)
	return d.convert(keep)
}

// convert answers the union nodes of keep (all when nil). A node's
// "[other]" holds, per side, its total less its self and its shown
// children's totals: the children left out, whether or not the side's
// tree holds them (a merge of heads does not). folded counts the
// "[other]" nodes, as the flame graph's does.
func (d *diffUnion) convert(keep map[*node]bool) (*DiffNode, int) {
	folded := 0
	var conv func(u *node) *DiffNode
	conv = func(u *node) *DiffNode {
		p := d.sides[u]
		out := &DiffNode{Name: u.name, Kind: u.kind, Base: shareOf(nodeTotal(p.b), d.baseTotal), Compare: shareOf(nodeTotal(p.c), d.compareTotal), Children: []*DiffNode{}}
		var restB, restC int64
		if p.b != nil {
			restB = p.b.total - p.b.self
		}
		if p.c != nil {
			restC = p.c.total - p.c.self
		}
		for _, c := range sortedChildren(u) {
			if keep != nil && !keep[c] {
				continue
			}
			cp := d.sides[c]
			restB -= nodeTotal(cp.b)
			restC -= nodeTotal(cp.c)
			out.Children = append(out.Children, conv(c))
		}
		if restB > 0 || restC > 0 {
			out.Children = append(out.Children, &DiffNode{Name: otherNodes, Base: shareOf(restB, d.baseTotal), Compare: shareOf(restC, d.compareTotal), Children: []*DiffNode{}})
			folded++
		}
		return out
	}
	return conv(d.root), folded
}

// sideBound is what a merge of heads (pieceMerge after bound) tells of a
// union node's value on one side: exact, or at most upper; open bounds
// any child of it the side's pieces do not hold.
type sideBound struct {
	exact       bool
	upper, open int64
}

// childBound is the bound of a child whose node on the side is n (nil
// when no piece of the side holds it) under a parent bounded by s.
func (s sideBound) childBound(n *node) sideBound {
	if n == nil {
		return sideBound{exact: s.open == 0, upper: s.open, open: s.open}
	}
	return sideBound{exact: n.slack == 0, upper: n.total + n.slack, open: n.open}
}

// prove is keepHeaviest's choice of maxNodes union nodes over the union of
// two merges of heads (or of a merge of heads and a whole tree), and
// whether it is the choice the union of the whole trees gives, as
// proveKeep proves a flame graph: a candidate is exact when both its
// sides are (a side no piece holds is exact when its parent's children
// are all held: open 0), the exact candidates are chosen as keepHeaviest
// chooses, and the choice stands when it holds maxNodes nodes and the last
// one chosen outweighs every bound of an inexact candidate or of a child
// no piece holds.
func (d *diffUnion) prove(maxNodes int) (map[*node]bool, bool) {
	bounds := map[*node][2]sideBound{}
	root := d.sides[d.root]
	bounds[d.root] = [2]sideBound{(sideBound{}).childBound(root.b), (sideBound{}).childBound(root.c)}
	keep := make(map[*node]bool, maxNodes)
	h := &frontier{}
	var unknown float64
	push := func(u *node, depth int) {
		ub := bounds[u]
		unknown = max(unknown, shareOf(ub[0].open, d.baseTotal), shareOf(ub[1].open, d.compareTotal))
		for _, c := range sortedChildren(u) {
			p := d.sides[c]
			cb := [2]sideBound{ub[0].childBound(p.b), ub[1].childBound(p.c)}
			if !cb[0].exact || !cb[1].exact {
				unknown = max(unknown, shareOf(cb[0].upper, d.baseTotal), shareOf(cb[1].upper, d.compareTotal))
				continue
			}
			bounds[c] = cb
			h.push(candidate{c, d.weight(c), depth + 1, h.seq})
			h.seq++
		}
	}
	if !bounds[d.root][0].exact || !bounds[d.root][1].exact {
		return nil, false
	}
	push(d.root, 0)
	var last float64
	for len(keep) < maxNodes && len(h.items) > 0 {
		c := h.pop()
		keep[c.n] = true
		last = c.w
		push(c.n, c.depth)
	}
	return keep, len(keep) == maxNodes && last > unknown
}
