package api

import "github.com/stackstream/stackstream/services/query/internal/store"

// MergeForBench decodes and merges encoded trees as a flame graph request
// does, then folds the result to maxNodes; it returns the nodes folded.
func MergeForBench(trees [][]byte, maxNodes int) (int, error) {
	m := &treeMerge{root: &node{name: "total"}}
	for _, t := range trees {
		if err := m.merge(t); err != nil {
			return 0, err
		}
	}
	_, folded := flame(m.root, maxNodes)
	return folded, nil
}

// ProveForBench merges encoded hour heads as a flame graph request over
// hour heads does, proves the flame graph of maxNodes nodes and converts
// it; proven is false when the request would read the whole trees.
func ProveForBench(heads [][]byte, maxNodes int) (proven bool, err error) {
	pm := newPieceMerge()
	for _, h := range heads {
		if err := pm.mergeHead(h); err != nil {
			return false, err
		}
	}
	pm.bound()
	keep, ok := proveKeep(pm.root, maxNodes)
	if ok {
		flameKept(pm.root, keep)
	}
	return ok, nil
}

// ProveDecodedForBench is ProveForBench for heads decoded before
// (store.DecodeHead: as the store's head cache keeps them).
func ProveDecodedForBench(heads []*store.Head, maxNodes int) (proven bool, err error) {
	pm := newPieceMerge()
	for _, h := range heads {
		if err := pm.mergeDecoded(h); err != nil {
			return false, err
		}
	}
	pm.bound()
	keep, ok := proveKeep(pm.root, maxNodes)
	if ok {
		flameKept(pm.root, keep)
	}
	return ok, nil
}

// TopForBench sums encoded trees by function as a top request does, then
// ranks limit functions; it returns how many it ranked.
func TopForBench(trees [][]byte, limit int) (int, error) {
	t := newTopSums()
	for _, b := range trees {
		if err := t.tree(b); err != nil {
			return 0, err
		}
	}
	return len(t.functions(limit)), nil
}

// MergeTopForBench decodes and merges encoded trees into one tree, then
// sums it by function: how top was answered before topSums.
func MergeTopForBench(trees [][]byte, limit int) (int, error) {
	m := &treeMerge{root: &node{name: "total"}}
	for _, b := range trees {
		if err := m.merge(b); err != nil {
			return 0, err
		}
	}
	t := newTopSums()
	var walk func(n *node, depth int)
	walk = func(n *node, depth int) {
		for _, c := range n.kids {
			t.fns = append(t.fns[:0], t.fn(c.name))
			t.Node(depth, 0, c.self, c.total)
			walk(c, depth+1)
		}
	}
	walk(m.root, 1)
	return len(t.functions(limit)), nil
}
