// Package v8 names the JavaScript frames of V8 (node): it reads the
// postmortem metadata node exports (the v8dbg_* symbols: frame slots, object
// field offsets, instance types, string encodings), gives the BPF walker the
// frame layout (bpf/profiler/v8.h), and turns the SharedFunctionInfo the
// walker recorded for a JavaScript frame into function name, script name and
// line by reading the process's memory. Everything read from the process is
// hostile input: reads are bounded, pointers checked, every object's type
// compared with the metadata's, results cached per (pid, SharedFunctionInfo)
// in a bounded LRU.
package v8

import (
	"errors"
	"fmt"

	"github.com/stackstream/stackstream/bpf/profiler"
)

// Errors, checked with errors.Is.
var (
	// ErrNotV8: the process runs no V8 the agent recognizes (no metadata).
	ErrNotV8 = errors.New("not a v8 process")
	// ErrUnsupported: V8 built in a way the agent cannot read (pointer
	// compression, another architecture).
	ErrUnsupported = errors.New("unsupported v8 build")
	// ErrInvalid: memory or a file that does not hold what it should.
	ErrInvalid = errors.New("invalid v8 data")
)

// Metadata is what the agent uses of V8's postmortem metadata, by symbol
// (v8dbg_ prefix dropped). Offsets of object fields are from the object's
// untagged address.
type Metadata struct {
	// Frame slots, from the frame pointer.
	FPContext  int64 // off_fp_context_or_frame_type (off_fp_context before V8 9)
	FPFunction int64 // off_fp_function

	// Tagging.
	HeapObjectTag     uint64 // HeapObjectTag (1)
	HeapObjectTagMask uint64 // HeapObjectTagMask (3)
	SmiTagMask        uint64 // SmiTagMask (1)
	SmiShift          uint   // SmiShiftSize + 1: where a Smi's value starts
	TaggedSize        int64  // TaggedSize: 8 without pointer compression

	// Objects.
	HeapObjectMap    int64 // class_HeapObject__map__Map
	MapInstanceType  int64 // class_Map__instance_type__uint16_t
	JSFunctionShared int64 // class_JSFunction__shared__SharedFunctionInfo
	SFINameOrScope   int64 // class_SharedFunctionInfo__name_or_scope_info__Object
	SFIScript        int64 // class_SharedFunctionInfo__script_or_debug_info__{Object,HeapObject}
	ScriptName       int64 // class_Script__name__Object
	ScriptLineEnds   int64 // class_Script__line_ends__Object
	ScriptSource     int64 // class_Script__source__Object
	FixedArrayLength int64 // class_FixedArrayBase__length__SMI
	FixedArrayData   int64 // class_FixedArray__data__uintptr_t
	ScopeInfoLocals  int64 // scopeinfo_idx_ncontextlocals: slot of context_local_count
	ScopeInfoVars    int64 // scopeinfo_idx_first_vars: slot where the variable part starts

	// Strings.
	StringLength       int64  // class_String__length__int32_t
	SeqOneByteChars    int64  // class_SeqOneByteString__chars__char
	SeqTwoByteChars    int64  // class_SeqTwoByteString__chars__char
	ConsFirst          int64  // class_ConsString__first__String
	ConsSecond         int64  // class_ConsString__second__String
	ThinActual         int64  // class_ThinString__actual__String
	SlicedParent       int64  // class_SlicedString__parent__String
	SlicedOffset       int64  // class_SlicedString__offset__SMI
	FirstNonstringType uint16 // FirstNonstringType
	StringEncodingMask uint16 // StringEncodingMask
	OneByteStringTag   uint16 // OneByteStringTag
	StringReprMask     uint16 // StringRepresentationMask
	SeqStringTag       uint16 // SeqStringTag
	ConsStringTag      uint16 // ConsStringTag
	SlicedStringTag    uint16 // SlicedStringTag
	ThinStringTag      uint16 // ThinStringTag
	ExternalStringTag  uint16 // ExternalStringTag

	// Instance types.
	TypeJSFunction  uint16 // type_JSFunction__JS_FUNCTION_TYPE
	TypeJSFunctionN uint16 // JSFunction subtypes (class constructors, ...) follow it: this many types in all
	TypeSFI         uint16 // type_SharedFunctionInfo__SHARED_FUNCTION_INFO_TYPE
	TypeScopeInfo   uint16 // type_ScopeInfo__SCOPE_INFO_TYPE
	TypeScript      uint16 // type_Script__SCRIPT_TYPE
	TypeFixedArray  uint16 // type_FixedArray__FIXED_ARRAY_TYPE
	TypeOddball     uint16 // type_Oddball__ODDBALL_TYPE

	// Where a ScopeInfo's slots start: after the map (a HeapObject since V8
	// 9), after map and length when it is a FixedArray
	// (parent_ScopeInfo__FixedArray).
	scopeInfoBase uint64
}

// symbolSpec says where a Metadata field comes from: the first symbol of
// names that the binary has (without the v8dbg_ prefix).
type symbolSpec struct {
	names    []string
	optional bool // zero when absent
	set      func(m *Metadata, v int64)
}

func i64(p func(m *Metadata) *int64) func(*Metadata, int64) {
	return func(m *Metadata, v int64) { *p(m) = v }
}

func u16(p func(m *Metadata) *uint16) func(*Metadata, int64) {
	return func(m *Metadata, v int64) { *p(m) = uint16(v) }
}

func u64(p func(m *Metadata) *uint64) func(*Metadata, int64) {
	return func(m *Metadata, v int64) { *p(m) = uint64(v) }
}

var symbolSpecs = []symbolSpec{
	{names: []string{"off_fp_context_or_frame_type", "off_fp_context"}, set: i64(func(m *Metadata) *int64 { return &m.FPContext })},
	{names: []string{"off_fp_function"}, set: i64(func(m *Metadata) *int64 { return &m.FPFunction })},
	{names: []string{"HeapObjectTag"}, set: u64(func(m *Metadata) *uint64 { return &m.HeapObjectTag })},
	{names: []string{"HeapObjectTagMask"}, set: u64(func(m *Metadata) *uint64 { return &m.HeapObjectTagMask })},
	{names: []string{"SmiTagMask"}, set: u64(func(m *Metadata) *uint64 { return &m.SmiTagMask })},
	{names: []string{"SmiShiftSize"}, set: func(m *Metadata, v int64) { m.SmiShift = uint(v) + 1 }},
	{names: []string{"TaggedSize", "PointerSize"}, set: i64(func(m *Metadata) *int64 { return &m.TaggedSize })},
	{names: []string{"class_HeapObject__map__Map"}, set: i64(func(m *Metadata) *int64 { return &m.HeapObjectMap })},
	{names: []string{"class_Map__instance_type__uint16_t"}, set: i64(func(m *Metadata) *int64 { return &m.MapInstanceType })},
	{names: []string{"class_JSFunction__shared__SharedFunctionInfo"}, set: i64(func(m *Metadata) *int64 { return &m.JSFunctionShared })},
	{names: []string{"class_SharedFunctionInfo__name_or_scope_info__Object"}, set: i64(func(m *Metadata) *int64 { return &m.SFINameOrScope })},
	{names: []string{"class_SharedFunctionInfo__script_or_debug_info__HeapObject", "class_SharedFunctionInfo__script_or_debug_info__Object"},
		set: i64(func(m *Metadata) *int64 { return &m.SFIScript })},
	{names: []string{"class_Script__name__Object"}, set: i64(func(m *Metadata) *int64 { return &m.ScriptName })},
	{names: []string{"class_Script__line_ends__Object"}, optional: true, set: i64(func(m *Metadata) *int64 { return &m.ScriptLineEnds })},
	{names: []string{"class_Script__source__Object"}, optional: true, set: i64(func(m *Metadata) *int64 { return &m.ScriptSource })},
	{names: []string{"class_FixedArrayBase__length__SMI"}, set: i64(func(m *Metadata) *int64 { return &m.FixedArrayLength })},
	{names: []string{"class_FixedArray__data__uintptr_t"}, set: i64(func(m *Metadata) *int64 { return &m.FixedArrayData })},
	{names: []string{"scopeinfo_idx_ncontextlocals"}, set: i64(func(m *Metadata) *int64 { return &m.ScopeInfoLocals })},
	{names: []string{"scopeinfo_idx_first_vars"}, set: i64(func(m *Metadata) *int64 { return &m.ScopeInfoVars })},
	{names: []string{"class_String__length__int32_t", "class_String__length__SMI"}, set: i64(func(m *Metadata) *int64 { return &m.StringLength })},
	{names: []string{"class_SeqOneByteString__chars__char"}, set: i64(func(m *Metadata) *int64 { return &m.SeqOneByteChars })},
	{names: []string{"class_SeqTwoByteString__chars__char"}, set: i64(func(m *Metadata) *int64 { return &m.SeqTwoByteChars })},
	{names: []string{"class_ConsString__first__String"}, set: i64(func(m *Metadata) *int64 { return &m.ConsFirst })},
	{names: []string{"class_ConsString__second__String"}, set: i64(func(m *Metadata) *int64 { return &m.ConsSecond })},
	{names: []string{"class_ThinString__actual__String"}, optional: true, set: i64(func(m *Metadata) *int64 { return &m.ThinActual })},
	{names: []string{"class_SlicedString__parent__String"}, set: i64(func(m *Metadata) *int64 { return &m.SlicedParent })},
	{names: []string{"class_SlicedString__offset__SMI"}, set: i64(func(m *Metadata) *int64 { return &m.SlicedOffset })},
	{names: []string{"FirstNonstringType"}, set: u16(func(m *Metadata) *uint16 { return &m.FirstNonstringType })},
	{names: []string{"StringEncodingMask"}, set: u16(func(m *Metadata) *uint16 { return &m.StringEncodingMask })},
	{names: []string{"OneByteStringTag"}, set: u16(func(m *Metadata) *uint16 { return &m.OneByteStringTag })},
	{names: []string{"StringRepresentationMask"}, set: u16(func(m *Metadata) *uint16 { return &m.StringReprMask })},
	{names: []string{"SeqStringTag"}, set: u16(func(m *Metadata) *uint16 { return &m.SeqStringTag })},
	{names: []string{"ConsStringTag"}, set: u16(func(m *Metadata) *uint16 { return &m.ConsStringTag })},
	{names: []string{"SlicedStringTag"}, set: u16(func(m *Metadata) *uint16 { return &m.SlicedStringTag })},
	{names: []string{"ThinStringTag"}, optional: true, set: u16(func(m *Metadata) *uint16 { return &m.ThinStringTag })},
	{names: []string{"ExternalStringTag"}, set: u16(func(m *Metadata) *uint16 { return &m.ExternalStringTag })},
	{names: []string{"type_JSFunction__JS_FUNCTION_TYPE"}, set: u16(func(m *Metadata) *uint16 { return &m.TypeJSFunction })},
	{names: []string{"type_SharedFunctionInfo__SHARED_FUNCTION_INFO_TYPE"}, set: u16(func(m *Metadata) *uint16 { return &m.TypeSFI })},
	{names: []string{"type_ScopeInfo__SCOPE_INFO_TYPE"}, set: u16(func(m *Metadata) *uint16 { return &m.TypeScopeInfo })},
	{names: []string{"type_Script__SCRIPT_TYPE"}, set: u16(func(m *Metadata) *uint16 { return &m.TypeScript })},
	{names: []string{"type_FixedArray__FIXED_ARRAY_TYPE"}, optional: true, set: u16(func(m *Metadata) *uint16 { return &m.TypeFixedArray })},
	{names: []string{"type_Oddball__ODDBALL_TYPE"}, optional: true, set: u16(func(m *Metadata) *uint16 { return &m.TypeOddball })},
}

// maxJSFunctionTypes bounds the JSFunction subtypes accepted after
// JS_FUNCTION_TYPE (V8 11: 30 constructor types follow it, exported by no
// symbol of their own).
const maxJSFunctionTypes = 64

// newMetadata builds Metadata from the v8dbg_ values (prefix dropped) and
// the instance types exported; it checks what the walker and the reader
// rely on.
func newMetadata(values map[string]int64) (*Metadata, error) {
	m := &Metadata{}
	for _, s := range symbolSpecs {
		found := false
		for _, n := range s.names {
			if v, ok := values[n]; ok {
				s.set(m, v)
				found = true
				break
			}
		}
		if !found && !s.optional {
			return nil, fmt.Errorf("%w: no v8dbg_%s", ErrNotV8, s.names[0])
		}
	}
	if m.TaggedSize != 8 {
		return nil, fmt.Errorf("%w: tagged size %d (pointer compression): only 8 is read", ErrUnsupported, m.TaggedSize)
	}
	if m.HeapObjectTag != 1 || m.HeapObjectTagMask != 3 || m.SmiTagMask != 1 || m.SmiShift != 32 {
		return nil, fmt.Errorf("%w: heap object tag %d/%d, smi tag mask %d, smi shift %d", ErrUnsupported,
			m.HeapObjectTag, m.HeapObjectTagMask, m.SmiTagMask, m.SmiShift)
	}
	if m.FPContext == 0 || m.FPFunction == 0 || m.FPContext < -4096 || m.FPFunction < -4096 || m.FPContext > 4096 || m.FPFunction > 4096 {
		return nil, fmt.Errorf("%w: frame slots %d, %d", ErrInvalid, m.FPContext, m.FPFunction)
	}
	for _, off := range []int64{m.HeapObjectMap, m.MapInstanceType, m.JSFunctionShared, m.SFINameOrScope, m.SFIScript, m.ScriptName,
		m.ScriptLineEnds, m.ScriptSource, m.FixedArrayLength, m.FixedArrayData, m.StringLength, m.SeqOneByteChars, m.SeqTwoByteChars,
		m.ConsFirst, m.ConsSecond, m.ThinActual, m.SlicedParent, m.SlicedOffset} {
		if off < 0 || off > maxObjectHeader-8 {
			return nil, fmt.Errorf("%w: field offset %d", ErrInvalid, off)
		}
	}
	if m.ScopeInfoVars <= 0 || m.ScopeInfoVars > 16 || m.ScopeInfoLocals <= 0 || m.ScopeInfoLocals >= m.ScopeInfoVars {
		return nil, fmt.Errorf("%w: scope info slots %d, %d", ErrInvalid, m.ScopeInfoLocals, m.ScopeInfoVars)
	}
	m.scopeInfoBase = uint64(m.TaggedSize)
	if _, ok := values["parent_ScopeInfo__FixedArray"]; ok {
		m.scopeInfoBase = uint64(m.FixedArrayData)
	}
	// The subtypes of JSFunction run up to the next type exported.
	m.TypeJSFunctionN = 1
	next := int64(m.TypeJSFunction) + maxJSFunctionTypes
	for k, v := range values {
		if len(k) > 5 && k[:5] == "type_" && v > int64(m.TypeJSFunction) && v < next {
			next = v
		}
	}
	m.TypeJSFunctionN = uint16(next - int64(m.TypeJSFunction))
	return m, nil
}

// maxObjectHeader is the most read of an object's fixed part.
const maxObjectHeader = 128

// BPF is the walker's view of p (struct v8_proc): the
// frame slots and where the embedded builtins are (0: unknown).
func (p *Process) BPF() profiler.ProfileV8Proc {
	return profiler.ProfileV8Proc{
		CodeStart: p.CodeStart, CodeEnd: p.CodeEnd,
		FpContext: int16(p.Meta.FPContext), FpFunction: int16(p.Meta.FPFunction),
		FunctionShared: uint16(p.Meta.JSFunctionShared),
	}
}

// IsFrame reports whether a value of an unwound stack is a JavaScript frame.
func IsFrame(v uint64) bool {
	return v&profiler.JSFrameFlag != 0 && v&profiler.PythonFrameFlag == 0
}

// DecodeFrame returns the tagged pointer of the SharedFunctionInfo of a
// JavaScript frame of an unwound stack.
func DecodeFrame(v uint64) uint64 { return v & profiler.JSPointerMask }
