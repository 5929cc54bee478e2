package querytest

import (
	"slices"
	"testing"
	"time"

	"github.com/stackstream/stackstream/schemas/indices"
)

func TestSamplesPacksOneDocumentPerProfileAndLabelSet(t *testing.T) {
	names := indices.Names{Prefix: "t-"}
	at := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	pod := func(p string) map[string]string { return map[string]string{"k8s_pod": p} }
	docs := Samples(names,
		indices.SampleDoc{Timestamp: at, Type: "cpu", Host: "h", Service: "s", StackIDs: []string{"b"}, Value: 30, Count: 3, Labels: pod("x")},
		indices.SampleDoc{Timestamp: at, Type: "cpu", Host: "h", Service: "s", StackIDs: []string{"a"}, Value: 10, Count: 1, Labels: pod("x")},
		indices.SampleDoc{Timestamp: at, Type: "cpu", Host: "h", Service: "s", StackIDs: []string{"b"}, Value: 20, Count: 2, Labels: pod("x")},
		// Another label set, another host, another time, no stack: apart.
		indices.SampleDoc{Timestamp: at, Type: "cpu", Host: "h", Service: "s", StackIDs: []string{"a"}, Value: 1, Labels: pod("y")},
		indices.SampleDoc{Timestamp: at, Type: "cpu", Host: "h2", Service: "s", StackIDs: []string{"a"}, Value: 2, Labels: pod("x")},
		indices.SampleDoc{Timestamp: at.Add(time.Minute), Type: "cpu", Host: "h", Service: "s", StackIDs: []string{"a"}, Value: 3, Labels: pod("x")},
		indices.SampleDoc{Timestamp: at, Type: "memory", Host: "h", Service: "s", Value: 1 << 30, Labels: pod("x")},
	)
	if len(docs) != 5 {
		t.Fatalf("%d documents, want 5", len(docs))
	}
	first := docs[0].Body.(indices.SampleDoc)
	ids, values, err := first.Stacks()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(ids, []string{"a", "b"}) || !slices.Equal(values, []int64{10, 50}) || first.Value != 60 || first.Count != 6 {
		t.Fatalf("first document: stacks %v values %v value %d count %d, want a=10 b=50, 60, 6", ids, values, first.Value, first.Count)
	}
	if want := indices.SampleID("h", "cpu", at, pod("x")); docs[0].ID != want || docs[0].Index != names.Samples(at) {
		t.Fatalf("first document %s in %s, want %s in %s", docs[0].ID, docs[0].Index, want, names.Samples(at))
	}
	mem := docs[4].Body.(indices.SampleDoc)
	if len(mem.StackIDs) != 0 || len(mem.StackValues) != 0 || mem.Value != 1<<30 {
		t.Fatalf("memory document %+v, want no stacks and the value", mem)
	}
	seen := map[string]bool{}
	for _, d := range docs {
		if seen[d.ID] {
			t.Fatalf("two documents with ID %s", d.ID)
		}
		seen[d.ID] = true
	}
}

func TestSamplesRefusesPackedInput(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("no panic for a doc with two stacks")
		}
	}()
	Samples(indices.Names{}, indices.SampleDoc{StackIDs: []string{"a", "b"}, Value: 1})
}
