package convert

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"math/rand/v2"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/pprof/profile"

	"github.com/stackstream/stackstream/pkg/pproftest"
	"github.com/stackstream/stackstream/pkg/pprofwire"
	"github.com/stackstream/stackstream/schemas/record"
	"github.com/stackstream/stackstream/services/indexer/internal/indexertest"
)

// benchCorpora are the shapes of BenchmarkDecodeConvert and bench/run.sh.
var benchCorpora = []struct {
	name    string
	samples int
	raw     int64
	zipf    float64
}{
	{"busy-100Hz", 300, 50, 0},
	{"agent-19Hz-zipf", 1520, 1, 1.1},
}

func benchCorpus(t testing.TB, samples int, raw int64, zipf float64, profiles int) []indexertest.Record {
	t.Helper()
	recs, _, err := indexertest.Corpus{
		Seed: 2026, Hosts: 1, ProfilesPerHost: profiles, Start: time.Unix(1700000000, 0), Interval: 10 * time.Second,
		Stacks: 2000, Depth: 30, Processes: 10, SamplesPerProf: samples, RawPerSample: raw, Zipf: zipf,
	}.Build()
	if err != nil {
		t.Fatal(err)
	}
	return recs
}

type fastCase struct {
	name     string
	meta     record.Meta
	value    []byte
	fallback time.Time
	wantFast bool // the fast path must take it
}

func encode(t testing.TB, p *profile.Profile) []byte {
	t.Helper()
	v, err := record.EncodeProfile(p)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func fastCases(t testing.TB) []fastCase {
	at := time.Date(2026, 11, 30, 23, 59, 58, 0, time.UTC)
	cpu := record.Meta{Type: record.ProfileCPU, Host: "web-1"}
	var cases []fastCase
	for _, bc := range benchCorpora {
		for i, r := range benchCorpus(t, bc.samples, bc.raw, bc.zipf, 3) {
			cases = append(cases, fastCase{fmt.Sprintf("%s-%d", bc.name, i), r.Meta, r.Val, r.Time, true})
		}
	}
	a := map[string]string{"pid": "1", "comm": "api", "executable": "/bin/api", "host": "ignored"}
	b := map[string]string{"pid": "2", "comm": "api", "executable": "/bin/api", "container_id": ""}
	cases = append(cases, fastCase{"labels", cpu, encode(t, pproftest.NewCPU(at, 10*time.Second).
		Sample(a, []int64{2, 20}, "leaf", "main").
		Sample(a, []int64{3, 30}, "leaf", "main").
		Sample(b, []int64{1, 10}, "leaf", "main").
		Sample(a, []int64{4, 40}, "other", "main").
		Sample(nil, []int64{4, 40}, "other").
		Sample(map[string]string{"service": "checkout", "k8s_workload": "w"}, []int64{1, 1}).
		Profile()), time.Time{}, true})
	// Each sample's labels longer than the one before: reading one sample
	// must not disturb the bytes of the next.
	grow := pproftest.NewCPU(at, time.Second)
	for i := range 6 {
		l := map[string]string{"comm": "a"}
		for j := range i * 3 {
			l[fmt.Sprintf("key%02d", j)] = fmt.Sprintf("value-%d-%d", i, j)
		}
		grow.Sample(l, []int64{1, int64(i + 1)}, "f", fmt.Sprintf("g%d", i), "main")
		grow.Sample(l, []int64{1, int64(i + 1)}, "f")
	}
	cases = append(cases, fastCase{"growing labels", cpu, encode(t, grow.Profile()), time.Time{}, true})
	cases = append(cases, fastCase{"host label without header", record.Meta{Type: record.ProfileCPU}, encode(t, pproftest.NewCPU(at, time.Second).
		Sample(map[string]string{"host": "h9", "comm": "a", "container_id": ""}, []int64{1, 5}, "f").
		Sample(map[string]string{"host": "h8", "comm": "a"}, []int64{1, 7}, "f").
		Profile()), time.Time{}, true})
	cases = append(cases, fastCase{"odd labels", cpu, encode(t, pproftest.NewCPU(at, time.Second).
		Sample(oddLabels(), []int64{1, 5}, "f").
		Sample(map[string]string{"a": "1", "a.b": "2", "a-b": "3", "k8s_pod": strings.Repeat("é", 300)}, []int64{1, 7}, "f").
		Profile()), time.Time{}, true})
	cases = append(cases, fastCase{"host too long", record.Meta{Type: record.ProfileCPU, Host: strings.Repeat("h", record.MaxHostBytes+1)},
		encode(t, pproftest.NewCPU(at, time.Second).Sample(nil, []int64{1, 5}, "f").Profile()), time.Time{}, false})
	procs := indexertest.ManyProcesses(t, at, 5000)
	cases = append(cases, fastCase{"memory of 5,000 processes", procs.Meta, procs.Val, time.Time{}, true})
	mem := pproftest.NewMemory(at, time.Second)
	mem.Sample(map[string]string{"pid": "7", "comm": "db"}, []int64{1 << 20})
	mem.Sample(map[string]string{"pid": "8", "comm": "db"}, []int64{2 << 20})
	cases = append(cases, fastCase{"memory", record.Meta{Type: record.ProfileMemory, Host: "h"}, encode(t, mem.Profile()), time.Time{}, true})

	un := pproftest.NewCPU(time.Time{}, time.Second)
	m := un.Mapping(0x400000, 0x500000, 0, "/usr/bin/app", "abc")
	un.AddressSample(map[string]string{"comm": "app"}, []int64{1, 10}, m, 0x400010, 0x400020)
	un.AddressSample(map[string]string{"comm": "app"}, []int64{2, 20}, nil, 0xdead)
	un.AddressSample(map[string]string{"comm": "app"}, []int64{2, 20}, m, 0x400010, 0x400020)
	cases = append(cases, fastCase{"unsymbolized, fallback time", cpu, encode(t, un.Profile()), at.Add(time.Hour), true})

	// Inlined lines, file names, line numbers, a function without name, a
	// location without lines or mapping.
	fa := &profile.Function{ID: 1, Name: "inlined", Filename: "a.c"}
	fb := &profile.Function{ID: 2, Name: "outer", Filename: "b.c"}
	fc := &profile.Function{ID: 3, SystemName: "_Z3sysv"}
	mp := &profile.Mapping{ID: 1, Start: 0x1000, Limit: 0x2000, File: "/lib/libx.so"}
	l1 := &profile.Location{ID: 1, Mapping: mp, Address: 0x1010, Line: []profile.Line{{Function: fa, Line: 3}, {Function: fb, Line: 9}}}
	l2 := &profile.Location{ID: 2, Mapping: mp, Address: 0x1020, Line: []profile.Line{{Function: fc, Line: 4}}}
	l3 := &profile.Location{ID: 3, Address: 0x30}
	inl := &profile.Profile{
		SampleType: []*profile.ValueType{{Type: "samples", Unit: "count"}, {Type: "cpu", Unit: "nanoseconds"}},
		TimeNanos:  at.UnixNano(), Mapping: []*profile.Mapping{mp}, Function: []*profile.Function{fa, fb, fc},
		Location: []*profile.Location{l1, l2, l3},
		Sample: []*profile.Sample{
			{Location: []*profile.Location{l1, l2, l3}, Value: []int64{1, 10}, Label: map[string][]string{"comm": {"x"}}},
			{Location: []*profile.Location{l2}, Value: []int64{1, 10}, Label: map[string][]string{"comm": {"x"}}},
			{Location: []*profile.Location{l1}, Value: []int64{3, 30}},
		},
	}
	cases = append(cases, fastCase{"inlined", cpu, encode(t, inl), time.Time{}, true})

	// No samples/count type: one raw sample per pprof sample; heap picks
	// inuse_space over the default.
	heap := &profile.Profile{
		SampleType:        []*profile.ValueType{{Type: "alloc_space", Unit: "bytes"}, {Type: "inuse_space", Unit: "bytes"}},
		DefaultSampleType: "alloc_space", TimeNanos: at.UnixNano(), Function: []*profile.Function{fa}, Location: []*profile.Location{{ID: 1, Line: []profile.Line{{Function: fa}}}},
	}
	heap.Sample = []*profile.Sample{{Location: heap.Location, Value: []int64{100, 7}}}
	cases = append(cases, fastCase{"heap without count", record.Meta{Type: record.ProfileType("heap"), Host: "h"}, encode(t, heap), time.Time{}, true})

	// What the fast path leaves to the general one.
	num := pproftest.NewCPU(at, time.Second).Sample(map[string]string{"comm": "a"}, []int64{1, 2}, "f").Profile()
	num.Sample[0].NumLabel = map[string][]int64{"bytes": {4}}
	cases = append(cases, fastCase{"numeric label", cpu, encode(t, num), time.Time{}, false})
	multi := pproftest.NewCPU(at, time.Second).Sample(nil, []int64{1, 2}, "f").Profile()
	multi.Sample[0].Label = map[string][]string{"comm": {"a", "b"}}
	cases = append(cases, fastCase{"two values of a label", cpu, encode(t, multi), time.Time{}, false})
	short := pproftest.NewCPU(at, time.Second).Sample(nil, []int64{1}, "f").Profile()
	cases = append(cases, fastCase{"too few values", cpu, encode(t, short), time.Time{}, false})
	neg := pproftest.NewCPU(at, time.Second).Sample(nil, []int64{1, -3}, "f").Profile()
	cases = append(cases, fastCase{"negative value", cpu, encode(t, neg), time.Time{}, false})
	cases = append(cases, fastCase{"no sample types", cpu, encode(t, &profile.Profile{TimeNanos: 1}), time.Time{}, false})
	long := pproftest.NewCPU(at, time.Second).Sample(nil, []int64{1, 2, 3}, "f").Profile()
	cases = append(cases, fastCase{"more values than types", cpu, encode(t, long), time.Time{}, false})
	nofn := pproftest.NewCPU(at, time.Second).Sample(nil, []int64{1, 2}, "f").Profile()
	nofn.Location[0].Line = append(nofn.Location[0].Line, profile.Line{Line: 7})
	cases = append(cases, fastCase{"line without function", cpu, encode(t, nofn), time.Time{}, false})
	// Beyond the limits on one element of record.DefaultLimits, which a
	// short protobuf can pass (the fast path checks them as it walks).
	lim := record.DefaultLimits()
	deep := pproftest.NewCPU(at, time.Second)
	frames := make([]string, lim.MaxLocationsPerSample+1)
	for i := range frames {
		frames[i] = fmt.Sprint("f", i)
	}
	cases = append(cases, fastCase{"stack too deep", cpu, encode(t, deep.Sample(nil, []int64{1, 2}, frames...).Profile()), time.Time{}, false})
	many := map[string]string{}
	for i := range lim.MaxLabelsPerSample + 1 {
		many[fmt.Sprint("l", i)] = "v"
	}
	cases = append(cases, fastCase{"too many labels in a sample", cpu, encode(t, pproftest.NewCPU(at, time.Second).Sample(many, []int64{1, 2}, "f").Profile()), time.Time{}, false})
	types := pproftest.NewCPU(at, time.Second).Sample(nil, make([]int64, lim.MaxSampleTypes+1), "f").Profile()
	for len(types.SampleType) <= lim.MaxSampleTypes {
		types.SampleType = append(types.SampleType, &profile.ValueType{Type: fmt.Sprint("t", len(types.SampleType)), Unit: "count"})
	}
	cases = append(cases, fastCase{"too many sample types", cpu, encode(t, types), time.Time{}, false})
	cases = append(cases, fastCase{"string too long", cpu, encode(t, pproftest.NewCPU(at, time.Second).Sample(nil, []int64{1, 2}, strings.Repeat("f", lim.MaxStringBytes+1)).Profile()), time.Time{}, false})
	comments := pproftest.NewCPU(at, time.Second).Sample(nil, []int64{1, 2}, "f").Profile()
	for range lim.MaxComments + 1 {
		comments.Comments = append(comments.Comments, "c")
	}
	cases = append(cases, fastCase{"too many comments", cpu, encode(t, comments), time.Time{}, false})
	maps := pproftest.NewCPU(at, time.Second)
	for i := range lim.MaxMappings + 1 {
		maps.Mapping(uint64(i)<<12, uint64(i+1)<<12, 0, "m", "")
	}
	cases = append(cases, fastCase{"too many mappings", cpu, encode(t, maps.Sample(nil, []int64{1, 2}, "f").Profile()), time.Time{}, false})
	cases = append(cases, fastCase{"documents over the budget", cpu, encode(t, indexertest.WideLabelSets(at)), time.Time{}, false})
	raw := encode(t, inl)
	zr, err := gzip.NewReader(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	plain := new(bytes.Buffer)
	plain.ReadFrom(zr)
	cases = append(cases, fastCase{"uncompressed", cpu, plain.Bytes(), time.Time{}, false})
	cases = append(cases, fastCase{"truncated gzip", cpu, raw[:len(raw)/2], time.Time{}, false})
	// A sample referencing location 9, which the table does not have.
	cases = append(cases, fastCase{"frame kinds", cpu, encode(t, mixedKinds(at)), time.Time{}, true})
	bad := append([]byte(nil), plain.Bytes()...)
	cases = append(cases, fastCase{"unknown location", cpu, pproftest.Gzip(append(bad, 0x12, 0x04, 0x0a, 0x01, 0x09, 0x10)), time.Time{}, false})
	// Two period types: pprof keeps the last, record.Limits refuses it.
	period := append(append([]byte(nil), plain.Bytes()...), 0x5a, 0x04, 0x08, 0x00, 0x10, 0x00, 0x5a, 0x04, 0x08, 0x00, 0x10, 0x00)
	cases = append(cases, fastCase{"two period types", cpu, pproftest.Gzip(period), time.Time{}, false})
	cases = append(cases, fastCase{"concatenated", cpu, pproftest.Gzip(append(append([]byte(nil), plain.Bytes()...), plain.Bytes()...)), time.Time{}, false})
	return cases
}

// namedCase is the case of fastCases named name.
func namedCase(t *testing.T, name string) fastCase {
	t.Helper()
	for _, tc := range fastCases(t) {
		if tc.name == name {
			return tc
		}
	}
	t.Fatalf("no case %q", name)
	return fastCase{}
}

// TestFastConvertMatchesGeneralPath: for every profile the fast path takes,
// its documents are exactly those of DecodeProfile+Convert; agent-shaped
// profiles do take it, and the ones it declines fail or succeed as before.
func TestFastConvertMatchesGeneralPath(t *testing.T) {
	names := testNames
	for _, tc := range fastCases(t) {
		t.Run(tc.name, func(t *testing.T) {
			slow, slowErr := decodeConvert(testLimits, names, tc.meta, "", tc.value, tc.fallback)
			// Twice: the second run takes the stack IDs from the cache.
			for range 2 {
				fast, ok := testFast.convert(names, tc.meta, "", tc.value, tc.fallback, nil)
				if ok != tc.wantFast {
					t.Fatalf("fast path ok=%v, want %v (general path error: %v)", ok, tc.wantFast, slowErr)
				}
				if !ok {
					continue
				}
				if slowErr != nil {
					t.Fatalf("fast path took a profile the general path rejects: %v", slowErr)
				}
				if !reflect.DeepEqual(fast, slow) {
					t.Fatalf("fast documents differ:\nfast %+v\nslow %+v", fast, slow)
				}
			}
		})
	}
}

// TestFastConvertKnownStacks: a stack Known reports stored comes without
// frames (once its ID is cached) and marked Known; one it does not report
// comes with its frames, and the samples documents are the same either way.
func TestFastConvertKnownStacks(t *testing.T) {
	rec := benchCorpus(t, 300, 3, 1.1, 1)[0]
	slow, err := decodeConvert(testLimits, testNames, rec.Meta, "", rec.Val, rec.Time)
	if err != nil || len(slow.Stacks) < 10 {
		t.Fatalf("general path: %d stacks, %v", len(slow.Stacks), err)
	}
	// Every other stack (by ID) is known, for the profile's day only.
	knownIDs := map[string]bool{}
	for i, s := range slow.Stacks {
		knownIDs[s.ID] = i%2 == 0
	}
	day := rec.Time.UTC().Truncate(24 * time.Hour)
	known := func(id string, at time.Time) bool {
		return knownIDs[id] && !at.UTC().Truncate(24*time.Hour).After(day)
	}
	f := newFastPath(testLimits)
	for run := range 2 {
		fast, ok := f.convert(testNames, rec.Meta, "", rec.Val, rec.Time, known)
		if !ok {
			t.Fatal("fast path declined a corpus profile")
		}
		if !reflect.DeepEqual(fast.Samples, slow.Samples) {
			t.Fatalf("run %d: samples documents differ from the general path's", run)
		}
		if len(fast.Stacks) != len(slow.Stacks) {
			t.Fatalf("run %d: %d stacks, want %d", run, len(fast.Stacks), len(slow.Stacks))
		}
		for i, s := range fast.Stacks {
			want := slow.Stacks[i]
			// The first run misses the ID cache: frames are built for the
			// ID, known or not.
			if run == 1 && knownIDs[s.ID] {
				want.Frames, want.Known = nil, true
			}
			if !reflect.DeepEqual(s, want) {
				t.Fatalf("run %d: stack %d = %+v, want %+v", run, i, s, want)
			}
		}
	}
	// Stored for the day before only: every stack has its frames again.
	day = day.Add(-24 * time.Hour)
	fast, ok := f.convert(testNames, rec.Meta, "", rec.Val, rec.Time, known)
	if !ok {
		t.Fatal("fast path declined a corpus profile")
	}
	for i, s := range fast.Stacks {
		if s.Known || len(s.Frames) == 0 {
			t.Fatalf("stack %d of the next day: known %v with %d frames, want its frames", i, s.Known, len(s.Frames))
		}
	}
}

// TestConvertUnknownLocationIsAnError: pprof leaves such a location nil; the
// general path must reject it rather than crash the worker.
func TestConvertUnknownLocationIsAnError(t *testing.T) {
	tc := namedCase(t, "unknown location")
	if _, err := decodeConvert(testLimits, testNames, tc.meta, "", tc.value, tc.fallback); err == nil {
		t.Fatal("a sample with an unknown location was accepted")
	}
}

// FuzzFastConvert: on any input the fast path never panics, and whatever it
// accepts the general path accepts with the same documents. Each input is
// tried as the record value and, gzipped, as the pprof message, so that
// mutations reach the protobuf walk.
func FuzzFastConvert(f *testing.F) {
	for _, tc := range fastCases(f) {
		if len(tc.value) < 4<<10 {
			f.Add(tc.value)
			if plain, err := gunzip(tc.value); err == nil {
				f.Add(plain)
			}
		}
	}
	small := benchCorpus(f, 12, 3, 1.1, 1)[0].Val
	f.Add(small)
	if plain, err := gunzip(small); err == nil {
		f.Add(plain)
	}
	meta := record.Meta{Type: record.ProfileCPU, Host: "h"}
	f.Fuzz(func(t *testing.T, in []byte) {
		for _, value := range [][]byte{in, pproftest.Gzip(in)} {
			fast, ok := testFast.convert(testNames, meta, "", value, time.Unix(5, 0), nil)
			if !ok {
				continue
			}
			slow, err := decodeConvert(testLimits, testNames, meta, "", value, time.Unix(5, 0))
			if err != nil {
				t.Fatalf("fast path accepted what the general path rejects: %v", err)
			}
			if !reflect.DeepEqual(fast, slow) {
				t.Fatalf("fast documents differ:\nfast %+v\nslow %+v", fast, slow)
			}
		}
	})
}

func gunzip(b []byte) ([]byte, error) {
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		return nil, err
	}
	return io.ReadAll(zr)
}

// BenchmarkFastConvert is BenchmarkDecodeConvert's work on the fast path.
func BenchmarkFastConvert(b *testing.B) {
	for _, bc := range benchCorpora {
		b.Run(bc.name, func(b *testing.B) {
			recs := benchCorpus(b, bc.samples, bc.raw, bc.zipf, 20)
			b.ReportAllocs()
			docs := 0
			cpu := startCPU(b)
			for i := 0; b.Loop(); i++ {
				r := recs[i%len(recs)]
				d, ok := testFast.convert(testNames, r.Meta, "", r.Val, r.Time, nil)
				if !ok {
					b.Fatal("fast path declined a corpus profile")
				}
				docs += len(d.Samples)
			}
			b.ReportMetric(float64(docs)/b.Elapsed().Seconds(), "docs/s")
			cpu.report()
		})
	}
}

// BenchmarkFastConvertFleet is the fast path in a fleet's steady state: 50
// hosts whose profiles (1,520 samples each) draw from 60,000 distinct
// stacks, more than the 16,384 the stack cache held with frames, every
// stack already stored (Known), caches warm. cpu-ns/op is one CPU profile.
//
//	go test -run '^$' -bench FastConvertFleet -benchtime 400x -cpu 1 ./internal/convert
func BenchmarkFastConvertFleet(b *testing.B) {
	recs, _, err := indexertest.Corpus{
		Seed: 2026, Hosts: 50, ProfilesPerHost: 4, Start: time.Unix(1700000000, 0), Interval: 10 * time.Second,
		Stacks: 60000, Depth: 30, Processes: 10, SamplesPerProf: 1520, RawPerSample: 1,
	}.Build()
	if err != nil {
		b.Fatal(err)
	}
	stored := func(string, time.Time) bool { return true }
	f := newFastPath(testLimits)
	for _, r := range recs {
		f.convert(testNames, r.Meta, "", r.Val, r.Time, stored)
	}
	b.ReportAllocs()
	cpu := startCPU(b)
	for i := 0; b.Loop(); i++ {
		r := recs[i%len(recs)]
		if _, ok := f.convert(testNames, r.Meta, "", r.Val, r.Time, stored); !ok {
			b.Fatal("fast path declined a corpus profile")
		}
	}
	cpu.report()
}

// BenchmarkFastConvertDecoded is BenchmarkFastConvert after decompression
// (parse and convert of the raw pprof bytes), so that the work this package
// does can be measured apart from gunzip, which depends on the record
// encoding.
func BenchmarkFastConvertDecoded(b *testing.B) {
	for _, bc := range benchCorpora {
		b.Run(bc.name, func(b *testing.B) {
			recs := benchCorpus(b, bc.samples, bc.raw, bc.zipf, 20)
			plain := make([][]byte, len(recs))
			for i, r := range recs {
				var err error
				if plain[i], err = gunzip(r.Val); err != nil {
					b.Fatal(err)
				}
			}
			f := newFastPath(testLimits)
			d := new(fastDecoder)
			b.ReportAllocs()
			cpu := startCPU(b)
			for i := 0; b.Loop(); i++ {
				r := recs[i%len(recs)]
				// parse only reads d.raw: no copy needed.
				d.raw = *bytes.NewBuffer(plain[i%len(recs)])
				if !d.parse(&f.limits) {
					b.Fatal("parse declined a corpus profile")
				}
				if _, ok := d.convert(testNames, r.Meta, "", r.Time, f, nil, docBudget(d.raw.Len())); !ok {
					b.Fatal("fast path declined a corpus profile")
				}
			}
			cpu.report()
		})
	}
}

// benchCPU reports the process's CPU time (user + system, GC included) per
// iteration as cpu-ns/op: on a machine shared with other work, wall time
// per op grows with the load while CPU time mostly does not.
type benchCPU struct {
	b     *testing.B
	start time.Duration
}

func startCPU(b *testing.B) benchCPU { return benchCPU{b, processCPU(b)} }

func (c benchCPU) report() {
	c.b.ReportMetric(float64(processCPU(c.b)-c.start)/float64(c.b.N), "cpu-ns/op")
}

func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// testLimits are the limits of the tests: the indexer's.
var testLimits = record.DefaultLimits()

// testFast is the fast path of the tests: one shared cache, as in a Converter.
var testFast = newFastPath(testLimits)

// TestSortStacks: stacks come out in ID order whether IDs differ in their
// first 6 bytes (the integer sort) or not (the tie groups), and past the
// 16-bit index too.
func TestSortStacks(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for _, n := range []int{0, 1, 2, 50, 1000, 1<<16 + 3} {
		for _, alphabet := range []string{"ab", "0123456789abcdef", "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"} {
			d := new(fastDecoder)
			stacks := make([]Stack, 0, n)
			seen := map[string]bool{}
			for len(stacks) < n {
				id := make([]byte, 8+rng.IntN(9)) // "ab" has room for 2^17 IDs
				for i := range id {
					id[i] = alphabet[rng.IntN(len(alphabet))]
				}
				if seen[string(id)] {
					continue
				}
				seen[string(id)] = true
				stacks = append(stacks, Stack{ID: string(id)})
				d.stackPrefix = append(d.stackPrefix, idPrefix(string(id)))
			}
			got := d.sortStacks(stacks)
			if len(got) != n {
				t.Fatalf("n=%d: %d indices", n, len(got))
			}
			for i := 1; i < len(got); i++ {
				if stacks[got[i-1]].ID >= stacks[got[i]].ID {
					t.Fatalf("n=%d alphabet %q: %q before %q", n, alphabet, stacks[got[i-1]].ID, stacks[got[i]].ID)
				}
			}
		}
	}
}

// TestFastLimitsBound: the fast path walks a protobuf with Check from
// pprofwire.CheckAbove on, whose bound TestCheckAbove (pkg/pprofwire)
// checks with the costliest elements.
func TestFastLimitsBound(t *testing.T) {
	l := record.DefaultLimits()
	if got, want := newFastLimits(l).checkAbove, pprofwire.CheckAbove(l); got != want {
		t.Fatalf("checkAbove = %d, want pprofwire.CheckAbove %d", got, want)
	}
}

// mixedKinds is a profile whose stacks mix native frames with the frames the
// agent names on its pseudo-files (kernel, python, java, js, jit).
func mixedKinds(at time.Time) *profile.Profile {
	b := pproftest.NewCPU(at, 10*time.Second)
	native := b.Mapping(0x400000, 0x500000, 0, "/usr/bin/python3.12", "aa11")
	native.HasFunctions = true
	kernel := b.Mapping(0, 0, 0, record.MappingKernel, "")
	python := b.Mapping(0, 0, 0, record.MappingPython, "")
	java := b.Mapping(0, 0, 0, record.MappingJava, "")
	js := b.Mapping(0, 0, 0, record.MappingJS, "")
	jit := b.Mapping(0, 0, 0, record.MappingJIT, "")
	pyLoc := b.NamedLocation(python, 0, "Handler.serve", "/srv/handler.py", 42)
	mainLoc := b.NamedLocation(native, 0x401000, "main", "main.c", 3)
	b.LocationSample(map[string]string{"pid": "1", "comm": "python3"}, []int64{2, 20},
		b.NamedLocation(kernel, 0xffffffff81000010, "do_syscall_64", "", 0),
		pyLoc,
		b.NamedLocation(native, 0x402000, "_PyEval_EvalFrameDefault", "ceval.c", 4200),
		mainLoc)
	b.LocationSample(map[string]string{"pid": "1", "comm": "python3"}, []int64{1, 10}, pyLoc, mainLoc)
	b.LocationSample(map[string]string{"pid": "2", "comm": "java"}, []int64{3, 30},
		b.NamedLocation(jit, 0x7e0000000200, "LazyCompile:*loop", "", 0),
		b.NamedLocation(js, 0, "(anonymous)", "file:///srv/index.js", 7),
		b.NamedLocation(java, 0x7e0000000100, "com.example.Cart.total", "Cart.java", 88))
	return b.Profile()
}
