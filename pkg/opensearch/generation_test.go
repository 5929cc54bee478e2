package opensearch

import (
	"slices"
	"testing"
	"time"

	"github.com/stackstream/stackstream/schemas/indices"
)

// TestPlanSwapKeepsUncovered: a name the new generation has no index for
// (a day older than the topics' records) stays on its generation.
func TestPlanSwapKeepsUncovered(t *testing.T) {
	names := indices.Names{Prefix: "p-"}
	old := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	now := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	l := Layout{}
	for _, name := range []string{names.Stacks(), names.Samples(old), names.Samples(now)} {
		p := names.Physical(1, name)
		l[p] = Physical{Index: p, Gen: 1, Name: name, Aliases: []string{name}}
	}
	for _, name := range []string{names.Stacks(), names.Samples(now)} {
		p := names.Physical(2, name)
		l[p] = Physical{Index: p, Gen: 2, Name: name}
	}
	s := PlanSwap(l, names, 2)
	if !slices.Equal(s.Moved, []string{"p-samples-2026.11.01", "p-stacks"}) || !slices.Equal(s.Kept, []string{"p-samples-2026.01.01"}) || len(s.Actions) != 4 {
		t.Fatalf("plan: moved %v, kept %v, %d actions", s.Moved, s.Kept, len(s.Actions))
	}
	// A name given to keep stays although generation 2 has an index for it.
	s = PlanSwap(l, names, 2, names.Samples(now))
	if !slices.Equal(s.Moved, []string{"p-stacks"}) || !slices.Equal(s.Kept, []string{"p-samples-2026.01.01", "p-samples-2026.11.01"}) {
		t.Fatalf("plan keeping %s: moved %v, kept %v", names.Samples(now), s.Moved, s.Kept)
	}
}
