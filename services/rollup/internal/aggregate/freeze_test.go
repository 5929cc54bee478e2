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

// TestFrozenHourLateProfiles: an hour window that has ended and is stored
// is frozen by Evict (its charge goes down); late profiles thaw what they
// touch (a series it holds, a new series, stacks new to the hour), and the
// documents they rewrite, trees and function documents included, are
// those of a partition that never froze it; the window freezes again once
// they are stored.
func TestFrozenHourLateProfiles(t *testing.T) {
	hour := windowKey{indices.ResolutionHour, t0.UnixNano()}
	// In minutes already written (closed), so the hour is written with them.
	lates := [][]*profile.Profile{
		{fleetLike(t0.Add(58*time.Minute + 40*time.Second))},
		{cpu(t0.Add(57*time.Minute + 20*time.Second)), fleetLike(t0.Add(58*time.Minute + 50*time.Second))},
	}
	// fleetLike draws differently on each call: the same profiles for both.
	first := []*profile.Profile{fleetLike(t0.Add(57 * time.Minute)), fleetLike(t0.Add(58*time.Minute + 10*time.Second)), cpu(t0.Add(61 * time.Minute))}
	var parts [2]*Partition
	var written [2][][]Pending
	for i := range parts {
		cfg := testConfig()
		cfg.Budget = &Budget{MaxBytes: math.MaxInt64}
		p := NewPartition(cfg, Checkpoint{})
		parts[i] = p
		freezes := i == 0
		// The last is past the hour's end: the hour is written with the
		// minute 10:57.
		off := int64(0)
		for _, prof := range first {
			add(t, p, prof, record.ProfileCPU, off)
			off++
		}
		for _, late := range lates {
			MarkStored(p.Pending(false))
			if freezes {
				before := cfg.Budget.Used()
				p.Evict()
				if w := p.windows[hour]; w == nil || !w.frozen {
					t.Fatalf("the ended hour is not frozen: %+v", w)
				}
				if cfg.Budget.Used() >= before {
					t.Fatalf("freezing left the charge at %d (was %d)", cfg.Budget.Used(), before)
				}
			}
			for _, prof := range late {
				add(t, p, prof, record.ProfileCPU, off)
				off++
			}
			if freezes && p.windows[hour].frozen {
				t.Fatal("a late profile left the hour frozen")
			}
			written[i] = append(written[i], p.Pending(false))
		}
	}
	for round := range lates {
		got, want := docsByID(written[0][round]), docsByID(written[1][round])
		hourDocs := map[string]int{}
		for _, d := range got {
			if d.Resolution == indices.ResolutionHour {
				hourDocs[d.Kind]++
			}
		}
		if len(want) == 0 || !reflect.DeepEqual(got, want) {
			t.Fatalf("late round %d: %d documents after freezing, %d never frozen, equal %v", round, len(got), len(want), reflect.DeepEqual(got, want))
		}
		for _, kind := range []string{indices.KindStacks, indices.KindTree, indices.KindFunction, indices.KindServiceTree, indices.KindPartitionTree, indices.KindService} {
			if hourDocs[kind] == 0 {
				t.Fatalf("late round %d rewrote no hourly %s document: %v", round, kind, hourDocs)
			}
		}
	}
}
