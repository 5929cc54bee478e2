package aggregate

import (
	"maps"
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
			// The late minutes are written again once the watermark
			// moves RewriteDelay (to 11:02, then 11:03).
			add(t, p, cpu(t0.Add(61*time.Minute+time.Duration(len(written[i])+1)*time.Minute)), record.ProfileCPU, off)
			off++
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

// TestHourWriteInChunks: an ended hour handed out by HourWrite a chunk at a
// time, with late profiles folded in between chunks (one to a series
// already handed out, one for a new host), ends up stored as the
// documents of a partition that wrote it whole with Pending: what the
// late profiles changed is dirty again and written after the chunks, and
// the hour freezes once that is stored.
func TestHourWriteInChunks(t *testing.T) {
	hosts := []string{"web-1", "web-2", "web-3", "web-4", "web-5", "web-6"}
	var profs []*profile.Profile
	var hostOf []string
	for k := range 8 { // 10:58:50 to 11:00:00, the last ending the hour
		for _, h := range hosts {
			profs = append(profs, fleetLike(t0.Add(58*time.Minute+50*time.Second+time.Duration(k)*10*time.Second)))
			hostOf = append(hostOf, h)
		}
	}
	lates := []Input{
		{Profile: fleetLike(t0.Add(59*time.Minute + 30*time.Second)), Host: "web-1"},
		{Profile: fleetLike(t0.Add(59*time.Minute + 40*time.Second)), Host: "web-9"},
	}
	hourDocs := func(docs []Pending) map[string]indices.RollupDoc {
		out := map[string]indices.RollupDoc{}
		for id, d := range docsByID(docs) {
			if d.Resolution == indices.ResolutionHour && d.Timestamp.Equal(t0) {
				out[id] = d
			}
		}
		return out
	}
	var parts [2]*Partition
	var stored [2]map[string]indices.RollupDoc
	chunks := 0
	for i := range parts {
		cfg := testConfig()
		cfg.Budget = &Budget{MaxBytes: math.MaxInt64}
		p := NewPartition(cfg, Checkpoint{})
		parts[i] = p
		off := int64(0)
		fold := func(in Input) {
			in.Type, in.Offset = record.ProfileCPU, off
			if _, err := p.Add(in); err != nil {
				t.Fatal(err)
			}
			off++
		}
		for j, prof := range profs {
			fold(Input{Profile: prof, Host: hostOf[j]})
		}
		if !p.HoldsEndedHour() {
			t.Fatal("the hour has not ended")
		}
		stored[i] = map[string]indices.RollupDoc{}
		if i == 0 { // whole, as the consumer wrote it before
			docs := p.Pending(false)
			MarkStored(docs)
			maps.Copy(stored[i], hourDocs(docs))
			for _, in := range lates {
				fold(in)
			}
		} else {
			h := p.EndedHour(time.Time{})
			if h == nil || !h.Hour().Equal(t0) {
				t.Fatalf("ended hour write %+v, want the hour %s", h, t0)
			}
			if p.EndedHour(t0) != nil {
				t.Fatal("an hour after 10:00 has ended")
			}
			for docs := h.Next(2 << 10); len(docs) > 0; docs = h.Next(2 << 10) {
				chunks++
				maps.Copy(stored[i], hourDocs(docs))
				if chunks == 2 {
					for _, in := range lates {
						fold(in)
					}
				}
			}
		}
		rewrite := p.Pending(false)
		if len(hourDocs(rewrite)) == 0 {
			t.Fatalf("partition %d: the late profiles rewrote no document of the hour", i)
		}
		MarkStored(rewrite)
		maps.Copy(stored[i], hourDocs(rewrite))
		p.Evict()
		if w := p.windows[windowKey{indices.ResolutionHour, t0.UnixNano()}]; w == nil || !w.frozen {
			t.Fatalf("partition %d: the stored hour is not frozen", i)
		}
	}
	if chunks < 3 {
		t.Fatalf("the hour was handed out in %d chunks", chunks)
	}
	if len(stored[1]) == 0 || !reflect.DeepEqual(stored[0], stored[1]) {
		t.Fatalf("%d documents stored whole, %d in %d chunks, equal %v", len(stored[0]), len(stored[1]), chunks, reflect.DeepEqual(stored[0], stored[1]))
	}
}
