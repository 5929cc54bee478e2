package ingesttest

import (
	"time"

	"github.com/google/pprof/profile"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pprofile"
)

// OTLP request built with the official pdata library, shaped as the
// OpenTelemetry eBPF profiler sends its profiles: one shared dictionary,
// a resource per container, samples/count with a cpu/nanoseconds period,
// frames typed by profile.frame.type, interpreted ones named with a
// placeholder mapping, native ones on a mapping with build IDs.
const (
	OTLPHost     = "otel-host-1"
	OTLPService  = "checkout"
	OTLPBuildID  = "4f1c2b3a9d8e7f60"
	OTLPPeriodNs = int64(50e6) // 20 Hz
	OTLPScope    = "go.opentelemetry.io/ebpf-profiler"
)

// OTLPBuilder appends to one request's dictionary.
type OTLPBuilder struct {
	PD   pprofile.Profiles
	dic  pprofile.ProfilesDictionary
	strs map[string]int32
}

// NewOTLPBuilder starts a request whose tables hold their zero entries.
func NewOTLPBuilder() *OTLPBuilder {
	b := &OTLPBuilder{PD: pprofile.NewProfiles(), strs: map[string]int32{}}
	b.dic = b.PD.Dictionary()
	b.Str("")
	b.dic.MappingTable().AppendEmpty()
	b.dic.LocationTable().AppendEmpty()
	b.dic.FunctionTable().AppendEmpty()
	b.dic.LinkTable().AppendEmpty()
	b.dic.AttributeTable().AppendEmpty()
	b.dic.StackTable().AppendEmpty()
	return b
}

// Str is the index of s in the string table.
func (b *OTLPBuilder) Str(s string) int32 {
	if i, ok := b.strs[s]; ok {
		return i
	}
	i := int32(b.dic.StringTable().Len())
	b.dic.StringTable().Append(s)
	b.strs[s] = i
	return i
}

// Attr is the index of a new attribute table entry k=v (a string or int64).
func (b *OTLPBuilder) Attr(k string, v any) int32 {
	kv := b.dic.AttributeTable().AppendEmpty()
	kv.SetKeyStrindex(b.Str(k))
	switch x := v.(type) {
	case string:
		kv.Value().SetStr(x)
	case int64:
		kv.Value().SetInt(x)
	}
	return int32(b.dic.AttributeTable().Len() - 1)
}

// Mapping is a native mapping of file with a GNU build ID ("" for none).
func (b *OTLPBuilder) Mapping(file, buildID string, start, limit, offset uint64) int32 {
	m := b.dic.MappingTable().AppendEmpty()
	m.SetFilenameStrindex(b.Str(file))
	m.SetMemoryStart(start)
	m.SetMemoryLimit(limit)
	m.SetFileOffset(offset)
	if buildID != "" {
		m.AttributeIndices().Append(b.Attr("process.executable.build_id.gnu", buildID))
	}
	m.AttributeIndices().Append(b.Attr("process.executable.build_id.htlhash", "0123456789abcdef0123456789abcdef"))
	return int32(b.dic.MappingTable().Len() - 1)
}

// Frame is a location of frame type typ: named (fn, file, line) or, with
// fn "", an address in mapping.
func (b *OTLPBuilder) Frame(typ, fn, file string, line int64, mapping int32, addr uint64) int32 {
	loc := b.dic.LocationTable().AppendEmpty()
	loc.SetMappingIndex(mapping)
	loc.SetAddress(addr)
	if fn != "" {
		f := b.dic.FunctionTable().AppendEmpty()
		f.SetNameStrindex(b.Str(fn))
		f.SetFilenameStrindex(b.Str(file))
		ln := loc.Lines().AppendEmpty()
		ln.SetFunctionIndex(int32(b.dic.FunctionTable().Len() - 1))
		ln.SetLine(line)
	}
	loc.AttributeIndices().Append(b.Attr("profile.frame.type", typ))
	return int32(b.dic.LocationTable().Len() - 1)
}

// Stack is a stack of locations, leaf first.
func (b *OTLPBuilder) Stack(locs ...int32) int32 {
	st := b.dic.StackTable().AppendEmpty()
	st.LocationIndices().FromRaw(locs)
	return int32(b.dic.StackTable().Len() - 1)
}

// Profile appends a profile of sample type typ/unit (and the eBPF
// profiler's cpu period when typ is samples) to a new resource with
// resource attributes.
func (b *OTLPBuilder) Profile(resource map[string]string, typ, unit string, at time.Time) pprofile.Profile {
	rp := b.PD.ResourceProfiles().AppendEmpty()
	for k, v := range resource {
		rp.Resource().Attributes().PutStr(k, v)
	}
	sp := rp.ScopeProfiles().AppendEmpty()
	sp.Scope().SetName(OTLPScope)
	sp.Scope().SetVersion("v0.0.0-test")
	p := sp.Profiles().AppendEmpty()
	p.SampleType().SetTypeStrindex(b.Str(typ))
	p.SampleType().SetUnitStrindex(b.Str(unit))
	if typ == "samples" {
		p.PeriodType().SetTypeStrindex(b.Str("cpu"))
		p.PeriodType().SetUnitStrindex(b.Str("nanoseconds"))
		p.SetPeriod(OTLPPeriodNs)
	}
	p.SetTime(pcommon.NewTimestampFromTime(at))
	p.SetDurationNano(uint64(5 * time.Second))
	return p
}

// Sample appends a sample of stack with attributes attrs (indices), its
// values or, with none, one timestamp per event.
func (b *OTLPBuilder) Sample(p pprofile.Profile, stack int32, attrs []int32, values []int64, events int, at time.Time) {
	s := p.Samples().AppendEmpty()
	s.SetStackIndex(stack)
	s.AttributeIndices().FromRaw(attrs)
	s.Values().FromRaw(values)
	for i := range events {
		s.TimestampsUnixNano().Append(uint64(at.Add(time.Duration(i) * time.Millisecond).UnixNano()))
	}
}

// EBPFProfilerRequest is a request like the eBPF profiler's of one host
// and container: a CPU profile with Python, Java, JavaScript, Ruby, kernel
// and native frames, and an off-CPU profile (events/nanoseconds, one
// value per block).
func EBPFProfilerRequest(now time.Time) pprofile.Profiles {
	b, _ := EBPFProfilerBuilder(now)
	return b.PD
}

// EBPFProfilerBuilder builds EBPFProfilerRequest and returns its builder
// and CPU profile, to add to.
func EBPFProfilerBuilder(now time.Time) (*OTLPBuilder, pprofile.Profile) {
	b := NewOTLPBuilder()
	at := now.Add(-5 * time.Second)
	libpython := b.Mapping("libpython3.12.so.1.0", OTLPBuildID, 0x1000, 0x400000, 0x1000)
	noID := b.Mapping("stripped-tool", "", 0x400000, 0x500000, 0)
	py := b.Stack(
		b.Frame("cpython", "handle_request", "/srv/app.py", 42, 0, 42),
		b.Frame("cpython", "<module>", "/srv/app.py", 3, 0, 3),
		b.Frame("native", "", "", 0, libpython, 0x2a1f0),
	)
	java := b.Stack(
		b.Frame("kernel", "do_syscall_64", "", 0, 0, 0xffffffff81000010),
		b.Frame("native", "", "", 0, noID, 0x401234),
		b.Frame("jvm", "com.example.Cart.total", "Cart.java", 17, 0, 17),
	)
	js := b.Stack(
		b.Frame("v8js", "render", "file:///srv/ui.js", 9, 0, 9),
		b.Frame("ruby", "Rack::Handler#call", "rack.rb", 70, 0, 70),
	)
	cpu := b.Profile(map[string]string{"host.name": OTLPHost, "service.name": OTLPService, "container.id": "c0ffee",
		"k8s.pod.name": "web-0", "k8s.namespace.name": "prod", "deployment.environment": "prod"}, "samples", "count", at)
	common := []int32{b.Attr("thread.name", "python3"), b.Attr("process.pid", int64(4242)), b.Attr("thread.id", int64(4243))}
	b.Sample(cpu, py, common, nil, 3, at)
	b.Sample(cpu, java, append(common[:2:2], b.Attr("service.name", "cart-jvm")), []int64{2}, 0, at)
	b.Sample(cpu, js, common, []int64{1}, 0, at)
	off := b.Profile(map[string]string{"host.name": OTLPHost}, "events", "nanoseconds", at)
	b.Sample(off, py, common, []int64{1500000}, 1, at)
	return b, cpu
}

// OTLPFromPprof is a CPU profile p as the eBPF profiler would send it: one
// resource, samples/count at 20 Hz, every frame native (an address in its
// binary's mapping, unnamed, for the symbolizer) with the thread name and
// pid as sample attributes.
func OTLPFromPprof(p *profile.Profile, now time.Time) pprofile.Profiles {
	b := NewOTLPBuilder()
	maps := map[*profile.Mapping]int32{}
	locs := map[*profile.Location]int32{}
	out := b.Profile(map[string]string{"host.name": OTLPHost, "service.name": OTLPService, "container.id": "c0ffee"}, "samples", "count", now.Add(-5*time.Second))
	attrs := []int32{b.Attr("thread.name", "app"), b.Attr("process.pid", int64(4242))}
	for _, s := range p.Sample {
		ids := make([]int32, 0, len(s.Location))
		for _, loc := range s.Location {
			id, ok := locs[loc]
			if !ok {
				m := int32(0)
				if loc.Mapping != nil {
					if m, ok = maps[loc.Mapping]; !ok {
						m = b.Mapping(loc.Mapping.File, loc.Mapping.BuildID, loc.Mapping.Start, loc.Mapping.Limit, loc.Mapping.Offset)
						maps[loc.Mapping] = m
					}
				}
				id = b.Frame("native", "", "", 0, m, loc.Address)
				locs[loc] = id
			}
			ids = append(ids, id)
		}
		b.Sample(out, b.Stack(ids...), attrs, []int64{max(1, s.Value[0])}, 0, now)
	}
	return b.PD
}
