package pprofwire

import "testing"

func TestIndexIDs(t *testing.T) {
	t.Run("dense", func(t *testing.T) {
		tab, ok := IndexIDs(nil, []uint64{3, 1, 2})
		if !ok {
			t.Fatal("refused 3, 1, 2")
		}
		for id, want := range map[uint64]int{1: 1, 2: 2, 3: 0, 0: -1, 4: -1, 1 << 40: -1} {
			if got := Lookup(tab, id); got != want {
				t.Errorf("Lookup(%d) = %d, want %d", id, got, want)
			}
		}
	})
	t.Run("reused", func(t *testing.T) {
		tab, _ := IndexIDs(nil, []uint64{1, 2, 3, 4, 5})
		tab, ok := IndexIDs(tab, []uint64{2})
		if !ok || Lookup(tab, 2) != 0 || Lookup(tab, 1) != -1 || Lookup(tab, 5) != -1 {
			t.Fatalf("a reused table keeps old IDs: %v", tab)
		}
	})
	t.Run("empty", func(t *testing.T) {
		tab, ok := IndexIDs(nil, nil)
		if !ok || Lookup(tab, 0) != -1 || Lookup(tab, 1) != -1 {
			t.Fatalf("empty table: %v, %v", tab, ok)
		}
	})
	for name, ids := range map[string][]uint64{
		"zero":      {0, 1},
		"repeated":  {1, 2, 1},
		"too large": {1, 2, 4*3 + 65},
	} {
		t.Run(name, func(t *testing.T) {
			if _, ok := IndexIDs(nil, ids); ok {
				t.Fatalf("IndexIDs(%v) accepted", ids)
			}
		})
	}
}
