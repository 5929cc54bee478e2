package pproftables

import (
	"bytes"
	"github.com/stackstream/stackstream/pkg/pprofwire"
	"testing"
	"time"

	"github.com/google/pprof/profile"

	"github.com/stackstream/stackstream/pkg/pproftest"
	"github.com/stackstream/stackstream/schemas/record"
)

func encode(t testing.TB, p *profile.Profile) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := p.WriteUncompressed(&buf); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func sample(t testing.TB) []byte {
	b := pproftest.NewCPU(time.Unix(1700000000, 0), time.Second)
	m := b.Mapping(0x7f0000000000, 0x7f0000001000, 0, "/lib/liba.so", "aa11")
	b.AddressSample(map[string]string{"pid": "1"}, []int64{1, 2}, m, 0x7f0000000010, 0x7f0000000ff0)
	b.Sample(map[string]string{"pid": "2"}, []int64{3, 4}, "kernel_fn", "caller_fn")
	p := b.Profile()
	p.Comments = []string{"c"}
	return encode(t, p)
}

// decodeBoth parses raw with google/pprof, as the consumers do.
func parse(raw []byte) (*profile.Profile, error) {
	p, err := profile.ParseUncompressed(raw)
	if err != nil {
		return nil, err
	}
	return p, p.CheckValid()
}

// FuzzDecode: whatever Decode accepts, google/pprof accepts too, and
// Append writes the same profile back, also after a function is added.
// The input is decoded into a Profile that held a symbolized profile
// before, as the symbolizer reuses one: nothing of that one may show.
func FuzzDecode(f *testing.F) {
	f.Add(sample(f))
	f.Add([]byte{})
	f.Add([]byte{0x32, 0})
	prev := sample(f)
	f.Fuzz(func(t *testing.T, raw []byte) {
		var p Profile
		if err := p.Decode(prev, record.DefaultLimits()); err != nil {
			t.Fatal(err)
		}
		fn := &profile.Function{ID: 1 << 41, Name: "previous", Filename: "previous.go"}
		p.Tables.Function = append(p.Tables.Function, fn)
		for _, l := range p.Tables.Location {
			l.Line = append(l.Line, profile.Line{Function: fn, Line: 9})
		}
		p.Append(nil)
		if err := p.Decode(raw, record.DefaultLimits()); err != nil {
			return
		}
		want, err := parse(raw)
		if err != nil {
			t.Fatalf("Decode accepted what pprof refuses: %v", err)
		}
		got, err := parse(p.Append(nil))
		if err != nil {
			t.Fatalf("Append wrote what pprof refuses: %v", err)
		}
		if got.String() != want.String() {
			t.Fatalf("Append changed the profile:\n%s\n---\n%s", got, want)
		}
		// Name every location as the symbolizer does.
		fn = &profile.Function{ID: 1 << 40, Name: "added", Filename: "added.go"}
		p.Tables.Function = append(p.Tables.Function, fn)
		for _, l := range p.Tables.Location {
			l.Line = []profile.Line{{Function: fn, Line: 7}}
		}
		out := p.Append(nil)
		if within, checked := p.OutputWithinLimits(out), record.DefaultLimits().Check(out); within != (checked == nil) {
			t.Fatalf("OutputWithinLimits = %v, record.Limits.Check: %v", within, checked)
		}
		if got, err = parse(out); err != nil {
			t.Fatalf("Append after changes wrote what pprof refuses: %v", err)
		}
		for _, l := range got.Location {
			if len(l.Line) != 1 || l.Line[0].Function.Name != "added" {
				t.Fatalf("location %d: lines %v", l.ID, l.Line)
			}
		}
		if len(got.Sample) != len(want.Sample) {
			t.Fatalf("%d samples, want %d", len(got.Sample), len(want.Sample))
		}
	})
}

func TestCallerOnly(t *testing.T) {
	var p Profile
	if err := p.Decode(sample(t), record.DefaultLimits()); err != nil {
		t.Fatal(err)
	}
	got := map[uint64]bool{}
	for _, l := range p.Tables.Location {
		got[l.ID] = p.CallerOnly(l)
	}
	want, err := parse(sample(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range want.Sample {
		for i, l := range s.Location {
			if got[l.ID] != (i > 0) {
				t.Errorf("location %d (depth %d): caller only %v", l.ID, i, got[l.ID])
			}
		}
	}
}

// TestRefused: what pprof refuses, Decode refuses.
func TestRefused(t *testing.T) {
	good := sample(t)
	cases := map[string][]byte{
		"empty":                 {},
		"no string table":       encodeFields(t, good, func(num uint64) bool { return num != 6 }),
		"truncated":             good[:len(good)-3],
		"unknown profile field": append(append([]byte{}, good...), 0xf8, 0x01, 0x01), // field 31, varint
		"two time_nanos":        append(append([]byte{}, good...), 0x48, 0x05),
		"too many comments":     append(append(append([]byte{}, good...), 0x6a, 0x90, 0x4e), make([]byte, 10000)...), // field 13, packed, 10,000 zeros
	}
	for name, raw := range cases {
		t.Run(name, func(t *testing.T) {
			if err := new(Profile).Decode(raw, record.DefaultLimits()); err == nil {
				t.Fatal("accepted")
			}
		})
	}
}

// encodeFields is raw with only the top-level fields keep accepts.
func encodeFields(t *testing.T, raw []byte, keep func(uint64) bool) []byte {
	var out []byte
	for b := raw; len(b) > 0; {
		num, _, _, _, rest, ok := pprofwire.Field(b)
		if !ok {
			t.Fatal("bad test input")
		}
		if keep(num) {
			out = append(out, b[:len(b)-len(rest)]...)
		}
		b = rest
	}
	return out
}

// TestOutputWithinLimits: for profiles just past each limit on one element
// (and one whose symbolized name is), OutputWithinLimits agrees with
// record.Limits.Check of the output whenever Decode accepts the input, so
// the fast path declines exactly the outputs the consumers would refuse.
func TestOutputWithinLimits(t *testing.T) {
	lim := record.DefaultLimits()
	at := time.Unix(1700000000, 0)
	base := func() (*pproftest.Builder, *profile.Mapping) {
		b := pproftest.NewCPU(at, time.Second)
		return b, b.Mapping(0x7f0000000000, 0x7f0000001000, 0, "/lib/liba.so", "aa11")
	}
	long := string(bytes.Repeat([]byte{'x'}, lim.MaxStringBytes+1))
	cases := []struct {
		name    string
		prof    func() *profile.Profile
		addName string // a function the symbolizer adds, naming every location
		within  bool
	}{
		{"ordinary", func() *profile.Profile {
			b, m := base()
			b.AddressSample(map[string]string{"pid": "1"}, []int64{1, 2}, m, 0x7f0000000010)
			return b.Profile()
		}, "fn", true},
		{"labels of one sample", func() *profile.Profile {
			b, m := base()
			labels := map[string]string{}
			for i := range lim.MaxLabelsPerSample + 1 {
				labels[string(rune('a'+i%26))+string(rune('a'+i/26))] = "v"
			}
			b.AddressSample(labels, []int64{1, 2}, m, 0x7f0000000010)
			return b.Profile()
		}, "fn", false},
		{"locations of one sample", func() *profile.Profile {
			b, m := base()
			addrs := make([]uint64, lim.MaxLocationsPerSample+1)
			for i := range addrs {
				addrs[i] = 0x7f0000000010 + uint64(i%16)
			}
			b.AddressSample(nil, []int64{1, 2}, m, addrs...)
			return b.Profile()
		}, "fn", false},
		{"bytes of an input string", func() *profile.Profile {
			b, m := base()
			b.AddressSample(map[string]string{"pid": long}, []int64{1, 2}, m, 0x7f0000000010)
			return b.Profile()
		}, "fn", false},
		{"bytes of an added string", func() *profile.Profile {
			b, m := base()
			b.AddressSample(nil, []int64{1, 2}, m, 0x7f0000000010)
			return b.Profile()
		}, long, false},
		{"sample types", func() *profile.Profile {
			b, m := base()
			b.AddressSample(nil, []int64{1, 2}, m, 0x7f0000000010)
			p := b.Profile()
			for len(p.SampleType) <= lim.MaxSampleTypes {
				p.SampleType = append(p.SampleType, &profile.ValueType{Type: "t", Unit: "u"})
				p.Sample[0].Value = append(p.Sample[0].Value, 1)
			}
			return p
		}, "fn", false},
		{"mappings", func() *profile.Profile {
			b, m := base()
			b.AddressSample(nil, []int64{1, 2}, m, 0x7f0000000010)
			p := b.Profile()
			for len(p.Mapping) <= lim.MaxMappings {
				p.Mapping = append(p.Mapping, &profile.Mapping{ID: uint64(len(p.Mapping) + 1)})
			}
			return p
		}, "fn", false},
		{"comments", func() *profile.Profile {
			b, m := base()
			b.AddressSample(nil, []int64{1, 2}, m, 0x7f0000000010)
			p := b.Profile()
			for len(p.Comments) <= lim.MaxComments {
				p.Comments = append(p.Comments, "c")
			}
			return p
		}, "fn", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			raw := encode(t, tc.prof())
			if len(raw) >= pprofwire.CheckAbove(lim) {
				t.Fatalf("the case is %d bytes: past CheckAbove, it would not test the skipped walk", len(raw))
			}
			var p Profile
			if err := p.Decode(raw, lim); err != nil {
				if tc.within {
					t.Fatalf("Decode: %v", err)
				}
				return // the full path takes it, and names the limit
			}
			fn := &profile.Function{ID: 1 << 40, Name: tc.addName, Filename: "added.go"}
			p.Tables.Function = append(p.Tables.Function, fn)
			for _, l := range p.Tables.Location {
				l.Line = []profile.Line{{Function: fn, Line: 7}}
			}
			out := p.Append(nil)
			checked := lim.Check(out)
			if got := p.OutputWithinLimits(out); got != tc.within || got != (checked == nil) {
				t.Fatalf("OutputWithinLimits = %v, want %v (record.Limits.Check: %v)", got, tc.within, checked)
			}
		})
	}
}
