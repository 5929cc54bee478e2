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
func FuzzDecode(f *testing.F) {
	f.Add(sample(f))
	f.Add([]byte{})
	f.Add([]byte{0x32, 0})
	f.Fuzz(func(t *testing.T, raw []byte) {
		p, err := Decode(raw, record.DefaultLimits())
		if err != nil {
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
		fn := &profile.Function{ID: 1 << 40, Name: "added", Filename: "added.go"}
		p.Tables.Function = append(p.Tables.Function, fn)
		for _, l := range p.Tables.Location {
			l.Line = []profile.Line{{Function: fn, Line: 7}}
		}
		if got, err = parse(p.Append(nil)); err != nil {
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
	p, err := Decode(sample(t), record.DefaultLimits())
	if err != nil {
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
			if _, err := Decode(raw, record.DefaultLimits()); err == nil {
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
