package pprofwire

import (
	"errors"
	"slices"

	"github.com/stackstream/stackstream/schemas/record"
)

// ErrUnsupported means Read does not read the protobuf exactly as
// google/pprof's parser and Profile.CheckValid would: it is malformed,
// hostile (past a limit), or unusual (a field pprof does not define at the
// top level, a wire type pprof skips, two period types). The caller decodes
// it in full (record.DecodeProfileLimits), which gives the right result or
// the precise error, and so the same DLQ reason.
var ErrUnsupported = errors.New("profile needs the full pprof decoder")

// Tables are the tables of one pprof protobuf as its fields have them:
// string fields are indices into Strings (slices of the protobuf), samples
// are their raw messages (ReadSample), each location's lines a range of
// Lines. Read reuses a Tables' memory from one protobuf to the next; it is
// not safe for concurrent use.
type Tables struct {
	Strings           [][]byte
	SampleTypes       []ValueType
	Samples           [][]byte
	Mappings          []Mapping
	Locations         []Location
	Lines             []Line
	Functions         []Function
	TimeNanos         int64
	DefaultSampleType uint64

	limits                   *record.Limits
	mapIDs, funcIDs, locIDs  IDIndex
	checkStrs                []uint64 // string indices pprof resolves (and so must be valid)
	ids                      []uint64 // scratch
	strVals                  []string // Strings converted on first use
	strDone                  []bool
	sampleBuf                []byte // ReadSample's labels when apart
	comments                 int
	timeSeen, periodTypeSeen bool
}

// The messages of profile.proto (google/pprof); the uint64 fields that name
// a string are indices into Tables.Strings, every field as on the wire.
type (
	ValueType struct{ Type, Unit uint64 }
	Mapping   struct {
		ID, Start, Limit, Offset, File, BuildID                     uint64
		HasFunctions, HasFilenames, HasLineNumbers, HasInlineFrames bool
	}
	Function struct{ ID, Name, SystemName, Filename, StartLine uint64 }
	Line     struct{ Function, Line, Column uint64 }
	Location struct {
		ID, Mapping, Address uint64
		IsFolded             bool
		Lines                [2]int32 // range in Tables.Lines
	}
	Label struct{ Key, Str, Num, NumUnit uint64 }
)

// Fields of profile.proto's Profile message.
const (
	fieldSampleType        = 1
	fieldSample            = 2
	fieldMapping           = 3
	fieldLocation          = 4
	fieldFunction          = 5
	fieldStringTable       = 6
	fieldDropFrames        = 7
	fieldKeepFrames        = 8
	fieldTimeNanos         = 9
	fieldDurationNanos     = 10
	fieldPeriodType        = 11
	fieldPeriod            = 12
	fieldComment           = 13
	fieldDefaultSampleType = 14
	fieldDocURL            = 15
)

// Read reads raw, a pprof protobuf, into t, refusing with ErrUnsupported
// what it does not read as pprof would (see ErrUnsupported) and whatever
// passes a limit of l: the limits on one element (sample types, mappings,
// comments, a string's bytes; a sample's locations and labels in
// ReadSample) and on the tables' counts as it reads, before they are
// allocated; the whole of l (record.Limits.Check) first when raw is as long
// as CheckAbove(l). visit, when not nil, is called with each top-level
// field's number and its bytes in raw, key included, in order.
func (t *Tables) Read(raw []byte, l *record.Limits, visit func(num uint64, start, end int)) error {
	t.reset(l)
	if len(raw) == 0 || len(raw) >= CheckAbove(*l) && l.Check(raw) != nil {
		return ErrUnsupported
	}
	for b := raw; len(b) > 0; {
		start := len(raw) - len(b)
		var num, u uint64
		var typ int
		var data []byte
		if k := b[0]; k < 0x80 && k&7 == 2 {
			// A one-byte key of a length-delimited field: nearly every
			// field of a profile, read here as Field would.
			n, m := Varint(b[1:])
			if m == 0 || n > uint64(len(b)-1-m) {
				return ErrUnsupported
			}
			num, typ, data, b = uint64(k>>3), 2, b[1+m:1+m+int(n)], b[1+m+int(n):]
		} else {
			var rest []byte
			var ok bool
			if num, typ, u, data, rest, ok = Field(b); !ok {
				return ErrUnsupported
			}
			b = rest
		}
		// The switch here rather than in a function: a call per field
		// (every sample, string, location and function is one) cost a
		// tenth of reading the tables.
		ok := true
		l := t.limits
		switch num {
		case fieldSampleType, fieldPeriodType:
			ok = t.readValueType(num, typ, data)
		case fieldSample:
			ok = typ == 2 && len(t.Samples) < l.MaxSamples
			t.Samples = append(t.Samples, data)
		case fieldMapping:
			ok = typ == 2 && len(t.Mappings) < l.MaxMappings && t.readMapping(data)
		case fieldLocation:
			ok = typ == 2 && len(t.Locations) < l.MaxLocations && t.readLocation(data)
		case fieldFunction:
			ok = typ == 2 && len(t.Functions) < l.MaxFunctions && t.readFunction(data)
		case fieldStringTable:
			// pprof: string_table[0] must be ''
			ok = typ == 2 && (len(t.Strings) > 0 || len(data) == 0) && len(data) <= l.MaxStringBytes && len(t.Strings) < l.MaxStrings
			t.Strings = append(t.Strings, data)
		case fieldDropFrames, fieldKeepFrames, fieldDocURL, fieldDefaultSampleType:
			ok = typ == 0
			t.checkStrs = append(t.checkStrs, u)
			if num == fieldDefaultSampleType {
				t.DefaultSampleType = u
			}
		case fieldDurationNanos, fieldPeriod:
			ok = typ == 0
		case fieldTimeNanos:
			ok = typ == 0 && !(t.timeSeen && t.TimeNanos != 0) // pprof refuses a concatenated profile
			t.timeSeen, t.TimeNanos = true, int64(u)
		case fieldComment:
			ok = t.readComments(typ, u, data)
		default:
			ok = false
		}
		if !ok {
			return ErrUnsupported
		}
		if visit != nil {
			visit(num, start, len(raw)-len(b))
		}
	}
	if !t.resolve() {
		return ErrUnsupported
	}
	return nil
}

func (t *Tables) reset(l *record.Limits) {
	t.limits = l
	t.Strings = t.Strings[:0]
	t.SampleTypes = t.SampleTypes[:0]
	t.Samples = t.Samples[:0]
	t.Mappings = t.Mappings[:0]
	t.Locations = t.Locations[:0]
	t.Lines = t.Lines[:0]
	t.Functions = t.Functions[:0]
	t.checkStrs = t.checkStrs[:0]
	t.TimeNanos, t.DefaultSampleType = 0, 0
	t.comments, t.timeSeen, t.periodTypeSeen = 0, false, false
}

// readValueType reads a sample type or the period type.
func (t *Tables) readValueType(num uint64, typ int, data []byte) bool {
	var vt ValueType
	if typ != 2 || !Scalars(data, []*uint64{&vt.Type, &vt.Unit}) {
		return false
	}
	if num == fieldSampleType {
		t.SampleTypes = append(t.SampleTypes, vt)
		return len(t.SampleTypes) <= t.limits.MaxSampleTypes
	}
	if t.periodTypeSeen {
		return false // pprof keeps the last; record.Limits refuses two
	}
	t.periodTypeSeen = true
	t.checkStrs = append(t.checkStrs, vt.Type, vt.Unit)
	return true
}

func (t *Tables) readMapping(data []byte) bool {
	var m Mapping
	var fns, files, lines, inline uint64
	if !Scalars(data, []*uint64{&m.ID, &m.Start, &m.Limit, &m.Offset, &m.File, &m.BuildID, &fns, &files, &lines, &inline}) {
		return false
	}
	m.HasFunctions, m.HasFilenames, m.HasLineNumbers, m.HasInlineFrames = fns != 0, files != 0, lines != 0, inline != 0
	t.Mappings = append(t.Mappings, m)
	return true
}

func (t *Tables) readFunction(data []byte) bool {
	var f Function
	if !Scalars(data, []*uint64{&f.ID, &f.Name, &f.SystemName, &f.Filename, &f.StartLine}) {
		return false
	}
	t.Functions = append(t.Functions, f)
	return true
}

// readComments reads a comment field, one or packed; a packed one can hold
// millions, bounded here rather than after they are stored.
func (t *Tables) readComments(typ int, u uint64, data []byte) bool {
	switch typ {
	case 0:
		t.checkStrs = append(t.checkStrs, u)
		t.comments++
	case 2:
		for len(data) > 0 && t.comments <= t.limits.MaxComments {
			v, n := Varint(data)
			if n == 0 {
				return false
			}
			t.checkStrs = append(t.checkStrs, v)
			t.comments++
			data = data[n:]
		}
	default:
		return false
	}
	return t.comments <= t.limits.MaxComments
}

// Fields of profile.proto's Location message.
const (
	fieldLocationID      = 1
	fieldLocationMapping = 2
	fieldLocationAddress = 3
	fieldLocationLine    = 4
	fieldLocationFolded  = 5
)

// readLocation reads a location message (Field and Scalars inlined: a
// profile has thousands).
func (t *Tables) readLocation(b []byte) bool {
	loc := Location{Lines: [2]int32{int32(len(t.Lines)), 0}}
	for len(b) > 0 {
		key, n := Varint(b)
		if n == 0 {
			return false
		}
		switch {
		case key&7 == 0:
			u, m := Varint(b[n:])
			if m == 0 {
				return false
			}
			b = b[n+m:]
			switch key >> 3 {
			case fieldLocationID:
				loc.ID = u
			case fieldLocationMapping:
				loc.Mapping = u
			case fieldLocationAddress:
				loc.Address = u
			case fieldLocationFolded:
				loc.IsFolded = u != 0
			case fieldLocationLine:
				return false // pprof refuses a line that is not a message
			}
		case key == fieldLocationLine<<3|2:
			size, m := Varint(b[n:])
			if m == 0 || size > uint64(len(b)-n-m) {
				return false
			}
			data := b[n+m : n+m+int(size)]
			b = b[n+m+int(size):]
			var ln Line
			if len(t.Lines) == t.limits.MaxLines || !Scalars(data, []*uint64{&ln.Function, &ln.Line, &ln.Column}) {
				return false
			}
			t.Lines = append(t.Lines, ln)
		default:
			// pprof skips a field it does not define, and refuses one it
			// defines with another wire type.
			num, _, _, _, rest, ok := Field(b)
			if !ok || num >= fieldLocationID && num <= fieldLocationFolded {
				return false
			}
			b = rest
		}
	}
	loc.Lines[1] = int32(len(t.Lines))
	t.Locations = append(t.Locations, loc)
	return true
}

// resolve checks the tables' references as pprof's parser and
// Profile.CheckValid do, refusing what they would refuse, and indexes the
// tables by ID.
func (t *Tables) resolve() bool {
	if len(t.Strings) == 0 || len(t.Samples) > 0 && len(t.SampleTypes) == 0 {
		return false
	}
	for _, i := range t.checkStrs {
		if !t.ValidString(i) {
			return false
		}
	}
	for _, st := range t.SampleTypes {
		if !t.ValidString(st.Type) || !t.ValidString(st.Unit) {
			return false
		}
	}
	// The IDs gathered into a slice first: indexing over a closure cost a
	// call per ID.
	t.ids = t.ids[:0]
	for _, m := range t.Mappings {
		if !t.ValidString(m.File) || !t.ValidString(m.BuildID) {
			return false
		}
		t.ids = append(t.ids, m.ID)
	}
	if !t.mapIDs.index(t.ids) {
		return false
	}
	t.ids = t.ids[:0]
	for _, f := range t.Functions {
		if !t.ValidString(f.Name) || !t.ValidString(f.SystemName) || !t.ValidString(f.Filename) {
			return false
		}
		t.ids = append(t.ids, f.ID)
	}
	if !t.funcIDs.index(t.ids) {
		return false
	}
	t.ids = t.ids[:0]
	for _, loc := range t.Locations {
		t.ids = append(t.ids, loc.ID)
	}
	if !t.locIDs.index(t.ids) {
		return false
	}
	for i := range t.Locations {
		loc := &t.Locations[i]
		// pprof's parser leaves a location naming a mapping the table
		// lacks without one: refused, so that no reader has to know.
		if loc.Mapping != 0 && t.mapIDs.Index(loc.Mapping) < 0 {
			return false
		}
		// CheckValid refuses a line without a function, as one naming a
		// function the table lacks.
		for _, ln := range t.LocationLines(loc) {
			if t.funcIDs.Index(ln.Function) < 0 {
				return false
			}
		}
	}
	t.strVals = grow(t.strVals, len(t.Strings))
	t.strDone = grow(t.strDone, len(t.Strings))
	return true
}

// grow returns s with n zero elements, in s's array when it is large
// enough, else in one grown as append grows (profiles of a fleet differ in
// size: an exact fit was allocated again by most larger ones). It clears
// them: a profile's strings are not kept for the next.
func grow[T any](s []T, n int) []T {
	s = slices.Grow(s[:0], n)[:n]
	clear(s)
	return s
}

// ValidString reports whether i, read as pprof reads string indices (an
// int64), is in the string table.
func (t *Tables) ValidString(i uint64) bool { return int64(i) >= 0 && int64(i) < int64(len(t.Strings)) }

// String is string i of the table, converted once a profile, so that what
// is built from it shares it as pprof's strings are shared. i must be valid.
func (t *Tables) String(i uint64) string {
	if !t.strDone[i] {
		t.strVals[i] = string(t.Strings[i])
		t.strDone[i] = true
	}
	return t.strVals[i]
}

// DenseIDs reports whether the IDs of every table are as pprof's encoder
// numbers them (1..n, give or take): looked up in a slice, not a map.
func (t *Tables) DenseIDs() bool {
	return t.mapIDs.sparse == nil && t.funcIDs.sparse == nil && t.locIDs.sparse == nil
}

// MappingIndex, FunctionIndex and LocationIndex are the index in their
// table of the entry with ID id, or -1.
func (t *Tables) MappingIndex(id uint64) int  { return t.mapIDs.Index(id) }
func (t *Tables) FunctionIndex(id uint64) int { return t.funcIDs.Index(id) }
func (t *Tables) LocationIndex(id uint64) int { return t.locIDs.Index(id) }

// LocationLines are the lines of loc, a location of t.
func (t *Tables) LocationLines(loc *Location) []Line { return t.Lines[loc.Lines[0]:loc.Lines[1]] }

// IDIndex maps the IDs of a table's entries to their index: in a slice
// when they are dense (IndexIDs), else in a map.
type IDIndex struct {
	dense  []int32
	sparse map[uint64]int32
}

// index indexes ids; false when one is zero or repeated, which pprof
// refuses.
func (x *IDIndex) index(ids []uint64) bool {
	var ok bool
	if x.dense, ok = IndexIDs(x.dense, ids); ok {
		x.sparse = nil
		return true
	}
	clear(x.dense)
	x.sparse = make(map[uint64]int32, len(ids))
	for i, id := range ids {
		if _, dup := x.sparse[id]; dup || id == 0 {
			return false
		}
		x.sparse[id] = int32(i)
	}
	return true
}

// Index is the index of the entry with ID id, or -1.
func (x *IDIndex) Index(id uint64) int {
	if x.sparse != nil {
		return x.sparseIndex(id)
	}
	return Lookup(x.dense, id)
}

func (x *IDIndex) sparseIndex(id uint64) int {
	if i, ok := x.sparse[id]; ok {
		return int(i)
	}
	return -1
}

// Sample is what ReadSample reads of a sample message.
type Sample struct {
	LocationIDs []uint64
	Values      []int64
	// Labels are the sample's label fields, keys included, together as on
	// the wire: a slice of the message when they are (pprof's encoder
	// writes them so), else copied together; equal label fields are equal
	// bytes. NextLabel reads them.
	Labels []byte
	labels int
}

// Fields of profile.proto's Sample message.
const (
	fieldSampleLocationID = 1
	fieldSampleValue      = 2
	fieldSampleLabel      = 3
)

// ReadSample reads sample message s into dst, reusing its memory, refusing
// what pprof's parser and CheckValid would refuse and what passes t's
// limits on one sample: a value count other than the sample types', more
// than MaxLocationsPerSample locations or MaxLabelsPerSample labels. The
// location IDs are not resolved (LocationIndex), nor the labels read
// (NextLabel).
func (t *Tables) ReadSample(s []byte, dst *Sample) bool {
	dst.LocationIDs, dst.Values, dst.Labels, dst.labels = dst.LocationIDs[:0], dst.Values[:0], nil, 0
	full := s
	labelStart, labelEnd, labelsApart := -1, -1, false
	for len(s) > 0 {
		start := len(full) - len(s)
		num, typ, u, data, rest, ok := Field(s)
		if !ok {
			return false
		}
		s = rest
		switch num {
		case fieldSampleLocationID:
			dst.LocationIDs, ok = AppendVarints(dst.LocationIDs, typ, u, data)
		case fieldSampleValue:
			dst.Values, ok = AppendVarints(dst.Values, typ, u, data)
		case fieldSampleLabel:
			ok = typ == 2
			if labelStart < 0 {
				labelStart = start
			} else if labelEnd != start {
				labelsApart = true
			}
			labelEnd = len(full) - len(s)
			dst.labels++
		}
		if !ok {
			return false
		}
	}
	if len(dst.Values) != len(t.SampleTypes) || len(dst.LocationIDs) > t.limits.MaxLocationsPerSample || dst.labels > t.limits.MaxLabelsPerSample {
		return false
	}
	switch {
	case labelsApart:
		// Rare: copied together, the fields as they are.
		t.sampleBuf = t.sampleBuf[:0]
		for r := full; len(r) > 0; {
			num, _, _, _, rest, _ := Field(r) // read above
			if num == fieldSampleLabel {
				t.sampleBuf = append(t.sampleBuf, r[:len(r)-len(rest)]...)
			}
			r = rest
		}
		dst.Labels = t.sampleBuf[:len(t.sampleBuf):len(t.sampleBuf)]
	case labelStart >= 0:
		dst.Labels = full[labelStart:labelEnd:labelEnd]
	}
	return true
}

// NextLabel reads the first label of labels (Sample.Labels) and returns
// the rest. The label's strings are not checked (ValidString).
func NextLabel(labels []byte) (l Label, rest []byte, ok bool) {
	_, typ, _, data, rest, ok := Field(labels)
	if !ok || typ != 2 || !Scalars(data, []*uint64{&l.Key, &l.Str, &l.Num, &l.NumUnit}) {
		return Label{}, nil, false
	}
	return l, rest, true
}
