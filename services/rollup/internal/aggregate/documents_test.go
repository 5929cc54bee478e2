package aggregate

import (
	"maps"
	"reflect"
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

// TestFlushInChunks: a flush handed out a chunk at a time holds at most
// the chunk's bytes and the documents of one step (a series, a tree) past
// them, and hands out exactly the documents of Pending, each once. A chunk
// not marked stored (its write failed) leaves its documents, and those
// after it, to the next flush, which hands out nothing already stored.
func TestFlushInChunks(t *testing.T) {
	// 8 hosts for 11 minutes: minute, 10-minute and hour windows, all
	// written with all.
	profs, hostOf := fleetProfiles(8, 66)
	build := func() *Partition {
		p := NewPartition(testConfig(), Checkpoint{})
		for i, prof := range profs {
			if _, err := p.Add(Input{Profile: prof, Type: record.ProfileCPU, Host: hostOf[i], Offset: int64(i)}); err != nil {
				t.Fatal(err)
			}
		}
		return p
	}
	want := docsByID(build().Pending(true))
	res := map[string]bool{}
	for _, d := range want {
		res[d.Resolution] = true
	}
	if len(res) != 3 {
		t.Fatalf("resolutions %v, want minutes, 10 minutes and the hour", res)
	}

	const chunk = 16 << 10
	p := build()
	got := map[string]indices.RollupDoc{}
	var chunks [][]Pending
	f := p.Flush(true)
	for docs := f.Next(chunk); len(docs) > 0; docs = f.Next(chunk) {
		// The documents before the last step's (those of its window,
		// series or tree) are less than a chunk.
		size, last := 0, 0
		step := func(d *Pending) [5]string {
			return [5]string{d.Index, d.Doc.Resolution, d.Doc.Type, d.Doc.Service, d.Doc.Host}
		}
		for i := range docs {
			n := pendingBytes(&docs[i])
			size += n
			if step(&docs[i]) == step(&docs[len(docs)-1]) {
				last += n
			} else {
				last = 0
			}
		}
		if size-last >= chunk {
			t.Fatalf("chunk %d: %d documents, %d bytes, %d before its last step (bound %d)", len(chunks), len(docs), size, size-last, chunk)
		}
		for _, d := range docs {
			if _, ok := got[d.Index+"/"+d.ID]; ok {
				t.Fatalf("%s handed out twice", d.ID)
			}
			got[d.Index+"/"+d.ID] = d.Doc
		}
		chunks = append(chunks, docs)
		MarkStored(docs)
	}
	if len(chunks) < 10 || !reflect.DeepEqual(got, want) {
		t.Fatalf("%d chunks, %d documents, %d from Pending, equal %v", len(chunks), len(got), len(want), reflect.DeepEqual(got, want))
	}
	if again := p.Pending(true); len(again) != 0 {
		t.Fatalf("%d documents pending after every chunk was stored", len(again))
	}
	if built := p.DocumentsBuilt(); built != int64(len(got)) {
		t.Fatalf("DocumentsBuilt %d, want %d", built, len(got))
	}

	// The write of the second chunk fails: the flush stops there.
	p = build()
	f = p.Flush(true)
	first := f.Next(chunk)
	MarkStored(first)
	if second := f.Next(chunk); len(second) == 0 {
		t.Fatal("one chunk only")
	}
	rest := maps.Clone(want)
	for id := range docsByID(first) {
		delete(rest, id)
	}
	if again := docsByID(p.Pending(true)); len(again) != len(want)-len(first) || !reflect.DeepEqual(again, rest) {
		t.Fatalf("after a failed write: %d documents pending, want the %d not stored", len(again), len(want)-len(first))
	}
}
