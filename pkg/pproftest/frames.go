package pproftest

import "github.com/google/pprof/profile"

// AddressLocation is the unsymbolized location of addr in m (one per
// address, shared with AddressSample), for samples mixing it with named
// frames (LocationSample).
func (b *Builder) AddressLocation(m *profile.Mapping, addr uint64) *profile.Location {
	if loc, ok := b.addrs[addr]; ok {
		return loc
	}
	loc := &profile.Location{ID: uint64(len(b.p.Location) + 1), Address: addr, Mapping: m}
	b.p.Location = append(b.p.Location, loc)
	b.addrs[addr] = loc
	return loc
}

// NamedLocation is a location the agent named itself, the way it sends
// kernel, Python, Java, JS and JIT frames: m is a record.Mapping* pseudo-file
// mapping (HasFunctions set here), the function and file come from the
// runtime, and addr is whatever the agent had (0 for interpreted code).
func (b *Builder) NamedLocation(m *profile.Mapping, addr uint64, function, file string, line int64) *profile.Location {
	m.HasFunctions = true
	if file != "" {
		m.HasFilenames = true
	}
	if line != 0 {
		m.HasLineNumbers = true
	}
	key := function + "\x00" + file
	f := b.funcs[key]
	if f == nil {
		f = &profile.Function{ID: uint64(len(b.p.Function) + 1), Name: function, SystemName: function, Filename: file}
		b.p.Function = append(b.p.Function, f)
		b.funcs[key] = f
	}
	loc := &profile.Location{ID: uint64(len(b.p.Location) + 1), Address: addr, Mapping: m, Line: []profile.Line{{Function: f, Line: line}}}
	b.p.Location = append(b.p.Location, loc)
	return loc
}

// LocationSample adds a sample of the given locations, leaf first.
func (b *Builder) LocationSample(labels map[string]string, values []int64, locs ...*profile.Location) *Builder {
	s := &profile.Sample{Value: values, Label: map[string][]string{}, Location: locs}
	for k, v := range labels {
		s.Label[k] = []string{v}
	}
	b.p.Sample = append(b.p.Sample, s)
	return b
}
