package jfr

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"errors"
	"io"
	"os"
	"runtime"
	"strings"
	"testing"

	"github.com/stackstream/stackstream/schemas/record"
)

// agentJFR is a recording the Pyroscope Java agent 2.9.2 uploaded (Java 17,
// a program whose main calls hotLoop (line 5) and allocate (line 9);
// itimer CPU at 100 Hz, alloc=256k, lock=1ms), gunzipped: one chunk of
// 66,152 bytes, compressed integers.
func agentJFR(t testing.TB) []byte { return testdataJFR(t, "agent.jfr.gz") }

func testdataJFR(t testing.TB, name string) []byte {
	t.Helper()
	f, err := os.ReadFile("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	zr, err := gzip.NewReader(bytes.NewReader(f))
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func kinds(rec *Recording) map[Kind]int {
	out := map[Kind]int{}
	for _, s := range rec.Samples {
		out[s.Kind]++
	}
	return out
}

func TestParseAgent(t *testing.T) {
	rec, err := Parse(agentJFR(t), DefaultLimits)
	if err != nil {
		t.Fatal(err)
	}
	// The counts the recording holds (the JDK's `jfr summary` of the same
	// file agrees: 130 jdk.ExecutionSample, 1867 jdk.ObjectAllocationInNewTLAB).
	if rec.Events["jdk.ExecutionSample"] != 130 || rec.Events["jdk.ObjectAllocationInNewTLAB"] != 1867 {
		t.Errorf("events = %v", rec.Events)
	}
	if k := kinds(rec); k[CPU] != 130 || k[Alloc] != 1867 || k[Lock] != 0 {
		t.Errorf("samples by kind = %v", k)
	}
	hot := false
	for _, st := range rec.Stacks {
		if len(st) == 2 && st[0] == (Frame{"Hot.hotLoop", 5}) && st[1] == (Frame{"Hot.main", 14}) {
			hot = true
		}
		for _, f := range st {
			if strings.Contains(f.Name, "/") || f.Name == "" {
				t.Errorf("frame %+v: want pkg.Class.method", f)
			}
			// async-profiler names native frames' library as their class.
			if strings.Contains(f.Name, ".so.") {
				t.Errorf("native frame %q keeps its library name", f.Name)
			}
		}
	}
	if !hot {
		t.Errorf("no stack Hot.hotLoop:5 <- Hot.main:14 among %v", rec.Stacks)
	}
	var bytes int64
	for _, s := range rec.Samples {
		if s.Kind == Alloc {
			if s.Value <= 0 {
				t.Fatalf("alloc sample of %d bytes", s.Value)
			}
			bytes += s.Value
		}
	}
	ps := ToPprof(rec)
	if ps.CPU == nil || ps.Alloc == nil {
		t.Fatalf("profiles = %+v", ps)
	}
	for _, p := range []*struct {
		name string
		err  error
	}{{"cpu", ps.CPU.CheckValid()}, {"alloc", ps.Alloc.CheckValid()}} {
		if p.err != nil {
			t.Errorf("%s profile: %v", p.name, p.err)
		}
	}
	var objects, space int64
	for _, s := range ps.Alloc.Sample {
		objects += s.Value[0]
		space += s.Value[1]
	}
	if objects != 1867 || space != bytes {
		t.Errorf("alloc profile = %d objects, %d bytes; want 1867, %d", objects, space, bytes)
	}
}

// TestParseLocks: lock events of the agent (PYROSCOPE_PROFILER_LOCK=1ms,
// four threads contending for one monitor in Lock.contend, line 6): their
// durations in nanoseconds. The JDK's `jfr print --json` of the same file
// lists 262 jdk.JavaMonitorEnter and jdk.ThreadPark events of 3,456,365,774
// ns in all.
func TestParseLocks(t *testing.T) {
	rec, err := Parse(testdataJFR(t, "agent-lock.jfr.gz"), DefaultLimits)
	if err != nil {
		t.Fatal(err)
	}
	var n, total int64
	contend := false
	for _, s := range rec.Samples {
		if s.Kind != Lock {
			continue
		}
		n++
		total += s.Value
		if st := rec.Stacks[s.Stack]; st[0] == (Frame{"Lock.contend", 6}) {
			contend = true
		}
	}
	if n != 262 || total != 3456365774 {
		t.Errorf("lock samples = %d of %d ns, want 262 of 3456365774", n, total)
	}
	if !contend {
		t.Errorf("no lock sample at Lock.contend:6")
	}
	if k := kinds(rec); k[CPU] != 111 {
		t.Errorf("cpu samples = %d, want 111", k[CPU])
	}
	// Not stored: the record contract has no lock type.
	if ps := ToPprof(rec); ps.Alloc != nil || ps.CPU == nil {
		t.Errorf("profiles of a CPU and lock recording = %+v", ps)
	}
}

// TestParseChunks: a file of several chunks is read chunk by chunk.
func TestParseChunks(t *testing.T) {
	one := agentJFR(t)
	rec, err := Parse(append(append([]byte{}, one...), one...), DefaultLimits)
	if err != nil {
		t.Fatal(err)
	}
	if k := kinds(rec); k[CPU] != 260 || k[Alloc] != 2*1867 {
		t.Errorf("two chunks: samples by kind = %v", k)
	}
	l := DefaultLimits
	l.MaxChunks = 1
	if _, err := Parse(append(append([]byte{}, one...), one...), l); !errors.Is(err, record.ErrTooLarge) {
		t.Errorf("two chunks, limit 1: %v", err)
	}
}

// TestParseLimits: each limit turns into ErrTooLarge or ErrInvalid naming it.
func TestParseLimits(t *testing.T) {
	data := agentJFR(t)
	for _, c := range []struct {
		name string
		edit func(*Limits)
		want string
	}{
		{"chunk bytes", func(l *Limits) { l.MaxChunkBytes = 1000 }, "limit 1000"},
		{"strings", func(l *Limits) { l.MaxStrings = 10 }, "strings, limit 10"},
		{"classes", func(l *Limits) { l.MaxClasses = 10 }, "more than 10 classes"},
		{"fields", func(l *Limits) { l.MaxFields = 2 }, "more than 2 fields"},
		{"objects", func(l *Limits) { l.MaxObjects = 1000 }, "more than 1000 decoded values"},
		{"depth", func(l *Limits) { l.MaxDepth = 1 }, "deeper than 1"},
	} {
		l := DefaultLimits
		c.edit(&l)
		_, err := Parse(data, l)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error containing %q", c.name, err, c.want)
		}
	}
	l := DefaultLimits
	l.MaxFrames = 1
	rec, err := Parse(data, l)
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range rec.Stacks {
		if len(st) > 1 {
			t.Fatalf("stack of %d frames, limit 1", len(st))
		}
	}
}

// TestParseBroken: cut or corrupted files fail with ErrInvalid.
func TestParseBroken(t *testing.T) {
	data := agentJFR(t)
	for _, n := range []int{0, 3, 67, 68, 100, 1000, len(data) / 2, len(data) - 1} {
		if _, err := Parse(data[:n], DefaultLimits); n > 0 && !errors.Is(err, ErrInvalid) {
			t.Errorf("first %d bytes: %v", n, err)
		}
	}
	bad := append([]byte{}, data...)
	binary.BigEndian.PutUint64(bad[24:], uint64(len(bad)+10)) // metadata offset past the end
	if _, err := Parse(bad, DefaultLimits); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "metadata offset") {
		t.Errorf("metadata offset past the end: %v", err)
	}
}

// FuzzParse: any input parses or fails with ErrInvalid or ErrTooLarge,
// never panics, and allocates a bounded multiple of its size. The seeds
// are the agent's recording and cuts of it.
func FuzzParse(f *testing.F) {
	data := agentJFR(f)
	f.Add(data)
	f.Add(data[:4096])
	f.Add(testdataJFR(f, "agent-lock.jfr.gz"))
	f.Add([]byte("FLR\x00"))
	l := DefaultLimits
	l.MaxObjects = 1 << 16
	f.Fuzz(func(t *testing.T, b []byte) {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		rec, err := Parse(b, l)
		runtime.ReadMemStats(&after)
		if err != nil {
			if !errors.Is(err, ErrInvalid) && !errors.Is(err, record.ErrTooLarge) {
				t.Fatalf("error %v is neither ErrInvalid nor ErrTooLarge", err)
			}
		} else {
			for _, s := range rec.Samples {
				if s.Stack < 0 || s.Stack >= len(rec.Stacks) {
					t.Fatalf("sample of stack %d of %d", s.Stack, len(rec.Stacks))
				}
			}
			ps := ToPprof(rec)
			for _, p := range []*Profiles{&ps} {
				if p.CPU != nil {
					if err := p.CPU.CheckValid(); err != nil {
						t.Fatal(err)
					}
				}
				if p.Alloc != nil {
					if err := p.Alloc.CheckValid(); err != nil {
						t.Fatal(err)
					}
				}
			}
		}
		if alloc, limit := after.TotalAlloc-before.TotalAlloc, uint64(200*len(b)+(8<<20)); alloc > limit {
			t.Fatalf("Parse of %d bytes allocated %d, limit %d", len(b), alloc, limit)
		}
	})
}

// BenchmarkParse: reading the agent's recording (66 KB, one chunk) and
// building its pprof profiles.
func BenchmarkParse(b *testing.B) {
	data := agentJFR(b)
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		rec, err := Parse(data, DefaultLimits)
		if err != nil {
			b.Fatal(err)
		}
		ToPprof(rec)
	}
}
