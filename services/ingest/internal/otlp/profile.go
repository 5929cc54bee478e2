package otlp

import (
	"fmt"
	"math"
	"slices"

	"github.com/google/pprof/profile"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pprofile"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/stackstream/stackstream/schemas/record"
	"github.com/stackstream/stackstream/services/ingest/internal/convert"
)

// dict reads the request's shared tables, checking every reference.
type dict struct {
	strs  pcommon.StringSlice
	attrs pprofile.KeyValueAndUnitSlice
	stack pprofile.StackSlice
	locs  pprofile.LocationSlice
	funcs pprofile.FunctionSlice
	maps  pprofile.MappingSlice
	// labelCache holds each attribute's label by its index.
	labelCache map[int32]attrLabel
}

func newDict(d pprofile.ProfilesDictionary) *dict {
	return &dict{strs: d.StringTable(), attrs: d.AttributeTable(), stack: d.StackTable(),
		locs: d.LocationTable(), funcs: d.FunctionTable(), maps: d.MappingTable(), labelCache: map[int32]attrLabel{}}
}

func (d *dict) str(i int32) (string, error) {
	if i < 0 || int(i) >= d.strs.Len() {
		if i == 0 {
			return "", nil // an empty string table
		}
		return "", fmt.Errorf("%w: string index %d is outside the string table (%d entries)", ErrInvalid, i, d.strs.Len())
	}
	return d.strs.At(int(i)), nil
}

func (d *dict) attr(i int32) (string, pcommon.Value, error) {
	if i < 0 || int(i) >= d.attrs.Len() {
		return "", pcommon.Value{}, fmt.Errorf("%w: attribute index %d is outside the attribute table (%d entries)", ErrInvalid, i, d.attrs.Len())
	}
	kv := d.attrs.At(int(i))
	k, err := d.str(kv.KeyStrindex())
	return k, kv.Value(), err
}

// labels are the attributes at idx as labels. Each attribute is turned
// into its label once per request, however many samples refer to it (an
// array or map value is written out as JSON).
func (d *dict) labels(idx pcommon.Int32Slice) ([]attrLabel, error) {
	out := make([]attrLabel, 0, idx.Len())
	for _, i := range idx.All() {
		l, ok := d.labelCache[i]
		if !ok {
			k, v, err := d.attr(i)
			if err != nil {
				return nil, err
			}
			if l, err = toLabel(k, v); err != nil {
				return nil, err
			}
			d.labelCache[i] = l
		}
		out = append(out, l)
	}
	return out, nil
}

// sampleKind is how the values of one OTLP profile become pprof values.
type sampleKind struct {
	types  []*profile.ValueType
	period *profile.ValueType
	// periodValue is the pprof period; scale turns one unit of the OTLP
	// values into one of the last pprof type (nanoseconds for time).
	periodValue, scale int64
	value              func(n, sum int64) []int64
	// events: a sample's timestamps without values count one each (a
	// profile of sample counts); for the others a sample needs values.
	events bool
}

// classify maps a profile's sample type to the pprof sample types that
// convert.Classify stores as one record type.
func (d *dict) classify(p pprofile.Profile) (sampleKind, error) {
	typ, err := d.str(p.SampleType().TypeStrindex())
	if err != nil {
		return sampleKind{}, err
	}
	unit, err := d.str(p.SampleType().UnitStrindex())
	if err != nil {
		return sampleKind{}, err
	}
	ptyp, err := d.str(p.PeriodType().TypeStrindex())
	if err != nil {
		return sampleKind{}, err
	}
	punit, err := d.str(p.PeriodType().UnitStrindex())
	if err != nil {
		return sampleKind{}, err
	}
	count := &profile.ValueType{Type: "samples", Unit: "count"}
	cpu := &profile.ValueType{Type: "cpu", Unit: "nanoseconds"}
	offcpu := &profile.ValueType{Type: "offcpu", Unit: "nanoseconds"}
	switch {
	case typ == "cpu" && unitScale(unit) > 0:
		s := unitScale(unit)
		return sampleKind{types: []*profile.ValueType{cpu}, period: cpu, periodValue: p.Period() * s, scale: s,
			value: func(_, sum int64) []int64 { return []int64{sum * s} }}, nil
	case typ == "samples" && unit == "count" && ptyp == "cpu" && unitScale(punit) > 0 && p.Period() > 0:
		period := p.Period() * unitScale(punit)
		return sampleKind{types: []*profile.ValueType{count, cpu}, period: cpu, periodValue: period, scale: period, events: true,
			value: func(n, sum int64) []int64 { return []int64{sum, sum * period} }}, nil
	case (typ == "off_cpu" || typ == "offcpu" || typ == "events") && unitScale(unit) > 0:
		// Each value is one block's time off the CPU.
		s := unitScale(unit)
		return sampleKind{types: []*profile.ValueType{count, offcpu}, scale: s,
			value: func(n, sum int64) []int64 { return []int64{n, sum * s} }}, nil
	case typ == "inuse_space" && unit == "bytes":
		return sampleKind{types: []*profile.ValueType{{Type: "inuse_space", Unit: "bytes"}}, scale: 1,
			value: func(_, sum int64) []int64 { return []int64{sum} }}, nil
	case (typ == "alloc_space" || typ == "allocated_space") && unit == "bytes":
		return sampleKind{types: []*profile.ValueType{{Type: "alloc_space", Unit: "bytes"}}, scale: 1,
			value: func(_, sum int64) []int64 { return []int64{sum} }}, nil
	}
	return sampleKind{}, fmt.Errorf("%w: sample type %s/%s (period type %s/%s): stackstream stores cpu (cpu/nanoseconds, or samples/count with period type cpu/nanoseconds), offcpu (off_cpu or events in nanoseconds), heap (inuse_space/bytes) and alloc (alloc_space/bytes)",
		convert.ErrUnsupported, short(typ), short(unit), short(ptyp), short(punit))
}

// unitScale is the nanoseconds in one unit of time, 0 for other units.
func unitScale(unit string) int64 {
	switch unit {
	case "nanoseconds", "ns":
		return 1
	case "microseconds", "us":
		return 1e3
	case "milliseconds", "ms":
		return 1e6
	case "seconds", "s":
		return 1e9
	}
	return 0
}

// builder converts one OTLP profile straight into pprof's protobuf: the
// locations, functions and mappings its samples use are encoded once each,
// the labels once per distinct set of sample attributes.
type builder struct {
	d      *dict
	w      *pprofWriter
	locs   map[int32]uint64 // dictionary index -> pprof ID
	funcs  map[int32]uint64
	maps   map[int32]uint64
	pseudo map[string]uint64
	labels map[string][]byte // encoded labels, by the sample's attribute indices
	key    []byte
	ids    []uint64
}

// profile converts p with labels on every sample into an uncompressed
// pprof protobuf; nil without samples of a value.
func (d *dict) profile(p pprofile.Profile, labels map[string]string) ([]byte, error) {
	kind, err := d.classify(p)
	if err != nil {
		return nil, err
	}
	b := &builder{d: d, w: newPprofWriter(), locs: map[int32]uint64{}, funcs: map[int32]uint64{}, maps: map[int32]uint64{},
		pseudo: map[string]uint64{}, labels: map[string][]byte{}}
	first, last := uint64(math.MaxUint64), uint64(0)
	samples := 0
	for _, s := range p.Samples().All() {
		// n events (values, or timestamps without values) of sum in all:
		// a value is a count (samples), a time (cpu, off-CPU) or bytes.
		var sum int64
		n := int64(max(s.Values().Len(), s.TimestampsUnixNano().Len()))
		if vals := s.Values(); vals.Len() > 0 {
			for _, x := range vals.All() {
				if x < 0 || sum > math.MaxInt64/(2*kind.scale)-x {
					return nil, fmt.Errorf("%w: sample value %d is negative or its sum with the sample's others too large", ErrInvalid, x)
				}
				sum += x
			}
		} else if kind.events {
			sum = n
		}
		if sum == 0 {
			continue
		}
		for _, ts := range s.TimestampsUnixNano().All() {
			first, last = min(first, ts), max(last, ts)
		}
		if err := b.stack(s.StackIndex()); err != nil {
			return nil, err
		}
		lbl, err := b.sampleLabels(s.AttributeIndices(), labels)
		if err != nil {
			return nil, err
		}
		b.w.sample(b.ids, kind.value(n, sum), lbl)
		samples++
	}
	if samples == 0 {
		return nil, nil
	}
	timeNanos, duration := int64(p.Time()), int64(p.DurationNano())
	if timeNanos == 0 && last >= first {
		timeNanos, duration = int64(first), int64(last-first)
	}
	if timeNanos < 0 || duration < 0 {
		return nil, fmt.Errorf("%w: time %d and duration %d nanoseconds do not fit int64", ErrInvalid, p.Time(), p.DurationNano())
	}
	return b.w.finish(kind.types, kind.period, kind.periodValue, timeNanos, duration), nil
}

// sampleLabels are the encoded labels with the sample's attributes added,
// and service set: service.name of the sample or above, else derived as
// the agent derives it (record.DeriveService), else unknown_service.
func (b *builder) sampleLabels(idx pcommon.Int32Slice, labels map[string]string) ([]byte, error) {
	b.key = b.key[:0]
	for _, i := range idx.All() {
		b.key = protowire.AppendVarint(b.key, uint64(uint32(i)))
	}
	if l, ok := b.labels[string(b.key)]; ok {
		return l, nil
	}
	attrs, err := b.d.labels(idx)
	if err != nil {
		return nil, err
	}
	flat, _, err := attrLabels(labels, attrs)
	if err != nil {
		return nil, err
	}
	if flat[record.LabelService] == "" {
		flat[record.LabelService] = record.TruncateUTF8(firstNonEmpty(record.DeriveService(flat), unknownService), record.MaxServiceBytes)
	}
	keys := make([]string, 0, len(flat))
	for k := range flat {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	out := b.w.labels(keys, flat)
	b.labels[string(b.key)] = out
	return out, nil
}

// stack sets b.ids to the pprof IDs of stack i's locations, leaf first.
func (b *builder) stack(i int32) error {
	b.ids = b.ids[:0]
	if i < 0 || int(i) >= b.d.stack.Len() {
		if i == 0 {
			return nil
		}
		return fmt.Errorf("%w: stack index %d is outside the stack table (%d entries)", ErrInvalid, i, b.d.stack.Len())
	}
	for _, li := range b.d.stack.At(int(i)).LocationIndices().All() {
		id, err := b.location(li)
		if err != nil {
			return err
		}
		b.ids = append(b.ids, id)
	}
	return nil
}

func (b *builder) location(i int32) (uint64, error) {
	if id, ok := b.locs[i]; ok {
		return id, nil
	}
	if i < 0 || int(i) >= b.d.locs.Len() {
		return 0, fmt.Errorf("%w: location index %d is outside the location table (%d entries)", ErrInvalid, i, b.d.locs.Len())
	}
	l := b.d.locs.At(int(i))
	frameType := ""
	for _, ai := range l.AttributeIndices().All() {
		k, v, err := b.d.attr(ai)
		if err != nil {
			return 0, err
		}
		if k == attrFrameType {
			frameType = valueString(v)
		}
	}
	var lines []pprofLine
	for _, ln := range l.Lines().All() {
		if ln.FunctionIndex() == 0 {
			continue // the table's null function: no name to show
		}
		fn, err := b.function(ln.FunctionIndex())
		if err != nil {
			return 0, err
		}
		lines = append(lines, pprofLine{function: fn, line: ln.Line(), column: ln.Column()})
	}
	var mapping uint64
	addr := l.Address()
	switch file, known := frameFiles[frameType]; {
	case known:
		mapping = b.pseudoMapping(file)
		if file != record.MappingKernel {
			// An interpreter's "address" is its line or bytecode
			// offset, not an address in any mapping.
			addr = 0
		}
	case !nativeFrames[frameType]:
		mapping, addr = b.pseudoMapping(record.MappingJIT), 0
	case l.MappingIndex() != 0:
		var err error
		if mapping, err = b.mapping(l.MappingIndex()); err != nil {
			return 0, err
		}
	}
	id := b.w.location(mapping, addr, lines)
	b.locs[i] = id
	return id, nil
}

func (b *builder) function(i int32) (uint64, error) {
	if id, ok := b.funcs[i]; ok {
		return id, nil
	}
	if i < 0 || int(i) >= b.d.funcs.Len() {
		return 0, fmt.Errorf("%w: function index %d is outside the function table (%d entries)", ErrInvalid, i, b.d.funcs.Len())
	}
	f := b.d.funcs.At(int(i))
	name, err := b.d.str(f.NameStrindex())
	if err != nil {
		return 0, err
	}
	sys, err := b.d.str(f.SystemNameStrindex())
	if err != nil {
		return 0, err
	}
	file, err := b.d.str(f.FilenameStrindex())
	if err != nil {
		return 0, err
	}
	id := b.w.function(name, sys, file, f.StartLine())
	b.funcs[i] = id
	return id, nil
}

// mapping is a native mapping: its file, range and offset as sent (the
// eBPF profiler sends them in the ELF's address space, as it does the
// locations' addresses), and its GNU build ID, under which the symbolizer
// finds its symbols.
func (b *builder) mapping(i int32) (uint64, error) {
	if id, ok := b.maps[i]; ok {
		return id, nil
	}
	if i < 0 || int(i) >= b.d.maps.Len() {
		return 0, fmt.Errorf("%w: mapping index %d is outside the mapping table (%d entries)", ErrInvalid, i, b.d.maps.Len())
	}
	om := b.d.maps.At(int(i))
	file, err := b.d.str(om.FilenameStrindex())
	if err != nil {
		return 0, err
	}
	buildID := ""
	for _, ai := range om.AttributeIndices().All() {
		k, v, err := b.d.attr(ai)
		if err != nil {
			return 0, err
		}
		if k == attrBuildIDGNU {
			buildID = record.TruncateUTF8(valueString(v), 256)
		}
	}
	id := b.w.mapping(om.MemoryStart(), om.MemoryLimit(), om.FileOffset(), file, buildID, false)
	b.maps[i] = id
	return id, nil
}

// pseudoMapping is the mapping of frames the profiler named, on one of the
// record contract's pseudo-files: the symbolizer passes them as they are.
func (b *builder) pseudoMapping(file string) uint64 {
	if id, ok := b.pseudo[file]; ok {
		return id
	}
	id := b.w.mapping(0, 0, 0, file, "", true)
	b.pseudo[file] = id
	return id
}
