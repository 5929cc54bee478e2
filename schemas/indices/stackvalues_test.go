package indices

import (
	"errors"
	"slices"
	"testing"
)

func TestSetStacksRoundTrip(t *testing.T) {
	var d SampleDoc
	ids := []string{"c", "a", "b"}
	values := []int64{3 * 52_631_578, 52_631_578, 7 * 52_631_578}
	if err := d.SetStacks(ids, values); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(d.StackIDs, []string{"a", "b", "c"}) {
		t.Fatalf("ids not sorted: %v", d.StackIDs)
	}
	// The scale (the sampling period) takes 4 bytes, each value one.
	if len(d.StackValues) != 4+3 {
		t.Errorf("packed into %d bytes, want 7", len(d.StackValues))
	}
	gotIDs, got, err := d.Stacks()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(gotIDs, d.StackIDs) || !slices.Equal(got, []int64{52_631_578, 7 * 52_631_578, 3 * 52_631_578}) {
		t.Fatalf("Stacks() = %v %v", gotIDs, got)
	}
}

func TestSetStacksRejects(t *testing.T) {
	for name, c := range map[string]struct {
		ids    []string
		values []int64
	}{
		"twice":    {[]string{"a", "a"}, []int64{1, 2}},
		"empty":    {[]string{""}, []int64{1}},
		"negative": {[]string{"a"}, []int64{-1}},
		"lengths":  {[]string{"a"}, nil},
	} {
		var d SampleDoc
		if err := d.SetStacks(c.ids, c.values); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestStacksOfOldDocuments(t *testing.T) {
	// Written before stack_values: one stack ID, its value in Value.
	d := SampleDoc{StackIDs: []string{"s"}, Value: 42}
	ids, v, err := d.Stacks()
	if err != nil || !slices.Equal(ids, []string{"s"}) || !slices.Equal(v, []int64{42}) {
		t.Fatalf("Stacks() = %v %v %v", ids, v, err)
	}
	d = SampleDoc{StackIDs: []string{"a", "b"}, Value: 42}
	if _, _, err := d.Stacks(); err == nil {
		t.Fatal("two IDs without values accepted")
	}
}

func TestPackZerosAndLargeValues(t *testing.T) {
	for _, values := range [][]int64{{0, 0}, {0, 5}, {1 << 62, 3}, {}} {
		b, err := PackStackValues(nil, values)
		if err != nil {
			t.Fatal(err)
		}
		got, err := UnpackStackValues(b, len(values))
		if err != nil || !slices.Equal(got, values) {
			t.Fatalf("%v: got %v %v", values, got, err)
		}
	}
}

func TestUnpackErrors(t *testing.T) {
	good, _ := PackStackValues(nil, []int64{10, 20})
	for name, c := range map[string]struct {
		b []byte
		n int
	}{
		"empty":      {nil, 1},
		"zero scale": {[]byte{0, 1}, 1},
		"short":      {good, 3},
		"trailing":   {good, 1},
		"truncated":  {[]byte{1, 0x80}, 1},
		"overflow":   {[]byte{0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x10, 0xff, 0xff, 0xff, 0xff, 0x0f}, 1},
	} {
		if _, err := UnpackStackValues(c.b, c.n); !errors.Is(err, errStackValues) {
			t.Errorf("%s: err = %v", name, err)
		}
	}
}

func FuzzUnpackStackValues(f *testing.F) {
	good, _ := PackStackValues(nil, []int64{52_631_578, 3 * 52_631_578})
	f.Add(good, 2)
	f.Add([]byte{1}, 0)
	f.Add([]byte{0xff, 0xff}, 5)
	f.Fuzz(func(t *testing.T, b []byte, n int) {
		if n < 0 || n > 1<<16 {
			return
		}
		v, err := UnpackStackValues(b, n)
		if err != nil {
			return
		}
		if len(v) != n {
			t.Fatalf("%d values, want %d", len(v), n)
		}
		// What decodes re-encodes to a form that decodes the same.
		again, err := PackStackValues(nil, v)
		if err != nil {
			t.Fatal(err)
		}
		w, err := UnpackStackValues(again, n)
		if err != nil || !slices.Equal(v, w) {
			t.Fatalf("round trip: %v -> %v (%v)", v, w, err)
		}
	})
}
