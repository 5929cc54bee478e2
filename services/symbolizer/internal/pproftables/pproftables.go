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
	"errors"
	"github.com/stackstream/stackstream/pkg/pprofwire"
	"strings"

	"github.com/google/pprof/profile"

	"github.com/stackstream/stackstream/schemas/record"
)

// ErrUnsupported means the profile must go through the full decoder.
var ErrUnsupported = errors.New("profile needs the full pprof decoder")

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
	head, tail []span   // fields numbered below and above the tables, in input order
	strs       [][]byte // the input's string table, slices of raw
	// String indices of the input's mappings (file, build ID) and
	// functions (name, system name, file name), by position in Tables.
	mapStrs [][2]uint64
	fnStrs  [][3]uint64

	locByID  []int32 // location ID -> index+1 when IDs are dense, else nil
	locIndex map[uint64]int
	marks    []uint8 // by location index: leafMark, callerMark

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
	tables                                               profile.Profile
	sampleTypes, samples, mappings, locations, functions [][]byte
	checkStrs                                            []uint64
	ms                                                   []profile.Mapping
	fs                                                   []profile.Function
	ls                                                   []profile.Location
	lines                                                []profile.Line
	ids                                                  map[uint64]bool
	locByID                                              []int32
	locIndex                                             map[uint64]int
	mapByID                                              map[uint64]*profile.Mapping
	fnByID                                               map[uint64]*profile.Function
	added                                                map[string]uint64
	order                                                []string
	names                                                interner
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
// copies from it. Tables past lim's
// counts are refused before they are allocated, and so is a profile past
// a limit on one element (sample types, mappings, comments, period types,
// a sample's locations and labels, a string's bytes); the limits on the
// whole profile are left to the caller's check of the output
// (OutputWithinLimits), which holds everything the input held.
func (p *Profile) Decode(raw []byte, lim record.Limits) error {
	if len(raw) == 0 {
		return ErrUnsupported
	}
	sc := &p.scratch
	ms, ls, fs := sc.tables.Mapping[:0], sc.tables.Location[:0], sc.tables.Function[:0]
	sc.tables = profile.Profile{Mapping: ms, Location: ls, Function: fs}
	p.Tables, p.raw, p.lim, p.addedTooLong = &sc.tables, raw, lim, false
	p.head, p.tail, p.strs, p.locByID, p.locIndex = p.head[:0], p.tail[:0], p.strs[:0], nil, nil
	var (
		sampleTypes, samples, mappings, locations, functions = sc.sampleTypes[:0], sc.samples[:0], sc.mappings[:0], sc.locations[:0], sc.functions[:0]
		checkStrs                                            = sc.checkStrs[:0] // string indices pprof resolves
		timeSeen                                             bool
		timeNanos                                            uint64
		periodTypes, comments                                int
	)
	// Kept for the next profile, whichever way this one ends.
	defer func() {
		sc.sampleTypes, sc.samples, sc.mappings, sc.locations, sc.functions = sampleTypes, samples, mappings, locations, functions
		sc.checkStrs = checkStrs
	}()
	for b := raw; len(b) > 0; {
		start := len(raw) - len(b)
		num, typ, u, data, rest, ok := pprofwire.Field(b)
		if !ok {
			return ErrUnsupported
		}
		b = rest
		switch num {
		case 1, 2, 3, 4, 5, 6, 11:
			if typ != 2 {
				return ErrUnsupported
			}
		case 7, 8, 9, 10, 12, 14, 15:
			if typ != 0 {
				return ErrUnsupported
			}
		}
		if len(samples) > lim.MaxSamples || len(mappings) > lim.MaxMappings || len(locations) > lim.MaxLocations ||
			len(functions) > lim.MaxFunctions || len(p.strs) > lim.MaxStrings || len(sampleTypes) > lim.MaxSampleTypes+1 ||
			len(checkStrs) > lim.MaxComments+8 {
			return ErrUnsupported
		}
		switch num {
		case 1:
			sampleTypes = append(sampleTypes, data)
		case 2:
			samples = append(samples, data)
		case 3:
			mappings = append(mappings, data)
		case 4:
			locations = append(locations, data)
		case 5:
			functions = append(functions, data)
		case 6:
			if len(data) > lim.MaxStringBytes {
				return ErrUnsupported
			}
			p.strs = append(p.strs, data)
		case 7, 8, 14, 15: // drop_frames, keep_frames, default_sample_type, doc_url
			checkStrs = append(checkStrs, u)
		case 9:
			if timeSeen && timeNanos != 0 {
				return ErrUnsupported // pprof refuses concatenated profiles
			}
			timeSeen, timeNanos = true, u
		case 10, 12: // duration_nanos, period
		case 11: // period_type
			if periodTypes++; periodTypes > 1 {
				return ErrUnsupported
			}
			sampleTypes = append(sampleTypes, nil) // marks where period_type's strings go
			var t, un uint64
			if !scalars(data, []*uint64{&t, &un}) {
				return ErrUnsupported
			}
			checkStrs = append(checkStrs, t, un)
		case 13: // comments, packed or not
			tooMany := false
			if typ != 0 && typ != 2 || !varints(typ, u, data, func(v uint64) {
				// One packed field can hold millions: bounded here, not
				// after it was stored.
				comments++
				if tooMany = tooMany || comments > lim.MaxComments; !tooMany {
					checkStrs = append(checkStrs, v)
				}
			}) || tooMany {
				return ErrUnsupported
			}
		default:
			return ErrUnsupported
		}
		switch {
		case num < 3:
			p.head = addSpan(p.head, start, len(raw)-len(b))
		case num > 6:
			p.tail = addSpan(p.tail, start, len(raw)-len(b))
		}
	}
	if len(p.strs) == 0 || len(p.strs[0]) != 0 {
		return ErrUnsupported
	}
	for _, i := range checkStrs {
		if !p.validStr(i) {
			return ErrUnsupported
		}
	}
	if len(mappings) > lim.MaxMappings {
		return ErrUnsupported
	}
	types := 0
	for _, st := range sampleTypes {
		if st == nil {
			continue
		}
		types++
		var t, un uint64
		if !scalars(st, []*uint64{&t, &un}) || !p.validStr(t) || !p.validStr(un) {
			return ErrUnsupported
		}
	}
	if err := p.decodeMappings(mappings); err != nil {
		return err
	}
	if err := p.decodeFunctions(functions); err != nil {
		return err
	}
	if err := p.decodeLocations(locations, lim.MaxLines); err != nil {
		return err
	}
	if len(samples) > 0 && types == 0 || types > lim.MaxSampleTypes {
		return ErrUnsupported
	}
	for _, s := range samples {
		if !p.checkSample(s, types, lim) {
			return ErrUnsupported
		}
	}
	return nil
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

// validStr reports whether i, read as pprof reads string indices (int64),
// is in the string table.
func (p *Profile) validStr(i uint64) bool {
	return int64(i) >= 0 && int64(i) < int64(len(p.strs))
}

func (p *Profile) decodeMappings(msgs [][]byte) error {
	sc := &p.scratch
	ms := resize(sc.ms, len(msgs))
	sc.ms = ms
	p.Tables.Mapping = resize(p.Tables.Mapping, len(msgs))
	p.mapStrs = resize(p.mapStrs, len(msgs))
	ids := clearMap(&sc.ids)
	for i, msg := range msgs {
		var id, start, limit, offset, file, build, hasFn, hasFile, hasLine, hasInline uint64
		if !scalars(msg, []*uint64{&id, &start, &limit, &offset, &file, &build, &hasFn, &hasFile, &hasLine, &hasInline}) ||
			id == 0 || ids[id] || !p.validStr(file) || !p.validStr(build) {
			return ErrUnsupported
		}
		ids[id] = true
		m := &ms[i]
		*m = profile.Mapping{ID: id, Start: start, Limit: limit, Offset: offset, File: sc.names.str(p.strs[file]), BuildID: sc.names.str(p.strs[build]),
			HasFunctions: hasFn != 0, HasFilenames: hasFile != 0, HasLineNumbers: hasLine != 0, HasInlineFrames: hasInline != 0}
		// As pprof's decoder does for "[kernel.kallsyms]_text".
		if rest, ok := strings.CutPrefix(m.File, "[kernel.kallsyms]"); ok {
			m.KernelRelocationSymbol = rest
		}
		p.Tables.Mapping[i] = m
		p.mapStrs[i] = [2]uint64{file, build}
	}
	return nil
}

func (p *Profile) decodeFunctions(msgs [][]byte) error {
	sc := &p.scratch
	fs := resize(sc.fs, len(msgs))
	sc.fs = fs
	p.Tables.Function = resize(p.Tables.Function, len(msgs))
	p.fnStrs = resize(p.fnStrs, len(msgs))
	ids := clearMap(&sc.ids)
	for i, msg := range msgs {
		var id, name, system, file, startLine uint64
		if !scalars(msg, []*uint64{&id, &name, &system, &file, &startLine}) ||
			id == 0 || ids[id] || !p.validStr(name) || !p.validStr(system) || !p.validStr(file) {
			return ErrUnsupported
		}
		ids[id] = true
		fs[i] = profile.Function{ID: id, Name: sc.names.str(p.strs[name]), SystemName: sc.names.str(p.strs[system]),
			Filename: sc.names.str(p.strs[file]), StartLine: int64(startLine)}
		p.Tables.Function[i] = &fs[i]
		p.fnStrs[i] = [3]uint64{name, system, file}
	}
	return nil
}

func (p *Profile) decodeLocations(msgs [][]byte, maxLines int) error {
	sc := &p.scratch
	mapByID := clearMap(&sc.mapByID)
	for _, m := range p.Tables.Mapping {
		mapByID[m.ID] = m
	}
	fnByID := clearMap(&sc.fnByID)
	for _, f := range p.Tables.Function {
		fnByID[f.ID] = f
	}
	ls := resize(sc.ls, len(msgs))
	sc.ls = ls
	p.Tables.Location = resize(p.Tables.Location, len(msgs))
	lines := sc.lines[:0]
	defer func() { sc.lines = lines }()
	dense := true
	for i, msg := range msgs {
		l := &ls[i]
		first := len(lines)
		for b := msg; len(b) > 0; {
			num, typ, u, data, rest, ok := pprofwire.Field(b)
			if !ok {
				return ErrUnsupported
			}
			b = rest
			if num == 4 {
				if typ != 2 {
					return ErrUnsupported
				}
				var fn, line, column uint64
				if !scalars(data, []*uint64{&fn, &line, &column}) || fnByID[fn] == nil {
					// pprof's CheckValid refuses a line without a function.
					return ErrUnsupported
				}
				if len(lines) == maxLines {
					return ErrUnsupported
				}
				lines = append(lines, profile.Line{Function: fnByID[fn], Line: int64(line), Column: int64(column)})
				continue
			}
			if num < 1 || num > 5 {
				continue
			}
			if typ != 0 {
				return ErrUnsupported
			}
			switch num {
			case 1:
				l.ID = u
			case 2:
				if u == 0 {
					l.Mapping = nil
					break
				}
				if l.Mapping = mapByID[u]; l.Mapping == nil {
					return ErrUnsupported
				}
			case 3:
				l.Address = u
			case 5:
				l.IsFolded = u != 0
			}
		}
		if len(lines) > first {
			l.Line = lines[first:len(lines):len(lines)]
		}
		if l.ID == 0 {
			return ErrUnsupported
		}
		dense = dense && l.ID <= uint64(len(msgs))
		p.Tables.Location[i] = l
	}
	if dense {
		p.locByID = resize(sc.locByID, len(msgs)+1)
		sc.locByID = p.locByID
		for i, l := range p.Tables.Location {
			if p.locByID[l.ID] != 0 {
				return ErrUnsupported // duplicate ID
			}
			p.locByID[l.ID] = int32(i + 1)
		}
	} else {
		p.locIndex = clearMap(&sc.locIndex)
		for i, l := range p.Tables.Location {
			if _, dup := p.locIndex[l.ID]; dup {
				return ErrUnsupported
			}
			p.locIndex[l.ID] = i
		}
	}
	p.marks = resize(p.marks, len(msgs))
	return nil
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

// location is the index of the location with ID id, or -1.
func (p *Profile) location(id uint64) int {
	if p.locByID != nil {
		if id < uint64(len(p.locByID)) {
			return int(p.locByID[id]) - 1
		}
		return -1
	}
	if i, ok := p.locIndex[id]; ok {
		return i
	}
	return -1
}

// checkSample checks one sample as pprof's decoder and CheckValid would
// (every location ID defined, one value per sample type, label strings in
// the table) and against lim's limits on one sample, and marks its
// locations as leaf or caller.
func (p *Profile) checkSample(s []byte, types int, lim record.Limits) bool {
	values, depth, labels := 0, 0, 0
	for len(s) > 0 {
		num, typ, u, data, rest, ok := pprofwire.Field(s)
		if !ok {
			return false
		}
		s = rest
		switch num {
		case 1:
			bad := false
			if !varints(typ, u, data, func(id uint64) {
				i := p.location(id)
				if i < 0 {
					bad = true
					return
				}
				if depth == 0 {
					p.marks[i] |= leafMark
				} else {
					p.marks[i] |= callerMark
				}
				depth++
			}) || bad {
				return false
			}
		case 2:
			if !varints(typ, u, data, func(uint64) { values++ }) {
				return false
			}
		case 3:
			if labels++; labels > lim.MaxLabelsPerSample {
				return false
			}
			var key, str, num, unit uint64
			if typ != 2 || !scalars(data, []*uint64{&key, &str, &num, &unit}) || !p.validStr(key) {
				return false
			}
			// The strings pprof's decoder resolves: the value of a string
			// label, else the unit of a numeric one.
			if str != 0 {
				if !p.validStr(str) {
					return false
				}
			} else if unit != 0 && !p.validStr(unit) {
				return false
			}
		}
	}
	return values == types && depth <= lim.MaxLocationsPerSample
}

// CallerOnly reports a location that appears in samples only below the
// leaf: its address is a return address.
func (p *Profile) CallerOnly(l *profile.Location) bool {
	i := p.location(l.ID)
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
		if i < len(p.mapStrs) {
			orig = p.mapStrs[i]
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
		if i < len(p.fnStrs) {
			orig = p.fnStrs[i]
		}
		name, system, file := e.index(f.Name, orig[0]), e.index(f.SystemName, orig[1]), e.index(f.Filename, orig[2])
		msg = appendUint(msg[:0], 1, f.ID)
		msg = appendUint(msg, 2, name)
		msg = appendUint(msg, 3, system)
		msg = appendUint(msg, 4, file)
		msg = appendUint(msg, 5, uint64(f.StartLine))
		dst = appendBytes(dst, 5, msg)
	}
	for _, s := range p.strs {
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
	if orig < uint64(len(e.p.strs)) && string(e.p.strs[orig]) == s {
		return orig
	}
	if j, ok := e.added[s]; ok {
		return j
	}
	j := uint64(len(e.p.strs) + len(e.order))
	if len(s) > e.p.lim.MaxStringBytes {
		e.p.addedTooLong = true
	}
	e.added[s] = j
	e.order = append(e.order, s)
	return j
}
