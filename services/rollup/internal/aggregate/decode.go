package aggregate

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"hash/maphash"
	"io"
	"slices"

	"github.com/google/pprof/profile"

	"github.com/stackstream/stackstream/pkg/pprofwire"
	"github.com/stackstream/stackstream/pkg/pprofx"
	"github.com/stackstream/stackstream/schemas/indices"
	"github.com/stackstream/stackstream/schemas/record"
)

// Decoder reads record values (gzip pprof) for Add. It reads the protobuf's
// tables as they are on the wire instead of building a *profile.Profile:
// google/pprof's parser was a quarter of the rollup's CPU, and the
// garbage collector, collecting its objects, most of another sixth
// (docs/ROLLUP.md). A value it does not read exactly as
// record.DecodeProfileLimits would (anything unusual: numeric labels,
// sparse IDs, unknown fields, a limit passed, a malformed protobuf...) is
// decoded by record.DecodeProfileLimits, which also says what is wrong:
// the same errors, the same DLQ reasons. A Decoder keeps its buffers from
// one value to the next and is not safe for concurrent use.
type Decoder struct {
	limits record.Limits
	// checkAbove: a protobuf this long or longer is walked by
	// limits.Check first; a shorter one is within the limits on the
	// whole profile, and Wire.parse checks those on one element.
	checkAbove int
	zr         *gzip.Reader
	br         bytes.Reader
	raw        []byte
	wire       Wire
	// general decodes what the wire reader leaves; tests replace it.
	general func([]byte, record.Limits) (*profile.Profile, error)
}

// NewDecoder returns a Decoder within l (the zero Limits means
// record.DefaultLimits).
func NewDecoder(l record.Limits) *Decoder {
	if l == (record.Limits{}) {
		l = record.DefaultLimits()
	}
	return &Decoder{limits: l, checkAbove: pprofwire.CheckAbove(l), general: record.DecodeProfileLimits}
}

// maxKeptRawBytes: a Decoder does not keep a rarely large profile's buffer.
const maxKeptRawBytes = 8 << 20

// Decode reads a record value into an Input's Wire (valid until the next
// Decode) or, for a value the wire reader leaves, its Profile, parsed by
// record.DecodeProfileLimits; the caller sets the rest of the Input. The
// errors are record.DecodeProfileLimits'.
func (d *Decoder) Decode(value []byte) (Input, error) {
	if d.decompress(value) && (len(d.raw) < d.checkAbove || d.limits.Check(d.raw) == nil) && d.wire.parse(d.raw, &d.limits) {
		return Input{Wire: &d.wire}, nil
	}
	p, err := d.general(value, d.limits)
	if err != nil {
		return Input{}, err
	}
	return Input{Profile: p}, nil
}

// decompress reads value into d.raw: a stored gzip (as the symbolizer
// writes) by copying its blocks, anything else with a gzip reader, up to
// the limit.
func (d *Decoder) decompress(value []byte) bool {
	if cap(d.raw) > maxKeptRawBytes {
		d.raw = nil
	}
	limit := d.limits.MaxDecompressedBytes
	if out, ok := record.AppendStored(d.raw[:0], value); ok {
		d.raw = out
		return len(out) > 0 && len(out) <= limit
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
	buf := bytes.NewBuffer(d.raw[:0])
	if _, err := buf.ReadFrom(io.LimitReader(d.zr, int64(limit)+1)); err != nil {
		return false
	}
	d.raw = buf.Bytes()
	return len(d.raw) > 0 && len(d.raw) <= limit
}

// Wire is the tables of one pprof protobuf as its fields have them:
// string fields are indices into strs (slices of the protobuf), samples
// are their raw messages, read one by one as they are folded in.
type Wire struct {
	strs        [][]byte
	sampleTypes []wireValueType
	samples     [][]byte
	mappings    []wireMapping
	locations   []wireLocation
	lines       []wireLine
	functions   []wireFunction
	mapByID     []int32 // ID -> index+1
	funcByID    []int32
	locByID     []int32
	limits      *record.Limits
	timeNanos   int64
	defaultType uint64
	checkStrs   []uint64 // string indices pprof resolves (and so must be valid)

	// The samples as readSamples read them: a row each, its values and
	// location indices (into locations) in values and locs, its labels
	// an index into labelSets.
	sampleRows []wireSample
	values     []int64
	locs       []int32
	labelSets  []wireLabels
	labelIndex map[string]int32 // by the label fields' bytes

	// locHashes are the content hashes of the locations (locationHash),
	// computed on first use.
	locHashes [][2]uint64
	locHashed []bool
	// strVals are strs converted on first use, so the frames of a
	// profile's stacks share their names, as pprof's strings do.
	strVals []string
	strDone []bool
	// Scratch for pprofx.LocationFrames.
	loc  profile.Location
	mp   profile.Mapping
	fns  []profile.Function
	plns []profile.Line

	ids      []uint64 // scratch
	labelBuf []byte
}

type wireSample struct {
	locs   [2]int32 // range in Wire.locs
	values int32    // start in Wire.values
	labels int32    // index in Wire.labelSets
}

// wireLabels is what the rollup reads of a sample's labels.
type wireLabels struct{ service, host string }

type (
	wireValueType struct{ typ, unit uint64 }
	wireMapping   struct{ id, file, build uint64 }
	wireFunction  struct{ id, name, system, file uint64 }
	wireLine      struct{ function, line uint64 }
	wireLocation  struct {
		id, mapping, address uint64
		lines                [2]int32 // range in Wire.lines
	}
)

func (w *Wire) reset() {
	w.strs = w.strs[:0]
	w.sampleTypes = w.sampleTypes[:0]
	w.samples = w.samples[:0]
	w.mappings = w.mappings[:0]
	w.locations = w.locations[:0]
	w.lines = w.lines[:0]
	w.functions = w.functions[:0]
	w.checkStrs = w.checkStrs[:0]
	w.timeNanos, w.defaultType = 0, 0
	w.sampleRows = w.sampleRows[:0]
	w.values = w.values[:0]
	w.locs = w.locs[:0]
	w.labelSets = w.labelSets[:0]
}

// Fields of profile.proto (google/pprof).
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

	fieldSampleLocationID = 1
	fieldSampleValue      = 2
	fieldSampleLabel      = 3

	fieldLocationID      = 1
	fieldLocationMapping = 2
	fieldLocationAddress = 3
	fieldLocationLine    = 4
	fieldLocationFolded  = 5
)

// parse reads raw, which is within l's limits on the whole profile
// (pprofwire.CheckAbove), and checks what record.DecodeProfileLimits would
// refuse (l's limits on one element, pprof's parser and
// Profile.CheckValid): ok=false for that and for anything it does not read
// exactly as pprof does.
func (w *Wire) parse(raw []byte, l *record.Limits) bool {
	w.reset()
	w.limits = l
	timeSeen, periodSeen, comments := false, false, 0
	for b := raw; len(b) > 0; {
		num, typ, u, data, rest, ok := pprofwire.Field(b)
		if !ok {
			return false
		}
		b = rest
		switch num {
		case fieldSampleType, fieldPeriodType:
			var vt wireValueType
			if typ != 2 || !pprofwire.Scalars(data, []*uint64{&vt.typ, &vt.unit}) {
				return false
			}
			if num == fieldSampleType {
				if w.sampleTypes = append(w.sampleTypes, vt); len(w.sampleTypes) > l.MaxSampleTypes {
					return false
				}
			} else {
				if periodSeen {
					return false // pprof keeps the last; Limits refuses two
				}
				periodSeen = true
				w.checkStrs = append(w.checkStrs, vt.typ, vt.unit)
			}
		case fieldSample:
			if typ != 2 {
				return false
			}
			w.samples = append(w.samples, data)
		case fieldMapping:
			var m wireMapping
			if typ != 2 || !pprofwire.Scalars(data, []*uint64{&m.id, nil, nil, nil, &m.file, &m.build, nil, nil, nil, nil}) {
				return false
			}
			if w.mappings = append(w.mappings, m); len(w.mappings) > l.MaxMappings {
				return false
			}
		case fieldLocation:
			if typ != 2 || !w.parseLocation(data) {
				return false
			}
		case fieldFunction:
			var f wireFunction
			if typ != 2 || !pprofwire.Scalars(data, []*uint64{&f.id, &f.name, &f.system, &f.file, nil}) {
				return false
			}
			w.functions = append(w.functions, f)
		case fieldStringTable:
			if typ != 2 || len(w.strs) == 0 && len(data) != 0 || len(data) > l.MaxStringBytes {
				return false // pprof: string_table[0] must be ''
			}
			w.strs = append(w.strs, data)
		case fieldDropFrames, fieldKeepFrames, fieldDocURL, fieldDefaultSampleType:
			if typ != 0 {
				return false
			}
			w.checkStrs = append(w.checkStrs, u)
			if num == fieldDefaultSampleType {
				w.defaultType = u
			}
		case fieldDurationNanos, fieldPeriod:
			if typ != 0 {
				return false
			}
		case fieldTimeNanos:
			if typ != 0 || timeSeen && w.timeNanos != 0 {
				return false // pprof refuses a concatenated profile
			}
			timeSeen = true
			w.timeNanos = int64(u)
		case fieldComment:
			n := len(w.checkStrs)
			if w.checkStrs, ok = pprofwire.AppendVarints(w.checkStrs, typ, u, data); !ok {
				return false
			}
			if comments += len(w.checkStrs) - n; comments > l.MaxComments {
				return false
			}
		default:
			return false
		}
	}
	return w.check() && w.readSamples()
}

// check resolves the tables' references as pprof's parser and
// Profile.CheckValid do, refusing what they would refuse.
func (w *Wire) check() bool {
	if len(w.strs) == 0 || len(w.samples) > 0 && len(w.sampleTypes) == 0 {
		return false
	}
	for _, i := range w.checkStrs {
		if !w.validStr(i) {
			return false
		}
	}
	for _, st := range w.sampleTypes {
		if !w.validStr(st.typ) || !w.validStr(st.unit) {
			return false
		}
	}
	w.ids = w.ids[:0]
	for _, m := range w.mappings {
		if !w.validStr(m.file) || !w.validStr(m.build) {
			return false
		}
		w.ids = append(w.ids, m.id)
	}
	var ok bool
	if w.mapByID, ok = pprofwire.IndexIDs(w.mapByID, w.ids); !ok {
		return false
	}
	w.ids = w.ids[:0]
	for _, f := range w.functions {
		if !w.validStr(f.name) || !w.validStr(f.system) || !w.validStr(f.file) {
			return false
		}
		w.ids = append(w.ids, f.id)
	}
	if w.funcByID, ok = pprofwire.IndexIDs(w.funcByID, w.ids); !ok {
		return false
	}
	w.ids = w.ids[:0]
	for _, loc := range w.locations {
		w.ids = append(w.ids, loc.id)
	}
	if w.locByID, ok = pprofwire.IndexIDs(w.locByID, w.ids); !ok {
		return false
	}
	w.locHashes = slices.Grow(w.locHashes[:0], len(w.locations))[:len(w.locations)]
	w.locHashed = slices.Grow(w.locHashed[:0], len(w.locations))[:len(w.locations)]
	clear(w.locHashed)
	w.strVals = slices.Grow(w.strVals[:0], len(w.strs))[:len(w.strs)]
	clear(w.strVals) // do not keep the last profile's strings alive
	w.strDone = slices.Grow(w.strDone[:0], len(w.strs))[:len(w.strs)]
	clear(w.strDone)
	for _, loc := range w.locations {
		// pprof leaves a location naming a mapping the table lacks
		// without one; such a profile is left to it.
		if loc.mapping != 0 && pprofwire.Lookup(w.mapByID, loc.mapping) < 0 {
			return false
		}
		// CheckValid refuses a line without a function, as one naming
		// a function the table lacks.
		for _, ln := range w.lines[loc.lines[0]:loc.lines[1]] {
			if pprofwire.Lookup(w.funcByID, ln.function) < 0 {
				return false
			}
		}
	}
	return true
}

// parseLocation reads a location message.
func (w *Wire) parseLocation(b []byte) bool {
	loc := wireLocation{lines: [2]int32{int32(len(w.lines)), int32(len(w.lines))}}
	for len(b) > 0 {
		num, typ, u, data, rest, ok := pprofwire.Field(b)
		if !ok {
			return false
		}
		b = rest
		switch {
		case typ == 0 && num == fieldLocationID:
			loc.id = u
		case typ == 0 && num == fieldLocationMapping:
			loc.mapping = u
		case typ == 0 && num == fieldLocationAddress:
			loc.address = u
		case typ == 0 && num == fieldLocationFolded:
		case typ == 2 && num == fieldLocationLine:
			var ln wireLine
			if !pprofwire.Scalars(data, []*uint64{&ln.function, &ln.line, nil}) {
				return false
			}
			w.lines = append(w.lines, ln)
		default:
			return false
		}
	}
	loc.lines[1] = int32(len(w.lines))
	w.locations = append(w.locations, loc)
	return true
}

func (w *Wire) validStr(i uint64) bool { return i < uint64(len(w.strs)) }

func (w *Wire) str(i uint64) string {
	if !w.strDone[i] {
		w.strVals[i] = string(w.strs[i])
		w.strDone[i] = true
	}
	return w.strVals[i]
}

// header is a profile of the sample types alone, for pprofx.ValueIndex and
// pprofx.CountIndex.
func (w *Wire) header() *profile.Profile {
	p := &profile.Profile{DefaultSampleType: w.str(w.defaultType)}
	for _, st := range w.sampleTypes {
		p.SampleType = append(p.SampleType, &profile.ValueType{Type: w.str(st.typ), Unit: w.str(st.unit)})
	}
	return p
}

// stackSeeds hash stacks for the stack cache: two 64-bit hashes, a
// 128-bit key whose collisions are not checked (as the indexer's stack
// cache does).
var stackSeeds = [2]maphash.Seed{maphash.MakeSeed(), maphash.MakeSeed()}

func hash128(b []byte) [2]uint64 {
	return [2]uint64{maphash.Bytes(stackSeeds[0], b), maphash.Bytes(stackSeeds[1], b)}
}

// locationHash is a content hash of everything the frames of location i
// depend on (its mapping's file, its lines' function names, files and
// numbers, and its address when a frame is named by it: no lines, or a
// line without a function name), so equal hashes mean equal frames, in any
// profile. The address of a named location is left out: a shared library
// is mapped at another address in every process (loadgen's fleet does so,
// as ASLR does), and with it each host's stacks through the library missed
// the stack cache, to be built and hashed again.
func (w *Wire) locationHash(i int32, buf *[]byte) [2]uint64 {
	if w.locHashed[i] {
		return w.locHashes[i]
	}
	loc := &w.locations[i]
	b := (*buf)[:0]
	if loc.mapping != 0 {
		b = appendBytes(b, w.strs[w.mappings[pprofwire.Lookup(w.mapByID, loc.mapping)].file])
	} else {
		b = appendBytes(b, nil)
	}
	lines := w.lines[loc.lines[0]:loc.lines[1]]
	named := len(lines) > 0
	for _, ln := range lines {
		if len(w.strs[w.functions[pprofwire.Lookup(w.funcByID, ln.function)].name]) == 0 {
			named = false
		}
	}
	if named {
		b = append(b, 0)
	} else {
		b = append(b, 1)
		b = binary.LittleEndian.AppendUint64(b, loc.address)
	}
	b = binary.LittleEndian.AppendUint64(b, uint64(len(lines)))
	for _, ln := range lines {
		f := &w.functions[pprofwire.Lookup(w.funcByID, ln.function)]
		b = appendBytes(b, w.strs[f.name])
		b = appendBytes(b, w.strs[f.file])
		b = binary.LittleEndian.AppendUint64(b, ln.line)
	}
	*buf = b
	w.locHashes[i], w.locHashed[i] = hash128(b), true
	return w.locHashes[i]
}

func appendBytes(b, s []byte) []byte {
	b = binary.LittleEndian.AppendUint64(b, uint64(len(s)))
	return append(b, s...)
}

// appendFrames appends the frames of location i by pprofx's rule, given a
// scratch profile.Location that mirrors it.
func (w *Wire) appendFrames(dst []indices.Frame, i int32) []indices.Frame {
	l := &w.locations[i]
	w.loc = profile.Location{Address: l.address}
	if l.mapping != 0 {
		w.mp = profile.Mapping{File: w.str(w.mappings[pprofwire.Lookup(w.mapByID, l.mapping)].file)}
		w.loc.Mapping = &w.mp
	}
	n := int(l.lines[1] - l.lines[0])
	if cap(w.plns) < n {
		w.plns = make([]profile.Line, n)
		w.fns = make([]profile.Function, n)
	}
	w.plns, w.fns = w.plns[:n], w.fns[:n]
	for j, ln := range w.lines[l.lines[0]:l.lines[1]] {
		f := &w.functions[pprofwire.Lookup(w.funcByID, ln.function)]
		w.fns[j] = profile.Function{Name: w.str(f.name), Filename: w.str(f.file)}
		w.plns[j] = profile.Line{Line: int64(ln.line), Function: &w.fns[j]}
	}
	w.loc.Line = w.plns
	return pprofx.LocationFrames(dst, &w.loc)
}

// readSamples reads every sample into w.values, w.locs and w.sampleRows,
// and each distinct label set once into w.labelSets. ok=false for what
// pprof would refuse or read otherwise: a value count other than the
// sample types', a location the table lacks, a label of another wire type,
// numeric labels (pprof keeps them apart).
func (w *Wire) readSamples() bool {
	clear(w.labelIndex)
	if w.labelIndex == nil {
		w.labelIndex = map[string]int32{}
	}
	for _, s := range w.samples {
		row := wireSample{locs: [2]int32{int32(len(w.locs)), 0}, values: int32(len(w.values))}
		ids := w.ids[:0]
		labels := w.labelBuf[:0]
		nLabels := 0
		for len(s) > 0 {
			num, typ, u, data, rest, ok := pprofwire.Field(s)
			if !ok {
				return false
			}
			switch num {
			case fieldSampleLocationID:
				ids, ok = pprofwire.AppendVarints(ids, typ, u, data)
			case fieldSampleValue:
				w.values, ok = pprofwire.AppendVarints(w.values, typ, u, data)
			case fieldSampleLabel:
				// The fields as they are: label sets are told apart by
				// their bytes.
				ok = typ == 2
				labels = append(labels, s[:len(s)-len(rest)]...)
				nLabels++
			default:
				ok = false
			}
			if !ok {
				return false
			}
			s = rest
		}
		w.ids, w.labelBuf = ids, labels
		if len(ids) > w.limits.MaxLocationsPerSample || nLabels > w.limits.MaxLabelsPerSample {
			return false
		}
		if len(w.values)-int(row.values) != len(w.sampleTypes) {
			return false
		}
		for _, id := range ids {
			i := pprofwire.Lookup(w.locByID, id)
			if i < 0 {
				return false
			}
			w.locs = append(w.locs, int32(i))
		}
		row.locs[1] = int32(len(w.locs))
		ls, ok := w.labelIndex[string(labels)]
		if !ok {
			if ls, ok = w.labelSet(labels); !ok {
				return false
			}
			w.labelIndex[string(labels)] = ls
		}
		row.labels = ls
		w.sampleRows = append(w.sampleRows, row)
	}
	return true
}

// labelSet reads a sample's label fields as record.Labels has them
// (pprof's string labels, the first value of each key) into the service
// and host label of a new entry of w.labelSets.
func (w *Wire) labelSet(raw []byte) (int32, bool) {
	labels := map[string]string{}
	for len(raw) > 0 {
		_, _, _, data, rest, _ := pprofwire.Field(raw) // read by readSamples
		raw = rest
		var key, str, num, unit uint64
		if !pprofwire.Scalars(data, []*uint64{&key, &str, &num, &unit}) || !w.validStr(key) || !w.validStr(str) || num != 0 || unit != 0 {
			return 0, false
		}
		if str == 0 {
			continue // pprof drops a label without a value
		}
		if _, ok := labels[string(w.strs[key])]; !ok {
			labels[string(w.strs[key])] = string(w.strs[str])
		}
	}
	w.labelSets = append(w.labelSets, wireLabels{service: record.DeriveService(labels), host: labels[record.LabelHost]})
	return int32(len(w.labelSets) - 1), true
}
