package indices

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strconv"
	"strings"
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

// setStacksByIndex is SetStacks as first written (sort a permutation by a
// closure over the IDs, pack a sorted copy): the reference the faster one
// must match, errors included.
func setStacksByIndex(d *SampleDoc, ids []string, values []int64) error {
	if len(ids) != len(values) {
		return fmt.Errorf("%d stack IDs, %d values", len(ids), len(values))
	}
	order := make([]int, len(ids))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return strings.Compare(ids[a], ids[b]) })
	d.StackIDs = make([]string, len(ids))
	sorted := make([]int64, len(ids))
	for i, o := range order {
		d.StackIDs[i], sorted[i] = ids[o], values[o]
		if ids[o] == "" {
			return errors.New("empty stack ID")
		}
		if i > 0 && d.StackIDs[i] == d.StackIDs[i-1] {
			return fmt.Errorf("stack %s listed twice", ids[o])
		}
	}
	packed, err := PackStackValues(nil, sorted)
	if err != nil {
		return err
	}
	d.StackValues = packed
	if len(ids) == 0 {
		d.StackIDs, d.StackValues = nil, nil
	}
	return nil
}

// checkSetStacks fails t unless SetStacks and the reference agree.
func checkSetStacks(t *testing.T, ids []string, values []int64) {
	t.Helper()
	var got, want SampleDoc
	gotErr := got.SetStacks(ids, values)
	wantErr := setStacksByIndex(&want, ids, values)
	if fmt.Sprint(gotErr) != fmt.Sprint(wantErr) {
		t.Fatalf("SetStacks(%q, %v) error %v, want %v", ids, values, gotErr, wantErr)
	}
	if wantErr == nil && !reflect.DeepEqual(got, want) {
		t.Fatalf("SetStacks(%q, %v) = %+v, want %+v", ids, values, got, want)
	}
}

// TestSetStacksMatchesReference: IDs that share their first 8 bytes, are
// shorter than 8, contain zero bytes, repeat or are empty; hashed IDs in
// random order; negative values at several places.
func TestSetStacksMatchesReference(t *testing.T) {
	for name, c := range map[string]struct {
		ids    []string
		values []int64
	}{
		"none":             {nil, nil},
		"one":              {[]string{"a"}, []int64{7}},
		"sorted":           {[]string{"a", "b", "c"}, []int64{2, 4, 6}},
		"common prefix":    {[]string{"abcdefgh2", "abcdefgh1", "abcdefgh", "abcdefg"}, []int64{1, 2, 3, 4}},
		"zero bytes":       {[]string{"a\x00", "a", "a\x00\x00", "\x00"}, []int64{5, 10, 15, 20}},
		"high bytes":       {[]string{"\xff\xfe", "\xff", "\x7f"}, []int64{1, 1, 1}},
		"twice unsorted":   {[]string{"b", "a", "b"}, []int64{1, 2, 3}},
		"twice sorted":     {[]string{"a", "a"}, []int64{1, 2}},
		"empty":            {[]string{"b", ""}, []int64{1, 2}},
		"empty and twice":  {[]string{"b", "", "b", ""}, []int64{1, 2, 3, 4}},
		"negatives":        {[]string{"c", "a", "b"}, []int64{-3, 1, -2}},
		"negative and dup": {[]string{"c", "c"}, []int64{-3, 1}},
		"zeros":            {[]string{"b", "a"}, []int64{0, 0}},
		"lengths":          {[]string{"a"}, nil},
	} {
		t.Run(name, func(t *testing.T) { checkSetStacks(t, c.ids, c.values) })
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for n := range 300 {
		ids := make([]string, n)
		values := make([]int64, n)
		for i := range ids {
			ids[i] = StackID([]Frame{{Function: strconv.Itoa(rng.IntN(1 << 20))}})
			values[i] = 52_631_578 * rng.Int64N(50)
		}
		checkSetStacks(t, ids, values)
	}
}

// FuzzSetStacks: SetStacks agrees with the reference on any IDs (split from
// the input at commas) and values.
func FuzzSetStacks(f *testing.F) {
	f.Add("b,a,c", int64(3), int64(2))
	f.Add("abcdefgh2,abcdefgh1,abcdefgh", int64(-1), int64(1))
	f.Add("a,,a", int64(0), int64(0))
	f.Fuzz(func(t *testing.T, list string, v0, step int64) {
		ids := strings.Split(list, ",")
		if len(ids) > 1000 {
			return
		}
		values := make([]int64, len(ids))
		for i := range values {
			values[i] = v0 + int64(i)*step
		}
		checkSetStacks(t, ids, values)
	})
}
