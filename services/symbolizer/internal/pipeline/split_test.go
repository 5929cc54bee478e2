package pipeline

import (
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/pprof/profile"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/stackstream/stackstream/pkg/pproftest"
	"github.com/stackstream/stackstream/schemas/record"
	"github.com/stackstream/stackstream/services/symbolizer/internal/symbolize"
	"github.com/stackstream/stackstream/services/symbolizer/internal/symtab"
)

// largeGoCPU is shaped like google/pprof's testdata large.cpu, a real Go
// CPU profile of 1.2 MB gzip: about 20,000 samples of stacks 24 deep on
// average over some 23,000 distinct locations, each its own function with a
// Go-style name and file. Stacks are paths in a call tree, so callers near
// the root are shared and leaves are many. Locations arrive with lines, as
// Go's own profiles do, so the symbolizer passes them through.
func largeGoCPU(now time.Time) *profile.Profile {
	rng := rand.New(rand.NewPCG(1, 2))
	b := pproftest.NewCPU(now, 10*time.Second)
	p := b.Profile()
	m := &profile.Mapping{ID: 1, Start: 0x400000, Limit: 0x4000000, File: "/usr/local/bin/server", BuildID: "9a3c0e", HasFunctions: true}
	p.Mapping = []*profile.Mapping{m}
	newLoc := func() *profile.Location {
		i := uint64(len(p.Location) + 1)
		name := fmt.Sprintf("github.com/acme/svc%d/internal/pkg%x.(*T%x).Method%x", rng.IntN(40), rng.Uint32(), rng.Uint32(), rng.Uint32())
		f := &profile.Function{ID: i, Name: name, SystemName: name, Filename: fmt.Sprintf("/src/acme/svc/pkg%x/file%d.go", rng.Uint32(), rng.IntN(30))}
		l := &profile.Location{ID: i, Mapping: m, Address: 0x400000 + i*64 + uint64(rng.IntN(64)), Line: []profile.Line{{Function: f, Line: int64(1 + rng.IntN(2000))}}}
		p.Function = append(p.Function, f)
		p.Location = append(p.Location, l)
		return l
	}
	// Each stack (root first here) shares all but its last frames with an
	// earlier one and grows or shrinks a little: about one new location
	// per sample, as in the real profile.
	var stacks [][]*profile.Location
	for i := 0; i < 20000; i++ {
		var stack []*profile.Location
		depth := 24
		if len(stacks) > 0 {
			prev := stacks[rng.IntN(len(stacks))]
			depth = min(40, max(8, len(prev)+rng.IntN(5)-2))
			keep := max(1, min(len(prev), depth)-rng.IntN(2))
			stack = append(stack, prev[:keep]...)
		}
		for len(stack) < depth {
			stack = append(stack, newLoc())
		}
		stacks = append(stacks, stack)
		leafFirst := slices.Clone(stack)
		slices.Reverse(leafFirst)
		s := &profile.Sample{Location: leafFirst, Value: []int64{int64(1 + rng.IntN(5)), 0}}
		s.Value[1] = s.Value[0] * 10_000_000
		p.Sample = append(p.Sample, s)
	}
	return p
}

// manyLabels is a profile whose bulk is sample labels: 6,000 samples of
// short stacks, each with 24 labels of distinct values, as a host with
// many short-lived containers and pods produces.
func manyLabels(now time.Time) *profile.Profile {
	rng := rand.New(rand.NewPCG(3, 4))
	b := pproftest.NewCPU(now, 10*time.Second)
	for i := 0; i < 6000; i++ {
		labels := map[string]string{"pid": fmt.Sprint(1000 + i), "comm": fmt.Sprintf("worker-%x", rng.Uint64())}
		for k := 0; k < 22; k++ {
			labels[fmt.Sprintf("label_%02d", k)] = fmt.Sprintf("%x-%x", rng.Uint64(), rng.Uint64())
		}
		b.Sample(labels, []int64{1, 10_000_000}, fmt.Sprintf("fn%d", i%50), "main")
	}
	return b.Profile()
}

func gzipSize(t testing.TB, p *profile.Profile) int {
	v, err := record.EncodeProfile(p)
	if err != nil {
		t.Fatal(err)
	}
	return len(v)
}

// stackKey names a sample by its frames and labels, so the samples of the
// parts can be matched with the input's.
func stackKey(s *profile.Sample) string {
	var b strings.Builder
	for _, l := range s.Location {
		fmt.Fprintf(&b, "%#x", l.Address)
		for _, ln := range l.Line {
			fmt.Fprintf(&b, "|%s %s:%d", ln.Function.Name, ln.Function.Filename, ln.Line)
		}
		b.WriteByte(';')
	}
	keys := make([]string, 0, len(s.Label))
	for k := range s.Label {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		fmt.Fprintf(&b, "%s=%v,", k, s.Label[k])
	}
	return b.String()
}

// checkParts checks that the symbolized parts of in are complete profiles
// that fit, carry only what their samples use, name their parts, and add
// up to exactly in: every stack and label set with the same values.
func checkParts(t *testing.T, p *Processor, in *kgo.Record, want *profile.Profile, res Result, parent string) {
	t.Helper()
	if res.Err != nil {
		t.Fatalf("dead letter: %v", res.Err)
	}
	if res.Parts < 2 || len(res.Out) != res.Parts {
		t.Fatalf("%d parts in %d records, want a split", res.Parts, len(res.Out))
	}
	totals := map[string][]int64{}
	for _, s := range want.Sample {
		k := stackKey(s)
		if totals[k] == nil {
			totals[k] = make([]int64, len(s.Value))
		}
		for i, v := range s.Value {
			totals[k][i] += v
		}
	}
	for i, out := range res.Out {
		size := len(out.Value) + len(out.Key) + recordOverhead
		for _, h := range out.Headers {
			size += len(h.Key) + len(h.Value)
		}
		if out.Topic != p.Topics.ProfilesSymbolized || size > p.MaxOutputBytes {
			t.Fatalf("part %d: %d bytes to %s, limit %d", i, size, out.Topic, p.MaxOutputBytes)
		}
		if got, want := record.HeaderValue(out.Headers, record.HeaderPart), record.SubPart(parent, i); got != want {
			t.Fatalf("part %d: header %s=%q, want %q", i, record.HeaderPart, got, want)
		}
		if !bytes.Equal(out.Key, in.Key) || !out.Timestamp.Equal(in.Timestamp) || record.HeaderValue(out.Headers, record.HeaderHost) != record.HeaderValue(in.Headers, record.HeaderHost) {
			t.Fatalf("part %d: key, timestamp or headers not kept", i)
		}
		q, err := record.DecodeProfile(out.Value)
		if err != nil {
			t.Fatalf("part %d: %v", i, err)
		}
		if err := q.CheckValid(); err != nil {
			t.Fatalf("part %d: %v", i, err)
		}
		if q.TimeNanos != want.TimeNanos || q.DurationNanos != want.DurationNanos || q.Period != want.Period || len(q.SampleType) != len(want.SampleType) {
			t.Fatalf("part %d: time %d+%d period %d, want %d+%d period %d", i, q.TimeNanos, q.DurationNanos, q.Period, want.TimeNanos, want.DurationNanos, want.Period)
		}
		usedLoc, usedFn, usedMap := map[uint64]bool{}, map[uint64]bool{}, map[uint64]bool{}
		for _, s := range q.Sample {
			for _, l := range s.Location {
				usedLoc[l.ID] = true
				if l.Mapping != nil {
					usedMap[l.Mapping.ID] = true
				}
				for _, ln := range l.Line {
					usedFn[ln.Function.ID] = true
				}
			}
			k := stackKey(s)
			if totals[k] == nil {
				t.Fatalf("part %d: sample %q not in the input", i, k)
			}
			for j, v := range s.Value {
				totals[k][j] -= v
			}
		}
		if len(usedLoc) != len(q.Location) || len(usedFn) != len(q.Function) || len(usedMap) != len(q.Mapping) {
			t.Fatalf("part %d: %d/%d locations, %d/%d functions, %d/%d mappings used", i,
				len(usedLoc), len(q.Location), len(usedFn), len(q.Function), len(usedMap), len(q.Mapping))
		}
	}
	for k, v := range totals {
		for _, x := range v {
			if x != 0 {
				t.Fatalf("stack %.80q: parts differ from the input by %v", k, v)
			}
		}
	}
}

func TestSplitLargeProfiles(t *testing.T) {
	now := time.Now()
	for _, tc := range []struct {
		name   string
		prof   *profile.Profile
		parent string
	}{
		{"go cpu like large.cpu", largeGoCPU(now), ""},
		{"many labels", manyLabels(now), ""},
		{"part of an agent split", manyLabels(now), "2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := fuzzProcessor(t)
			p.MaxOutputBytes = 999000
			val, err := record.EncodeProfile(tc.prof)
			if err != nil {
				t.Fatal(err)
			}
			if len(val) < p.MaxOutputBytes {
				t.Fatalf("input is %d bytes gzip: not larger than one record", len(val))
			}
			h := record.Meta{Type: record.ProfileCPU, Host: "host-a"}.Headers()
			if tc.parent != "" {
				h = append(h, kgo.RecordHeader{Key: record.HeaderPart, Value: []byte(tc.parent)})
			}
			in := &kgo.Record{Topic: "f.profiles.raw", Key: []byte("host-a"), Value: val, Headers: h, Timestamp: now}
			res := p.Process(context.Background(), in)
			want, err := record.DecodeProfile(val)
			if err != nil {
				t.Fatal(err)
			}
			checkParts(t, p, in, want, res, tc.parent)
			t.Logf("%d samples, %d locations, %d bytes gzip in, %d parts", len(want.Sample), len(want.Location), len(val), res.Parts)
		})
	}
}

// TestSplitSampleTooLargeAlone: a sample that fits no record even alone
// (here ten labels of 40,000 random letters, 400 KB, 235 KB gzip, against
// a limit of 200 KB) goes to the DLQ as
// its own part; the other samples are written.
func TestSplitSampleTooLargeAlone(t *testing.T) {
	now := time.Now()
	prof := manyLabels(now)
	rng := rand.New(rand.NewPCG(5, 6))
	big := prof.Sample[len(prof.Sample)/2]
	for k := 0; k < 10; k++ {
		junk := make([]byte, 40_000)
		for i := range junk {
			junk[i] = 'a' + byte(rng.IntN(26))
		}
		big.Label[fmt.Sprintf("blob%d", k)] = []string{string(junk)}
	}
	val, err := record.EncodeProfile(prof)
	if err != nil {
		t.Fatal(err)
	}
	p := fuzzProcessor(t)
	p.MaxOutputBytes = 200_000
	in := &kgo.Record{Topic: "f.profiles.raw", Partition: 3, Offset: 42, Key: []byte("h"), Value: val, Headers: record.Meta{Type: record.ProfileCPU, Host: "h"}.Headers()}
	res := p.Process(context.Background(), in)
	if res.Reason != "output_too_large" || res.Parts < 2 || len(res.Out) != res.Parts+1 {
		t.Fatalf("reason %q (%v), %d parts in %d records: want the one sample dead-lettered and the rest written", res.Reason, res.Err, res.Parts, len(res.Out))
	}
	var samples int
	for _, out := range res.Out {
		q, err := record.DecodeProfile(out.Value)
		if err != nil {
			t.Fatal(err)
		}
		if out.Topic == p.Topics.DLQ {
			if len(q.Sample) != 1 || q.Sample[0].Label["blob0"] == nil || record.HeaderValue(out.Headers, record.HeaderDLQOffset) != "42" {
				t.Fatalf("dead letter holds %d samples, headers %v", len(q.Sample), out.Headers)
			}
			continue
		}
		samples += len(q.Sample)
	}
	if samples != len(prof.Sample)-1 {
		t.Fatalf("%d samples written, want %d", samples, len(prof.Sample)-1)
	}
}

type panickyTables struct{}

func (panickyTables) Table(context.Context, string) *symtab.Table { panic("table lookup exploded") }

// TestProcessRecoversPanic: a panic while processing one record becomes
// its dead letter with reason panic, counted; nothing reaches the loop.
func TestProcessRecoversPanic(t *testing.T) {
	p := fuzzProcessor(t)
	p.Symbolizer = &symbolize.Symbolizer{Tables: panickyTables{}}
	var panics int
	p.OnPanic = func() { panics++ }
	b := pproftest.NewCPU(time.Now(), time.Second)
	m := b.Mapping(0x1000, 0x2000, 0, "/bin/x", "ab12")
	b.AddressSample(nil, []int64{1, 2}, m, 0x1010)
	val, _ := record.EncodeProfile(b.Profile())
	in := &kgo.Record{Topic: "f.profiles.raw", Offset: 7, Value: val, Headers: record.Meta{Type: record.ProfileCPU}.Headers()}
	res := p.Process(context.Background(), in)
	if res.Reason != "panic" || panics != 1 || len(res.Out) != 1 || res.Out[0].Topic != "f.dlq" || !bytes.Equal(res.Out[0].Value, val) {
		t.Fatalf("reason %q, panics %d, %d records", res.Reason, panics, len(res.Out))
	}
	if why := record.HeaderValue(res.Out[0].Headers, record.HeaderDLQReason); !strings.Contains(why, "table lookup exploded") {
		t.Fatalf("dlq reason %q", why)
	}
}

// undefinedLocation is a pprof profile (gzip, about 100 bytes) whose one
// sample names location 7, which the profile does not define: pprof parses
// it into a nil location.
func undefinedLocation(t testing.TB) []byte {
	t.Helper()
	var pb []byte
	field := func(num int, body []byte) {
		pb = append(pb, byte(num<<3|2), byte(len(body)))
		pb = append(pb, body...)
	}
	field(1, []byte{1<<3 | 0, 1, 2<<3 | 0, 2})       // sample_type {type: 1, unit: 2}
	field(2, []byte{1<<3 | 2, 1, 7, 2<<3 | 2, 1, 1}) // sample {location_id: [7], value: [1]}
	field(6, nil)                                    // string_table: "", "samples", "count"
	field(6, []byte("samples"))
	field(6, []byte("count"))
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	zw.Write(pb)
	zw.Close()
	return buf.Bytes()
}

func TestProcessUndefinedLocation(t *testing.T) {
	p := fuzzProcessor(t)
	val := undefinedLocation(t)
	res := p.Process(context.Background(), &kgo.Record{Topic: "f.profiles.raw", Value: val, Headers: record.Meta{Type: record.ProfileCPU}.Headers()})
	if res.Reason != "panic" && res.Reason != "invalid_profile" {
		t.Fatalf("reason %q (%v), want the record dead-lettered", res.Reason, res.Err)
	}
	if len(res.Out) != 1 || !bytes.Equal(res.Out[0].Value, val) {
		t.Fatal("dead letter does not keep the value")
	}
	t.Logf("%d bytes: %s: %v", len(val), res.Reason, res.Err)
}

// TestSplitPastDecodeLimits: a symbolized profile small in bytes but past
// the decode limits of the consumers downstream (here 1,000 samples, as
// symbolization can also push lines and functions past theirs) is split
// into parts each of them can decode.
func TestSplitPastDecodeLimits(t *testing.T) {
	now := time.Now()
	b := pproftest.NewCPU(now, 10*time.Second)
	for i := 0; i < 4500; i++ {
		b.Sample(map[string]string{"pid": fmt.Sprint(i % 7)}, []int64{1, 10}, fmt.Sprintf("fn%d", i%300), "main")
	}
	prof := b.Profile()
	val, err := record.EncodeProfile(prof)
	if err != nil {
		t.Fatal(err)
	}
	p := fuzzProcessor(t)
	p.Limits = record.DefaultLimits()
	p.Limits.MaxSamples = 1000
	in := &kgo.Record{Topic: "f.profiles.raw", Key: []byte("h"), Value: val, Headers: record.Meta{Type: record.ProfileCPU, Host: "h"}.Headers(), Timestamp: now}
	res := p.Process(context.Background(), in)
	want, _ := record.DecodeProfile(val)
	checkParts(t, p, in, want, res, "")
	for i, out := range res.Out {
		if _, err := record.DecodeProfileLimits(out.Value, p.Limits); err != nil {
			t.Fatalf("part %d: %v", i, err)
		}
	}
	t.Logf("%d bytes gzip, %d samples in %d parts", len(val), len(prof.Sample), res.Parts)
}
