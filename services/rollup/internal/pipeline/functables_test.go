package pipeline

import (
	"fmt"
	"slices"
	"testing"

	"github.com/stackstream/stackstream/schemas/indices"
)

// checkFunctionTables: every hour partition tree stored has its digest and
// a function table (indices.KindFunctionTable) whose sources are that
// digest and whose functions are the tree's, every one with its self and
// total (the test fleets have fewer than indices.TableFunctions); the
// tables are then removed from docs (compare checks the rest).
func checkFunctionTables(t *testing.T, docs map[string]indices.RollupDoc) {
	t.Helper()
	key := func(d indices.RollupDoc) string {
		return fmt.Sprintf("%s %s %s partition %d", d.Resolution, d.Timestamp.UTC().Format("15:04"), d.Type, d.Partition)
	}
	tables := map[string]indices.RollupDoc{}
	for k, d := range docs {
		if d.Kind == indices.KindFunctionTable {
			tables[key(d)] = d
			delete(docs, k)
		}
	}
	for _, d := range docs {
		if d.Kind != indices.KindPartitionTree || d.Resolution != indices.ResolutionHour {
			continue
		}
		table, ok := tables[key(d)]
		delete(tables, key(d))
		if !ok {
			t.Errorf("partition tree %s without its function table", key(d))
			continue
		}
		want, err := indices.TreeFunctions(d.Tree, indices.TreeLimits{})
		if err != nil {
			t.Errorf("partition tree %s: %v", key(d), err)
			continue
		}
		got, err := indices.DecodeFunctionTable(table.Tree, indices.TreeLimits{})
		if err != nil {
			t.Errorf("function table %s: %v", key(d), err)
			continue
		}
		if d.Digest != indices.TreeDigest(d.Tree) || table.Sources != d.Digest {
			t.Errorf("partition tree %s: digest %q (of its tree %q), its table's sources %q", key(d), d.Digest, indices.TreeDigest(d.Tree), table.Sources)
		}
		if table.Value != d.Value || got.Total != d.Value || !got.Complete() || !slices.Equal(got.Kept, want.Kept) {
			t.Errorf("function table %s: value %d, total %d, %d of %d functions; tree %d, %d functions", key(d), table.Value, got.Total, len(got.Kept), got.Functions, d.Value, len(want.Kept))
		}
	}
	for k := range tables {
		t.Errorf("function table %s without its partition tree", k)
	}
}
