package api

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
