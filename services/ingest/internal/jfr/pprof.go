package jfr

import (
	"github.com/google/pprof/profile"

	"github.com/stackstream/stackstream/schemas/record"
)

// Profiles are the pprof profiles of a recording, nil where it has no
// samples of that kind: CPU of samples/count (the caller adds
// cpu/nanoseconds from the sample rate, as for other count profiles), and
// allocations of alloc_objects/count and alloc_space/bytes. Every frame is
// a location on the record.MappingJava pseudo-file with its function name
// and line, so nothing is left to symbolize. Lock events are not converted:
// the record contract has no lock profile type.
type Profiles struct {
	CPU, Alloc *profile.Profile
}

// ToPprof builds the profiles of rec; samples of one stack are summed.
func ToPprof(rec *Recording) Profiles {
	cpu := newBuilder(&profile.ValueType{Type: "samples", Unit: "count"})
	alloc := newBuilder(&profile.ValueType{Type: "alloc_objects", Unit: "count"}, &profile.ValueType{Type: "alloc_space", Unit: "bytes"})
	for _, s := range rec.Samples {
		switch s.Kind {
		case CPU:
			cpu.add(rec.Stacks[s.Stack], s.Stack, 1)
		case Alloc:
			alloc.add(rec.Stacks[s.Stack], s.Stack, 1, s.Value)
		}
	}
	return Profiles{CPU: cpu.profile(), Alloc: alloc.profile()}
}

type builder struct {
	p       *profile.Profile
	mapping *profile.Mapping
	funcs   map[string]*profile.Function
	locs    map[Frame]*profile.Location
	samples map[int]*profile.Sample // by stack index
}

func newBuilder(types ...*profile.ValueType) *builder {
	m := &profile.Mapping{ID: 1, File: record.MappingJava, HasFunctions: true, HasLineNumbers: true}
	return &builder{
		p:       &profile.Profile{SampleType: types, Mapping: []*profile.Mapping{m}, PeriodType: types[0], Period: 1},
		mapping: m, funcs: map[string]*profile.Function{}, locs: map[Frame]*profile.Location{}, samples: map[int]*profile.Sample{},
	}
}

func (b *builder) add(stack []Frame, id int, values ...int64) {
	if s, ok := b.samples[id]; ok {
		for i, v := range values {
			s.Value[i] += v
		}
		return
	}
	s := &profile.Sample{Value: values, Location: make([]*profile.Location, 0, len(stack))}
	for _, f := range stack {
		s.Location = append(s.Location, b.location(f))
	}
	b.samples[id] = s
	b.p.Sample = append(b.p.Sample, s)
}

func (b *builder) location(f Frame) *profile.Location {
	if loc, ok := b.locs[f]; ok {
		return loc
	}
	fn, ok := b.funcs[f.Name]
	if !ok {
		fn = &profile.Function{ID: uint64(len(b.funcs) + 1), Name: f.Name, SystemName: f.Name}
		b.funcs[f.Name] = fn
		b.p.Function = append(b.p.Function, fn)
	}
	loc := &profile.Location{ID: uint64(len(b.locs) + 1), Mapping: b.mapping, Line: []profile.Line{{Function: fn, Line: f.Line}}}
	b.locs[f] = loc
	b.p.Location = append(b.p.Location, loc)
	return loc
}

func (b *builder) profile() *profile.Profile {
	if len(b.p.Sample) == 0 {
		return nil
	}
	return b.p
}
