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
			want: []indices.Frame{{Function: "app+0x1010", Binary: "app"}},
		},
		{
			name: "no mapping",
			locs: []*profile.Location{{Address: 0xdead}},
			want: []indices.Frame{{Function: "0xdead"}},
		},
		{
			name: "system name when name is empty",
			locs: []*profile.Location{{Line: []profile.Line{{Function: sys}}}},
			want: []indices.Frame{{Function: "_Z3sysv"}},
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
	tests := []struct {
		name       string
		p          *profile.Profile
		value, cnt int
	}{
		{"cpu takes the last", &profile.Profile{SampleType: cpu}, 1, 0},
		{"default sample type wins", &profile.Profile{SampleType: heap, DefaultSampleType: "inuse_space"}, 1, -1},
		{"unknown default falls back to last", &profile.Profile{SampleType: heap, DefaultSampleType: "nope"}, 2, -1},
		{"no types", &profile.Profile{}, -1, -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := ValueIndex(tt.p); got != tt.value {
				t.Errorf("ValueIndex = %d, want %d", got, tt.value)
			}
			if got := CountIndex(tt.p); got != tt.cnt {
				t.Errorf("CountIndex = %d, want %d", got, tt.cnt)
			}
		})
	}
}
