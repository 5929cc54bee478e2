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
