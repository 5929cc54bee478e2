package indices

import (
	"reflect"
	"testing"
	"time"
)

// TestStackRollupForms: a stacks document packs like a samples document
// and reads back, per stack, as the stack documents it replaces; a stack
// document of before schema 3 reads as its one stack; the _id of a stacks
// document is its series' and window's, apart from any stack document's.
func TestStackRollupForms(t *testing.T) {
	at := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	d := RollupDoc{Timestamp: at, Resolution: ResolutionMinute, Kind: KindStacks, Type: "cpu", Service: "s", Host: "h", Value: 70}
	if err := d.SetStacks([]string{"b", "c", "a"}, []int64{20, 0, 50}); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(d.StackIDs, []string{"a", "b", "c"}) {
		t.Fatalf("stack IDs %v, want sorted", d.StackIDs)
	}
	per, err := d.PerStack()
	if err != nil {
		t.Fatal(err)
	}
	want := []RollupDoc{
		{Timestamp: at, Resolution: ResolutionMinute, Kind: KindStack, Type: "cpu", Service: "s", Host: "h", StackIDs: []string{"a"}, Value: 50},
		{Timestamp: at, Resolution: ResolutionMinute, Kind: KindStack, Type: "cpu", Service: "s", Host: "h", StackIDs: []string{"b"}, Value: 20},
		{Timestamp: at, Resolution: ResolutionMinute, Kind: KindStack, Type: "cpu", Service: "s", Host: "h", StackIDs: []string{"c"}},
	}
	if !reflect.DeepEqual(per, want) {
		t.Fatalf("per stack %+v, want %+v", per, want)
	}
	old := want[0]
	ids, values, err := old.Stacks()
	if err != nil || !reflect.DeepEqual(ids, []string{"a"}) || !reflect.DeepEqual(values, []int64{50}) {
		t.Fatalf("old document's stacks %v %v %v", ids, values, err)
	}
	other := d
	other.StackIDs, other.StackValues = []string{"z"}, []byte{1, 1}
	if RollupID(&d) != RollupID(&other) {
		t.Fatal("a stacks document's _id depends on its stacks")
	}
	if RollupID(&d) == RollupID(&want[0]) || RollupID(&want[0]) == RollupID(&want[1]) {
		t.Fatal("stack and stacks documents share an _id")
	}
	if WindowKey(ResolutionMinute, at, "a:1", "b") == WindowKey(ResolutionMinute, at, "a", "1:b") {
		t.Fatal("window keys of different series collide")
	}
}
