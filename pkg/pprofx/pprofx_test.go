package pprofx

import (
	"bytes"
	"testing"
	"time"

	"github.com/google/pprof/profile"

	"github.com/stackstream/stackstream/pkg/pproftest"
	"github.com/stackstream/stackstream/schemas/indices"
	"github.com/stackstream/stackstream/schemas/record"
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
			name: "kind of the agent's pseudo-files, none for native code",
			locs: []*profile.Location{
				{Mapping: &profile.Mapping{File: record.MappingPython}, Line: []profile.Line{{Function: &profile.Function{Name: "serve", Filename: "app.py"}, Line: 7}}},
				{Mapping: &profile.Mapping{File: record.MappingKernel}, Address: 0xffff0010},
				{Mapping: m, Line: []profile.Line{{Function: outer, Line: 9}}},
			},
			want: []indices.Frame{
				{Function: "serve", File: "app.py", Line: 7, Binary: "[python]", Kind: "python"},
				{Function: "[kernel.kallsyms]+0xffff0010", Binary: "[kernel.kallsyms]", Kind: "kernel"},
				{Function: "outer", File: "b.c", Line: 9, Binary: "app"},
			},
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

// TestNilSafe: a sample naming a location the profile does not define used
// to reach here as a nil *profile.Location and panic the consumer.
func TestNilSafe(t *testing.T) {
	s := &profile.Sample{Location: []*profile.Location{nil, {Address: 0x10}}}
	got := StackFrames(s)
	want := []indices.Frame{{Function: MissingLocation}, {Function: "0x10"}}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("StackFrames = %v, want %v", got, want)
	}
	if StackFrames(nil) != nil || UnresolvedName(nil) != MissingLocation {
		t.Fatal("nil sample or location")
	}
	p := &profile.Profile{SampleType: []*profile.ValueType{nil, {Type: "cpu"}}, DefaultSampleType: "x"}
	if ValueIndex(p, "cpu") != 1 || CountIndex(p) != -1 {
		t.Fatal("nil sample type")
	}
}

// FuzzProfile: nothing record.ParseProfile accepts makes the frame and
// value helpers panic. Seeded with raw protobuf (record.ParseProfile reads
// it uncompressed).
func FuzzProfile(f *testing.F) {
	b := pproftest.NewCPU(time.Unix(1, 0), time.Second)
	b.Sample(map[string]string{"comm": "a"}, []int64{1, 10}, "leaf", "main")
	m := b.Mapping(0x1000, 0x2000, 0, "/bin/app", "abcd")
	b.AddressSample(nil, []int64{2, 20}, m, 0x1100, 0x1200)
	var raw bytes.Buffer
	if err := b.Profile().WriteUncompressed(&raw); err != nil {
		f.Fatal(err)
	}
	f.Add(raw.Bytes())
	l := record.DefaultLimits()
	l.MaxDecompressedBytes, l.MaxDecodeHeapBytes = 1<<20, 4<<20
	f.Fuzz(func(t *testing.T, in []byte) {
		p, err := record.ParseProfile(in, l)
		if err != nil {
			return
		}
		for _, typ := range []string{"cpu", "memory", "heap", "alloc", "other"} {
			ValueIndex(p, typ)
		}
		CountIndex(p)
		for _, s := range p.Sample {
			StackFrames(s)
		}
	})
}
