package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/pprof/profile"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/stackstream/stackstream/pkg/pproftest"
	"github.com/stackstream/stackstream/pkg/testenv"
	"github.com/stackstream/stackstream/schemas/record"
	"github.com/stackstream/stackstream/services/indexer/internal/indexertest"
)

// peakRSS is the peak resident set of process pid (VmHWM), in bytes.
func peakRSS(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) == 3 && f[0] == "VmHWM:" {
			kb, err := strconv.ParseInt(f[1], 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatal("no VmHWM in /proc status")
	return 0
}

// hostileMix is records made to cost the indexer the most memory per byte:
// label values repeated through the string table in thousands of label sets,
// deep stacks of 64 KiB names, 1.5 MB of junk, half a million samples, and
// thousands of odd label keys; then an ordinary corpus.
func hostileMix(t *testing.T, at time.Time) []*kgo.Record {
	t.Helper()
	var out []*kgo.Record
	add := func(n int, p *profile.Profile) {
		v, err := record.EncodeProfile(p)
		if err != nil {
			t.Fatal(err)
		}
		for i := range n {
			host := fmt.Sprint("hostile-", len(out), "-", i)
			out = append(out, &kgo.Record{Key: []byte(host), Value: v, Headers: record.Meta{Type: record.ProfileCPU, Host: host}.Headers()})
		}
	}
	add(20, indexertest.WideLabelSets(at))

	limits := record.DefaultLimits()
	name := strings.Repeat("f", limits.MaxStringBytes)
	fn := &profile.Function{ID: 1, Name: name}
	deep := &profile.Profile{SampleType: []*profile.ValueType{{Type: "samples", Unit: "count"}, {Type: "cpu", Unit: "nanoseconds"}},
		TimeNanos: at.UnixNano(), Function: []*profile.Function{fn}}
	for s := range 16 {
		var locs []*profile.Location
		for i := range limits.MaxLocationsPerSample {
			l := &profile.Location{ID: uint64(len(deep.Location) + 1), Line: []profile.Line{{Function: fn, Line: int64(s*limits.MaxLocationsPerSample + i)}}}
			deep.Location = append(deep.Location, l)
			locs = append(locs, l)
		}
		deep.Sample = append(deep.Sample, &profile.Sample{Location: locs, Value: []int64{1, 1}})
	}
	add(5, deep)

	many := pproftest.NewCPU(at, time.Second).Profile()
	for range 500_000 {
		many.Sample = append(many.Sample, &profile.Sample{Value: []int64{1, 1}})
	}
	add(10, many)

	for i := range 50 {
		b := pproftest.NewCPU(at.Add(time.Duration(i)*time.Second), time.Second)
		for j := range 40 {
			l := map[string]string{"comm": "odd", "a": "1", "a.b": "2"}
			for k := range 5 {
				l[fmt.Sprintf([...]string{"k%d", "k%d.sub", "k-%d", "%d", "a.b.%d"}[k], (i*40+j)*5+k)] = "v"
			}
			b.Sample(l, []int64{1, 2}, "f")
		}
		add(1, b.Profile())
	}

	junk := bytes.Repeat([]byte{0x1f, 0x8b, 0x08, 0x00, 'j', 'u', 'n', 'k'}, 1536<<10/8)
	for i := range 5 {
		out = append(out, &kgo.Record{Key: []byte(fmt.Sprint("junk-", i)), Value: junk, Headers: record.Meta{Type: record.ProfileCPU}.Headers()})
	}
	return out
}

// TestPeakRSSUnderHostileMix runs the real binary over a hostile mix of
// records on profiles.symbolized, then an ordinary corpus: it stays up,
// indexes the corpus exactly, and its peak RSS stays well under 1 GiB
// (docs/INDEXER.md states the bound).
func TestPeakRSSUnderHostileMix(t *testing.T) {
	brokers := testenv.KafkaBrokers(t)
	url := testenv.OpenSearchURL(t)
	e := indexertest.Setup(t, brokers, url, testenv.Name(t, "ix-"), 2)
	at := time.Now().UTC().Add(-time.Hour).Truncate(time.Second)
	big, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ProducerBatchMaxBytes(16<<20), kgo.DefaultProduceTopic(e.Topics.ProfilesSymbolized))
	if err != nil {
		t.Fatal(err)
	}
	defer big.Close()
	for _, r := range hostileMix(t, at) {
		if err := big.ProduceSync(context.Background(), r).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	recs, want, err := indexertest.Corpus{
		Seed: 3, Hosts: 4, ProfilesPerHost: 20, Start: at, Interval: 10 * time.Second,
		Stacks: 200, Depth: 20, Processes: 5, SamplesPerProf: 300, RawPerSample: 3,
	}.Build()
	if err != nil {
		t.Fatal(err)
	}
	e.Produce(t, recs)
	p := spawn(t, build(t), envFor(e)...)
	e.WaitCaughtUp(t, 5*time.Minute)
	// The corpus's stacks hold exactly its values (the hostile records that
	// were indexed, with their own stacks, are in the same indices).
	stored := e.ReadStored(t)
	for id, v := range want.Value {
		if stored.Value[id] != v {
			t.Fatalf("ordinary corpus after the hostile mix: stack %s holds %d, want %d", id, stored.Value[id], v)
		}
	}
	if p.cmd.ProcessState != nil {
		t.Fatalf("the indexer exited: %v", p.cmd.ProcessState)
	}
	rss := peakRSS(t, p.cmd.Process.Pid)
	t.Logf("peak RSS %d MiB", rss>>20)
	if rss > 768<<20 {
		t.Fatalf("peak RSS %d MiB, want under 768 MiB", rss>>20)
	}
}
