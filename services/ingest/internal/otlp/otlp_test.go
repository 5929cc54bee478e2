package otlp_test

import (
	"bytes"
	"errors"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/google/pprof/profile"
	"go.opentelemetry.io/collector/pdata/pprofile"
	"go.opentelemetry.io/collector/pdata/pprofile/pprofileotlp"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/stackstream/stackstream/schemas/record"
	"github.com/stackstream/stackstream/services/ingest/internal/convert"
	"github.com/stackstream/stackstream/services/ingest/internal/ingesttest"
	"github.com/stackstream/stackstream/services/ingest/internal/otlp"
)

func marshal(t testing.TB, pd pprofile.Profiles) []byte {
	b, err := pprofileotlp.NewExportRequestFromProfiles(pd).MarshalProto()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func decode(t testing.TB, raw []byte) pprofile.Profiles {
	req := pprofileotlp.NewExportRequest()
	if err := req.UnmarshalProto(raw); err != nil {
		t.Fatal(err)
	}
	return req.Profiles()
}

func TestConvert(t *testing.T) {
	now := time.Now()
	raw := marshal(t, ingesttest.EBPFProfilerRequest(now))
	if err := otlp.Check(raw, otlp.DefaultLimits()); err != nil {
		t.Fatal(err)
	}
	profs, rejected, err := otlp.Convert(decode(t, raw))
	if err != nil {
		t.Fatal(err)
	}
	if len(profs) != 2 || len(rejected) != 0 {
		t.Fatalf("%d profiles, rejected %+v", len(profs), rejected)
	}
	off := parse(t, profs[1].Pprof)
	if types, err := convert.Classify(off, "", 0); err != nil || types[0] != record.ProfileOffCPU || off.Sample[0].Value[1] != 1500000 || off.Sample[0].Value[0] != 1 {
		t.Errorf("off-CPU profile: %v %v, values %v", types, err, off.Sample[0].Value)
	}
	p := profs[0]
	if p.Host != ingesttest.OTLPHost || p.Agent != ingesttest.OTLPScope {
		t.Errorf("host %q agent %q", p.Host, p.Agent)
	}
	prof := parse(t, p.Pprof)
	types, err := convert.Classify(prof, "", 0)
	if err != nil || len(types) != 1 || types[0] != record.ProfileCPU {
		t.Fatalf("classify: %v %v", types, err)
	}
	if got := len(prof.Sample); got != 3 {
		t.Fatalf("%d samples", got)
	}
}

func TestClassify(t *testing.T) {
	now := time.Now()
	for _, c := range []struct {
		typ, unit string
		want      string // first sample type, or the error's text
	}{
		{"cpu", "nanoseconds", "cpu"},
		{"cpu", "milliseconds", "cpu"},
		{"inuse_space", "bytes", "inuse_space"},
		{"allocated_space", "bytes", "alloc_space"},
		{"off_cpu", "nanoseconds", "samples"},
		{"events", "nanoseconds", "samples"},
		{"wall", "nanoseconds", "stackstream stores cpu"},
		{"inuse_objects", "count", "stackstream stores cpu"},
	} {
		t.Run(c.typ+"/"+c.unit, func(t *testing.T) {
			b := ingesttest.NewOTLPBuilder()
			p := b.Profile(nil, c.typ, c.unit, now)
			b.Sample(p, b.Stack(b.Frame("native", "", "", 0, b.Mapping("a", "", 0, 10, 0), 1)), nil, []int64{7}, 0, now)
			profs, rejected, err := otlp.Convert(b.PD)
			switch {
			case err != nil:
				t.Fatal(err)
			case len(rejected) == 1:
				if !strings.Contains(rejected[0].Err.Error(), c.want) {
					t.Errorf("rejected: %v, want %q", rejected[0].Err, c.want)
				}
			case parse(t, profs[0].Pprof).SampleType[0].Type != c.want:
				t.Errorf("sample types %v, want %s", parse(t, profs[0].Pprof).SampleType, c.want)
			case c.unit == "milliseconds" && parse(t, profs[0].Pprof).Sample[0].Value[0] != 7e6:
				t.Errorf("7 ms became %d ns", parse(t, profs[0].Pprof).Sample[0].Value[0])
			}
		})
	}
}

// TestBrokenReferences: every table reference out of range is ErrInvalid,
// never a panic.
func TestBrokenReferences(t *testing.T) {
	now := time.Now()
	for name, edit := range map[string]func(pprofile.Profiles){
		"stack":    func(pd pprofile.Profiles) { sample(pd).SetStackIndex(1000) },
		"location": func(pd pprofile.Profiles) { pd.Dictionary().StackTable().At(1).LocationIndices().Append(-3) },
		"function": func(pd pprofile.Profiles) { pd.Dictionary().LocationTable().At(1).Lines().At(0).SetFunctionIndex(77) },
		"string":   func(pd pprofile.Profiles) { pd.Dictionary().FunctionTable().At(1).SetNameStrindex(5000) },
		"mapping":  func(pd pprofile.Profiles) { pd.Dictionary().LocationTable().At(3).SetMappingIndex(40) },
		"attr":     func(pd pprofile.Profiles) { sample(pd).AttributeIndices().Append(9999) },
	} {
		t.Run(name, func(t *testing.T) {
			pd := ingesttest.EBPFProfilerRequest(now)
			edit(pd)
			// Through the wire, as a client sends it.
			_, _, err := otlp.Convert(decode(t, marshal(t, pd)))
			if !errors.Is(err, otlp.ErrInvalid) {
				t.Fatalf("err %v, want ErrInvalid", err)
			}
		})
	}
}

// parse decodes a converted profile as pprof does and checks it.
func parse(t testing.TB, raw []byte) *profile.Profile {
	t.Helper()
	p, err := profile.ParseUncompressed(raw)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.CheckValid(); err != nil {
		t.Fatal(err)
	}
	return p
}

func sample(pd pprofile.Profiles) pprofile.Sample {
	return pd.ResourceProfiles().At(0).ScopeProfiles().At(0).Profiles().At(0).Samples().At(0)
}

// TestCheckLimits: each count over its limit is refused before decoding.
func TestCheckLimits(t *testing.T) {
	raw := marshal(t, ingesttest.EBPFProfilerRequest(time.Now()))
	for name, edit := range map[string]func(*otlp.Limits){
		"samples":   func(l *otlp.Limits) { l.MaxSamples = 3 },
		"locations": func(l *otlp.Limits) { l.MaxLocations = 5 },
		"strings":   func(l *otlp.Limits) { l.MaxStrings = 10 },
		"profiles":  func(l *otlp.Limits) { l.MaxProfiles = 3 },
		"string":    func(l *otlp.Limits) { l.MaxStringBytes = 10 },
		"heap":      func(l *otlp.Limits) { l.MaxDecodeHeapBytes = 1000 },
	} {
		t.Run(name, func(t *testing.T) {
			l := otlp.DefaultLimits()
			edit(&l)
			if err := otlp.Check(raw, l); !errors.Is(err, record.ErrTooLarge) {
				t.Fatalf("err %v, want ErrTooLarge", err)
			}
		})
	}
	// Attribute values nested deeper than MaxValueDepth.
	b := ingesttest.NewOTLPBuilder()
	b.Profile(nil, "cpu", "nanoseconds", time.Now())
	v := b.PD.ResourceProfiles().At(0).Resource().Attributes().PutEmptySlice("deep")
	for range 20 {
		v = v.AppendEmpty().SetEmptySlice()
	}
	if err := otlp.Check(marshal(t, b.PD), otlp.DefaultLimits()); !errors.Is(err, record.ErrTooLarge) {
		t.Fatalf("deep value: %v", err)
	}
}

// TestHeapEstimate: requests of many empty elements of each kind, the
// worst case per byte, decode within what Check estimates.
func TestHeapEstimate(t *testing.T) {
	l := otlp.DefaultLimits()
	l.MaxDecodeHeapBytes = 1 << 40
	for name, part := range map[string][]byte{
		// a profile of empty samples
		"samples": msg(1, msg(2, msg(2, repeat(2, 200000)))),
		// a dictionary of empty locations, stacks, attributes
		"locations":  msg(2, repeat(2, 200000)),
		"stacks":     msg(2, repeat(7, 200000)),
		"attributes": msg(2, repeat(6, 200000)),
		"strings":    msg(2, repeat(5, 200000)),
		"lines":      msg(2, msg(2, repeat(3, 200000))),
	} {
		t.Run(name, func(t *testing.T) {
			l2 := l
			l2.MaxDecodeHeapBytes = int64(len(part)) * 1000
			if err := otlp.Check(part, l2); err != nil {
				t.Fatal(err)
			}
			// The estimate: find the smallest heap bound Check accepts.
			lo, hi := int64(0), l2.MaxDecodeHeapBytes
			for lo < hi {
				mid := (lo + hi) / 2
				l2.MaxDecodeHeapBytes = mid
				if otlp.Check(part, l2) == nil {
					hi = mid
				} else {
					lo = mid + 1
				}
			}
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			req := pprofileotlp.NewExportRequest()
			if err := req.UnmarshalProto(part); err != nil {
				t.Fatal(err)
			}
			runtime.ReadMemStats(&after)
			used := int64(after.TotalAlloc - before.TotalAlloc)
			t.Logf("%s: %d bytes on the wire: decoded with %d bytes, estimated %d", name, len(part), used, lo)
			if used > lo {
				t.Errorf("decode allocated %d bytes, more than the estimate %d", used, lo)
			}
		})
	}
}

func msg(num protowire.Number, body []byte) []byte {
	b := protowire.AppendTag(nil, num, protowire.BytesType)
	return protowire.AppendBytes(b, body)
}

func repeat(num protowire.Number, n int) []byte {
	one := msg(num, nil)
	return bytes.Repeat(one, n)
}

// TestSharedAttributeOnce: an attribute with a large array value referred
// to by many samples, each with an attribute of its own (so no two share a
// label set), is written out once, not once per sample: the conversion's
// allocations stay a small multiple of the request, not samples x value.
func TestSharedAttributeOnce(t *testing.T) {
	now := time.Now()
	b := ingesttest.NewOTLPBuilder()
	p := b.Profile(map[string]string{"service.name": "s"}, "cpu", "nanoseconds", now)
	big := b.Attr("big", "")
	arr := b.PD.Dictionary().AttributeTable().At(int(big)).Value().SetEmptySlice()
	for i := range 10000 {
		arr.AppendEmpty().SetInt(int64(i) * 1000003)
	}
	stack := b.Stack(b.Frame("cpython", "f", "f.py", 1, 0, 1))
	for i := range 20000 {
		b.Sample(p, stack, []int32{big, b.Attr("n", int64(i))}, []int64{1}, 0, now)
	}
	raw := marshal(t, b.PD)
	pd := decode(t, raw)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	profs, _, err := otlp.Convert(pd)
	runtime.ReadMemStats(&after)
	if err != nil || len(profs) != 1 {
		t.Fatalf("%v, %d profiles", err, len(profs))
	}
	used := after.TotalAlloc - before.TotalAlloc
	t.Logf("request %d bytes, conversion allocated %d bytes", len(raw), used)
	if used > 200<<20 {
		t.Errorf("conversion allocated %d MB for a %d KB request: the shared attribute is written out per sample", used>>20, len(raw)>>10)
	}
}
