package aggregate

import (
	"slices"
	"testing"
	"time"

	"github.com/stackstream/stackstream/pkg/pproftest"
	"github.com/stackstream/stackstream/schemas/indices"
	"github.com/stackstream/stackstream/schemas/record"
)

// TestStacksDocument: a window's stacks are one stacks document per
// series, keyed by the series, holding every stack (sorted) with its value;
// a late profile touching one stack rewrites it whole; a stack summed to a
// negative value stays in the document's value only.
func TestStacksDocument(t *testing.T) {
	p := NewPartition(testConfig(), Checkpoint{})
	prof := pproftest.NewCPU(t0.Add(10*time.Second), 10*time.Second).
		Sample(svc("checkout"), []int64{3, 30}, "hash", "work", "main").
		Sample(svc("checkout"), []int64{1, 10}, "work", "main").
		Sample(svc("checkout"), []int64{1, -7}, "evil", "main").
		Profile()
	add(t, p, prof, record.ProfileCPU, 0)
	stacks := func(docs []Pending) map[string]indices.RollupDoc {
		out := map[string]indices.RollupDoc{}
		for _, d := range docs {
			if d.Doc.Kind == indices.KindStack {
				t.Fatalf("a document per stack: %+v", d.Doc)
			}
			if d.Doc.Kind != indices.KindStacks {
				continue
			}
			if d.ID != indices.RollupID(&d.Doc) || d.ID != indices.RollupID(&indices.RollupDoc{Timestamp: d.Doc.Timestamp, Resolution: d.Doc.Resolution, Kind: indices.KindStacks, Type: "cpu", Service: "checkout", Host: "web-1"}) {
				t.Fatalf("_id %s is not the series' %+v", d.ID, d.Doc)
			}
			out[d.Doc.Resolution] = d.Doc
		}
		return out
	}
	check := func(docs map[string]indices.RollupDoc, want map[string]int64, value int64) {
		t.Helper()
		if len(docs) != 2 {
			t.Fatalf("stacks documents %v, want one per resolution", docs)
		}
		for res, d := range docs {
			ids, values, err := d.Stacks()
			if err != nil {
				t.Fatal(err)
			}
			if !slices.IsSorted(ids) || len(ids) != len(want) || d.Value != value {
				t.Fatalf("%s: stacks %v %v, value %d; want %v, value %d", res, ids, values, d.Value, want, value)
			}
			for i, id := range ids {
				if want[id] != values[i] {
					t.Fatalf("%s: stack %s = %d, want %d", res, id, values[i], want[id])
				}
			}
		}
	}
	hash, work := stackID("hash", "work", "main"), stackID("work", "main")
	docs := p.Pending(true)
	check(stacks(docs), map[string]int64{hash: 30, work: 10}, 30+10-7)
	MarkStored(docs)
	if again := p.Pending(true); len(again) != 0 {
		t.Fatalf("%d documents pending after all were stored", len(again))
	}
	// A late profile of one stack: the window's document again, whole.
	late := pproftest.NewCPU(t0.Add(20*time.Second), 10*time.Second).
		Sample(svc("checkout"), []int64{1, 5}, "work", "main").Profile()
	add(t, p, late, record.ProfileCPU, 1)
	check(stacks(p.Pending(true)), map[string]int64{hash: 30, work: 15}, 30+15-7)
}
