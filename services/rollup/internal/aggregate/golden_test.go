package aggregate

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/pprof/profile"

	"github.com/stackstream/stackstream/pkg/pproftest"
	"github.com/stackstream/stackstream/schemas/record"
)

// TestDocumentsGolden: the documents written for three corpora, stored as
// the consumer stores them (the last write of each _id), are byte for byte
// those in testdata/documents.golden, which the code of d4a80a3 wrote
// (before the rollup's CPU work of issue 15's second pass). It holds every
// change of how the documents are computed to what they were: per corpus
// and (kind, resolution), the count and a sha256 of the sorted _id and
// JSON lines. UPDATE_FIXTURES=true rewrites the file.
//
//   - loadgen corpus: the symbolized loadgen records (pkg/pproftest/symcorpus)
//     through the wire decoder, written every 7 records.
//   - fleet boundary: boundaryRun's 3 fleetGenerator hosts from 10:00 to
//     11:15 with late profiles of the ended (frozen) hour, written after
//     every interval.
//   - mixed frames: unsymbolized frames, kernel and Python frames, a
//     function named like an unsymbolized frame's tree name, recursion, a
//     negative stack, across an hour, with late profiles.
func TestDocumentsGolden(t *testing.T) {
	if testing.Short() {
		t.Skip("folds 2,300 profiles")
	}
	got := map[string]map[string]string{}

	// The loadgen corpus, through the wire decoder.
	cfg := testConfig()
	cfg.Now = time.Now
	cfg.MaxClockSkew = 24 * time.Hour
	cfg.Budget = &Budget{MaxBytes: math.MaxInt64}
	p := NewPartition(cfg, Checkpoint{})
	dec := NewDecoder(record.Limits{})
	store := map[string]string{}
	recs := corpusRecords(t)
	for i, r := range recs {
		in, err := dec.Decode(r.value)
		if err != nil {
			t.Fatal(err)
		}
		in.Type, in.Host, in.Offset, in.Fallback = r.typ, r.host, int64(i), r.ts
		if _, err := p.Add(in); err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
		if i%7 == 6 {
			storeDocs(t, p, store, false)
		}
	}
	storeDocs(t, p, store, true)
	got["loadgen corpus"] = store

	// The fleet across an hour boundary.
	cfg = testConfig()
	cfg.Retention = 10 * time.Minute
	cfg.Budget = &Budget{MaxBytes: math.MaxInt64}
	r := boundaryRun(t, cfg, 3, 6*75)
	store = map[string]string{}
	for id, d := range r.store {
		pd := Pending{ID: id, Doc: d}
		b, err := pd.AppendJSON(nil)
		if err != nil {
			t.Fatal(err)
		}
		store[id] = string(b)
	}
	got["fleet boundary"] = store

	// Mixed frames.
	cfg = testConfig()
	cfg.Budget = &Budget{MaxBytes: math.MaxInt64}
	p = NewPartition(cfg, Checkpoint{})
	store = map[string]string{}
	start := t0.Add(50 * time.Minute)
	for i := range 6 * 20 {
		at := start.Add(time.Duration(i) * 10 * time.Second)
		if _, err := p.Add(Input{Profile: mixedFrames(at, i), Type: record.ProfileCPU, Host: fmt.Sprintf("mixed-%d", i%3), Offset: int64(2 * i)}); err != nil {
			t.Fatalf("profile %d: %v", i, err)
		}
		if i%6 == 5 && i > 6*12 {
			// Late: a profile of the hour 10:00 after it was written.
			late := mixedFrames(at.Add(-9*time.Minute), i+1000)
			if _, err := p.Add(Input{Profile: late, Type: record.ProfileCPU, Host: "mixed-late", Offset: int64(2*i + 1)}); err != nil {
				t.Fatalf("late profile %d: %v", i, err)
			}
		}
		storeDocs(t, p, store, false)
	}
	storeDocs(t, p, store, true)
	got["mixed frames"] = store

	lines := goldenLines(got)
	path := filepath.Join("testdata", "documents.golden")
	if os.Getenv("UPDATE_FIXTURES") == "true" {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (UPDATE_FIXTURES=true writes it)", err)
	}
	var wantLines []string
	sc := bufio.NewScanner(strings.NewReader(string(want)))
	for sc.Scan() {
		wantLines = append(wantLines, sc.Text())
	}
	if !slices.Equal(lines, wantLines) {
		t.Fatalf("documents differ from %s:\ngot\n%s\nwant\n%s", path, strings.Join(lines, "\n"), strings.Join(wantLines, "\n"))
	}
}

// storeDocs writes p's pending documents into store (by _id, the last
// write wins, as in OpenSearch) and marks them stored, as the consumer
// does.
func storeDocs(t *testing.T, p *Partition, store map[string]string, all bool) {
	t.Helper()
	docs := p.Pending(all)
	for i := range docs {
		b, err := docs[i].AppendJSON(nil)
		if err != nil {
			t.Fatal(err)
		}
		store[docs[i].Index+"/"+docs[i].ID] = string(b)
	}
	MarkStored(docs)
	p.Evict()
	if o, cp, ok := p.Commit(); ok {
		p.Committed(o, cp)
	}
}

// goldenLines are, per corpus and (kind, resolution) in order, the count
// of documents and a sha256 of their sorted "_id JSON" lines.
func goldenLines(corpora map[string]map[string]string) []string {
	var out []string
	for _, name := range slices.Sorted(maps.Keys(corpora)) {
		groups := map[string][]string{}
		for id, doc := range corpora[name] {
			k := jsonField(doc, "kind") + " " + jsonField(doc, "resolution")
			groups[k] = append(groups[k], id+" "+doc)
		}
		for _, k := range slices.Sorted(maps.Keys(groups)) {
			g := groups[k]
			slices.Sort(g)
			h := sha256.New()
			for _, l := range g {
				h.Write([]byte(l))
				h.Write([]byte{'\n'})
			}
			out = append(out, fmt.Sprintf("%s | %s | %d | %s", name, k, len(g), hex.EncodeToString(h.Sum(nil))))
		}
	}
	return out
}

// jsonField is a string field of a document's JSON as AppendJSON writes
// it (plain names only: kinds and resolutions).
func jsonField(doc, name string) string {
	key := `"` + name + `":"`
	i := strings.Index(doc, key)
	if i < 0 {
		return ""
	}
	rest := doc[i+len(key):]
	return rest[:strings.IndexByte(rest, '"')]
}

// mixedFrames is a CPU profile whose stacks mix what trees and function
// documents treat apart: unsymbolized frames of two binaries, kernel and
// Python frames, a function named "[/bin/app]" (the tree name of an
// unsymbolized frame of /bin/app), recursion, and in one profile in five a
// negative stack.
func mixedFrames(at time.Time, seq int) *profile.Profile {
	b := pproftest.NewCPU(at, 10*time.Second)
	app := b.Mapping(0x400000, 0x800000, 0, "/bin/app", "b1")
	lib := b.Mapping(0x900000, 0xa00000, 0, "/lib/libc.so", "b2")
	kernel := &profile.Mapping{ID: 3, File: record.MappingKernel}
	python := &profile.Mapping{ID: 4, File: record.MappingPython}
	p := b.Profile()
	p.Mapping = append(p.Mapping, kernel, python)
	named := func(m *profile.Mapping, fn string) *profile.Location {
		return b.NamedLocation(m, 0, fn, "", 0)
	}
	l := svc("mixed")
	vary := int64(seq%7 + 1)
	b.AddressSample(l, []int64{vary, vary * 1000}, app, 0x401000, 0x402000, 0x403000)
	b.AddressSample(l, []int64{2, 2000}, lib, 0x901000, 0x902000+uint64(seq%3)*0x10)
	b.LocationSample(l, []int64{3, 3000}, named(kernel, "do_syscall_64"), named(kernel, "entry_SYSCALL_64"), b.AddressLocation(app, 0x404000))
	b.LocationSample(l, []int64{1, 1500}, named(python, "handler"), named(python, "<module>"), b.AddressLocation(app, 0x401000))
	b.Sample(svc("other"), []int64{4, 4000}, "[/bin/app]", "main")
	b.Sample(svc("other"), []int64{vary, 700 * vary}, "fib", "fib", "fib", "main")
	b.Sample(svc("other"), []int64{1, 100}, fmt.Sprintf("leaf%d", seq%11), "work", "main")
	if seq%5 == 0 {
		b.Sample(svc("other"), []int64{1, -50}, "negative", "main")
	}
	return p
}
