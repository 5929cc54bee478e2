package v8

import (
	"encoding/binary"
	"fmt"
	"io"
	"sort"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// ReadLimits bound what is read for one function.
type ReadLimits struct {
	MaxStringBytes int // a name is cut to this many bytes of UTF-8 (default 1024)
	MaxStringParts int // pieces of a cons string followed (default 64)
	MaxLineEnds    int // line ends of a script searched; past them no line (default 1M)
	// Before V8 computed a script's line ends, a function's line is counted
	// in the script's source, when it starts in the first MaxSourceBytes.
	MaxSourceBytes int // default 1 MiB
}

// DefaultReadLimits are the agent's.
var DefaultReadLimits = ReadLimits{MaxStringBytes: 1024, MaxStringParts: 64, MaxLineEnds: 1 << 20, MaxSourceBytes: 1 << 20}

// Function is what the agent keeps of a SharedFunctionInfo.
type Function struct {
	Name   string // "" when the function has none (anonymous)
	Script string // the script's name: a file path or URL; "" when none
	Line   int    // 1-based line of the function's start; 0 when unknown
}

// userLimit is the end of x86-64 user space (47-bit addresses).
const userLimit = 1 << 47

// heap reads objects of one process.
type heap struct {
	mem   io.ReaderAt
	m     *Metadata
	lim   ReadLimits
	parts int // cons-string pieces left
	max   int // bytes of UTF-8 the string being read may take
}

// object returns the untagged address of the tagged pointer v, or false
// when v is no pointer to a heap object.
func (h *heap) object(v uint64) (uint64, bool) {
	if v&h.m.HeapObjectTagMask != h.m.HeapObjectTag {
		return 0, false
	}
	a := v - h.m.HeapObjectTag
	return a, a >= 4096 && a < userLimit && a%8 == 0
}

func (h *heap) isSmi(v uint64) bool { return v&h.m.SmiTagMask == 0 }

func (h *heap) smi(v uint64) int64 { return int64(v) >> h.m.SmiShift }

func (h *heap) read(addr uint64, b []byte) error {
	if addr >= userLimit || uint64(len(b)) > userLimit-addr {
		return fmt.Errorf("%w: read of %d bytes at %#x", ErrInvalid, len(b), addr)
	}
	if _, err := h.mem.ReadAt(b, int64(addr)); err != nil {
		return fmt.Errorf("%w: read %d bytes at %#x: %v", ErrInvalid, len(b), addr, err)
	}
	return nil
}

func (h *heap) word(addr uint64) (uint64, error) {
	var b [8]byte
	if err := h.read(addr, b[:]); err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint64(b[:]), nil
}

// typeOf returns the instance type of the object at untagged addr, read
// through its map.
func (h *heap) typeOf(addr uint64) (uint16, error) {
	mp, err := h.word(addr + uint64(h.m.HeapObjectMap))
	if err != nil {
		return 0, err
	}
	ma, ok := h.object(mp)
	if !ok {
		return 0, fmt.Errorf("%w: map %#x of object %#x", ErrInvalid, mp, addr)
	}
	var b [2]byte
	if err := h.read(ma+uint64(h.m.MapInstanceType), b[:]); err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint16(b[:]), nil
}

// ReadFunction reads the SharedFunctionInfo at the tagged pointer sfi of
// the process whose memory is mem.
func ReadFunction(mem io.ReaderAt, m *Metadata, sfi uint64, lim ReadLimits) (*Function, error) {
	h := &heap{mem: mem, m: m, lim: lim}
	a, ok := h.object(sfi)
	if !ok {
		return nil, fmt.Errorf("%w: SharedFunctionInfo pointer %#x", ErrInvalid, sfi)
	}
	if t, err := h.typeOf(a); err != nil {
		return nil, err
	} else if t != m.TypeSFI {
		return nil, fmt.Errorf("%w: object at %#x has type %d, not SharedFunctionInfo (%d)", ErrInvalid, a, t, m.TypeSFI)
	}
	f := &Function{}
	nameOrScope, err := h.word(a + uint64(m.SFINameOrScope))
	if err != nil {
		return nil, err
	}
	start := int64(-1)
	if na, ok := h.object(nameOrScope); ok {
		t, err := h.typeOf(na)
		if err != nil {
			return nil, err
		}
		switch {
		case t < m.FirstNonstringType:
			f.Name, err = h.string(nameOrScope)
		case t == m.TypeScopeInfo:
			f.Name, start, err = h.scopeInfo(na)
		default:
			err = fmt.Errorf("%w: name_or_scope_info of type %d", ErrInvalid, t)
		}
		if err != nil {
			return nil, fmt.Errorf("function name: %w", err)
		}
	}
	// The script, if any (a DebugInfo stands in for it while debugging:
	// no file then).
	scriptOrDebug, err := h.word(a + uint64(m.SFIScript))
	if err != nil {
		return f, nil
	}
	sa, ok := h.object(scriptOrDebug)
	if !ok {
		return f, nil
	}
	if t, err := h.typeOf(sa); err != nil || t != m.TypeScript {
		return f, nil
	}
	if name, err := h.word(sa + uint64(m.ScriptName)); err == nil {
		if na, ok := h.object(name); ok {
			if t, err := h.typeOf(na); err == nil && t < m.FirstNonstringType {
				f.Script, _ = h.string(name)
			}
		}
	}
	if start >= 0 {
		if f.Line = h.line(sa, start); f.Line == 0 {
			f.Line = h.sourceLine(sa, start)
		}
	}
	return f, nil
}

// Bits of a ScopeInfo's flags (V8's ScopeFlags, the same from V8 9 to 12):
// how the variable part is laid out.
const (
	scopeReceiverShift     = 7  // receiver_variable: 2 bits, STACK 1 and CONTEXT 2 take a slot
	scopeSavedClassBit     = 10 // has_saved_class_variable: a slot
	scopeFunctionVarShift  = 12 // function_variable: 2 bits, not NONE: name and slot index
	scopeInferredNameBit   = 14 // has_inferred_function_name: a slot
	maxInlinedLocalNames   = 75 // kScopeInfoMaxInlinedLocalNamesSize
	scopeInfoWindow        = 12 // slots of the variable part read
	variableAllocationNone = 0
)

// scopeInfo finds the function's name and start position in a ScopeInfo,
// where they move once the function is compiled. Its slots (after the map)
// are the flags, the parameter count, the context local count, then the
// variable part: the context locals' names (a hash table past 75) and
// infos, the saved class variable, the receiver's slot, the function
// variable (name, or Smi zero, and its slot), the inferred name (String or
// undefined), the position (start, end), the outer scope info; the flags
// say which are there. Each slot's type is checked; when the layout does
// not hold (another V8), the first string after the locals is taken as the
// name and no position.
func (h *heap) scopeInfo(a uint64) (string, int64, error) {
	m := h.m
	ts := uint64(m.TaggedSize)
	base := a + h.m.scopeInfoBase
	var hdr [3]uint64
	for i := range hdr {
		v, err := h.word(base + uint64(i)*ts)
		if err != nil {
			return "", -1, err
		}
		hdr[i] = v
	}
	flagsV, n := hdr[0], hdr[m.ScopeInfoLocals]
	if !h.isSmi(n) || h.smi(n) < 0 || h.smi(n) > 1<<16 || !h.isSmi(flagsV) {
		return "", -1, fmt.Errorf("%w: scope info %#x with flags %#x, %#x context locals", ErrInvalid, a, flagsV, n)
	}
	flags := uint64(h.smi(flagsV))
	locals := uint64(h.smi(n))
	idx := uint64(m.ScopeInfoVars) + 2*locals
	if locals >= maxInlinedLocalNames {
		idx = uint64(m.ScopeInfoVars) + 1 + locals
	}
	var b [scopeInfoWindow * 8]byte
	if err := h.read(base+idx*ts, b[:]); err != nil {
		return "", -1, err
	}
	slot := func(i int) uint64 { return binary.LittleEndian.Uint64(b[i*8:]) }
	isString := func(v uint64) bool {
		oa, ok := h.object(v)
		if !ok {
			return false
		}
		t, err := h.typeOf(oa)
		return err == nil && t < m.FirstNonstringType
	}
	isOddball := func(v uint64) bool {
		oa, ok := h.object(v)
		if !ok || m.TypeOddball == 0 {
			return false
		}
		t, err := h.typeOf(oa)
		return err == nil && t == m.TypeOddball
	}
	i := 0
	if flags>>scopeSavedClassBit&1 == 1 {
		i++
	}
	if r := flags >> scopeReceiverShift & 3; r == 1 || r == 2 {
		i++
	}
	var nameSlot, inferredSlot uint64
	layoutOK := true
	if flags>>scopeFunctionVarShift&3 != variableAllocationNone {
		nameSlot = slot(i)
		layoutOK = isString(nameSlot) || nameSlot == 0
		i += 2
	}
	if flags>>scopeInferredNameBit&1 == 1 {
		inferredSlot = slot(i)
		layoutOK = layoutOK && (isString(inferredSlot) || isOddball(inferredSlot))
		i++
	}
	if layoutOK {
		start := int64(-1)
		if s, e := slot(i), slot(i+1); h.isSmi(s) && h.isSmi(e) && h.smi(s) >= 0 && h.smi(s) <= h.smi(e) {
			start = h.smi(s)
		}
		for _, v := range []uint64{nameSlot, inferredSlot} {
			if v != 0 && isString(v) {
				name, err := h.string(v)
				return name, start, err
			}
		}
		return "", start, nil
	}
	for i := range scopeInfoWindow {
		if v := slot(i); isString(v) {
			name, err := h.string(v)
			return name, -1, err
		}
	}
	return "", -1, nil
}

// line is the 1-based line of source position pos in the script at a, from
// its line ends (a FixedArray of Smis, computed by V8 on first need:
// before that, no line).
func (h *heap) line(a uint64, pos int64) int {
	m := h.m
	if m.ScriptLineEnds == 0 {
		return 0
	}
	le, err := h.word(a + uint64(m.ScriptLineEnds))
	if err != nil {
		return 0
	}
	la, ok := h.object(le)
	if !ok {
		return 0
	}
	if m.TypeFixedArray != 0 {
		if t, err := h.typeOf(la); err != nil || t != m.TypeFixedArray {
			return 0
		}
	}
	nv, err := h.word(la + uint64(m.FixedArrayLength))
	if err != nil || !h.isSmi(nv) {
		return 0
	}
	n := h.smi(nv)
	if n <= 0 || n > int64(h.lim.MaxLineEnds) {
		return 0
	}
	// Binary search, one slot read per step: the first line whose end is
	// at or after pos.
	var readErr bool
	i := sort.Search(int(n), func(i int) bool {
		v, err := h.word(la + uint64(m.FixedArrayData) + uint64(i)*8)
		if err != nil || !h.isSmi(v) {
			readErr = true
			return true
		}
		return h.smi(v) >= pos
	})
	if readErr || i >= int(n) {
		return 0
	}
	return i + 1
}

// sourceLine is the 1-based line of source position pos in the script at
// a, counted in its source; 0 past MaxSourceBytes or when unreadable.
func (h *heap) sourceLine(a uint64, pos int64) int {
	m := h.m
	if m.ScriptSource == 0 || pos > int64(h.lim.MaxSourceBytes) {
		return 0
	}
	src, err := h.word(a + uint64(m.ScriptSource))
	if err != nil {
		return 0
	}
	var sb strings.Builder
	h.parts, h.max = h.lim.MaxStringParts, h.lim.MaxSourceBytes
	if err := h.appendString(&sb, src, 0, pos); err != nil {
		return 0
	}
	s := sb.String()
	if utf8.RuneCountInString(s) != int(pos) {
		return 0 // cut: the position lies past what was read
	}
	return strings.Count(s, "\n") + 1
}

// string reads the V8 string at tagged pointer v, cut to MaxStringBytes of
// UTF-8.
func (h *heap) string(v uint64) (string, error) {
	var sb strings.Builder
	h.parts, h.max = h.lim.MaxStringParts, h.lim.MaxStringBytes
	if err := h.appendString(&sb, v, 0, -1); err != nil {
		return "", err
	}
	return sb.String(), nil
}

// appendString appends characters [from, from+count) of the string at v
// (count -1: to its end) to sb, within h.max bytes.
func (h *heap) appendString(sb *strings.Builder, v uint64, from, count int64) error {
	m := h.m
	for {
		if sb.Len() >= h.max {
			return nil
		}
		h.parts--
		if h.parts < 0 {
			return nil // cut: the name so far stands
		}
		a, ok := h.object(v)
		if !ok {
			return fmt.Errorf("%w: string pointer %#x", ErrInvalid, v)
		}
		t, err := h.typeOf(a)
		if err != nil {
			return err
		}
		if t >= m.FirstNonstringType {
			return fmt.Errorf("%w: object at %#x has type %d, not a string", ErrInvalid, a, t)
		}
		var lb [4]byte
		if err := h.read(a+uint64(m.StringLength), lb[:]); err != nil {
			return err
		}
		length := int64(int32(binary.LittleEndian.Uint32(lb[:])))
		if length < 0 || from < 0 || from > length {
			return fmt.Errorf("%w: string at %#x of length %d, from %d", ErrInvalid, a, length, from)
		}
		if count < 0 || from+count > length {
			count = length - from
		}
		oneByte := t&m.StringEncodingMask == m.OneByteStringTag
		switch t & m.StringReprMask {
		case m.SeqStringTag:
			off, width := m.SeqTwoByteChars, int64(2)
			if oneByte {
				off, width = m.SeqOneByteChars, 1
			}
			// No more characters than the bytes left could hold.
			n := min(count, int64(h.max-sb.Len()))
			buf := make([]byte, n*width)
			if err := h.read(a+uint64(off)+uint64(from*width), buf); err != nil {
				return err
			}
			decode(sb, buf, oneByte, h.max)
			return nil
		case m.ConsStringTag:
			first, err := h.word(a + uint64(m.ConsFirst))
			if err != nil {
				return err
			}
			second, err := h.word(a + uint64(m.ConsSecond))
			if err != nil {
				return err
			}
			fa, ok := h.object(first)
			if !ok {
				return fmt.Errorf("%w: cons string %#x first %#x", ErrInvalid, a, first)
			}
			var fl [4]byte
			if err := h.read(fa+uint64(m.StringLength), fl[:]); err != nil {
				return err
			}
			firstLen := int64(int32(binary.LittleEndian.Uint32(fl[:])))
			if firstLen < 0 || firstLen > length {
				return fmt.Errorf("%w: cons string %#x of length %d with a first part of %d", ErrInvalid, a, length, firstLen)
			}
			if from < firstLen {
				n := min(count, firstLen-from)
				if err := h.appendString(sb, first, from, n); err != nil {
					return err
				}
				count -= n
				from = 0
			} else {
				from -= firstLen
			}
			if count == 0 {
				return nil
			}
			v = second // the right side iteratively: long concatenations grow there
		case m.ThinStringTag:
			if m.ThinActual == 0 {
				return fmt.Errorf("%w: thin string without metadata", ErrUnsupported)
			}
			if v, err = h.word(a + uint64(m.ThinActual)); err != nil {
				return err
			}
		case m.SlicedStringTag:
			parent, err := h.word(a + uint64(m.SlicedParent))
			if err != nil {
				return err
			}
			off, err := h.word(a + uint64(m.SlicedOffset))
			if err != nil {
				return err
			}
			if !h.isSmi(off) || h.smi(off) < 0 {
				return fmt.Errorf("%w: sliced string %#x offset %#x", ErrInvalid, a, off)
			}
			v, from = parent, from+h.smi(off)
		default:
			// External strings keep their characters behind a C++ resource
			// the metadata does not describe.
			return fmt.Errorf("%w: string representation %d at %#x", ErrUnsupported, t&m.StringReprMask, a)
		}
	}
}

// decode appends Latin-1 or UTF-16 characters to sb as UTF-8, stopping
// before max bytes at a character boundary.
func decode(sb *strings.Builder, buf []byte, oneByte bool, max int) {
	put := func(r rune) bool {
		if !utf8.ValidRune(r) {
			r = utf8.RuneError
		}
		if sb.Len()+utf8.RuneLen(r) > max {
			return false
		}
		sb.WriteRune(r)
		return true
	}
	if oneByte {
		for _, b := range buf {
			if !put(rune(b)) {
				return
			}
		}
		return
	}
	for i := 0; i+1 < len(buf); i += 2 {
		r := rune(binary.LittleEndian.Uint16(buf[i:]))
		if utf16.IsSurrogate(r) && i+3 < len(buf) {
			r2 := rune(binary.LittleEndian.Uint16(buf[i+2:]))
			if d := utf16.DecodeRune(r, r2); d != utf8.RuneError {
				r = d
				i += 2
			}
		}
		if utf16.IsSurrogate(r) {
			r = utf8.RuneError
		}
		if !put(r) {
			return
		}
	}
}
