package api

// TopTablesForBench decodes encoded function tables and proves the top
// table of limit functions as a top request over tables does; proven is
// false when the request would sum the trees.
func TopTablesForBench(tables [][]byte, limit int) (proven bool, err error) {
	tt := &topTables{exact: newTopSums()}
	for _, b := range tables {
		if err := tt.table(b); err != nil {
			return false, err
		}
	}
	_, _, proven = tt.prove(limit)
	return proven, nil
}
