package convert

import (
	"errors"
	"fmt"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/stackstream/stackstream/schemas/record"
)

// errSlowPath means a profile needs what only the parsed path does (a
// pseudo-mapping for named frames without one, sample types to complete,
// a split into parts); it is not an error of the input.
var errSlowPath = errors.New("needs the parsed path")

// Field numbers of profile.proto (google/pprof).
const (
	fProfileSampleType    = 1
	fProfileSample        = 2
	fProfileMapping       = 3
	fProfileLocation      = 4
	fProfileFunction      = 5
	fProfileStringTable   = 6
	fProfileTimeNanos     = 9
	fProfileDurationNanos = 10

	fValueTypeType = 1

	fSampleLocationID = 1
	fSampleLabel      = 3
	fLabelKey         = 1
	fLabelStr         = 2

	fMappingID           = 1
	fMappingHasFunctions = 7

	fLocationID        = 1
	fLocationMappingID = 2
	fLocationLine      = 4
	fLineFunctionID    = 1

	fFunctionID = 1

	fProfileDropFrames        = 7
	fProfileKeepFrames        = 8
	fProfilePeriodType        = 11
	fProfileComment           = 13
	fProfileDefaultSampleType = 14
)

// String table indexes, checked in range as pprof's decoder does.
var (
	valueTypeStrings = []protowire.Number{1, 2}    // type, unit
	mappingStrings   = []protowire.Number{5, 6}    // filename, build_id
	functionStrings  = []protowire.Number{2, 3, 4} // name, system_name, filename
	labelStrings     = []protowire.Number{1, 2, 4} // key, str, num_unit
)

// wireProfile is what the first pass over a profile learns.
type wireProfile struct {
	strings     [][]byte
	sampleTypes []int64 // string index of each sample type's type
	timeNanos   int64
	duration    int64
	locations   idSet
	functions   idSet
	mappings    idSet
	// unnamed holds the mappings with a location without lines; named
	// those with a location with lines.
	unnamed, named map[uint64]bool
	orphanNamed    bool // a location with lines and no mapping
	samples        int
	locMappings    []uint64
	lineFunctions  []uint64
}

// idSet holds the IDs of one kind of message, to check references the way
// pprof's CheckValid does (IDs are non-zero, unique, and what is referred
// to exists), without a map for the usual dense IDs.
type idSet struct {
	dense  []bool
	sparse map[uint64]bool
}

func (s *idSet) add(id uint64) bool {
	if id == 0 {
		return false
	}
	if id < 1<<20 {
		if int(id) >= len(s.dense) {
			s.dense = append(s.dense, make([]bool, int(id)+1-len(s.dense))...)
		}
		if s.dense[id] {
			return false
		}
		s.dense[id] = true
		return true
	}
	if s.sparse == nil {
		s.sparse = map[uint64]bool{}
	}
	if s.sparse[id] {
		return false
	}
	s.sparse[id] = true
	return true
}

func (s *idSet) has(id uint64) bool {
	if id < uint64(len(s.dense)) {
		return s.dense[id]
	}
	return s.sparse[id]
}

// rewriteWire does what Records does with a parsed profile, on the
// protobuf itself: it adds labels to every sample (replacing sample labels
// of the same keys and the tenant label), marks the mappings whose every
// location is named HasFunctions, and stamps the time where the profile
// has none (stamp gets the profile's time and duration and returns those
// to write, or why the time is refused). An empty result without an
// error means the profile has no samples. raw must have passed record.Limits.Check. It returns the
// record types by the sample types, or errSlowPath when the profile needs
// the parsed path; ErrInvalidProfile (wrapped) when a reference is broken.
func rewriteWire(raw []byte, labels map[string]string, stamp func(timeNanos, durationNanos int64) (int64, int64, error)) ([]byte, []record.ProfileType, error) {
	var w wireProfile
	w.unnamed, w.named = map[uint64]bool{}, map[uint64]bool{}
	if err := w.scan(raw); err != nil {
		return nil, nil, err
	}
	if w.samples == 0 {
		return nil, nil, nil
	}
	types, err := w.types()
	if err != nil {
		return nil, nil, err
	}
	if w.orphanNamed {
		return nil, nil, errSlowPath
	}
	if w.timeNanos, w.duration, err = stamp(w.timeNanos, w.duration); err != nil {
		return nil, nil, err
	}
	for _, id := range w.locMappings {
		if id != 0 && !w.mappings.has(id) {
			return nil, nil, fmt.Errorf("%w: location refers to mapping %d, which the profile does not define", record.ErrInvalidProfile, id)
		}
	}
	for _, id := range w.lineFunctions {
		if id != 0 && !w.functions.has(id) {
			return nil, nil, fmt.Errorf("%w: line refers to function %d, which the profile does not define", record.ErrInvalidProfile, id)
		}
	}

	// The new strings go at the end of the string table.
	keys := make([]string, 0, len(labels))
	for k := range labels {
		keys = append(keys, k)
	}
	drop := make(map[string]bool, len(labels)+1)
	drop[LabelTenant] = true
	for _, k := range keys {
		drop[k] = true
	}
	next := int64(len(w.strings))
	var label []byte // the Label messages appended to every sample
	var table []byte
	for _, k := range keys {
		var l []byte
		l = protowire.AppendTag(l, fLabelKey, protowire.VarintType)
		l = protowire.AppendVarint(l, uint64(next))
		l = protowire.AppendTag(l, fLabelStr, protowire.VarintType)
		l = protowire.AppendVarint(l, uint64(next+1))
		label = protowire.AppendTag(label, fSampleLabel, protowire.BytesType)
		label = protowire.AppendBytes(label, l)
		for _, s := range []string{k, labels[k]} {
			table = protowire.AppendTag(table, fProfileStringTable, protowire.BytesType)
			table = protowire.AppendString(table, s)
		}
		next += 2
	}

	out := make([]byte, 0, len(raw)+w.samples*len(label)+len(table)+32)
	// Fields pass through in runs, copied at once; samples, mappings to
	// mark and the times break a run.
	run := 0
	for pos := 0; pos < len(raw); {
		num, typ, n := protowire.ConsumeTag(raw[pos:])
		if n < 0 {
			return nil, nil, fmt.Errorf("%w: %v", record.ErrNotPprof, protowire.ParseError(n))
		}
		var msg []byte
		m := 0
		if typ == protowire.BytesType {
			msg, m = protowire.ConsumeBytes(raw[pos+n:])
		} else {
			m = protowire.ConsumeFieldValue(num, typ, raw[pos+n:])
		}
		if m < 0 {
			return nil, nil, fmt.Errorf("%w: %v", record.ErrNotPprof, protowire.ParseError(m))
		}
		start, end := pos, pos+n+m
		pos = end
		switch {
		case num == fProfileSample && typ == protowire.BytesType:
			out = append(out, raw[run:start]...)
			run = end
			if out, err = w.rewriteSample(out, msg, label, drop); err != nil {
				return nil, nil, err
			}
		case num == fProfileMapping && typ == protowire.BytesType:
			if err := w.checkStrings(msg, mappingStrings); err != nil {
				return nil, nil, err
			}
			if id := firstVarint(msg, fMappingID); w.named[id] && !w.unnamed[id] {
				out = append(out, raw[run:start]...)
				run = end
				// Appended to the message: the last value of a field wins.
				out = protowire.AppendTag(out, fProfileMapping, protowire.BytesType)
				out = protowire.AppendVarint(out, uint64(len(msg)+2))
				out = append(append(out, msg...), byte(fMappingHasFunctions<<3), 1)
			}
		case num == fProfileTimeNanos || num == fProfileDurationNanos:
			out = append(out, raw[run:start]...) // written below
			run = end
		case num == fProfileFunction && typ == protowire.BytesType:
			err = w.checkStrings(msg, functionStrings)
		case (num == fProfileSampleType || num == fProfilePeriodType) && typ == protowire.BytesType:
			err = w.checkStrings(msg, valueTypeStrings)
		case num == fProfileDropFrames || num == fProfileKeepFrames || num == fProfileDefaultSampleType || num == fProfileComment:
			err = w.checkStrings(raw[start:end], []protowire.Number{num})
		}
		if err != nil {
			return nil, nil, err
		}
	}
	out = append(out, raw[run:]...)
	out = append(out, table...)
	out = protowire.AppendTag(out, fProfileTimeNanos, protowire.VarintType)
	out = protowire.AppendVarint(out, uint64(w.timeNanos))
	out = protowire.AppendTag(out, fProfileDurationNanos, protowire.VarintType)
	out = protowire.AppendVarint(out, uint64(w.duration))
	return out, types, nil
}

// rewriteSample appends sample msg to out with label added and the labels
// of the keys in drop left out, checking its location IDs.
func (w *wireProfile) rewriteSample(out, msg, label []byte, drop map[string]bool) ([]byte, error) {
	dropped := 0
	for rest := msg; len(rest) > 0; {
		num, typ, n := protowire.ConsumeTag(rest)
		if n < 0 {
			return nil, fmt.Errorf("%w: %v", record.ErrNotPprof, protowire.ParseError(n))
		}
		var payload []byte
		m := 0
		if typ == protowire.BytesType {
			payload, m = protowire.ConsumeBytes(rest[n:])
		} else {
			m = protowire.ConsumeFieldValue(num, typ, rest[n:])
		}
		if m < 0 {
			return nil, fmt.Errorf("%w: %v", record.ErrNotPprof, protowire.ParseError(m))
		}
		field := rest[:n+m]
		rest = rest[n+m:]
		switch {
		case num == fSampleLocationID:
			if err := w.checkLocations(typ, field, payload); err != nil {
				return nil, err
			}
		case num == fSampleLabel && typ == protowire.BytesType:
			if err := w.checkStrings(payload, labelStrings); err != nil {
				return nil, err
			}
			if w.dropLabel(payload, drop) {
				dropped += len(field)
			}
		}
	}
	out = protowire.AppendTag(out, fProfileSample, protowire.BytesType)
	out = protowire.AppendVarint(out, uint64(len(msg)-dropped+len(label)))
	if dropped == 0 {
		out = append(out, msg...)
	} else {
		walkFields(msg, func(num protowire.Number, typ protowire.Type, field, lmsg []byte, _ uint64) error {
			if !(num == fSampleLabel && typ == protowire.BytesType && w.dropLabel(lmsg, drop)) {
				out = append(out, field...)
			}
			return nil
		})
	}
	return append(out, label...), nil
}

// checkStrings checks that the varint fields nums of msg (packed or not)
// are indexes into the string table.
func (w *wireProfile) checkStrings(msg []byte, nums []protowire.Number) error {
	check := func(num protowire.Number, v uint64) error {
		if v >= uint64(len(w.strings)) {
			return fmt.Errorf("%w: field %d names string %d, the table holds %d", record.ErrNotPprof, num, int64(v), len(w.strings))
		}
		return nil
	}
	for len(msg) > 0 {
		num, typ, n := protowire.ConsumeTag(msg)
		if n < 0 {
			return fmt.Errorf("%w: %v", record.ErrNotPprof, protowire.ParseError(n))
		}
		msg = msg[n:]
		want := false
		for _, f := range nums {
			want = want || f == num
		}
		switch {
		case want && typ == protowire.VarintType:
			v, m := protowire.ConsumeVarint(msg)
			if m < 0 {
				return fmt.Errorf("%w: %v", record.ErrNotPprof, protowire.ParseError(m))
			}
			if err := check(num, v); err != nil {
				return err
			}
			msg = msg[m:]
		case want && typ == protowire.BytesType: // packed
			b, m := protowire.ConsumeBytes(msg)
			if m < 0 {
				return fmt.Errorf("%w: %v", record.ErrNotPprof, protowire.ParseError(m))
			}
			for len(b) > 0 {
				v, k := protowire.ConsumeVarint(b)
				if k < 0 {
					return fmt.Errorf("%w: %v", record.ErrNotPprof, protowire.ParseError(k))
				}
				if err := check(num, v); err != nil {
					return err
				}
				b = b[k:]
			}
			msg = msg[m:]
		default:
			m := protowire.ConsumeFieldValue(num, typ, msg)
			if m < 0 {
				return fmt.Errorf("%w: %v", record.ErrNotPprof, protowire.ParseError(m))
			}
			msg = msg[m:]
		}
	}
	return nil
}

func (w *wireProfile) dropLabel(msg []byte, drop map[string]bool) bool {
	key := labelKey(msg)
	return key >= 0 && key < int64(len(w.strings)) && drop[string(w.strings[key])]
}

// firstVarint is varint field num of msg, read directly when it is the
// message's first field (as pprof writes IDs), else by walking it.
func firstVarint(msg []byte, num protowire.Number) uint64 {
	if len(msg) > 1 && msg[0] == byte(num<<3) {
		if v, n := protowire.ConsumeVarint(msg[1:]); n > 0 {
			// A later repetition would win; pprof writes an ID once.
			if !repeats(msg[1+n:], num) {
				return v
			}
		}
	}
	return fieldVarint(msg, num)
}

// repeats reports whether field num occurs in msg.
func repeats(msg []byte, num protowire.Number) bool {
	found := false
	walkFields(msg, func(n protowire.Number, _ protowire.Type, _, _ []byte, _ uint64) error {
		if n == num {
			found = true
		}
		return nil
	})
	return found
}

// types classifies the profile by its sample types as Classify does, or
// errSlowPath when only the parsed path can (samples/count to complete).
func (w *wireProfile) types() ([]record.ProfileType, error) {
	names := make(map[string]bool, len(w.sampleTypes))
	for _, i := range w.sampleTypes {
		if i < 0 || i >= int64(len(w.strings)) {
			return nil, fmt.Errorf("%w: sample type names string %d of %d", record.ErrInvalidProfile, i, len(w.strings))
		}
		names[string(w.strings[i])] = true
	}
	if names["cpu"] {
		return []record.ProfileType{record.ProfileCPU}, nil
	}
	if names["offcpu"] {
		return []record.ProfileType{record.ProfileOffCPU}, nil
	}
	var out []record.ProfileType
	if names["inuse_space"] || names["inuse_objects"] {
		out = append(out, record.ProfileHeap)
	}
	if names["alloc_space"] || names["alloc_objects"] {
		out = append(out, record.ProfileAlloc)
	}
	if len(out) == 0 {
		return nil, errSlowPath
	}
	return out, nil
}

// scan is the first pass: strings, sample types, times, and the IDs and
// references of mappings, locations and functions.
func (w *wireProfile) scan(raw []byte) error {
	return walkFields(raw, func(num protowire.Number, typ protowire.Type, _, msg []byte, v uint64) error {
		switch num {
		case fProfileStringTable:
			w.strings = append(w.strings, msg)
		case fProfileSample:
			w.samples++
		case fProfileSampleType:
			w.sampleTypes = append(w.sampleTypes, int64(fieldVarint(msg, fValueTypeType)))
		case fProfileTimeNanos:
			w.timeNanos = int64(v)
		case fProfileDurationNanos:
			w.duration = int64(v)
		case fProfileMapping:
			if !w.mappings.add(fieldVarint(msg, fMappingID)) {
				return fmt.Errorf("%w: mapping ID zero or repeated", record.ErrInvalidProfile)
			}
		case fProfileFunction:
			if !w.functions.add(fieldVarint(msg, fFunctionID)) {
				return fmt.Errorf("%w: function ID zero or repeated", record.ErrInvalidProfile)
			}
		case fProfileLocation:
			id, mapping, lines, err := w.scanLocation(msg)
			if err != nil {
				return err
			}
			if !w.locations.add(id) {
				return fmt.Errorf("%w: location ID zero or repeated", record.ErrInvalidProfile)
			}
			w.locMappings = append(w.locMappings, mapping)
			switch {
			case mapping == 0 && lines:
				w.orphanNamed = true
			case lines:
				if !w.named[mapping] {
					w.named[mapping] = true
				}
			case mapping != 0:
				if !w.unnamed[mapping] {
					w.unnamed[mapping] = true
				}
			}
		}
		return nil
	})
}

// scanLocation reads a Location's ID and mapping ID, and collects the
// function IDs of its lines.
func (w *wireProfile) scanLocation(msg []byte) (id, mapping uint64, lines bool, err error) {
	for len(msg) > 0 {
		num, typ, n := protowire.ConsumeTag(msg)
		if n < 0 {
			return 0, 0, false, fmt.Errorf("%w: %v", record.ErrNotPprof, protowire.ParseError(n))
		}
		msg = msg[n:]
		switch {
		case typ == protowire.VarintType:
			v, m := protowire.ConsumeVarint(msg)
			if m < 0 {
				return 0, 0, false, fmt.Errorf("%w: %v", record.ErrNotPprof, protowire.ParseError(m))
			}
			switch num {
			case fLocationID:
				id = v
			case fLocationMappingID:
				mapping = v
			}
			msg = msg[m:]
		case typ == protowire.BytesType && num == fLocationLine:
			line, m := protowire.ConsumeBytes(msg)
			if m < 0 {
				return 0, 0, false, fmt.Errorf("%w: %v", record.ErrNotPprof, protowire.ParseError(m))
			}
			lines = true
			// Line.function_id is its first field as pprof writes it.
			fn := uint64(0)
			if len(line) > 1 && line[0] == fLineFunctionID<<3 {
				if v, k := protowire.ConsumeVarint(line[1:]); k > 0 {
					fn = v
				}
			} else {
				fn = fieldVarint(line, fLineFunctionID)
			}
			w.lineFunctions = append(w.lineFunctions, fn)
			msg = msg[m:]
		default:
			m := protowire.ConsumeFieldValue(num, typ, msg)
			if m < 0 {
				return 0, 0, false, fmt.Errorf("%w: %v", record.ErrNotPprof, protowire.ParseError(m))
			}
			msg = msg[m:]
		}
	}
	return id, mapping, lines, nil
}

// walkFields calls fn with each field of msg: its number, wire type, the
// whole field as encoded, and its payload (bytes) or value (varint).
func walkFields(msg []byte, fn func(num protowire.Number, typ protowire.Type, field, payload []byte, v uint64) error) error {
	for len(msg) > 0 {
		num, typ, n := protowire.ConsumeTag(msg)
		if n < 0 {
			return fmt.Errorf("%w: %v", record.ErrNotPprof, protowire.ParseError(n))
		}
		var payload []byte
		var v uint64
		var m int
		switch typ {
		case protowire.BytesType:
			payload, m = protowire.ConsumeBytes(msg[n:])
		case protowire.VarintType:
			v, m = protowire.ConsumeVarint(msg[n:])
		default:
			m = protowire.ConsumeFieldValue(num, typ, msg[n:])
		}
		if m < 0 {
			return fmt.Errorf("%w: %v", record.ErrNotPprof, protowire.ParseError(m))
		}
		if err := fn(num, typ, msg[:n+m], payload, v); err != nil {
			return err
		}
		msg = msg[n+m:]
	}
	return nil
}

// fieldVarint is the last value of varint field num of msg, or 0.
func fieldVarint(msg []byte, num protowire.Number) uint64 {
	var out uint64
	walkFields(msg, func(n protowire.Number, typ protowire.Type, _, _ []byte, v uint64) error {
		if n == num && typ == protowire.VarintType {
			out = v
		}
		return nil
	})
	return out
}

// labelKey is the key string index of a Label message, or -1.
func labelKey(msg []byte) int64 {
	for len(msg) > 0 {
		num, typ, n := protowire.ConsumeTag(msg)
		if n < 0 {
			return -1
		}
		if num == fLabelKey && typ == protowire.VarintType {
			v, m := protowire.ConsumeVarint(msg[n:])
			if m < 0 {
				return -1
			}
			return int64(v)
		}
		m := protowire.ConsumeFieldValue(num, typ, msg[n:])
		if m < 0 {
			return -1
		}
		msg = msg[n+m:]
	}
	return -1
}

// checkLocations checks the location IDs of a sample's field (packed or
// not) name locations the profile defines.
func (w *wireProfile) checkLocations(typ protowire.Type, field, payload []byte) error {
	if typ == protowire.VarintType {
		_, _, n := protowire.ConsumeTag(field)
		payload = field[n:]
	}
	for len(payload) > 0 {
		id, n := protowire.ConsumeVarint(payload)
		if n < 0 {
			return fmt.Errorf("%w: %v", record.ErrNotPprof, protowire.ParseError(n))
		}
		if !w.locations.has(id) {
			return fmt.Errorf("%w: sample refers to location %d, which the profile does not define", record.ErrInvalidProfile, id)
		}
		if typ == protowire.VarintType {
			break
		}
		payload = payload[n:]
	}
	return nil
}
