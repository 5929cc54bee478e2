package convert

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/pprof/profile"

	"github.com/stackstream/stackstream/pkg/pproftest"
	"github.com/stackstream/stackstream/schemas/record"
	"github.com/stackstream/stackstream/services/ingest/internal/pyroscope"
)

var now = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

func opts() Options {
	// Any past time: the service fixture keeps the time it was recorded.
	return Options{Limits: record.DefaultLimits(), MaxClockSkew: 10 * time.Minute, MaxRecordBytes: 1 << 20, Now: time.Now}
}

// summary is what a record says, in a comparable form.
func summary(t *testing.T, r Record) []string {
	t.Helper()
	p, err := record.DecodeProfile(r.Value)
	if err != nil {
		t.Fatalf("record does not decode: %v", err)
	}
	var out []string
	for _, s := range p.Sample {
		var frames []string
		for _, loc := range s.Location {
			for _, ln := range loc.Line {
				frames = append(frames, ln.Function.Name)
			}
			if loc.Mapping != nil {
				frames = append(frames, fmt.Sprintf("[%s %v]", loc.Mapping.File, loc.Mapping.HasFunctions))
			}
		}
		var labels []string
		for k, v := range s.Label {
			labels = append(labels, k+"="+strings.Join(v, "|"))
		}
		sort.Strings(labels)
		out = append(out, fmt.Sprint(s.Value, frames, labels))
	}
	sort.Strings(out)
	return append(out, fmt.Sprint(r.Type, p.TimeNanos, p.DurationNanos))
}

// TestWireMatchesParsed: the rewrite of the encoded profile gives the same
// records as the parsed path, for real SDK profiles and built ones.
func TestWireMatchesParsed(t *testing.T) {
	service, err := os.ReadFile("../../testdata/sdk/service-cpu.pprof")
	if err != nil {
		t.Fatal(err)
	}
	built := pproftest.NewCPU(now.Add(-time.Minute), 10*time.Second).
		Sample(map[string]string{"span": "7", "tenant": "spoofed", "env": "sample"}, []int64{1, 10}, "leaf", "root").
		Sample(nil, []int64{2, 20}, "other", "root").Profile()
	m := &profile.Mapping{ID: 1, Start: 0x1000, Limit: 0x2000, File: "/bin/app", BuildID: "ab"}
	m2 := &profile.Mapping{ID: 2, Start: 0x3000, Limit: 0x4000, File: "/lib/libc.so", BuildID: "cd"}
	built.Mapping = []*profile.Mapping{m, m2}
	for _, loc := range built.Location {
		loc.Mapping = m
	}
	// An unnamed frame on libc: its mapping must stay unmarked.
	built.Location = append(built.Location, &profile.Location{ID: 99, Mapping: m2, Address: 0x3010})
	built.Sample[1].Location = append(built.Sample[1].Location, built.Location[len(built.Location)-1])
	built.TimeNanos = 0
	var b bytes.Buffer
	built.Write(&b)

	for name, data := range map[string][]byte{"service-cpu": service, "built": b.Bytes()} {
		t.Run(name, func(t *testing.T) {
			push := Push{Service: "svc", Tenant: "team", Tags: []pyroscope.Tag{{Key: "env", Value: "prod"}, {Key: "__session_id__", Value: "s1"}, {Key: "hostname", Value: "h"}},
				From: now.Add(-10 * time.Second), Until: now}
			fast, err := Pprof(data, push, opts())
			if err != nil {
				t.Fatal(err)
			}
			p, err := DecodePprof(data, record.DefaultLimits())
			if err != nil {
				t.Fatal(err)
			}
			push.Profile = p
			slow, err := Records(push, opts())
			if err != nil {
				t.Fatal(err)
			}
			if len(fast) != len(slow) {
				t.Fatalf("%d records, parsed path %d", len(fast), len(slow))
			}
			for i := range fast {
				f, s := summary(t, fast[i]), summary(t, slow[i])
				if !reflect.DeepEqual(f, s) {
					for j := range min(len(f), len(s)) {
						if f[j] != s[j] {
							t.Fatalf("record %d differs:\nrewrite %s\nparsed  %s", i, f[j], s[j])
						}
					}
					t.Fatalf("record %d: %d lines, parsed %d", i, len(f), len(s))
				}
			}
			if name == "built" {
				got := summary(t, fast[0])
				want := "[1 10] [leaf [/bin/app true] root [/bin/app true]] [env=prod service=svc session_id=s1 span=7 tenant=team]"
				if !strings.Contains(strings.Join(got, "\n"), want) {
					t.Fatalf("built record:\n%s\nwant a line %s", strings.Join(got, "\n"), want)
				}
				if !strings.Contains(strings.Join(got, "\n"), "[/lib/libc.so false]") {
					t.Fatalf("libc mapping marked: %s", got)
				}
				if !strings.HasSuffix(got[len(got)-1], fmt.Sprint(now.Add(-10*time.Second).UnixNano(), " ", int64(10*time.Second))) {
					t.Fatalf("time: %s", got[len(got)-1])
				}
			}
		})
	}
}

func TestWireRefusesBrokenReferences(t *testing.T) {
	p := pproftest.NewCPU(now, time.Second).Sample(nil, []int64{1, 2}, "f").Profile()
	p.Sample[0].Location = []*profile.Location{{ID: 42}} // not in p.Location
	var b bytes.Buffer
	p.Write(&b)
	_, err := Pprof(b.Bytes(), Push{Service: "s"}, opts())
	if !errors.Is(err, record.ErrInvalidProfile) {
		t.Fatalf("err = %v, want ErrInvalidProfile", err)
	}
}

func TestClassify(t *testing.T) {
	vt := func(pairs ...string) []*profile.ValueType {
		var out []*profile.ValueType
		for i := 0; i < len(pairs); i += 2 {
			out = append(out, &profile.ValueType{Type: pairs[i], Unit: pairs[i+1]})
		}
		return out
	}
	tests := []struct {
		name  string
		types []*profile.ValueType
		hint  string
		want  []record.ProfileType
		err   string
	}{
		{"go cpu", vt("samples", "count", "cpu", "nanoseconds"), "", []record.ProfileType{record.ProfileCPU}, ""},
		{"go heap", vt("alloc_objects", "count", "alloc_space", "bytes", "inuse_objects", "count", "inuse_space", "bytes"), "", []record.ProfileType{record.ProfileHeap, record.ProfileAlloc}, ""},
		{"inuse only", vt("inuse_space", "bytes"), "inuse_space", []record.ProfileType{record.ProfileHeap}, ""},
		{"counts of a .cpu", vt("samples", "count"), "cpu", []record.ProfileType{record.ProfileCPU}, ""},
		{"counts of a .goroutines", vt("samples", "count"), "goroutines", nil, "samples/count"},
		{"wall", vt("wall", "nanoseconds"), "wall", nil, "wall/nanoseconds"},
		{"mutex", vt("contentions", "count", "delay", "nanoseconds"), "", nil, "contentions/count, delay/nanoseconds"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := &profile.Profile{SampleType: tt.types, Sample: []*profile.Sample{{Value: make([]int64, len(tt.types))}}}
			got, err := Classify(p, tt.hint, 0)
			if tt.err != "" {
				if !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("err = %v, want %q", err, tt.err)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("Classify = %v, %v; want %v", got, err, tt.want)
			}
		})
	}
	// Counts completed with nanoseconds at the sample rate.
	p := &profile.Profile{SampleType: []*profile.ValueType{{Type: "samples", Unit: "count"}}, Sample: []*profile.Sample{{Value: []int64{3}}}}
	Classify(p, "cpu", 50)
	if len(p.SampleType) != 2 || p.Sample[0].Value[1] != 3*2e7 {
		t.Fatalf("completed: %v %v", p.SampleType, p.Sample[0].Value)
	}
}

func TestTags(t *testing.T) {
	labels, host, err := Tags([]pyroscope.Tag{{Key: "__session_id__", Value: "s"}, {Key: "__name__", Value: "x"}, {Key: "otel.scope.name", Value: "go"}, {Key: "hostname", Value: "h1"},
		{Key: "service", Value: "spoof"}, {Key: "tenant", Value: "spoof"}, {Key: "pod-name", Value: strings.Repeat("é", 300)}})
	if err != nil || host != "h1" {
		t.Fatal(err, host)
	}
	want := map[string]string{"session_id": "s", "otel_scope_name": "go", "pod_name": strings.Repeat("é", 256)}
	if !reflect.DeepEqual(labels, want) {
		t.Fatalf("labels = %v", labels)
	}
	if _, _, err := Tags([]pyroscope.Tag{{Key: "1x", Value: "v"}}); !errors.Is(err, ErrInvalidTag) {
		t.Fatalf("err = %v", err)
	}
}

// TestLegacyFormat: a legacy text profile (here Go's old heap format) takes
// the parsed path and becomes heap and alloc records.
func TestLegacyFormat(t *testing.T) {
	legacy := "heap profile: 1: 2048 [3: 4096] @ heap/1048576\n1: 2048 [3: 4096] @ 0x401000 0x402000\n"
	recs, err := Pprof([]byte(legacy), Push{Service: "old", From: time.Now().Add(-time.Minute)}, opts())
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 2 || recs[0].Type != record.ProfileHeap || recs[1].Type != record.ProfileAlloc {
		t.Fatalf("records = %+v", recs)
	}
	p, err := record.DecodeProfile(recs[0].Value)
	if err != nil || len(p.Sample) != 1 || p.Sample[0].Label["service"][0] != "old" {
		t.Fatalf("decoded %v, %v", p, err)
	}
}

// TestWireRefusesBadStringIndex: a function name past the string table is
// refused, as the consumers' pprof decoder would refuse it.
func TestWireRefusesBadStringIndex(t *testing.T) {
	p := pproftest.NewCPU(now, time.Second).Sample(nil, []int64{1, 2}, "f").Profile()
	m := &profile.Mapping{ID: 1, File: "/bin/x"}
	p.Mapping = []*profile.Mapping{m}
	p.Location[0].Mapping = m
	var b bytes.Buffer
	p.WriteUncompressed(&b)
	raw := b.Bytes()
	// The function's name index is its second field: 0x10 then the index.
	fn := bytes.Index(raw, []byte{0x2a}) // field 5 (function), bytes
	if fn < 0 || raw[fn+2] != 0x08 || raw[fn+4] != 0x10 {
		t.Fatalf("unexpected encoding around %d: %x", fn, raw[fn:fn+8])
	}
	raw[fn+5] = 0x7f // string 127, the table holds far fewer
	keep := func(t, d int64) (int64, int64, error) { return t, d, nil }
	if _, _, err := rewriteWire(raw, map[string]string{"service": "s"}, keep); !errors.Is(err, record.ErrNotPprof) || !strings.Contains(err.Error(), "names string 127") {
		t.Fatalf("rewrite err = %v, want ErrNotPprof naming string 127", err)
	}
	if _, err := Pprof(raw, Push{Service: "s"}, opts()); !errors.Is(err, record.ErrNotPprof) {
		t.Fatalf("err = %v, want ErrNotPprof", err)
	}
}
