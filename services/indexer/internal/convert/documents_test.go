package convert

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/google/pprof/profile"

	"github.com/stackstream/stackstream/pkg/pproftest"
	"github.com/stackstream/stackstream/pkg/pprofx"
	"github.com/stackstream/stackstream/schemas/indices"
	"github.com/stackstream/stackstream/schemas/record"
)

var testNames = indices.Names{Prefix: "t-"}

func decodeSample(t *testing.T, s Sample) indices.SampleDoc {
	t.Helper()
	var d indices.SampleDoc
	if err := json.Unmarshal(s.Doc, &d); err != nil {
		t.Fatal(err)
	}
	return d
}

func TestConvertOneDocumentPerLabelSet(t *testing.T) {
	at := time.Date(2026, 11, 30, 23, 59, 58, 0, time.UTC)
	a := map[string]string{"pid": "1", "comm": "api", "executable": "/bin/api", "host": "ignored"}
	b := map[string]string{"pid": "2", "comm": "api", "executable": "/bin/api"}
	p := pproftest.NewCPU(at, 10*time.Second).
		Sample(a, []int64{2, 20}, "leaf", "main").
		Sample(a, []int64{3, 30}, "leaf", "main").
		Sample(b, []int64{1, 10}, "leaf", "main").
		Sample(a, []int64{4, 40}, "other", "main").
		Profile()
	docs, err := Convert(testNames, record.Meta{Type: record.ProfileCPU, Host: "web-1"}, "", p, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	if len(docs.Stacks) != 2 {
		t.Fatalf("%d stacks, want 2", len(docs.Stacks))
	}
	if len(docs.Samples) != 2 {
		t.Fatalf("%d sample docs, want 2 (one per pid)", len(docs.Samples))
	}
	leafMain := indices.StackID([]indices.Frame{{Function: "leaf"}, {Function: "main"}})
	otherMain := indices.StackID([]indices.Frame{{Function: "other"}, {Function: "main"}})
	first := decodeSample(t, docs.Samples[0])
	if first.Timestamp != at || first.Type != "cpu" || first.Host != "web-1" || first.Service != "api" ||
		first.Value != 90 || first.Count != 9 || len(first.Labels) != 3 || first.Labels["pid"] != "1" {
		t.Fatalf("pid 1 doc = %+v", first)
	}
	ids, values, err := first.Stacks()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int64{}
	for i, id := range ids {
		got[id] = values[i]
	}
	if len(got) != 2 || got[leafMain] != 50 || got[otherMain] != 40 {
		t.Fatalf("pid 1 stacks = %v, want leaf;main 50 and other;main 40", got)
	}
	if docs.Samples[0].Index != "t-samples-2026.11.30" || docs.Samples[0].Raw != 9 {
		t.Fatalf("index %s raw %d", docs.Samples[0].Index, docs.Samples[0].Raw)
	}
	// Deterministic: converting again gives the same IDs and documents.
	again, _ := Convert(testNames, record.Meta{Type: record.ProfileCPU, Host: "web-1"}, "", p, time.Time{})
	for i := range docs.Samples {
		if docs.Samples[i].ID != again.Samples[i].ID || string(docs.Samples[i].Doc) != string(again.Samples[i].Doc) {
			t.Fatal("sample documents differ between two conversions of one profile")
		}
	}
	if docs.Samples[0].ID == docs.Samples[1].ID {
		t.Fatal("different label sets share an ID")
	}
}

func TestConvertRejectsNegativeValues(t *testing.T) {
	p := pproftest.NewCPU(time.Now(), time.Second).Sample(nil, []int64{1, -5}, "f").Profile()
	if _, err := Convert(testNames, record.Meta{Type: record.ProfileCPU, Host: "h"}, "", p, time.Now()); err == nil {
		t.Fatal("a negative value was accepted")
	}
}

func TestConvertMemoryIsStackless(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	p := pproftest.NewMemory(at, time.Minute).
		Sample(map[string]string{"pid": "7", "systemd_unit": "db.service"}, []int64{4096}).
		Profile()
	docs, err := Convert(testNames, record.Meta{Type: record.ProfileMemory, Host: "h"}, "", p, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	if len(docs.Stacks) != 0 || len(docs.Samples) != 1 {
		t.Fatalf("got %d stacks, %d samples; want 0 and 1", len(docs.Stacks), len(docs.Samples))
	}
	d := decodeSample(t, docs.Samples[0])
	if len(d.StackIDs) != 0 || len(d.StackValues) != 0 || d.Value != 4096 || d.Count != 1 || d.Service != "db" || d.Type != "memory" {
		t.Fatalf("memory doc = %+v", d)
	}
}

func TestConvertUsesFallbackTime(t *testing.T) {
	p := pproftest.NewCPU(time.Unix(0, 0), time.Second).Sample(nil, []int64{1, 1}, "f").Profile()
	p.TimeNanos = 0
	fallback := time.Date(2025, 5, 6, 7, 8, 9, 0, time.UTC)
	docs, err := Convert(testNames, record.Meta{Type: record.ProfileCPU, Host: "h"}, "", p, fallback)
	if err != nil {
		t.Fatal(err)
	}
	if docs.Samples[0].Index != "t-samples-2025.05.06" {
		t.Fatalf("index %s, want the fallback day", docs.Samples[0].Index)
	}
}

func TestFrames(t *testing.T) {
	m := &profile.Mapping{ID: 1, File: "/usr/lib/libc.so.6"}
	inner := &profile.Function{ID: 1, Name: "inlined", Filename: "a.c"}
	outer := &profile.Function{ID: 2, Name: "caller", Filename: "b.c"}
	tests := []struct {
		name string
		s    *profile.Sample
		want []indices.Frame
	}{
		{"inlined frames innermost first", &profile.Sample{Location: []*profile.Location{
			{ID: 1, Mapping: m, Line: []profile.Line{{Function: inner, Line: 3}, {Function: outer, Line: 9}}},
		}}, []indices.Frame{{Function: "inlined", File: "a.c", Line: 3, Binary: "libc.so.6"}, {Function: "caller", File: "b.c", Line: 9, Binary: "libc.so.6"}}},
		{"unsymbolized keeps its address", &profile.Sample{Location: []*profile.Location{
			{ID: 2, Mapping: m, Address: 0xbeef},
		}}, []indices.Frame{{Function: "libc.so.6+0xbeef", Binary: "libc.so.6"}}},
		{"no locations", &profile.Sample{}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := pprofx.StackFrames(tt.s)
			if len(got) != len(tt.want) {
				t.Fatalf("got %+v, want %+v", got, tt.want)
			}
			for i := range got {
				if got[i] != tt.want[i] {
					t.Fatalf("frame %d = %+v, want %+v", i, got[i], tt.want[i])
				}
			}
		})
	}
}

func TestConvertRejectsBrokenProfiles(t *testing.T) {
	p := pproftest.NewCPU(time.Now(), time.Second).Sample(nil, []int64{1}, "f").Profile() // 1 value for 2 types
	if _, err := Convert(testNames, record.Meta{Type: record.ProfileCPU}, "", p, time.Now()); err == nil {
		t.Fatal("a sample with too few values was accepted")
	}
	if _, err := Convert(testNames, record.Meta{Type: record.ProfileCPU}, "", &profile.Profile{}, time.Now()); err == nil {
		t.Fatal("a profile without sample types was accepted")
	}
}

// FuzzConvert feeds record values through the decoder and the conversion: any
// input either fails with an error (and goes to the DLQ) or yields documents
// that are valid JSON.
func FuzzConvert(f *testing.F) {
	p := pproftest.NewCPU(time.Unix(1700000000, 0), time.Second).
		Sample(map[string]string{"pid": "1"}, []int64{1, 10}, "a", "b").Profile()
	v, _ := record.EncodeProfile(p)
	f.Add(v)
	f.Add([]byte{0x1f, 0x8b})
	f.Fuzz(func(t *testing.T, in []byte) {
		p, err := record.DecodeProfile(in)
		if err != nil {
			return
		}
		docs, err := Convert(testNames, record.Meta{Type: record.ProfileCPU, Host: "h"}, "", p, time.Unix(0, 0))
		if err != nil {
			return
		}
		for _, s := range docs.Samples {
			var d indices.SampleDoc
			if err := json.Unmarshal(s.Doc, &d); err != nil || s.ID == "" {
				t.Fatalf("invalid sample doc %q: %v", s.Doc, err)
			}
			if _, _, err := d.Stacks(); err != nil {
				t.Fatalf("sample doc %q: %v", s.Doc, err)
			}
		}
		for _, s := range docs.Stacks {
			doc, err := s.Doc()
			if err != nil || !json.Valid(doc) {
				t.Fatalf("invalid stack doc %q: %v", doc, err)
			}
		}
	})
}

// BenchmarkDecodeConvert is the CPU the indexer spends per profile of the
// benchmark corpora (8 CPUs, 10 s profiles): decode plus documents.
func BenchmarkDecodeConvert(b *testing.B) {
	for _, bc := range benchCorpora {
		b.Run(bc.name, func(b *testing.B) {
			recs := benchCorpus(b, bc.samples, bc.raw, bc.zipf, 20)
			b.ReportAllocs()
			docs := 0
			for i := 0; b.Loop(); i++ {
				r := recs[i%len(recs)]
				p, err := record.DecodeProfile(r.Val)
				if err != nil {
					b.Fatal(err)
				}
				d, err := Convert(testNames, r.Meta, "", p, r.Time)
				if err != nil {
					b.Fatal(err)
				}
				docs += len(d.Samples)
			}
			b.ReportMetric(float64(docs)/b.Elapsed().Seconds(), "docs/s")
		})
	}
}

func TestConvertHostFromLabelWhenHeaderEmpty(t *testing.T) {
	p := pproftest.NewCPU(time.Unix(1700000000, 0), time.Second).
		Sample(map[string]string{"host": "h9", "comm": "a", "container_id": ""}, []int64{1, 5}, "f").
		Sample(map[string]string{"host": "h8", "comm": "a"}, []int64{1, 7}, "f").
		Profile()
	docs, err := Convert(testNames, record.Meta{Type: record.ProfileCPU}, "", p, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	if len(docs.Samples) != 2 {
		t.Fatalf("%d docs, want one per host", len(docs.Samples))
	}
	d := decodeSample(t, docs.Samples[0])
	if d.Host != "h9" || d.Value != 5 || len(d.Labels) != 1 || d.Labels["comm"] != "a" {
		t.Fatalf("doc = %+v, want host h9 from the label and only comm left in labels", d)
	}
	if docs.Samples[0].ID == docs.Samples[1].ID {
		t.Fatal("two hosts share a sample ID")
	}
}

// TestFramesMatchPprofx guards the contract with the rollup service, which
// extracts stacks with pkg/pprofx: one stack must hash to one StackID in the
// stacks index and in the rollups.

// TestJSONPlain: the 8-bytes-at-a-time test agrees with the byte-by-byte
// rule for every byte value at every place of strings of several lengths,
// and next to bytes that borrow.
func TestJSONPlain(t *testing.T) {
	plainByte := func(c byte) bool { return c >= 0x20 && c != '"' && c != '\\' && c < 0x80 }
	for _, n := range []int{1, 7, 8, 9, 16, 17, 24} {
		for _, fill := range []byte{'a', 0x20, 0x21, 0x7f, '0'} {
			for at := range n {
				for c := range 256 {
					b := bytes.Repeat([]byte{fill}, n)
					b[at] = byte(c)
					want := plainByte(byte(c)) && plainByte(fill)
					if got := jsonPlain(string(b)); got != want {
						t.Fatalf("jsonPlain(%q) = %v, want %v", b, got, want)
					}
				}
			}
		}
	}
	if !jsonPlain("") || !jsonPlain("AbCdEfGh-_0123456789") {
		t.Fatal("plain strings not plain")
	}
}

// oddLabels has a label of every kind the label rules change: keys outside
// the pattern, a value too long, more labels than MaxLabelsPerSample, a
// service too long, next to contract and other labels that pass.
func oddLabels() map[string]string {
	l := map[string]string{
		"pid": "42", "comm": "api", "zone": "eu-1",
		"a.b": "dot", "a-b": "dash", "9lives": "digit", "": "empty key", "x y": "space",
		"note":    strings.Repeat("ü", record.MaxLabelValueBytes), // 1,024 bytes
		"service": strings.Repeat("s", record.MaxServiceBytes+10),
	}
	for i := range MaxLabelsPerSample {
		l[fmt.Sprintf("extra_%02d", i)] = "v"
	}
	return l
}

func TestLabelRules(t *testing.T) {
	at := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	p := pproftest.NewCPU(at, time.Second).Sample(oddLabels(), []int64{1, 5}, "f").Profile()
	docs, err := Convert(testNames, record.Meta{Type: record.ProfileCPU, Host: "h"}, "", p, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	d := decodeSample(t, docs.Samples[0])
	if len(d.Labels) != 2 || d.Labels["pid"] != "42" || d.Labels["comm"] != "api" {
		t.Fatalf("labels = %v, want the contract labels pid and comm only", d.Labels)
	}
	if len(d.Service) != record.MaxServiceBytes {
		t.Fatalf("service of %d bytes, want it cut to %d", len(d.Service), record.MaxServiceBytes)
	}
	// 64 labels: pid and comm, then 62 others in key order: extra_00 to
	// extra_61 ("extra_" sorts before "note" and "zone").
	if len(d.LabelPairs) != MaxLabelsPerSample-2 || len(d.LabelNames) != len(d.LabelPairs) ||
		d.LabelPairs[0] != "extra_00=v" || d.LabelNames[61] != "extra_61" {
		t.Fatalf("%d label pairs (%q...), want %d from extra_00", len(d.LabelPairs), d.LabelPairs[:min(3, len(d.LabelPairs))], MaxLabelsPerSample-2)
	}
	want := LabelDrops{InvalidKey: 5, TooMany: 4, ServiceTruncated: 1} // a.b, a-b, 9lives, "", "x y"; note, zone, extra_62, extra_63
	if docs.Labels != want {
		t.Fatalf("drops %+v, want %+v", docs.Labels, want)
	}

	// Fewer others: the long value is kept, cut on a UTF-8 boundary.
	l := map[string]string{"note": strings.Repeat("ü", record.MaxLabelValueBytes), "k8s_pod": "p"}
	p = pproftest.NewCPU(at, time.Second).Sample(l, []int64{1, 5}, "f").Profile()
	if docs, err = Convert(testNames, record.Meta{Type: record.ProfileCPU, Host: "h"}, "", p, time.Time{}); err != nil {
		t.Fatal(err)
	}
	d = decodeSample(t, docs.Samples[0])
	if len(d.LabelPairs) != 1 || d.LabelPairs[0] != "note="+strings.Repeat("ü", record.MaxLabelValueBytes/2) ||
		docs.Labels != (LabelDrops{ValueTruncated: 1}) || d.Labels["k8s_pod"] != "p" {
		t.Fatalf("doc %+v, drops %+v: want note cut to %d bytes", d, docs.Labels, record.MaxLabelValueBytes)
	}
}

func TestHostTooLongIsAnError(t *testing.T) {
	p := pproftest.NewCPU(time.Unix(1700000000, 0), time.Second).
		Sample(map[string]string{"host": strings.Repeat("h", record.MaxHostBytes+1)}, []int64{1, 5}, "f").Profile()
	if _, err := Convert(testNames, record.Meta{Type: record.ProfileCPU}, "", p, time.Time{}); !errors.Is(err, ErrHostTooLong) {
		t.Fatalf("Convert = %v, want ErrHostTooLong", err)
	}
}

// TestPartsHaveTheirOwnIDs: the parts of a split profile share host, type,
// time and label sets; their documents must not overwrite each other, and a
// record that was not split keeps the ID it always had.
func TestPartsHaveTheirOwnIDs(t *testing.T) {
	at := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	v := encode(t, pproftest.NewCPU(at, time.Second).Sample(map[string]string{"pid": "1", "comm": "a"}, []int64{1, 5}, "f").Profile())
	meta := record.Meta{Type: record.ProfileCPU, Host: "h"}
	ids := map[string]string{}
	for _, part := range []string{"", "0", "1"} {
		slow, err := decodeConvert(testLimits, testNames, meta, part, v, time.Time{})
		if err != nil {
			t.Fatal(err)
		}
		fast, ok := testFast.convert(testNames, meta, part, v, time.Time{}, nil)
		if !ok || !reflect.DeepEqual(fast, slow) {
			t.Fatalf("part %q: fast path ok=%v, documents differ", part, ok)
		}
		ids[part] = slow.Samples[0].ID
	}
	if ids["0"] == ids["1"] || ids["0"] == ids[""] {
		t.Fatalf("IDs %v: parts share an ID", ids)
	}
	if want := indices.SampleID("h", "cpu", at, map[string]string{"pid": "1", "comm": "a", "service": "a"}); ids[""] != want {
		t.Fatalf("unsplit ID %s, want %s as before parts existed", ids[""], want)
	}
}

// TestSampleDocIsJSON: appendSampleDoc's bytes decode to the document they
// encode, label fields included.
func TestSampleDocIsJSON(t *testing.T) {
	d := indices.SampleDoc{Timestamp: time.Date(2026, 11, 30, 1, 2, 3, 4, time.UTC), Type: "cpu", Host: "h\"", Service: "s\\", Value: 7, Count: 2}
	d.SetLabels(map[string]string{"pid": "1", "comm": "ä", "zone": "a\x00b", "rack": "r=1"})
	if err := d.SetStacks([]string{"a", "b"}, []int64{3, 4}); err != nil {
		t.Fatal(err)
	}
	b := appendSampleDoc(nil, &d, appendLabelFields(nil, &d))
	var got indices.SampleDoc
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	if !reflect.DeepEqual(got, d) {
		t.Fatalf("decoded %+v, want %+v", got, d)
	}
}

// TestDocumentBudget: label values reach the string table by index, so a
// record of a few hundred KB could name the same 500-byte values in every
// one of thousands of label sets; its documents are refused as too large
// past docBudget, before they are all built.
func TestDocumentBudget(t *testing.T) {
	tc := namedCase(t, "documents over the budget")
	_, err := decodeConvert(testLimits, testNames, tc.meta, "", tc.value, tc.fallback)
	if !errors.Is(err, record.ErrTooLarge) {
		t.Fatalf("decodeConvert of %d bytes = %v, want ErrTooLarge", len(tc.value), err)
	}
}

// TestConvertStoresFrameKinds: frames on the agent's pseudo-files carry
// their kind, native frames none, and every stack document lists its kinds.
func TestConvertStoresFrameKinds(t *testing.T) {
	at := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	docs, err := Convert(testNames, record.Meta{Type: record.ProfileCPU, Host: "h"}, "", mixedKinds(at), at)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string][]string{}
	for _, st := range docs.Stacks {
		var frames []string
		for _, f := range st.Frames {
			frames = append(frames, f.Function+"="+f.Kind)
		}
		raw, err := st.Doc()
		if err != nil {
			t.Fatal(err)
		}
		var doc indices.StackDoc
		if err := json.Unmarshal(raw, &doc); err != nil {
			t.Fatal(err)
		}
		got[strings.Join(frames, " ")] = doc.Kinds
	}
	want := map[string][]string{
		"do_syscall_64=kernel Handler.serve=python _PyEval_EvalFrameDefault= main=": {"kernel", "native", "python"},
		"Handler.serve=python main=":                                       {"native", "python"},
		"LazyCompile:*loop=jit (anonymous)=js com.example.Cart.total=java": {"java", "jit", "js"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("stacks and their kinds:\n got %q\nwant %q", got, want)
	}
}
