package convert

import (
	"fmt"
	"slices"
	"strings"

	"github.com/google/pprof/profile"

	"github.com/stackstream/stackstream/schemas/record"
	"github.com/stackstream/stackstream/services/ingest/internal/pyroscope"
)

// cpuHints are the names (suffixes, the push API's __name__) of CPU profiles.
var cpuHints = []string{"", "cpu", "itimer", "process_cpu"}

// Classify returns the record profile types of p from its sample types:
//
//   - cpu/nanoseconds: cpu; offcpu/nanoseconds: offcpu. A CPU profile of counts only (samples/count, or
//     a hint of cpu) gets cpu/nanoseconds added: the count times the
//     period, or 1e9/sampleRate without one.
//   - inuse_space or inuse_objects: heap; alloc_space or alloc_objects:
//     alloc; a Go heap profile holds both and becomes two records.
//
// Anything else is ErrUnsupported with the sample types it holds.
func Classify(p *profile.Profile, hint string, sampleRate int64) ([]record.ProfileType, error) {
	has := func(name string) bool {
		return slices.ContainsFunc(p.SampleType, func(v *profile.ValueType) bool { return v != nil && v.Type == name })
	}
	var out []record.ProfileType
	switch {
	case has("cpu"):
		return []record.ProfileType{record.ProfileCPU}, nil
	case has("offcpu"):
		return []record.ProfileType{record.ProfileOffCPU}, nil
	case has("inuse_space") || has("inuse_objects"):
		out = append(out, record.ProfileHeap)
	}
	if has("alloc_space") || has("alloc_objects") {
		out = append(out, record.ProfileAlloc)
	}
	if len(out) > 0 {
		return out, nil
	}
	if count := countIndex(p); count >= 0 && len(p.SampleType) == 1 && slices.Contains(cpuHints, hint) {
		addCPUNanos(p, count, sampleRate)
		return []record.ProfileType{record.ProfileCPU}, nil
	}
	var types []string
	for _, v := range p.SampleType {
		if v != nil {
			types = append(types, v.Type+"/"+v.Unit)
		}
	}
	return nil, fmt.Errorf("%w: sample types %s (name suffix %q): stackstream stores cpu (cpu/nanoseconds, or samples/count of a .cpu profile), offcpu (offcpu/nanoseconds), heap (inuse_space, inuse_objects) and alloc (alloc_space, alloc_objects)",
		ErrUnsupported, strings.Join(types, ", "), hint)
}

func countIndex(p *profile.Profile) int {
	for i, v := range p.SampleType {
		if v != nil && v.Type == "samples" && v.Unit == "count" {
			return i
		}
	}
	return -1
}

// addCPUNanos appends cpu/nanoseconds to a profile of sample counts.
func addCPUNanos(p *profile.Profile, count int, sampleRate int64) {
	period := int64(0)
	if p.PeriodType != nil && p.PeriodType.Unit == "nanoseconds" && p.Period > 0 {
		period = p.Period
	}
	if period == 0 {
		if sampleRate <= 0 {
			sampleRate = 100
		}
		period = int64(1e9) / sampleRate
	}
	cpu := &profile.ValueType{Type: "cpu", Unit: "nanoseconds"}
	p.SampleType = append(p.SampleType, cpu)
	p.PeriodType, p.Period = cpu, period
	for _, s := range p.Sample {
		s.Value = append(s.Value, s.Value[count]*period)
	}
}

// FoldedSpec is the sample spec of a folded body from the name's suffix
// (or, without one, the units and aggregationType parameters): counts of
// CPU samples, or objects or bytes allocated or in use.
func FoldedSpec(suffix, units, aggregation string, sampleRate int64) (pyroscope.SampleSpec, error) {
	one := func(typ, unit string) pyroscope.SampleSpec {
		v := &profile.ValueType{Type: typ, Unit: unit}
		return pyroscope.SampleSpec{Types: []*profile.ValueType{v}, Factor: []int64{1}, PeriodType: v, Period: 1}
	}
	if suffix == "" {
		switch {
		case units == "objects" && aggregation == "average":
			suffix = "inuse_objects"
		case units == "bytes" && aggregation == "average":
			suffix = "inuse_space"
		case units == "objects":
			suffix = "alloc_objects"
		case units == "bytes":
			suffix = "alloc_space"
		case units == "" || units == "samples":
			suffix = "cpu"
		}
	}
	switch suffix {
	case "cpu", "itimer":
		if sampleRate <= 0 {
			sampleRate = 100
		}
		period := int64(1e9) / sampleRate
		cpu := &profile.ValueType{Type: "cpu", Unit: "nanoseconds"}
		return pyroscope.SampleSpec{
			Types:  []*profile.ValueType{{Type: "samples", Unit: "count"}, cpu},
			Factor: []int64{1, period}, PeriodType: cpu, Period: period,
		}, nil
	case "alloc_objects", "inuse_objects":
		return one(suffix, "count"), nil
	case "alloc_space", "inuse_space":
		return one(suffix, "bytes"), nil
	}
	return pyroscope.SampleSpec{}, fmt.Errorf("%w: folded profile of %q (units %q): stackstream stores .cpu, .itimer, .alloc_objects, .alloc_space, .inuse_objects and .inuse_space",
		ErrUnsupported, suffix, units)
}
