package ctl

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/stackstream/stackstream/pkg/opensearch"
	"github.com/stackstream/stackstream/pkg/testenv"
	"github.com/stackstream/stackstream/schemas/indices"
)

// TestMoveLateNames: a day a live writer created in the old generation
// while the swap happened moves to the new one (which gets an index for
// it); a day that existed before and has no index in the new generation
// stays where it is.
func TestMoveLateNames(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	osc, err := opensearch.NewClient(ctx, opensearch.Config{URLs: []string{testenv.OpenSearchURL(t)}, Timeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	names := indices.Names{Prefix: testenv.Name(t, "late-") + "-"}
	t.Cleanup(func() { opensearch.RemovePrefix(context.Background(), osc, names.Prefix) })
	if _, err := opensearch.ApplyTemplates(ctx, osc, names.Prefix, indices.Settings{Replicas: 0}); err != nil {
		t.Fatal(err)
	}
	kept := names.Samples(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	day := names.Samples(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC))
	late := names.Samples(time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC))
	create := func(index, alias string) {
		t.Helper()
		body := []byte(`{}`)
		if alias != "" {
			body, _ = json.Marshal(map[string]any{"aliases": map[string]any{alias: map[string]any{}}})
		}
		if st, b, err := opensearch.Raw(ctx, osc, http.MethodPut, "/"+index, body); err != nil || st != http.StatusOK {
			t.Fatalf("create %s: %d %s %v", index, st, b, err)
		}
	}
	for _, n := range []string{names.Stacks(), kept, day} {
		create(names.Physical(1, n), n)
	}
	for _, n := range []string{names.Stacks(), day} {
		create(names.Physical(2, n), "")
	}
	before, err := opensearch.ReadLayout(ctx, osc, names)
	if err != nil {
		t.Fatal(err)
	}
	if err := opensearch.PlanSwap(before, names, 2).Apply(ctx, osc); err != nil {
		t.Fatal(err)
	}
	create(names.Physical(1, late), late) // a live writer that read generation 1

	moved, err := moveLateNames(ctx, osc, names, before, 2, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(moved, []string{late}) {
		t.Fatalf("moved %v, want [%s]", moved, late)
	}
	l, _ := opensearch.ReadLayout(ctx, osc, names)
	for name, gen := range map[string]int{names.Stacks(): 2, day: 2, late: 2, kept: 1} {
		if p, ok := l.Serving(name); !ok || p.Gen != gen {
			t.Errorf("%s resolves to %+v, want generation %d", name, p, gen)
		}
	}
	if again, err := moveLateNames(ctx, osc, names, before, 2, nil); err != nil || len(again) != 0 {
		t.Fatalf("a second pass moved %v, %v", again, err)
	}
}
