package aggregate

import (
	"math"
	"reflect"
	"testing"
	"time"

	"github.com/google/pprof/profile"

	"github.com/stackstream/stackstream/schemas/indices"
	"github.com/stackstream/stackstream/schemas/record"
)

// TestPackedWindowLateProfile: a minute window closed and stored is packed
// by Evict (its charge goes down); a late profile unpacks it, and the
// documents it rewrites, and the charge, are those of a partition that
// never packed.
func TestPackedWindowLateProfile(t *testing.T) {
	var parts [2]*Partition
	var budgets [2]*Budget
	var late [2][]Pending
	// fleetProfiles draws differently on each call: the same profiles for both.
	at20, at40 := fleetLike(t0.Add(20*time.Second)), fleetLike(t0.Add(40*time.Second))
	for i := range parts {
		cfg := testConfig()
		budgets[i] = &Budget{MaxBytes: math.MaxInt64}
		cfg.Budget = budgets[i]
		p := NewPartition(cfg, Checkpoint{})
		parts[i] = p
		add(t, p, cpu(t0), record.ProfileCPU, 0)
		add(t, p, at20, record.ProfileCPU, 1)
		// Closes the minute t0 (lateness 2m), not past retention (5m).
		add(t, p, cpu(t0.Add(4*time.Minute)), record.ProfileCPU, 2)
		MarkStored(p.Pending(false))
		packs := i == 0
		if packs {
			before := budgets[i].Used()
			p.Evict()
			w := p.windows[windowKey{indices.ResolutionMinute, t0.UnixNano()}]
			if w == nil || !w.packed {
				t.Fatalf("minute window not packed: %+v", w)
			}
			if budgets[i].Used() >= before {
				t.Fatalf("packing left the charge at %d (was %d)", budgets[i].Used(), before)
			}
		}
		add(t, p, at40, record.ProfileCPU, 3)
		// Written again once the watermark moves RewriteDelay.
		add(t, p, cpu(t0.Add(5*time.Minute)), record.ProfileCPU, 4)
		late[i] = p.Pending(false)
		if w := p.windows[windowKey{indices.ResolutionMinute, t0.UnixNano()}]; w.packed {
			t.Fatal("late profile left the window packed")
		}
	}
	if budgets[0].Used() != budgets[1].Used() {
		t.Fatalf("charge after unpacking %d, never packed %d", budgets[0].Used(), budgets[1].Used())
	}
	got, want := docsByID(late[0]), docsByID(late[1])
	if len(want) == 0 || !reflect.DeepEqual(got, want) {
		t.Fatalf("late rewrite after packing: %d documents, never packed %d, equal %v", len(got), len(want), reflect.DeepEqual(got, want))
	}
	minute := 0
	for _, d := range late[0] {
		if d.Doc.Resolution == indices.ResolutionMinute && d.Doc.Timestamp.Equal(t0) {
			minute++
		}
	}
	if minute == 0 {
		t.Fatal("the late profile rewrote no document of the packed minute")
	}
}

// fleetLike is one fleetProfiles profile at the given time.
func fleetLike(at time.Time) *profile.Profile {
	profs, _ := fleetProfiles(1, 1)
	profs[0].TimeNanos = at.UnixNano()
	return profs[0]
}

func docsByID(docs []Pending) map[string]indices.RollupDoc {
	out := map[string]indices.RollupDoc{}
	for _, d := range docs {
		out[d.Index+"/"+d.ID] = d.Doc
	}
	return out
}
