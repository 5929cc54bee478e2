package pprofx

import (
	"testing"

	"github.com/google/pprof/profile"

	"github.com/stackstream/stackstream/schemas/indices"
)

func TestStackFrames(t *testing.T) {
	m := &profile.Mapping{ID: 1, Start: 0x400000, Limit: 0x500000, Offset: 0x1000, File: "/usr/bin/app"}
	inner := &profile.Function{ID: 1, Name: "inlined", Filename: "a.c"}
	outer := &profile.Function{ID: 2, Name: "outer", Filename: "b.c"}
	sys := &profile.Function{ID: 3, SystemName: "_Z3sysv"}
	tests := []struct {
		name string
		locs []*profile.Location
		want []indices.Frame
	}{
		{
			name: "inlined callee first",
			locs: []*profile.Location{{Mapping: m, Address: 0x400010, Line: []profile.Line{{Function: inner, Line: 3}, {Function: outer, Line: 9}}}},
			want: []indices.Frame{{Function: "inlined", File: "a.c", Line: 3, Binary: "app"}, {Function: "outer", File: "b.c", Line: 9, Binary: "app"}},
		},
		{
			name: "unresolved keeps binary and file offset",
			locs: []*profile.Location{{Mapping: m, Address: 0x400010}},
			want: []indices.Frame{{Function: "app+0x400010", Binary: "app"}},
		},
		{
			name: "no mapping",
			locs: []*profile.Location{{Address: 0xdead}},
			want: []indices.Frame{{Function: "0xdead"}},
		},
		{
			name: "address when the function has no name",
			locs: []*profile.Location{{Address: 0xbeef, Mapping: m, Line: []profile.Line{{Function: sys, Line: 4}}}},
			want: []indices.Frame{{Function: "0xbeef", Line: 4, Binary: "app"}},
		},
		{
			name: "leaf first across locations",
			locs: []*profile.Location{{Line: []profile.Line{{Function: inner}}}, {Line: []profile.Line{{Function: outer}}}},
			want: []indices.Frame{{Function: "inlined", File: "a.c"}, {Function: "outer", File: "b.c"}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := StackFrames(&profile.Sample{Location: tt.locs})
			if len(got) != len(tt.want) {
				t.Fatalf("got %d frames %+v, want %+v", len(got), got, tt.want)
			}
			for i := range got {
				if got[i] != tt.want[i] {
					t.Fatalf("frame %d = %+v, want %+v", i, got[i], tt.want[i])
				}
			}
		})
	}
}

func TestValueIndex(t *testing.T) {
	cpu := []*profile.ValueType{{Type: "samples", Unit: "count"}, {Type: "cpu", Unit: "nanoseconds"}}
	heap := []*profile.ValueType{{Type: "alloc_space", Unit: "bytes"}, {Type: "inuse_space", Unit: "bytes"}, {Type: "inuse_objects", Unit: "count"}}
	alloc := []*profile.ValueType{{Type: "alloc_objects", Unit: "count"}, {Type: "alloc_space", Unit: "bytes"}, {Type: "inuse_objects", Unit: "count"}}
	tests := []struct {
		name       string
		p          *profile.Profile
		typ        string
		value, cnt int
	}{
		{"cpu by name", &profile.Profile{SampleType: cpu}, "cpu", 1, 0},
		{"heap by name over the default", &profile.Profile{SampleType: heap, DefaultSampleType: "alloc_space"}, "heap", 1, -1},
		{"default sample type without a named one", &profile.Profile{SampleType: alloc, DefaultSampleType: "alloc_objects"}, "memory", 0, -1},
		{"unknown default falls back to last", &profile.Profile{SampleType: alloc, DefaultSampleType: "nope"}, "memory", 2, -1},
		{"no types", &profile.Profile{}, "cpu", -1, -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := ValueIndex(tt.p, tt.typ); got != tt.value {
				t.Errorf("ValueIndex = %d, want %d", got, tt.value)
			}
			if got := CountIndex(tt.p); got != tt.cnt {
				t.Errorf("CountIndex = %d, want %d", got, tt.cnt)
			}
		})
	}
}
