package heap

import (
	"testing"

	"github.com/google/pprof/profile"
)

// goHeapProfile is a Go heap profile (alloc_objects, alloc_space, inuse_objects,
// inuse_space) with one sample per function: values[fn] = {objects, bytes}.
func goHeapProfile(at int64, values map[string][2]int64) *profile.Profile {
	p := &profile.Profile{
		SampleType: []*profile.ValueType{{Type: "alloc_objects", Unit: "count"}, {Type: "alloc_space", Unit: "bytes"},
			{Type: "inuse_objects", Unit: "count"}, {Type: "inuse_space", Unit: "bytes"}},
		PeriodType: &profile.ValueType{Type: "space", Unit: "bytes"}, Period: 524288, TimeNanos: at,
	}
	m := &profile.Mapping{ID: 1, Start: 0x400000, Limit: 0x800000, File: "/app"}
	p.Mapping = []*profile.Mapping{m}
	id := uint64(1)
	for fn, v := range values {
		// A function's code is at the same address in every scrape.
		addr := 0x400000 + uint64(len(fn))*0x100 + uint64(fn[0])
		f := &profile.Function{ID: id, Name: fn}
		l := &profile.Location{ID: id, Mapping: m, Address: addr, Line: []profile.Line{{Function: f}}}
		p.Function = append(p.Function, f)
		p.Location = append(p.Location, l)
		p.Sample = append(p.Sample, &profile.Sample{Location: []*profile.Location{l}, Value: []int64{v[0], v[1], 1, 100},
			Label: map[string][]string{"service": {"api"}}})
		id++
	}
	return p
}

func allocsByFunction(t *testing.T, p *profile.Profile) map[string][2]int64 {
	t.Helper()
	if err := p.CheckValid(); err != nil {
		t.Fatal(err)
	}
	if len(p.SampleType) != 2 || p.SampleType[0].Type != "alloc_objects" || p.SampleType[1].Type != "alloc_space" {
		t.Fatalf("sample types %v", p.SampleType)
	}
	out := map[string][2]int64{}
	for _, s := range p.Sample {
		if s.Label["service"][0] != "api" {
			t.Fatalf("labels lost: %v", s.Label)
		}
		fn := s.Location[0].Line[0].Function.Name
		v := out[fn]
		out[fn] = [2]int64{v[0] + s.Value[0], v[1] + s.Value[1]}
	}
	return out
}

func TestAllocsDelta(t *testing.T) {
	a := NewAllocs()
	const url = "http://127.0.0.1:6060/debug/pprof/heap"
	if d, err := a.Delta(url, goHeapProfile(1e9, map[string][2]int64{"parse": {10, 1000}, "idle": {5, 500}})); d != nil || err != nil {
		t.Fatalf("first scrape gave %v, %v; want only a baseline", d, err)
	}
	d, err := a.Delta(url, goHeapProfile(11e9, map[string][2]int64{"parse": {30, 3000}, "idle": {5, 500}, "encode": {2, 64}}))
	if err != nil || d == nil {
		t.Fatalf("second scrape: %v, %v", d, err)
	}
	got := allocsByFunction(t, d)
	want := map[string][2]int64{"parse": {20, 2000}, "encode": {2, 64}}
	if len(got) != len(want) || got["parse"] != want["parse"] || got["encode"] != want["encode"] {
		t.Errorf("delta %v, want %v (idle did not allocate)", got, want)
	}
	if d.DurationNanos != 10e9 || d.TimeNanos != 11e9 {
		t.Errorf("delta spans %d ns from %d", d.DurationNanos, d.TimeNanos)
	}

	// A restart: the counts went down, so everything since is new.
	d, _ = a.Delta(url, goHeapProfile(21e9, map[string][2]int64{"parse": {3, 300}}))
	if got := allocsByFunction(t, d); got["parse"] != [2]int64{3, 300} || len(got) != 1 {
		t.Errorf("after a restart %v, want parse {3 300}", got)
	}

	// An endpoint whose profile has no allocation counts (a heap profile
	// of another runtime) gives none, and forgets its baseline.
	p := goHeapProfile(31e9, map[string][2]int64{"x": {1, 1}})
	p.SampleType = p.SampleType[2:]
	for _, s := range p.Sample {
		s.Value = s.Value[2:]
	}
	if d, err := a.Delta(url, p); d != nil || err != nil {
		t.Errorf("profile without alloc counts gave %v, %v", d, err)
	}
	a.Delta("other", goHeapProfile(1, map[string][2]int64{"x": {1, 1}}))
	a.Forget(map[string]bool{})
	if len(a.prev) != 0 {
		t.Errorf("baselines kept after Forget: %d", len(a.prev))
	}
}
