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
	"github.com/stackstream/stackstream/schemas/indices"
	"github.com/stackstream/stackstream/schemas/record"
)

// Decoder reads record values (gzip pprof) for Add. It reads the protobuf's
// tables as they are on the wire instead of building a *profile.Profile:
// google/pprof's parser was a quarter of the rollup's CPU, and the
// garbage collector, collecting its objects, most of another sixth
// (docs/ROLLUP.md). It reads the tables with pprofwire.Tables, as the
// indexer and the symbolizer do. A value it does not read exactly as
// record.DecodeProfileLimits would (anything unusual: numeric labels,
// sparse IDs, a field pprof does not define at the top level, a limit
// passed, a malformed protobuf...: pprofwire.ErrUnsupported) is
// decoded by record.DecodeProfileLimits, which also says what is wrong:
// the same errors, the same DLQ reasons. A Decoder keeps its buffers from
// one value to the next and is not safe for concurrent use.
type Decoder struct {
	limits record.Limits
	zr     *gzip.Reader
	br     bytes.Reader
	raw    []byte
	wire   Wire
	// general decodes what the wire reader leaves; tests replace it.
	general func([]byte, record.Limits) (*profile.Profile, error)
}

// NewDecoder returns a Decoder within l (the zero Limits means
// record.DefaultLimits).
func NewDecoder(l record.Limits) *Decoder {
	if l == (record.Limits{}) {
		l = record.DefaultLimits()
	}
	return &Decoder{limits: l, general: record.DecodeProfileLimits}
}

// maxKeptRawBytes: a Decoder does not keep a rarely large profile's buffer.
const maxKeptRawBytes = 8 << 20

// Decode reads a record value into an Input's Wire (valid until the next
// Decode) or, for a value the wire reader leaves, its Profile, parsed by
// record.DecodeProfileLimits; the caller sets the rest of the Input. The
// errors are record.DecodeProfileLimits'.
func (d *Decoder) Decode(value []byte) (Input, error) {
	if d.decompress(value) && d.wire.parse(d.raw, &d.limits) {
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

// Wire is the tables of one pprof protobuf as pprofwire reads them, and
// its samples as the rollup folds them in.
type Wire struct {
	pprofwire.Tables

	// The samples as readSamples read them: a row each, its values and
	// location indices (into Locations) in values and locs, its labels
	// an index into labelSets.
	sampleRows []wireSample
	values     []int64
	locs       []int32
	labelSets  []wireLabels
	labelIndex map[string]int32 // by the label fields' bytes
	sample     pprofwire.Sample

	// locHashes are the content hashes of the locations (locationHash),
	// computed on first use.
	locHashes [][2]uint64
	locHashed []bool
	frames    pprofwire.Frames
	// locFrames are the stack cache's frames of the locations
	// (stackCache.location), looked up once a profile by wireStack: the
	// new stacks of a profile share most of their callers. They are of
	// the cache's table locTable: cleared when the cache drops it.
	locFrames []*locFrames
	locTable  *frameTable
}

type wireSample struct {
	locs   [2]int32 // range in Wire.locs
	values int32    // start in Wire.values
	labels int32    // index in Wire.labelSets
}

// wireLabels is what the rollup reads of a sample's labels.
type wireLabels struct{ service, host string }

// parse reads raw within l (pprofwire.Tables.Read) and its samples:
// ok=false for what record.DecodeProfileLimits would refuse and for
// anything the rollup does not read exactly as it does (sparse IDs,
// numeric labels).
func (w *Wire) parse(raw []byte, l *record.Limits) bool {
	if w.Read(raw, l, nil) != nil || !w.DenseIDs() {
		return false
	}
	w.locHashes = slices.Grow(w.locHashes[:0], len(w.Locations))[:len(w.Locations)]
	w.locHashed = slices.Grow(w.locHashed[:0], len(w.Locations))[:len(w.Locations)]
	clear(w.locHashed)
	w.locFrames = slices.Grow(w.locFrames[:0], len(w.Locations))[:len(w.Locations)]
	clear(w.locFrames)
	w.locTable = nil
	return w.readSamples()
}

// header is a profile of the sample types alone, for pprofx.ValueIndex and
// pprofx.CountIndex.
func (w *Wire) header() *profile.Profile {
	p := &profile.Profile{DefaultSampleType: w.String(w.DefaultSampleType)}
	for _, st := range w.SampleTypes {
		p.SampleType = append(p.SampleType, &profile.ValueType{Type: w.String(st.Type), Unit: w.String(st.Unit)})
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
	loc := &w.Locations[i]
	b := (*buf)[:0]
	if loc.Mapping != 0 {
		b = appendBytes(b, w.Strings[w.Mappings[w.MappingIndex(loc.Mapping)].File])
	} else {
		b = appendBytes(b, nil)
	}
	lines := w.LocationLines(loc)
	named := len(lines) > 0
	for _, ln := range lines {
		if len(w.Strings[w.Functions[w.FunctionIndex(ln.Function)].Name]) == 0 {
			named = false
		}
	}
	if named {
		b = append(b, 0)
	} else {
		b = append(b, 1)
		b = binary.LittleEndian.AppendUint64(b, loc.Address)
	}
	b = binary.LittleEndian.AppendUint64(b, uint64(len(lines)))
	for _, ln := range lines {
		f := &w.Functions[w.FunctionIndex(ln.Function)]
		b = appendBytes(b, w.Strings[f.Name])
		b = appendBytes(b, w.Strings[f.Filename])
		b = binary.LittleEndian.AppendUint64(b, ln.Line)
	}
	*buf = b
	w.locHashes[i], w.locHashed[i] = hash128(b), true
	return w.locHashes[i]
}

func appendBytes(b, s []byte) []byte {
	b = binary.LittleEndian.AppendUint64(b, uint64(len(s)))
	return append(b, s...)
}

// appendFrames appends the frames of location i.
func (w *Wire) appendFrames(dst []indices.Frame, i int32) []indices.Frame {
	return w.frames.Append(dst, &w.Tables, &w.Locations[i])
}

// readSamples reads every sample into w.values, w.locs and w.sampleRows,
// and each distinct label set once into w.labelSets. ok=false for what
// pprof would refuse (pprofwire.Tables.ReadSample, a location the table
// lacks) or read otherwise (numeric labels: pprof keeps them apart).
func (w *Wire) readSamples() bool {
	w.sampleRows, w.values, w.locs, w.labelSets = w.sampleRows[:0], w.values[:0], w.locs[:0], w.labelSets[:0]
	clear(w.labelIndex)
	if w.labelIndex == nil {
		w.labelIndex = map[string]int32{}
	}
	for _, s := range w.Samples {
		if !w.ReadSample(s, &w.sample) {
			return false
		}
		row := wireSample{locs: [2]int32{int32(len(w.locs)), 0}, values: int32(len(w.values))}
		w.values = append(w.values, w.sample.Values...)
		for _, id := range w.sample.LocationIDs {
			i := w.LocationIndex(id)
			if i < 0 {
				return false
			}
			w.locs = append(w.locs, int32(i))
		}
		row.locs[1] = int32(len(w.locs))
		labels := w.sample.Labels
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
		l, rest, ok := pprofwire.NextLabel(raw)
		if !ok || !w.ValidString(l.Key) || !w.ValidString(l.Str) || l.Num != 0 || l.NumUnit != 0 {
			return 0, false
		}
		raw = rest
		if l.Str == 0 {
			continue // pprof drops a label without a value
		}
		if _, ok := labels[string(w.Strings[l.Key])]; !ok {
			labels[string(w.Strings[l.Key])] = string(w.Strings[l.Str])
		}
	}
	w.labelSets = append(w.labelSets, wireLabels{service: record.DeriveService(labels), host: labels[record.LabelHost]})
	return int32(len(w.labelSets) - 1), true
}
