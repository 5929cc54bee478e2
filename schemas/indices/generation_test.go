package indices

import (
	"testing"
	"time"
)

func TestGenerationNames(t *testing.T) {
	n := Names{Prefix: "p-"}
	day := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	tests := []struct {
		alias    string
		gen      int
		physical string
	}{
		{n.Stacks(), 0, "p-stacks"},
		{n.Stacks(), 1, "p-stacks_g1"},
		{n.Samples(day), 2, "p-samples_g2-2026.12.01"},
		{n.Rollups(day), 12, "p-rollups_g12-2026.12"},
	}
	for _, tt := range tests {
		t.Run(tt.physical, func(t *testing.T) {
			if got := n.Physical(tt.gen, tt.alias); got != tt.physical {
				t.Fatalf("Physical(%d, %s) = %s, want %s", tt.gen, tt.alias, got, tt.physical)
			}
			gen, alias, ok := n.Generation(tt.physical)
			if !ok || gen != tt.gen || alias != tt.alias {
				t.Fatalf("Generation(%s) = %d, %s, %v; want %d, %s", tt.physical, gen, alias, ok, tt.gen, tt.alias)
			}
		})
	}
	for _, bad := range []string{"p-stacks_g", "p-stacks_g0", "p-stacks_g01", "p-samples_gx-2026.12.01", "p-samples_g1-", "q-stacks", "p-other"} {
		if gen, alias, ok := n.Generation(bad); ok {
			t.Errorf("Generation(%s) = %d, %s: want not ok", bad, gen, alias)
		}
	}
	end, ok := n.IndexEnd("p-samples_g3-2026.12.01")
	if !ok || !end.Equal(time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)) {
		t.Fatalf("IndexEnd of a generation 3 index = %v, %v", end, ok)
	}
	if _, ok := n.IndexEnd("p-rollups_g1-2026.12"); !ok {
		t.Fatal("IndexEnd of a generation 1 rollups index: not ok")
	}
}

// FuzzGeneration: any index name the cluster lists parses without panic,
// and a name read as a generation's index is exactly that generation's
// physical name for the alias read.
func FuzzGeneration(f *testing.F) {
	for _, s := range []string{"p-stacks", "p-stacks_g1", "p-samples_g2-2026.12.01", "p-rollups_g12-2026.12", "p-samples_g-1", "p-stacks_g1-", "p-samples_g99999999999999999999-x"} {
		f.Add(s)
	}
	n := Names{Prefix: "p-"}
	f.Fuzz(func(t *testing.T, index string) {
		gen, alias, ok := n.Generation(index)
		if !ok {
			return
		}
		if got := n.Physical(gen, alias); got != index {
			t.Fatalf("Generation(%q) = %d, %q; Physical gives back %q", index, gen, alias, got)
		}
	})
}
