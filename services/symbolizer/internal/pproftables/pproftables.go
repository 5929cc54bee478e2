// Package pproftables decodes only the tables of an encoded pprof profile
// that the symbolizer changes (mappings, locations, functions and the
// string table) and writes the profile back with those tables re-encoded
// and every other field (samples, labels, sample types, times, comments)
// copied as it was. Decoding and re-encoding every sample and label with
// google/pprof was most of the symbolizer's CPU per record.
//
// It is conservative: a profile that google/pprof's parser or CheckValid
// would refuse, or that holds anything unexpected (a field pprof does not
// define, a location naming a mapping that does not exist), is refused
// with ErrUnsupported, and the caller decodes it in full, which gives the
// right result or the precise error.
package pproftables

import (
	"strings"

	"github.com/google/pprof/profile"

	"github.com/stackstream/stackstream/pkg/pprofwire"
	"github.com/stackstream/stackstream/schemas/record"
)

// ErrUnsupported means the profile must go through the full decoder.
var ErrUnsupported = pprofwire.ErrUnsupported

// span is a range of bytes of the input kept as they are.
type span struct{ start, end int }

// Profile is an encoded profile with its tables decoded.
type Profile struct {
	// Tables holds the decoded Mapping, Location and Function tables
	// (with IDs, strings and links, as profile.Parse gives them); no
	// samples. Changes to them, and functions appended, are written by
	// Append.
	Tables *profile.Profile

	raw        []byte
	head, tail []span // fields numbered below and above the tables, in input order
	// wire is the input's tables as pprofwire reads them: its string
	// table (slices of raw), the string indices of its mappings and
	// functions (by position in Tables), its location IDs.
	wire  pprofwire.Tables
	marks []uint8 // by location index: leafMark, callerMark

	// lim is Decode's; addedTooLong is set by Append when a string it
	// added is longer than lim.MaxStringBytes.
	lim          record.Limits
	addedTooLong bool

	scratch scratch
}

// scratch is what Decode and Append allocate for one profile and keep for
// the next: the symbolizer decodes one record after another, and these
// allocations (about 0.6 MB per host interval) were most of its collector's
// work. Nothing in it outlives the next Decode.
type scratch struct {
	tables profile.Profile
	ms     []profile.Mapping
	fs     []profile.Function
	ls     []profile.Location
	lines  []profile.Line
	sample pprofwire.Sample
	added  map[string]uint64
	order  []string
	names  interner
}

// interner keeps the table strings of earlier profiles (file names, build
// IDs, the agent's function names), which repeat from one record to the
// next, so that a string is allocated once rather than once a record.
type interner struct {
	strs  map[string]string
	bytes int
}

// maxInternedBytes bounds the interner; past it, it starts over.
const maxInternedBytes = 1 << 20

func (in *interner) str(b []byte) string {
	if s, ok := in.strs[string(b)]; ok {
		return s
	}
	if in.strs == nil || in.bytes+len(b) > maxInternedBytes {
		in.strs = make(map[string]string, 256)
		in.bytes = 0
	}
	s := string(b)
	in.strs[s] = s
	in.bytes += len(s)
	return s
}

const (
	leafMark   = 1
	callerMark = 2
)

// Decode reads raw, an uncompressed pprof protobuf, into p, reusing the
// memory of p's previous profile: what p held before, Tables included, is
// overwritten. raw must not change while the Profile is used: Append
// copies from it. pprofwire.Tables.Read bounds what it reads by lim; the
// limits on the whole profile that a protobuf shorter than
// pprofwire.CheckAbove cannot pass are left to the caller's check of the
// output (OutputWithinLimits), which holds everything the input held.
func (p *Profile) Decode(raw []byte, lim record.Limits) error {
	sc := &p.scratch
	ms, ls, fs := sc.tables.Mapping[:0], sc.tables.Location[:0], sc.tables.Function[:0]
	sc.tables = profile.Profile{Mapping: ms, Location: ls, Function: fs}
	p.Tables, p.raw, p.lim, p.addedTooLong = &sc.tables, raw, lim, false
	p.head, p.tail = p.head[:0], p.tail[:0]
	w := &p.wire
	if err := w.Read(raw, &p.lim, p.keepSpan); err != nil {
		return err
	}
	p.decodeMappings()
	p.decodeFunctions()
	p.decodeLocations()
	p.marks = resize(p.marks, len(w.Locations))
	for _, s := range w.Samples {
		if !p.checkSample(s) {
			return ErrUnsupported
		}
	}
	return nil
}

// keepSpan keeps the bytes of the fields Append copies as they were.
func (p *Profile) keepSpan(num uint64, start, end int) {
	switch {
	case num < 3:
		p.head = addSpan(p.head, start, end)
	case num > 6:
		p.tail = addSpan(p.tail, start, end)
	}
}

// addSpan adds [start, end) to spans, joining it to the last when they
// touch.
func addSpan(spans []span, start, end int) []span {
	if n := len(spans); n > 0 && spans[n-1].end == start {
		spans[n-1].end = end
		return spans
	}
	return append(spans, span{start, end})
}

func (p *Profile) decodeMappings() {
	sc, w := &p.scratch, &p.wire
	sc.ms = resize(sc.ms, len(w.Mappings))
	p.Tables.Mapping = resize(p.Tables.Mapping, len(w.Mappings))
	for i, wm := range w.Mappings {
		m := &sc.ms[i]
		*m = profile.Mapping{ID: wm.ID, Start: wm.Start, Limit: wm.Limit, Offset: wm.Offset,
			File: sc.names.str(w.Strings[wm.File]), BuildID: sc.names.str(w.Strings[wm.BuildID]),
			HasFunctions: wm.HasFunctions, HasFilenames: wm.HasFilenames, HasLineNumbers: wm.HasLineNumbers, HasInlineFrames: wm.HasInlineFrames}
		// As pprof's decoder does for "[kernel.kallsyms]_text".
		if rest, ok := strings.CutPrefix(m.File, "[kernel.kallsyms]"); ok {
			m.KernelRelocationSymbol = rest
		}
		p.Tables.Mapping[i] = m
	}
}

func (p *Profile) decodeFunctions() {
	sc, w := &p.scratch, &p.wire
	sc.fs = resize(sc.fs, len(w.Functions))
	p.Tables.Function = resize(p.Tables.Function, len(w.Functions))
	for i, f := range w.Functions {
		sc.fs[i] = profile.Function{ID: f.ID, Name: sc.names.str(w.Strings[f.Name]), SystemName: sc.names.str(w.Strings[f.SystemName]),
			Filename: sc.names.str(w.Strings[f.Filename]), StartLine: int64(f.StartLine)}
		p.Tables.Function[i] = &sc.fs[i]
	}
}

func (p *Profile) decodeLocations() {
	sc, w := &p.scratch, &p.wire
	sc.ls = resize(sc.ls, len(w.Locations))
	p.Tables.Location = resize(p.Tables.Location, len(w.Locations))
	sc.lines = resize(sc.lines, len(w.Lines))
	for i, wl := range w.Lines {
		sc.lines[i] = profile.Line{Function: &sc.fs[w.FunctionIndex(wl.Function)], Line: int64(wl.Line), Column: int64(wl.Column)}
	}
	for i := range w.Locations {
		wl, l := &w.Locations[i], &sc.ls[i]
		*l = profile.Location{ID: wl.ID, Address: wl.Address, IsFolded: wl.IsFolded}
		if wl.Mapping != 0 {
			l.Mapping = &sc.ms[w.MappingIndex(wl.Mapping)]
		}
		if wl.Lines[1] > wl.Lines[0] {
			l.Line = sc.lines[wl.Lines[0]:wl.Lines[1]:wl.Lines[1]]
		}
		p.Tables.Location[i] = l
	}
}

// resize returns s with n zero elements, in s's array when it is large
// enough.
func resize[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	s = s[:n]
	clear(s)
	return s
}

// clearMap empties *m, making it when it is nil, and returns it.
func clearMap[K comparable, V any](m *map[K]V) map[K]V {
	if *m == nil {
		*m = make(map[K]V)
	}
	clear(*m)
	return *m
}

// checkSample checks one sample as pprof's decoder and CheckValid would
// (pprofwire.Tables.ReadSample; every location ID defined, label strings
// in the table) and marks its locations as leaf or caller.
func (p *Profile) checkSample(s []byte) bool {
	w, smp := &p.wire, &p.scratch.sample
	if !w.ReadSample(s, smp) {
		return false
	}
	for depth, id := range smp.LocationIDs {
		i := w.LocationIndex(id)
		if i < 0 {
			return false
		}
		if depth == 0 {
			p.marks[i] |= leafMark
		} else {
			p.marks[i] |= callerMark
		}
	}
	for r := smp.Labels; len(r) > 0; {
		l, rest, ok := pprofwire.NextLabel(r)
		if !ok || !w.ValidString(l.Key) {
			return false
		}
		r = rest
		// The strings pprof's decoder resolves: the value of a string
		// label, else the unit of a numeric one.
		if l.Str != 0 {
			if !w.ValidString(l.Str) {
				return false
			}
		} else if l.NumUnit != 0 && !w.ValidString(l.NumUnit) {
			return false
		}
	}
	return true
}

// CallerOnly reports a location that appears in samples only below the
// leaf: its address is a return address.
func (p *Profile) CallerOnly(l *profile.Location) bool {
	i := p.wire.LocationIndex(l.ID)
	return i >= 0 && p.marks[i] == callerMark
}

// OutputWithinLimits reports whether out, what Append wrote, is within
// Decode's limits. A protobuf shorter than pprofwire.CheckAbove is within
// the limits on counts of the whole profile and on the decode heap, and
// the limits on one element held for the input (Decode) and hold for what
// the tables changed (the mappings, the strings Append added): such an
// output needs no walk (record.Limits.Check was about a tenth of the
// symbolizer's CPU). A longer one is walked.
func (p *Profile) OutputWithinLimits(out []byte) bool {
	if len(out) < pprofwire.CheckAbove(p.lim) && len(out) <= p.lim.MaxDecompressedBytes &&
		!p.addedTooLong && len(p.Tables.Mapping) <= p.lim.MaxMappings {
		return true
	}
	return p.lim.Check(out) == nil
}

// Append appends the profile to dst as an uncompressed pprof protobuf: the
// input's other fields as they were, the tables from Tables, and the
// input's string table followed by the strings the tables added.
func (p *Profile) Append(dst []byte) []byte {
	for _, s := range p.head {
		dst = append(dst, p.raw[s.start:s.end]...)
	}
	sc := &p.scratch
	e := &encoder{p: p, added: clearMap(&sc.added), order: sc.order[:0]}
	defer func() { sc.order = e.order }()
	var msg []byte
	for i, m := range p.Tables.Mapping {
		orig := [2]uint64{notInInput, notInInput}
		if i < len(p.wire.Mappings) {
			orig = [2]uint64{p.wire.Mappings[i].File, p.wire.Mappings[i].BuildID}
		}
		file, build := e.index(m.File, orig[0]), e.index(m.BuildID, orig[1])
		msg = appendUint(msg[:0], 1, m.ID)
		msg = appendUint(msg, 2, m.Start)
		msg = appendUint(msg, 3, m.Limit)
		msg = appendUint(msg, 4, m.Offset)
		msg = appendUint(msg, 5, file)
		msg = appendUint(msg, 6, build)
		msg = appendBool(msg, 7, m.HasFunctions)
		msg = appendBool(msg, 8, m.HasFilenames)
		msg = appendBool(msg, 9, m.HasLineNumbers)
		msg = appendBool(msg, 10, m.HasInlineFrames)
		dst = appendBytes(dst, 3, msg)
	}
	var line []byte
	for _, l := range p.Tables.Location {
		msg = appendUint(msg[:0], 1, l.ID)
		if l.Mapping != nil {
			msg = appendUint(msg, 2, l.Mapping.ID)
		}
		msg = appendUint(msg, 3, l.Address)
		for _, ln := range l.Line {
			line = line[:0]
			if ln.Function != nil {
				line = appendUint(line, 1, ln.Function.ID)
			}
			line = appendUint(line, 2, uint64(ln.Line))
			line = appendUint(line, 3, uint64(ln.Column))
			msg = appendBytes(msg, 4, line)
		}
		msg = appendBool(msg, 5, l.IsFolded)
		dst = appendBytes(dst, 4, msg)
	}
	for i, f := range p.Tables.Function {
		orig := [3]uint64{notInInput, notInInput, notInInput}
		if i < len(p.wire.Functions) {
			f := &p.wire.Functions[i]
			orig = [3]uint64{f.Name, f.SystemName, f.Filename}
		}
		name, system, file := e.index(f.Name, orig[0]), e.index(f.SystemName, orig[1]), e.index(f.Filename, orig[2])
		msg = appendUint(msg[:0], 1, f.ID)
		msg = appendUint(msg, 2, name)
		msg = appendUint(msg, 3, system)
		msg = appendUint(msg, 4, file)
		msg = appendUint(msg, 5, uint64(f.StartLine))
		dst = appendBytes(dst, 5, msg)
	}
	for _, s := range p.wire.Strings {
		dst = appendBytes(dst, 6, s)
	}
	for _, s := range e.order {
		dst = appendVarint(append(dst, 6<<3|2), uint64(len(s)))
		dst = append(dst, s...)
	}
	for _, s := range p.tail {
		dst = append(dst, p.raw[s.start:s.end]...)
	}
	return dst
}

// encoder assigns string indices while Append writes the tables.
type encoder struct {
	p     *Profile
	added map[string]uint64
	order []string
}

// notInInput stands for the input string index of a table entry the
// input did not have.
const notInInput = ^uint64(0)

// index is the string index of s, whose index in the input was orig: orig
// when the string did not change, else that of an added string.
func (e *encoder) index(s string, orig uint64) uint64 {
	if s == "" {
		return 0
	}
	if strs := e.p.wire.Strings; orig < uint64(len(strs)) && string(strs[orig]) == s {
		return orig
	}
	if j, ok := e.added[s]; ok {
		return j
	}
	j := uint64(len(e.p.wire.Strings) + len(e.order))
	if len(s) > e.p.lim.MaxStringBytes {
		e.p.addedTooLong = true
	}
	e.added[s] = j
	e.order = append(e.order, s)
	return j
}
