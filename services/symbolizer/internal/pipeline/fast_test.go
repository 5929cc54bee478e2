package pipeline

import (
	"context"
	"testing"
	"time"

	"github.com/google/pprof/profile"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/stackstream/stackstream/pkg/pproftest"
	"github.com/stackstream/stackstream/schemas/record"
	"github.com/stackstream/stackstream/services/symbolizer/internal/source"
	"github.com/stackstream/stackstream/services/symbolizer/internal/symbolize"
)

// full is the path every record took before the fast one: decode the whole
// profile, symbolize, encode it whole.
func full(t testing.TB, p *Processor, value []byte) []byte {
	t.Helper()
	prof, err := record.DecodeProfile(value)
	if err != nil {
		t.Fatal(err)
	}
	p.Symbolizer.Profile(context.Background(), prof)
	pieces, err := splitToFit(prof, p.MaxOutputBytes, record.DefaultLimits())
	if err != nil || len(pieces) != 1 || pieces[0].value == nil {
		t.Fatalf("full path: %v, %d pieces", err, len(pieces))
	}
	return pieces[0].value
}

// sameProfile fails unless a and b decode to the same profile: samples,
// labels, locations, lines, functions, mappings with their flags.
func sameProfile(t testing.TB, a, b []byte) {
	t.Helper()
	pa, err := record.DecodeProfile(a)
	if err != nil {
		t.Fatalf("fast output: %v", err)
	}
	pb, err := record.DecodeProfile(b)
	if err != nil {
		t.Fatalf("full output: %v", err)
	}
	if sa, sb := pa.String(), pb.String(); sa != sb {
		t.Fatalf("fast and full outputs differ:\n%s\n---\n%s", sa, sb)
	}
	if len(pa.Mapping) != len(pb.Mapping) {
		t.Fatalf("%d mappings, want %d", len(pa.Mapping), len(pb.Mapping))
	}
	for i, m := range pa.Mapping {
		if *m != *pb.Mapping[i] {
			t.Fatalf("mapping %d: %+v, want %+v", i, *m, *pb.Mapping[i])
		}
	}
	for i, l := range pa.Location {
		if l.IsFolded != pb.Location[i].IsFolded {
			t.Fatalf("location %d: folded %v, want %v", l.ID, l.IsFolded, pb.Location[i].IsFolded)
		}
	}
	for i, f := range pa.Function {
		if *f != *pb.Function[i] {
			t.Fatalf("function %d: %+v, want %+v", i, *f, *pb.Function[i])
		}
	}
}

// TestFastMatchesFull: every record of the loadgen corpus goes the fast
// way, and its output decodes to what the full path writes.
func TestFastMatchesFull(t *testing.T) {
	c := readLoadgenCorpus(t)
	p := loadgenProcessor(t, c)
	for i, cr := range c.Raw {
		val, st, ok := p.fast(context.Background(), cr.Value, p.MaxOutputBytes-1000, record.DefaultLimits())
		if !ok {
			t.Fatalf("record %d took the full path", i)
		}
		if st.Unresolved > 0 {
			t.Fatalf("record %d: %d frames unresolved", i, st.Unresolved)
		}
		sameProfile(t, val, full(t, p, cr.Value))
	}
}

func loadgenProcessor(tb testing.TB, c *loadgenCorpus) *Processor {
	tb.Helper()
	store := source.NewTopic(1<<30, nil)
	for id, v := range c.Debuginfo {
		if err := store.Apply([]byte(id), v); err != nil {
			tb.Fatal(err)
		}
	}
	chain := source.NewChain(source.Options{MissTTL: time.Hour}, store)
	tb.Cleanup(chain.Close)
	return &Processor{Symbolizer: &symbolize.Symbolizer{Tables: chain}, Topics: record.TopicsFor("bench."), MaxOutputBytes: 999000}
}

// TestFastCases: profiles shaped unlike the agent's go the fast way or the
// full one, and come out the same either way.
func TestFastCases(t *testing.T) {
	at := time.Unix(1700000000, 0)
	cases := []struct {
		name string
		prof func() *profile.Profile
		fast bool
	}{
		{"resolved, unresolved, unmapped and kernel frames", func() *profile.Profile {
			b := pproftest.NewCPU(at, time.Second)
			m := b.Mapping(0x7f0000000000, 0x7f0000001000, 0, "/lib/liba.so", "aa11")
			u := b.Mapping(0x7f0000100000, 0x7f0000101000, 0x2000, "/lib/libb.so", "bb22")
			b.AddressSample(map[string]string{"pid": "1"}, []int64{1, 2}, m, 0x7f0000000010, 0x7f0000000ff0)
			b.AddressSample(map[string]string{"pid": "2", "k8s_pod": "x"}, []int64{3, 4}, u, 0x7f0000100010, 0x7f0000000ff0)
			b.Sample(nil, []int64{5, 6}, "kernel_fn")
			p := b.Profile()
			p.Location = append(p.Location, &profile.Location{ID: uint64(len(p.Location) + 1), Address: 0x1234})
			p.Sample = append(p.Sample, &profile.Sample{Value: []int64{7, 8}, Location: []*profile.Location{p.Location[len(p.Location)-1]},
				NumLabel: map[string][]int64{"bytes": {64}}, NumUnit: map[string][]string{"bytes": {"bytes"}}})
			p.Comments = []string{"a comment"}
			p.DropFrames, p.KeepFrames = "drop.*", "keep"
			return p
		}, true},
		{"sparse location IDs", func() *profile.Profile {
			b := pproftest.NewCPU(at, time.Second)
			m := b.Mapping(0x7f0000000000, 0x7f0000001000, 0, "/lib/liba.so", "aa11")
			b.AddressSample(nil, []int64{1, 2}, m, 0x7f0000000010, 0x7f0000000ff0)
			p := b.Profile()
			for i, l := range p.Location {
				l.ID = uint64(1000 + 7*i)
			}
			return p
		}, true},
		{"a location is a leaf and a caller", func() *profile.Profile {
			b := pproftest.NewCPU(at, time.Second)
			m := b.Mapping(0x7f0000000000, 0x7f0000001000, 0, "/lib/liba.so", "aa11")
			b.AddressSample(nil, []int64{1, 2}, m, 0x7f0000000010, 0x7f0000000ff0)
			b.AddressSample(nil, []int64{1, 2}, m, 0x7f0000000ff0)
			return b.Profile()
		}, true},
		{"no samples", func() *profile.Profile {
			return pproftest.NewCPU(at, time.Second).Profile()
		}, true},
	}
	p := fuzzProcessor(t)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			value, err := record.EncodeProfile(tc.prof())
			if err != nil {
				t.Fatal(err)
			}
			val, _, ok := p.fast(context.Background(), value, p.MaxOutputBytes-1000, record.DefaultLimits())
			if ok != tc.fast {
				t.Fatalf("fast path taken: %v, want %v", ok, tc.fast)
			}
			if !ok {
				return
			}
			sameProfile(t, val, full(t, p, value))
			// And through Process, as the runner calls it.
			res := p.Process(context.Background(), &kgo.Record{Topic: "f.profiles.raw", Value: value, Headers: record.Meta{Type: record.ProfileCPU, Host: "h"}.Headers()})
			if res.Err != nil || res.Parts != 1 {
				t.Fatalf("process: %v, %d parts", res.Err, res.Parts)
			}
			sameProfile(t, res.Out[0].Value, val)
		})
	}
}
