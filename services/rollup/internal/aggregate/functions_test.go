package aggregate

import (
	"testing"
	"time"

	"github.com/stackstream/stackstream/pkg/pprofx"
	"github.com/stackstream/stackstream/schemas/indices"
	"github.com/stackstream/stackstream/schemas/record"
)

// TestHourFunctionsFromStacks: the hour's function documents, computed from
// its stack documents and the trie when written, equal a brute force over
// every sample of every profile (self: the leaf's function; total: each
// distinct function of the stack once), for fleet-shaped profiles of 3
// hosts, written while the hour is open (after its end, within lateness),
// again after a late profile (rewritten whole, the sums still exact), and
// no minute window has function documents.
func TestHourFunctionsFromStacks(t *testing.T) {
	if testing.Short() {
		t.Skip("folds 1,098 profiles")
	}
	cfg := testConfig()
	cfg.Retention = 10 * time.Minute
	p := NewPartition(cfg, Checkpoint{})
	profs, hostOf := fleetProfiles(3, 6*61) // 61 minutes: the hour ends
	type key struct{ service, host, function string }
	want := map[key][2]int64{}
	brute := func(i int) {
		hour := truncate(profs[i].TimeNanos, time.Hour)
		if hour != t0.UnixNano() {
			return
		}
		for _, s := range profs[i].Sample {
			frames := pprofx.StackFrames(s)
			svc := record.DeriveService(record.Labels(s.Label))
			k := key{svc, hostOf[i], frames[0].Function}
			v := want[k]
			v[0] += s.Value[1]
			want[k] = v
			seen := map[string]bool{}
			for _, f := range frames {
				if !seen[f.Function] {
					seen[f.Function] = true
					k := key{svc, hostOf[i], f.Function}
					v := want[k]
					v[1] += s.Value[1]
					want[k] = v
				}
			}
		}
	}
	// One profile of 10:55 held back, added late (within retention).
	late := 55*6*3 + 1
	got := map[key][2]int64{}
	check := func(docs []Pending) int {
		n := 0
		for _, d := range docs {
			if d.Doc.Kind != indices.KindFunction {
				continue
			}
			if d.Doc.Resolution != indices.ResolutionHour {
				t.Fatalf("function document of resolution %s", d.Doc.Resolution)
			}
			if !d.Doc.Timestamp.Equal(t0) {
				continue
			}
			got[key{d.Doc.Service, d.Doc.Host, d.Doc.Function}] = [2]int64{d.Doc.Self, d.Doc.Total}
			n++
		}
		return n
	}
	for i, prof := range profs {
		if i == late {
			continue
		}
		brute(i)
		if _, err := p.Add(Input{Profile: prof, Type: record.ProfileCPU, Host: hostOf[i], Offset: int64(i)}); err != nil {
			t.Fatal(err)
		}
		if i%3 == 2 {
			docs := p.Pending(false)
			check(docs)
			MarkStored(docs)
			p.Evict()
		}
	}
	compare := func(when string) {
		t.Helper()
		if len(got) != len(want) {
			t.Fatalf("%s: %d function documents, want %d", when, len(got), len(want))
		}
		for k, w := range want {
			if got[k] != w {
				t.Fatalf("%s: %v = %v, want %v", when, k, got[k], w)
			}
		}
	}
	compare("hour written")
	brute(late)
	if out, err := p.Add(Input{Profile: profs[late], Type: record.ProfileCPU, Host: hostOf[late], Offset: int64(len(profs))}); err != nil || out != Added {
		t.Fatalf("late profile: %v %v", out, err)
	}
	docs := p.Pending(true)
	if n := check(docs); n == 0 {
		t.Fatalf("a late profile rewrote no function document")
	}
	compare("after a late profile")
}
