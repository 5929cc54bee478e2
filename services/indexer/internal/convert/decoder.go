package convert

import (
	"bytes"
	"encoding/binary"
	"github.com/stackstream/stackstream/pkg/pprofwire"
	"io"

	"github.com/google/pprof/profile"
	"github.com/klauspost/compress/gzip"

	"github.com/stackstream/stackstream/schemas/record"
)

// Decoded tables of one profile; string fields are string table indices.
type (
	fastMapping struct {
		id, file, build uint64
	}
	fastFunction struct {
		id, name, system, file uint64
	}
	fastLine struct {
		function, line uint64
	}
	fastLocation struct {
		id, mapping, address uint64
		lines                [2]int // range in fastDecoder.lines
		hashed               bool
		hash                 [2]uint64
	}
	fastValueType struct{ typ, unit uint64 }
)

// locField is a location_id field of a sample: one ID or a packed list.
type locField struct {
	typ  int
	u    uint64
	data []byte
}

// fastDecoder is the state of one profile's conversion, reused between
// profiles (its slices keep their capacity).
type fastDecoder struct {
	zr      *gzip.Reader
	br      bytes.Reader
	raw     bytes.Buffer
	strs    [][]byte // string table, slices of raw
	strVals []string // strs converted on first use
	strDone []bool

	sampleTypes []fastValueType
	samples     [][]byte
	mappings    []fastMapping
	locations   []fastLocation
	lines       []fastLine
	functions   []fastFunction
	mapByID     []int32 // ID -> index+1
	funcByID    []int32
	locByID     []int32

	timeNanos, defaultType int64
	checkStrs              []int64 // string indices pprof resolves (and so must be valid)
	limits                 *fastLimits

	ids    []uint64
	values []int64
	buf    []byte
	lkey   [][2]uint64 // a stack's location hashes

	aggBufs     []*aggBuf
	stackByLocs hashSlots // 64-bit hash of a location key -> index in locKeys
	locKeys     []arenaKey
	byRawLabels hashSlots // 64-bit hash of a sample's label fields -> index in labelKeys
	labelKeys   []arenaKey
	keyArena    []byte
	stackIndex  hashSlots // mixed idPrefix of a stack ID -> index in Documents.Stacks
	tableIDs    []uint64  // scratch of index
	stackPrefix []uint64  // idPrefix by index in Documents.Stacks
	packed      []byte    // a document's stack_values, until encoded
	byID        []int32   // stack indices in ID order
	sortKeys    []uint64  // scratch of sortStacks
	key         []byte
	labelBuf    []byte
	locFields   []locField
	// lastStacks is how many stacks the previous profile had: the next
	// one's Documents.Stacks starts with that capacity instead of growing
	// (and copying) a dozen times.
	lastStacks int

	// Scratch for pprofx.LocationFrames.
	loc  profile.Location
	mp   profile.Mapping
	fns  []profile.Function
	plns []profile.Line
}

func (d *fastDecoder) decompress(value []byte, limit int) bool {
	if len(value) < 2 || value[0] != 0x1f || value[1] != 0x8b {
		return false
	}
	d.raw.Reset()
	if out, ok := record.AppendStored(d.raw.AvailableBuffer(), value); ok {
		// Stored gzip, as the symbolizer writes: the blocks are copied, not
		// inflated (Write copies out onto itself unless append had to grow).
		d.raw.Write(out)
		return d.raw.Len() > 0
	}
	d.br.Reset(value)
	if d.zr == nil {
		zr, err := gzip.NewReader(&d.br)
		if err != nil {
			return false
		}
		d.zr = zr
	} else if err := d.zr.Reset(&d.br); err != nil {
		return false
	}
	if _, err := d.raw.ReadFrom(io.LimitReader(d.zr, int64(limit)+1)); err != nil {
		return false
	}
	return d.raw.Len() > 0 && d.raw.Len() <= limit
}

func (d *fastDecoder) reset() {
	d.strs = d.strs[:0]
	d.sampleTypes = d.sampleTypes[:0]
	d.samples = d.samples[:0]
	d.mappings = d.mappings[:0]
	d.locations = d.locations[:0]
	d.lines = d.lines[:0]
	d.functions = d.functions[:0]
	d.checkStrs = d.checkStrs[:0]
	d.timeNanos, d.defaultType = 0, 0
}

// parse walks the profile message, keeping samples as raw bytes for later,
// and checks the limits on one element of l.
func (d *fastDecoder) parse(l *fastLimits) bool {
	d.reset()
	d.limits = l
	b := d.raw.Bytes()
	timeSeen, periodSeen := false, false
	comments := 0
	for len(b) > 0 {
		var num, u uint64
		var typ int
		var data []byte
		if k := b[0]; k < 0x80 && k&7 == 2 {
			// A one-byte key of a length-delimited field: nearly every
			// field of a profile, read here as field would.
			l, n := pprofwire.Varint(b[1:])
			if n == 0 || l > uint64(len(b)-1-n) {
				return false
			}
			num, typ, data, b = uint64(k>>3), 2, b[1+n:1+n+int(l)], b[1+n+int(l):]
		} else {
			var rest []byte
			var ok bool
			if num, typ, u, data, rest, ok = pprofwire.Field(b); !ok {
				return false
			}
			b = rest
		}
		switch num {
		case 1, 11: // sample_type, period_type
			if typ != 2 {
				return false
			}
			var vt fastValueType
			if !pprofwire.Scalars(data, []*uint64{&vt.typ, &vt.unit}) {
				return false
			}
			if num == 1 {
				d.sampleTypes = append(d.sampleTypes, vt)
				if len(d.sampleTypes) > l.MaxSampleTypes {
					return false
				}
			} else {
				if periodSeen {
					return false // pprof keeps the last; Limits refuses two
				}
				periodSeen = true
				d.checkStrs = append(d.checkStrs, int64(vt.typ), int64(vt.unit))
			}
		case 2:
			if typ != 2 {
				return false
			}
			d.samples = append(d.samples, data)
		case 3:
			if typ != 2 {
				return false
			}
			var m fastMapping
			var skip uint64
			if !pprofwire.Scalars(data, []*uint64{&m.id, &skip, &skip, &skip, &m.file, &m.build, &skip, &skip, &skip, &skip}) {
				return false
			}
			d.mappings = append(d.mappings, m)
			if len(d.mappings) > l.MaxMappings {
				return false
			}
		case 4:
			if typ != 2 || !d.parseLocation(data) {
				return false
			}
		case 5:
			if typ != 2 {
				return false
			}
			var f fastFunction
			var skip uint64
			if !pprofwire.Scalars(data, []*uint64{&f.id, &f.name, &f.system, &f.file, &skip}) {
				return false
			}
			d.functions = append(d.functions, f)
		case 6:
			if typ != 2 {
				return false
			}
			d.strs = append(d.strs, data)
			if len(d.strs[0]) != 0 || len(data) > l.MaxStringBytes {
				return false
			}
		case 7, 8, 10, 12, 15: // drop_frames, keep_frames, duration, period, doc_url
			if typ != 0 {
				return false
			}
			if num != 10 && num != 12 {
				d.checkStrs = append(d.checkStrs, int64(u))
			}
		case 9:
			if typ != 0 || (timeSeen && d.timeNanos != 0) {
				return false // pprof rejects concatenated profiles
			}
			timeSeen = true
			d.timeNanos = int64(u)
		case 13: // comments
			n := len(d.checkStrs)
			var ok bool
			if d.checkStrs, ok = pprofwire.AppendVarints(d.checkStrs, typ, u, data); !ok || (typ != 0 && typ != 2) {
				return false
			}
			if comments += len(d.checkStrs) - n; comments > l.MaxComments {
				return false
			}
		case 14:
			if typ != 0 {
				return false
			}
			d.defaultType = int64(u)
		default:
			return false
		}
	}
	if len(d.strs) == 0 {
		return false
	}
	for _, i := range d.checkStrs {
		if !d.validStr(i) {
			return false
		}
	}
	for _, st := range d.sampleTypes {
		if !d.validStr(int64(st.typ)) || !d.validStr(int64(st.unit)) {
			return false
		}
	}
	for _, m := range d.mappings {
		if !d.validStr(int64(m.file)) || !d.validStr(int64(m.build)) {
			return false
		}
	}
	for _, f := range d.functions {
		if !d.validStr(int64(f.name)) || !d.validStr(int64(f.system)) || !d.validStr(int64(f.file)) {
			return false
		}
	}
	var ok bool
	// The IDs gathered into a slice first: index over a closure cost a
	// call per ID.
	d.tableIDs = d.tableIDs[:0]
	for _, m := range d.mappings {
		d.tableIDs = append(d.tableIDs, m.id)
	}
	if d.mapByID, ok = pprofwire.IndexIDs(d.mapByID, d.tableIDs); !ok {
		return false
	}
	d.tableIDs = d.tableIDs[:0]
	for _, f := range d.functions {
		d.tableIDs = append(d.tableIDs, f.id)
	}
	if d.funcByID, ok = pprofwire.IndexIDs(d.funcByID, d.tableIDs); !ok {
		return false
	}
	d.tableIDs = d.tableIDs[:0]
	for _, l := range d.locations {
		d.tableIDs = append(d.tableIDs, l.id)
	}
	if d.locByID, ok = pprofwire.IndexIDs(d.locByID, d.tableIDs); !ok {
		return false
	}
	for i := range d.locations {
		l := &d.locations[i]
		if l.mapping != 0 && pprofwire.Lookup(d.mapByID, l.mapping) < 0 {
			return false
		}
		// pprof's CheckValid (record.DecodeProfile) refuses a line
		// without a function, as one naming a function the table lacks.
		for _, ln := range d.lines[l.lines[0]:l.lines[1]] {
			if pprofwire.Lookup(d.funcByID, ln.function) < 0 {
				return false
			}
		}
	}
	if cap(d.strVals) < len(d.strs) {
		d.strVals = make([]string, len(d.strs))
		d.strDone = make([]bool, len(d.strs))
	}
	d.strVals = d.strVals[:len(d.strs)]
	d.strDone = d.strDone[:len(d.strs)]
	clear(d.strVals)
	clear(d.strDone)
	return true
}

// parseLocation reads a location (as field and scalars would, inlined:
// a profile has thousands).
func (d *fastDecoder) parseLocation(b []byte) bool {
	l := fastLocation{lines: [2]int{len(d.lines), len(d.lines)}}
	for len(b) > 0 {
		key, n := pprofwire.Varint(b)
		if n == 0 {
			return false
		}
		b = b[n:]
		num, typ := key>>3, key&7
		switch {
		case typ == 0 && (num >= 1 && num <= 3 || num == 5):
			u, m := pprofwire.Varint(b)
			if m == 0 {
				return false
			}
			b = b[m:]
			switch num {
			case 1:
				l.id = u
			case 2:
				l.mapping = u
			case 3:
				l.address = u
			}
		case typ == 2 && num == 4:
			size, m := pprofwire.Varint(b)
			if m == 0 || size > uint64(len(b)-m) {
				return false
			}
			data := b[m : m+int(size)]
			b = b[m+int(size):]
			var ln fastLine
			var skip uint64
			if !pprofwire.Scalars(data, []*uint64{&ln.function, &ln.line, &skip}) {
				return false
			}
			d.lines = append(d.lines, ln)
		default:
			return false
		}
	}
	l.lines[1] = len(d.lines)
	d.locations = append(d.locations, l)
	return true
}

func (d *fastDecoder) validStr(i int64) bool { return i >= 0 && i < int64(len(d.strs)) }

func (d *fastDecoder) str(i uint64) string {
	if !d.strDone[i] {
		d.strVals[i] = string(d.strs[i])
		d.strDone[i] = true
	}
	return d.strVals[i]
}

// usualSample reads a sample laid out as pprof's encoder writes it: one
// packed location_id field (more than two IDs), the values (packed, or one
// field each when at most two), then the label fields (maybe none). It
// appends the values to d.values; ok=false for anything else, which
// walkSample reads: this skips its per-field bookkeeping.
func (d *fastDecoder) usualSample(s []byte) (locs, labels []byte, ok bool) {
	if locs, s, ok = lenField(s, 1<<3|2); !ok {
		return nil, nil, false
	}
	if len(s) > 0 && s[0] == 2<<3|2 {
		var values []byte
		if values, s, ok = lenField(s, 2<<3|2); !ok {
			return nil, nil, false
		}
		if d.values, ok = pprofwire.AppendVarints(d.values, 2, 0, values); !ok {
			return nil, nil, false
		}
	} else {
		for len(s) > 0 && s[0] == 2<<3 {
			u, n := pprofwire.Varint(s[1:])
			if n == 0 {
				return nil, nil, false
			}
			d.values = append(d.values, int64(u))
			s = s[1+n:]
		}
	}
	labels = s[:len(s):len(s)] // never appended to
	for len(s) > 0 {
		if _, s, ok = lenField(s, 3<<3|2); !ok {
			return nil, nil, false
		}
	}
	return locs, labels, true
}

// walkSample reads a sample field by field, whatever its layout: the
// location_id fields into locFields, the values into d.values. labelKey is
// the label fields as they are when together (the usual case), else copied
// together into d.labelBuf (a second walk, rare); never appended to.
func (d *fastDecoder) walkSample(s []byte, locFields *[]locField) (labelKey []byte, ok bool) {
	full := s
	labelStart, labelEnd, labelsApart := -1, -1, false
	for len(s) > 0 {
		start := len(full) - len(s)
		num, typ, u, data, rest, ok := pprofwire.Field(s)
		if !ok {
			return nil, false
		}
		s = rest
		if labelStart >= 0 && num != 3 {
			labelsApart = true
		}
		switch num {
		case 1:
			*locFields = append(*locFields, locField{typ, u, data})
		case 2:
			if d.values, ok = pprofwire.AppendVarints(d.values, typ, u, data); !ok {
				return nil, false
			}
		case 3:
			if typ != 2 {
				return nil, false
			}
			if labelStart < 0 {
				labelStart = start
			}
			labelEnd = len(full) - len(s)
		default:
			return nil, false
		}
	}
	if labelStart >= 0 {
		labelKey = full[labelStart:labelEnd:labelEnd]
	}
	if labelsApart {
		d.labelBuf = d.labelBuf[:0]
		for r := full; len(r) > 0; {
			num, _, _, data, rest, _ := pprofwire.Field(r) // walked above
			r = rest
			if num == 3 {
				d.labelBuf = binary.AppendUvarint(d.labelBuf, 3<<3|2)
				d.labelBuf = binary.AppendUvarint(d.labelBuf, uint64(len(data)))
				d.labelBuf = append(d.labelBuf, data...)
			}
		}
		labelKey = d.labelBuf
	}
	return labelKey, true
}

// labels decodes the label submessages of a sample as pprof's Label map.
// Numeric labels, repeated keys and more labels than the limit are left to
// the general path.
func (d *fastDecoder) labels(raw []byte) (map[string][]string, bool) {
	var out map[string][]string
	for n := 0; len(raw) > 0; n++ {
		if n == d.limits.MaxLabelsPerSample {
			return nil, false
		}
		_, _, _, data, rest, _ := pprofwire.Field(raw) // validated by the caller
		raw = rest
		var key, str, num, unit uint64
		if !pprofwire.Scalars(data, []*uint64{&key, &str, &num, &unit}) || !d.validStr(int64(key)) {
			return nil, false
		}
		if str == 0 {
			if num != 0 || unit != 0 {
				return nil, false
			}
			continue // pprof drops a label without value
		}
		if !d.validStr(int64(str)) {
			return nil, false
		}
		k := d.str(key)
		if _, dup := out[k]; dup {
			return nil, false
		}
		if out == nil {
			out = map[string][]string{}
		}
		out[k] = []string{d.str(str)}
	}
	return out, true
}
