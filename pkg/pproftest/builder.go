// Package pproftest builds pprof profiles with known content for tests and
// benchmarks.
package pproftest

import (
	"time"

	"github.com/google/pprof/profile"
)

// Builder accumulates samples into one profile, sharing functions and
// locations the way real profiles do.
type Builder struct {
	p     *profile.Profile
	funcs map[string]*profile.Function
	locs  map[string]*profile.Location
	addrs map[uint64]*profile.Location
}

// NewCPU starts a CPU profile (samples/count, cpu/nanoseconds) at t covering d.
func NewCPU(t time.Time, d time.Duration) *Builder {
	return New([]*profile.ValueType{{Type: "samples", Unit: "count"}, {Type: "cpu", Unit: "nanoseconds"}}, t, d)
}

// NewMemory starts a memory profile (rss/bytes) at t covering d.
func NewMemory(t time.Time, d time.Duration) *Builder {
	return New([]*profile.ValueType{{Type: "rss", Unit: "bytes"}}, t, d)
}

// New starts a profile with the given sample types.
func New(types []*profile.ValueType, t time.Time, d time.Duration) *Builder {
	p := &profile.Profile{
		SampleType:    types,
		TimeNanos:     t.UnixNano(),
		DurationNanos: int64(d),
		PeriodType:    types[len(types)-1],
		Period:        1,
	}
	return &Builder{p: p, funcs: map[string]*profile.Function{}, locs: map[string]*profile.Location{}, addrs: map[uint64]*profile.Location{}}
}

// Sample adds a symbolized sample; stack is leaf first, as in pprof.
func (b *Builder) Sample(labels map[string]string, values []int64, stack ...string) *Builder {
	s := &profile.Sample{Value: values, Label: map[string][]string{}}
	for k, v := range labels {
		s.Label[k] = []string{v}
	}
	for _, name := range stack {
		s.Location = append(s.Location, b.location(name))
	}
	b.p.Sample = append(b.p.Sample, s)
	return b
}

// Mapping adds an executable mapping for unsymbolized samples.
func (b *Builder) Mapping(start, limit, offset uint64, file, buildID string) *profile.Mapping {
	m := &profile.Mapping{ID: uint64(len(b.p.Mapping) + 1), Start: start, Limit: limit, Offset: offset, File: file, BuildID: buildID}
	b.p.Mapping = append(b.p.Mapping, m)
	return m
}

// AddressSample adds an unsymbolized sample; addrs are leaf first and each
// falls in m.
func (b *Builder) AddressSample(labels map[string]string, values []int64, m *profile.Mapping, addrs ...uint64) *Builder {
	s := &profile.Sample{Value: values, Label: map[string][]string{}}
	for k, v := range labels {
		s.Label[k] = []string{v}
	}
	for _, a := range addrs {
		loc, ok := b.addrs[a]
		if !ok {
			loc = &profile.Location{ID: uint64(len(b.p.Location) + 1), Address: a, Mapping: m}
			b.p.Location = append(b.p.Location, loc)
			b.addrs[a] = loc
		}
		s.Location = append(s.Location, loc)
	}
	b.p.Sample = append(b.p.Sample, s)
	return b
}

// Profile returns the built profile.
func (b *Builder) Profile() *profile.Profile { return b.p }

func (b *Builder) location(name string) *profile.Location {
	if l, ok := b.locs[name]; ok {
		return l
	}
	f := b.funcs[name]
	if f == nil {
		f = &profile.Function{ID: uint64(len(b.p.Function) + 1), Name: name, SystemName: name}
		b.p.Function = append(b.p.Function, f)
		b.funcs[name] = f
	}
	l := &profile.Location{ID: uint64(len(b.p.Location) + 1), Line: []profile.Line{{Function: f}}}
	b.p.Location = append(b.p.Location, l)
	b.locs[name] = l
	return l
}
