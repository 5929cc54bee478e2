package aggregate

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/pprof/profile"

	"github.com/stackstream/stackstream/pkg/pproftest"
	"github.com/stackstream/stackstream/pkg/pprofx"
	"github.com/stackstream/stackstream/schemas/indices"
	"github.com/stackstream/stackstream/schemas/record"
)

var t0 = time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)

func testConfig() Config {
	return Config{
		AllowedLateness: 2 * time.Minute, Retention: 5 * time.Minute, MaxClockSkew: time.Hour,
		Names: indices.Names{Prefix: "t-"}, Now: func() time.Time { return t0.Add(24 * time.Hour) },
	}
}

func svc(name string) map[string]string {
	return map[string]string{record.LabelService: name, record.LabelPID: "1"}
}

// cpu builds a CPU profile at t: checkout spends 30 ns in main;work;hash and
// 10 ns in main;work, api spends 5 ns in main;serve;main (recursion).
func cpu(t time.Time) *profile.Profile {
	return pproftest.NewCPU(t, 10*time.Second).
		Sample(svc("checkout"), []int64{3, 30}, "hash", "work", "main").
		Sample(svc("checkout"), []int64{1, 10}, "work", "main").
		Sample(svc("api"), []int64{1, 5}, "main", "serve", "main").
		Profile()
}

func stackID(names ...string) string {
	s := &profile.Sample{}
	for _, n := range names {
		s.Location = append(s.Location, &profile.Location{Line: []profile.Line{{Function: &profile.Function{Name: n, SystemName: n}}}})
	}
	return indices.StackID(pprofx.StackFrames(s))
}

func add(t *testing.T, p *Partition, prof *profile.Profile, typ record.ProfileType, offset int64) Outcome {
	t.Helper()
	out, err := p.Add(Input{Profile: prof, Type: typ, Host: "web-1", Offset: offset})
	if err != nil {
		t.Fatalf("add offset %d: %v", offset, err)
	}
	return out
}

// byKey indexes pending docs by resolution/kind/service/function/stack, a
// stacks document as one stack document per stack.
func byKey(docs []Pending) map[string]indices.RollupDoc {
	out := map[string]indices.RollupDoc{}
	for _, d := range perStack(docs) {
		out[d.Resolution+"/"+d.Timestamp.Format("15:04")+"/"+d.Kind+"/"+d.Service+"/"+d.Function+strings.Join(d.StackIDs, ",")] = d
	}
	return out
}

// perStack is the documents with each stacks document as its stacks'
// documents.
func perStack(docs []Pending) []indices.RollupDoc {
	var out []indices.RollupDoc
	for _, d := range docs {
		if d.Doc.Kind != indices.KindStacks {
			out = append(out, d.Doc)
			continue
		}
		stacks, err := d.Doc.PerStack()
		if err != nil {
			panic(err)
		}
		out = append(out, stacks...)
	}
	return out
}

func TestCPUDocs(t *testing.T) {
	p := NewPartition(testConfig(), Checkpoint{})
	add(t, p, cpu(t0.Add(10*time.Second)), record.ProfileCPU, 0)
	add(t, p, cpu(t0.Add(20*time.Second)), record.ProfileCPU, 1)
	docs := byKey(p.Pending(true))
	checks := []struct {
		key  string
		want indices.RollupDoc
	}{
		{"1m/10:00/service/checkout/", indices.RollupDoc{Value: 80, Samples: 8, Cores: 80 / 60e9}},
		{"1m/10:00/service/api/", indices.RollupDoc{Value: 10, Samples: 2, Cores: 10 / 60e9}},
		{"1h/10:00/service/checkout/", indices.RollupDoc{Value: 80, Samples: 8, Cores: 80 / 3600e9}},
		{"10m/10:00/service/checkout/", indices.RollupDoc{Value: 80, Samples: 8, Cores: 80 / 600e9}},
		{"1h/10:00/function/checkout/hash", indices.RollupDoc{Self: 60, Total: 60}},
		{"1h/10:00/function/checkout/work", indices.RollupDoc{Self: 20, Total: 80}},
		{"1h/10:00/function/checkout/main", indices.RollupDoc{Total: 80}},
		{"1h/10:00/function/api/main", indices.RollupDoc{Self: 10, Total: 10}},
		{"1h/10:00/function/api/serve", indices.RollupDoc{Total: 10}},
		{"1m/10:00/stack/checkout/" + stackID("hash", "work", "main"), indices.RollupDoc{Value: 60}},
		{"1h/10:00/stack/api/" + stackID("main", "serve", "main"), indices.RollupDoc{Value: 10}},
	}
	for _, c := range checks {
		t.Run(c.key, func(t *testing.T) {
			got, ok := docs[c.key]
			if !ok {
				t.Fatalf("no doc %s among %d", c.key, len(docs))
			}
			if got.Value != c.want.Value || got.Self != c.want.Self || got.Total != c.want.Total || got.Samples != c.want.Samples || got.Cores != c.want.Cores {
				t.Fatalf("got %+v, want %+v", got, c.want)
			}
			if got.Host != "web-1" || got.Type != "cpu" {
				t.Fatalf("host/type = %q/%q", got.Host, got.Type)
			}
		})
	}
	// 2 services + 3 stacks per resolution, 5 functions in the hour only
	// (no minute function documents), and in the hour a tree per service
	// and host, one per service and one for the partition; at 10 minutes
	// 2 services; a partition tree per minute and 10 minutes.
	for k := range docs {
		if strings.HasPrefix(k, "1m/") && strings.Contains(k, "/function/") {
			t.Errorf("minute function document %s", k)
		}
	}
	// and the hour partition tree's function table; the minute's and the
	// 10 minutes' partition heads (tests write every head).
	if len(docs) != 2*5+5+2+2+1+2+2+1+2 {
		t.Fatalf("got %d docs, want 27: %v", len(docs), docs)
	}
	pt, table := docs["1h/10:00/partition_tree//"], docs["1h/10:00/function_table//"]
	fns, err := indices.DecodeFunctionTable(table.Tree, indices.TreeLimits{})
	if err != nil {
		t.Fatal(err)
	}
	want := []indices.TableFunction{{Name: "hash", Self: 60, Total: 60}, {Name: "work", Self: 20, Total: 80}, {Name: "main", Self: 10, Total: 90}, {Name: "serve", Total: 10}}
	if pt.Digest != indices.TreeDigest(pt.Tree) || table.Sources != pt.Digest || table.Value != 90 || fns.Total != 90 || !fns.Complete() || !slices.Equal(fns.Kept, want) {
		t.Fatalf("function table %+v (sources %q) of the partition tree of digest %q: want %v", fns, table.Sources, pt.Digest, want)
	}
	for _, k := range []string{"1m/10:00/partition_tree//", "10m/10:00/partition_tree//"} {
		if d := docs[k]; d.Value != 90 || len(d.Tree) == 0 {
			t.Fatalf("%s: %+v, want the minute's stacks worth 90", k, d)
		}
	}
	tree := docs["1h/10:00/tree/checkout/"]
	if tree.Value != 80 || tree.Host != "web-1" || len(tree.Tree) == 0 {
		t.Fatalf("checkout's tree %+v, want value 80", tree)
	}
	paths := decodeTree(t, tree.Tree)
	if paths["main;work"] != [2]int64{20, 80} || paths["main;work;hash"] != [2]int64{60, 60} || len(paths) != 3 {
		t.Fatalf("checkout's tree %v, want main;work (self 20 total 80), main;work;hash (60)", paths)
	}
}

func TestMemoryDocs(t *testing.T) {
	p := NewPartition(testConfig(), Checkpoint{})
	mem := func(at time.Duration, a, b int64) *profile.Profile {
		return pproftest.NewMemory(t0.Add(at), 10*time.Second).
			Sample(map[string]string{record.LabelService: "db", record.LabelPID: "1"}, []int64{a}).
			Sample(map[string]string{record.LabelService: "db", record.LabelPID: "2"}, []int64{b}).
			Profile()
	}
	add(t, p, mem(0, 100, 50), record.ProfileMemory, 0)
	add(t, p, mem(10*time.Second, 300, 50), record.ProfileMemory, 1)
	add(t, p, mem(70*time.Second, 1000, 0), record.ProfileMemory, 2)
	docs := byKey(p.Pending(true))
	tests := []struct {
		key     string
		avg     float64
		max     int64
		samples int64
	}{
		{"1m/10:00/service/db/", 250, 350, 4},
		{"1m/10:01/service/db/", 1000, 1000, 2},
		{"1h/10:00/service/db/", 500, 1000, 6},
		{"10m/10:00/service/db/", 500, 1000, 6},
	}
	for _, tt := range tests {
		d := docs[tt.key]
		if d.MemAvg != tt.avg || d.MemMax != tt.max || d.Samples != tt.samples || d.Value != 0 {
			t.Errorf("%s = %+v, want avg %v max %d samples %d", tt.key, d, tt.avg, tt.max, tt.samples)
		}
	}
	if len(docs) != 4 {
		t.Fatalf("memory profiles make only service docs, got %v", docs)
	}
}

func TestWindowsCloseOnWatermark(t *testing.T) {
	p := NewPartition(testConfig(), Checkpoint{})
	add(t, p, cpu(t0.Add(10*time.Second)), record.ProfileCPU, 0)
	add(t, p, cpu(t0.Add(130*time.Second)), record.ProfileCPU, 1)
	if got := p.Pending(false); len(got) != 0 {
		t.Fatalf("minute 10:00 closes at watermark 10:03, got %d docs at 10:02:10", len(got))
	}
	add(t, p, cpu(t0.Add(180*time.Second)), record.ProfileCPU, 2)
	docs := p.Pending(false)
	if len(docs) != 6 {
		t.Fatalf("got %d docs, want minute 10:00 only (6: 2 services, the stacks of each, the partition tree and its head): the hour and its first 10 minutes are in progress", len(docs))
	}
	for _, d := range docs {
		if d.Doc.Resolution != indices.ResolutionMinute || !d.Doc.Timestamp.Equal(t0) {
			t.Fatalf("wrote %s %v", d.Doc.Resolution, d.Doc.Timestamp)
		}
	}
	MarkStored(docs)
	if got := p.Pending(false); len(got) != 0 {
		t.Fatalf("stored docs pending again: %d", len(got))
	}
	// Past 11:00 the hour is over (though open for late data): written with
	// the minutes that close.
	add(t, p, cpu(t0.Add(time.Hour+30*time.Second)), record.ProfileCPU, 3)
	got := byKey(p.Pending(false))
	if len(got) != 34 {
		t.Fatalf("got %d docs, want minutes 10:02, 10:03 (7 each: their partition trees and heads), the 10 minutes 10:00 (4) and the hour (16: its 5 trees and the partition tree's function table): %v", len(got), slices.Sorted(maps.Keys(got)))
	}
	if d := got["1h/10:00/service/checkout/"]; d.Value != 120 {
		t.Fatalf("hour doc %+v, want value 120", d)
	}
	if off, _, ok := p.Commit(); !ok || off != 0 {
		t.Fatalf("commit = %d %v, want 0 (the hour window holds offset 0)", off, ok)
	}
}

func TestLateProfileRecomputes(t *testing.T) {
	p := NewPartition(testConfig(), Checkpoint{})
	add(t, p, cpu(t0.Add(10*time.Second)), record.ProfileCPU, 0)
	add(t, p, cpu(t0.Add(200*time.Second)), record.ProfileCPU, 1)
	MarkStored(p.Pending(false))
	// Late but within retention: the stored window is rewritten with the sum.
	late := pproftest.NewCPU(t0.Add(30*time.Second), time.Second).Sample(svc("checkout"), []int64{1, 7}, "work", "main").Profile()
	if got := add(t, p, late, record.ProfileCPU, 2); got != Added {
		t.Fatalf("outcome %v, want Added", got)
	}
	if docs := p.Pending(false); len(docs) != 0 {
		t.Fatalf("the late minute rewritten before the watermark moved RewriteDelay: %v", slices.Sorted(maps.Keys(byKey(docs))))
	}
	// The watermark a minute on (10:04:20): the minute is written again.
	add(t, p, cpu(t0.Add(260*time.Second)), record.ProfileCPU, 3)
	docs := byKey(p.Pending(false))
	if d := docs["1m/10:00/service/checkout/"]; d.Value != 47 || d.Samples != 5 {
		t.Fatalf("recomputed minute doc = %+v, want value 47 samples 5", d)
	}
	if d, ok := docs["1h/10:00/service/checkout/"]; ok {
		t.Fatalf("hour in progress written: %+v", d)
	}
	if d := byKey(p.Pending(true))["1h/10:00/service/checkout/"]; d.Value != 127 {
		t.Fatalf("hour doc on shutdown = %+v, want 127 (the three minutes)", d)
	}
	if _, ok := docs["1m/10:00/service/api/"]; ok {
		t.Fatal("unchanged doc rewritten")
	}
	if _, ok := docs["1m/10:04/service/checkout/"]; ok {
		t.Fatal("open window written")
	}
}

func TestTooLate(t *testing.T) {
	cfg := testConfig()
	p := NewPartition(cfg, Checkpoint{})
	add(t, p, cpu(t0.Add(10*time.Second)), record.ProfileCPU, 0)
	add(t, p, cpu(t0.Add(8*time.Minute)), record.ProfileCPU, 1) // 10:00 + 1m + 2m + 5m
	if got := add(t, p, cpu(t0.Add(59*time.Second)), record.ProfileCPU, 2); got != TooLate {
		t.Fatalf("outcome %v, want TooLate", got)
	}
	if got := add(t, p, cpu(t0.Add(60*time.Second)), record.ProfileCPU, 3); got != Added {
		t.Fatalf("outcome %v, want Added for 10:01", got)
	}
	written := p.Pending(true)
	MarkStored(written)
	hourBefore := byKey(written)
	if n := p.Evict(); n != 1 {
		t.Fatalf("evicted %d, want minute 10:00", n)
	}
	off, cp, ok := p.Commit()
	if !ok || off != 0 || cp.Next != 4 {
		t.Fatalf("commit %d %+v %v: the hour still holds offset 0", off, cp, ok)
	}

	// A restart reads again from the committed offset with the checkpoint:
	// the same decisions, the evicted minute is not recreated, the hour is
	// rebuilt whole, and the too-late record is known to be handled.
	r := NewPartition(cfg, cp)
	add(t, r, cpu(t0.Add(10*time.Second)), record.ProfileCPU, 0)
	add(t, r, cpu(t0.Add(8*time.Minute)), record.ProfileCPU, 1)
	if got := add(t, r, cpu(t0.Add(59*time.Second)), record.ProfileCPU, 2); got != Skipped {
		t.Fatalf("after restart outcome %v, want Skipped", got)
	}
	add(t, r, cpu(t0.Add(60*time.Second)), record.ProfileCPU, 3)
	if got := add(t, r, cpu(t0.Add(59*time.Second)), record.ProfileCPU, 7); got != TooLate {
		t.Fatalf("after restart new record outcome %v, want TooLate", got)
	}
	after := byKey(r.Pending(true))
	if _, ok := after["1m/10:00/service/checkout/"]; ok {
		t.Fatal("restart recreated the evicted minute 10:00 from part of its records")
	}
	if got, want := after["1h/10:00/service/checkout/"], hourBefore["1h/10:00/service/checkout/"]; !reflect.DeepEqual(got, want) || got.Value != 3*40 {
		t.Fatalf("rebuilt hour %+v, want %+v (three profiles)", got, want)
	}
}

// TestCommitWaitsForWindows, with the tests' configuration (every head
// written) and with the service's defaults (no minute trees, no heads: a
// minute then holds no partition tree state, which, never written, kept
// its window dirty: never evicted, the commit held at its first record).
func TestCommitWaitsForWindows(t *testing.T) {
	service := testConfig()
	service.NoMinuteTrees, service.HeadMinNodes = true, math.MaxInt
	// Window heads on (STACKSTREAM_ROLLUP_WINDOW_HEADS) and minute trees
	// off: these minutes' trees are too small for a head, so they write
	// nothing either.
	heads := service
	heads.HeadMinNodes = 1000
	for name, cfg := range map[string]Config{"tests": testConfig(), "service": service, "heads": heads} {
		t.Run("config="+name, func(t *testing.T) { commitWaitsForWindows(t, cfg) })
	}
}

func commitWaitsForWindows(t *testing.T, cfg Config) {
	p := NewPartition(cfg, Checkpoint{})
	// Hours 10 and 11; the 10:xx windows go once the watermark passes
	// 11:00 + lateness + retention.
	add(t, p, cpu(t0.Add(10*time.Second)), record.ProfileCPU, 5)
	add(t, p, cpu(t0.Add(time.Hour+30*time.Second)), record.ProfileCPU, 6)
	MarkStored(p.Pending(false))
	if off, _, _ := p.Commit(); off != 5 {
		t.Fatalf("commit %d, want 5", off)
	}
	add(t, p, cpu(t0.Add(time.Hour+8*time.Minute)), record.ProfileCPU, 7)
	if off, _, _ := p.Commit(); off != 5 {
		t.Fatalf("commit %d before the hour is stored and evicted, want 5", off)
	}
	MarkStored(p.Pending(false))
	p.Evict()
	off, cp, ok := p.Commit()
	if !ok || off != 6 || cp.Next != 8 || cp.Watermark != t0.Add(10*time.Second).UnixNano() || cp.Floor != t0.Add(time.Hour+8*time.Minute).UnixNano() {
		t.Fatalf("commit %d %+v %v, want 6 with next 8", off, cp, ok)
	}
	p.Committed(off, cp)
	if _, _, ok := p.Commit(); ok {
		t.Fatal("commit again with nothing new")
	}
	add(t, p, cpu(t0.Add(time.Hour+9*time.Minute)), record.ProfileCPU, 8)
	if off2, cp2, ok := p.Commit(); !ok || off2 != 6 || cp2.Next != 9 {
		t.Fatalf("commit %d %+v %v, want offset 6 again with next 9", off2, cp2, ok)
	}
}

func TestDirtyWindowIsNotEvicted(t *testing.T) {
	p := NewPartition(testConfig(), Checkpoint{})
	add(t, p, cpu(t0), record.ProfileCPU, 0)
	add(t, p, cpu(t0.Add(2*time.Hour)), record.ProfileCPU, 1)
	if n := p.Evict(); n != 0 {
		t.Fatalf("evicted %d windows whose docs were never stored", n)
	}
	if off, _, _ := p.Commit(); off != 0 {
		t.Fatalf("commit %d past unstored windows", off)
	}
}

func TestAddRejects(t *testing.T) {
	p := NewPartition(testConfig(), Checkpoint{})
	tests := []struct {
		name string
		prof *profile.Profile
		want error
	}{
		{"no time", &profile.Profile{SampleType: []*profile.ValueType{{Type: "cpu"}}}, ErrNoTime},
		{"future", cpu(t0.Add(48 * time.Hour)), record.ErrTimeOutOfRange},
		{"no sample types", &profile.Profile{TimeNanos: t0.UnixNano()}, ErrNoValues},
		{"short sample", &profile.Profile{TimeNanos: t0.UnixNano(), SampleType: []*profile.ValueType{{Type: "samples"}, {Type: "cpu"}}, Sample: []*profile.Sample{{Value: []int64{1}}}}, ErrShortSample},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := p.Add(Input{Profile: tt.prof, Type: record.ProfileCPU}); !errors.Is(err, tt.want) {
				t.Fatalf("Add = %v, want %v", err, tt.want)
			}
		})
	}
}

func TestCheckpointRoundTrip(t *testing.T) {
	c := Checkpoint{Watermark: t0.UnixNano(), Floor: t0.UnixNano() + 5, Next: 42}
	got, ok := ParseCheckpoint(c.String())
	if !ok || got != c {
		t.Fatalf("ParseCheckpoint(%q) = %+v %v", c.String(), got, ok)
	}
	for _, bad := range []string{"", "member-1", "rollup/v1 wm=x floor=1 next=1", "rollup/v1 wm=5 floor=1 next=1"} {
		if _, ok := ParseCheckpoint(bad); ok {
			t.Errorf("ParseCheckpoint(%q) accepted", bad)
		}
	}
}

func FuzzParseCheckpoint(f *testing.F) {
	f.Add(Checkpoint{Watermark: 1, Floor: 2, Next: 3}.String())
	f.Add("")
	f.Fuzz(func(t *testing.T, s string) {
		c, ok := ParseCheckpoint(s)
		if !ok && c != (Checkpoint{}) {
			t.Fatalf("rejected %q but returned %+v", s, c)
		}
	})
}

func TestIndexerCompatibleInput(t *testing.T) {
	p := NewPartition(testConfig(), Checkpoint{})
	prof := pproftest.NewCPU(t0, time.Second).
		Sample(map[string]string{record.LabelService: "a", record.LabelHost: "from-label"}, []int64{1, 9}, "f").Profile()
	prof.TimeNanos = 0
	// No host header: the sample's host label; no profile time: the record's.
	if _, err := p.Add(Input{Profile: prof, Type: record.ProfileCPU, Offset: 0, Fallback: t0.Add(90 * time.Second)}); err != nil {
		t.Fatal(err)
	}
	d, ok := byKey(p.Pending(true))["1m/10:01/service/a/"]
	if !ok || d.Host != "from-label" || d.Value != 9 {
		t.Fatalf("got %+v %v, want host from-label value 9 at 10:01", d, ok)
	}
}

// genRecords is a partition's log: three hosts over about three hours, some
// profiles arriving up to 15 minutes late, CPU and memory.
func genRecords(rng *rand.Rand, n int) []Input {
	return genLog(rng, n, 3, 4, func(at time.Time) *profile.Profile {
		return pproftest.NewCPU(at, time.Second).
			Sample(svc("checkout"), []int64{1, rng.Int64N(100)}, "hash", "work", "main").
			Sample(svc("api"), []int64{2, rng.Int64N(100)}, "main", "serve", "main").Profile()
	})
}

// genLog is a partition's log of n profiles, 0-40 s apart, a tenth of them
// up to 15 minutes late, from hosts hosts, one in memEvery a memory
// profile and the others cpu's.
func genLog(rng *rand.Rand, n, hosts, memEvery int, cpu func(at time.Time) *profile.Profile) []Input {
	out := make([]Input, n)
	now := t0
	for i := range out {
		now = now.Add(time.Duration(rng.IntN(40)) * time.Second)
		at := now
		if rng.IntN(10) == 0 {
			at = at.Add(-time.Duration(rng.IntN(15*60)) * time.Second)
		}
		host := fmt.Sprintf("h%d", rng.IntN(hosts))
		if rng.IntN(memEvery) == 0 {
			prof := pproftest.NewMemory(at, time.Second).
				Sample(map[string]string{record.LabelService: "db", record.LabelPID: "1"}, []int64{rng.Int64N(1000)}).Profile()
			out[i] = Input{Profile: prof, Type: record.ProfileMemory, Host: host, Offset: int64(i)}
			continue
		}
		out[i] = Input{Profile: cpu(at), Type: record.ProfileCPU, Host: host, Offset: int64(i)}
	}
	return out
}

// consumer drives a Partition as the pipeline does, into an in-memory store.
type consumer struct {
	p         *Partition
	store     map[string]indices.RollupDoc
	tooLate   map[int64]bool
	committed int64
	cp        Checkpoint
}

func (c *consumer) run(t *testing.T, recs []Input, flushEvery int) {
	t.Helper()
	for i, in := range recs {
		out, err := c.p.Add(in)
		if err != nil {
			t.Fatal(err)
		}
		if out == TooLate {
			c.tooLate[in.Offset] = true
		}
		if (i+1)%flushEvery == 0 {
			c.flush(false)
		}
	}
}

func (c *consumer) flush(all bool) {
	docs := c.p.Pending(all)
	for _, d := range docs {
		c.store[d.ID] = d.Doc
	}
	MarkStored(docs)
	c.p.Evict()
	if off, cp, ok := c.p.Commit(); ok {
		c.p.Committed(off, cp)
		c.committed, c.cp = off, cp
	}
}

// TestRestartRebuildsExactly crashes a consumer at random points and
// replays from its last commit: the stored documents and the DLQ decisions
// equal those of a run that never stopped.
func TestRestartRebuildsExactly(t *testing.T) {
	cfg := testConfig()
	for seed := range 40 {
		rng := rand.New(rand.NewPCG(uint64(seed), 7))
		recs := genRecords(rng, 600)
		flushEvery := 1 + rng.IntN(20)

		whole := &consumer{p: NewPartition(cfg, Checkpoint{}), store: map[string]indices.RollupDoc{}, tooLate: map[int64]bool{}}
		whole.run(t, recs, flushEvery)
		whole.flush(true)

		crash := rng.IntN(len(recs))
		first := &consumer{p: NewPartition(cfg, Checkpoint{}), store: map[string]indices.RollupDoc{}, tooLate: map[int64]bool{}}
		first.run(t, recs[:crash], flushEvery)
		// The crash loses every unflushed window; the store and the commit stay.
		second := &consumer{p: NewPartition(cfg, first.cp), store: first.store, tooLate: first.tooLate}
		second.run(t, recs[first.committed:], flushEvery)
		second.flush(true)

		if len(second.store) != len(whole.store) {
			t.Fatalf("seed %d crash at %d (commit %d): %d docs, want %d", seed, crash, first.committed, len(second.store), len(whole.store))
		}
		for id, want := range whole.store {
			if got := second.store[id]; !reflect.DeepEqual(got, want) {
				t.Fatalf("seed %d crash at %d (commit %d): doc %s\n got %+v\nwant %+v", seed, crash, first.committed, id, got, want)
			}
		}
		if len(second.tooLate) != len(whole.tooLate) {
			t.Fatalf("seed %d: too late %v, want %v", seed, second.tooLate, whole.tooLate)
		}
	}
}

// FuzzAdd feeds any profile the pprof parser accepts (the consumer has
// decoded it already) through Add and the document builder: bad content is
// an error or a document, never a panic.
// FuzzAdd: whatever the consumer's decoder accepts (gzip values, and the
// same bytes as a raw protobuf) goes through Add, within a small state
// budget, and the document builder without panicking.
func FuzzAdd(f *testing.F) {
	for _, p := range []*profile.Profile{
		cpu(t0),
		pproftest.NewMemory(t0, time.Second).Sample(map[string]string{record.LabelPID: "1"}, []int64{5}).Profile(),
	} {
		b, err := record.EncodeProfile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b, uint8(0))
		var raw bytes.Buffer
		if err := p.WriteUncompressed(&raw); err != nil {
			f.Fatal(err)
		}
		f.Add(raw.Bytes(), uint8(1))
	}
	l := record.DefaultLimits()
	l.MaxDecompressedBytes, l.MaxDecodeHeapBytes = 1<<20, 4<<20
	f.Fuzz(func(t *testing.T, data []byte, typ uint8) {
		prof, err := record.DecodeProfileLimits(data, l)
		if errors.Is(err, record.ErrNotGzip) {
			prof, err = record.ParseProfile(data, l)
		}
		if err != nil {
			return
		}
		cfg := testConfig()
		cfg.Budget = &Budget{MaxBytes: 64 << 10}
		p := NewPartition(cfg, Checkpoint{})
		in := Input{Profile: prof, Type: record.ProfileTypes[int(typ)%len(record.ProfileTypes)], Offset: 1, Fallback: t0}
		if _, err := p.Add(in); err != nil {
			return
		}
		if cfg.Budget.Used() > cfg.Budget.MaxBytes {
			t.Fatalf("state %d bytes, budget %d", cfg.Budget.Used(), cfg.Budget.MaxBytes)
		}
		for _, d := range p.Pending(true) {
			if d.ID == "" || d.Index == "" {
				t.Fatalf("document without id or index: %+v", d)
			}
		}
	})
}
