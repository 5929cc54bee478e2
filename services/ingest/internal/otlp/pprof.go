package otlp

import (
	"github.com/google/pprof/profile"
	"google.golang.org/protobuf/encoding/protowire"
)

// Field numbers of google/pprof's profile.proto.
const (
	fSampleType    = 1
	fSample        = 2
	fMapping       = 3
	fLocation      = 4
	fFunction      = 5
	fStringTable   = 6
	fTimeNanos     = 9
	fDurationNanos = 10
	fPeriodType    = 11
	fPeriod        = 12

	fValueTypeType, fValueTypeUnit = 1, 2

	fSampleLocationID, fSampleValue, fSampleLabel = 1, 2, 3
	fLabelKey, fLabelStr                          = 1, 2

	fMappingID, fMappingStart, fMappingLimit, fMappingOffset = 1, 2, 3, 4
	fMappingFilename, fMappingBuildID                        = 5, 6
	fMappingHasFunctions, fMappingHasFilenames               = 7, 8
	fMappingHasLineNumbers                                   = 9

	fLocationID, fLocationMappingID, fLocationAddress, fLocationLine = 1, 2, 3, 4
	fLineFunctionID, fLineLine, fLineColumn                          = 1, 2, 3

	fFunctionID, fFunctionName, fFunctionSystemName = 1, 2, 3
	fFunctionFilename, fFunctionStartLine           = 4, 5
)

// pprofWriter encodes a pprof profile as it is built: every message is
// appended to its section once, strings are interned, IDs count from 1.
type pprofWriter struct {
	samples, mappings, locations, functions []byte
	strs                                    map[string]int64
	table                                   []string
	nMappings, nLocations, nFunctions       uint64
	scratch, msg                            []byte
}

type pprofLine struct {
	function     uint64
	line, column int64
}

func newPprofWriter() *pprofWriter {
	w := &pprofWriter{strs: map[string]int64{"": 0}, table: []string{""}}
	return w
}

func (w *pprofWriter) str(s string) int64 {
	if i, ok := w.strs[s]; ok {
		return i
	}
	i := int64(len(w.table))
	w.strs[s] = i
	w.table = append(w.table, s)
	return i
}

func appendVarintField(b []byte, num protowire.Number, v uint64) []byte {
	if v == 0 {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.VarintType)
	return protowire.AppendVarint(b, v)
}

func appendMessage(b []byte, num protowire.Number, msg []byte) []byte {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendBytes(b, msg)
}

// labels encodes string labels keys[i]=flat[keys[i]] as sample label fields.
func (w *pprofWriter) labels(keys []string, flat map[string]string) []byte {
	var out []byte
	for _, k := range keys {
		w.msg = appendVarintField(w.msg[:0], fLabelKey, uint64(w.str(k)))
		w.msg = appendVarintField(w.msg, fLabelStr, uint64(w.str(flat[k])))
		out = appendMessage(out, fSampleLabel, w.msg)
	}
	return out
}

func (w *pprofWriter) sample(locs []uint64, values []int64, labels []byte) {
	w.msg = w.msg[:0]
	if len(locs) > 0 {
		w.scratch = w.scratch[:0]
		for _, id := range locs {
			w.scratch = protowire.AppendVarint(w.scratch, id)
		}
		w.msg = appendMessage(w.msg, fSampleLocationID, w.scratch)
	}
	w.scratch = w.scratch[:0]
	for _, v := range values {
		w.scratch = protowire.AppendVarint(w.scratch, uint64(v))
	}
	w.msg = appendMessage(w.msg, fSampleValue, w.scratch)
	w.msg = append(w.msg, labels...)
	w.samples = appendMessage(w.samples, fSample, w.msg)
}

func (w *pprofWriter) mapping(start, limit, offset uint64, file, buildID string, named bool) uint64 {
	w.nMappings++
	m := appendVarintField(w.msg[:0], fMappingID, w.nMappings)
	m = appendVarintField(m, fMappingStart, start)
	m = appendVarintField(m, fMappingLimit, limit)
	m = appendVarintField(m, fMappingOffset, offset)
	m = appendVarintField(m, fMappingFilename, uint64(w.str(file)))
	m = appendVarintField(m, fMappingBuildID, uint64(w.str(buildID)))
	if named {
		m = appendVarintField(m, fMappingHasFunctions, 1)
		m = appendVarintField(m, fMappingHasFilenames, 1)
		m = appendVarintField(m, fMappingHasLineNumbers, 1)
	}
	w.msg = m
	w.mappings = appendMessage(w.mappings, fMapping, m)
	return w.nMappings
}

func (w *pprofWriter) function(name, systemName, file string, startLine int64) uint64 {
	w.nFunctions++
	m := appendVarintField(w.msg[:0], fFunctionID, w.nFunctions)
	m = appendVarintField(m, fFunctionName, uint64(w.str(name)))
	m = appendVarintField(m, fFunctionSystemName, uint64(w.str(systemName)))
	m = appendVarintField(m, fFunctionFilename, uint64(w.str(file)))
	m = appendVarintField(m, fFunctionStartLine, uint64(startLine))
	w.msg = m
	w.functions = appendMessage(w.functions, fFunction, m)
	return w.nFunctions
}

func (w *pprofWriter) location(mapping, addr uint64, lines []pprofLine) uint64 {
	w.nLocations++
	m := appendVarintField(w.msg[:0], fLocationID, w.nLocations)
	m = appendVarintField(m, fLocationMappingID, mapping)
	m = appendVarintField(m, fLocationAddress, addr)
	for _, ln := range lines {
		w.scratch = appendVarintField(w.scratch[:0], fLineFunctionID, ln.function)
		w.scratch = appendVarintField(w.scratch, fLineLine, uint64(ln.line))
		w.scratch = appendVarintField(w.scratch, fLineColumn, uint64(ln.column))
		m = appendMessage(m, fLocationLine, w.scratch)
	}
	w.msg = m
	w.locations = appendMessage(w.locations, fLocation, m)
	return w.nLocations
}

func (w *pprofWriter) valueType(b []byte, num protowire.Number, v *profile.ValueType) []byte {
	m := appendVarintField(nil, fValueTypeType, uint64(w.str(v.Type)))
	m = appendVarintField(m, fValueTypeUnit, uint64(w.str(v.Unit)))
	return appendMessage(b, num, m)
}

// finish returns the whole profile.
func (w *pprofWriter) finish(types []*profile.ValueType, periodType *profile.ValueType, period, timeNanos, duration int64) []byte {
	var head []byte
	for _, t := range types {
		head = w.valueType(head, fSampleType, t)
	}
	if periodType != nil {
		head = w.valueType(head, fPeriodType, periodType)
	}
	head = appendVarintField(head, fPeriod, uint64(period))
	head = appendVarintField(head, fTimeNanos, uint64(timeNanos))
	head = appendVarintField(head, fDurationNanos, uint64(duration))
	size := len(head) + len(w.samples) + len(w.mappings) + len(w.locations) + len(w.functions)
	for _, s := range w.table {
		size += len(s) + 6
	}
	out := make([]byte, 0, size)
	out = append(out, head...)
	out = append(out, w.samples...)
	out = append(out, w.mappings...)
	out = append(out, w.locations...)
	out = append(out, w.functions...)
	for _, s := range w.table {
		out = protowire.AppendTag(out, fStringTable, protowire.BytesType)
		out = protowire.AppendString(out, s)
	}
	return out
}
