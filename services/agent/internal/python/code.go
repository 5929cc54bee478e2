package python

import (
	"encoding/binary"
	"fmt"
	"io"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// Limits bound what is read of one code object.
type Limits struct {
	MaxStringBytes    int // co_qualname, co_filename: longer ones are cut (default 1024)
	MaxLineTableBytes int // co_linetable read; past it lines fall back to co_firstlineno (default 64 KiB)
}

// DefaultLimits are the agent's.
var DefaultLimits = Limits{MaxStringBytes: 1024, MaxLineTableBytes: 64 << 10}

// Code is what the agent keeps of a code object.
type Code struct {
	Qualname  string
	Filename  string
	FirstLine int
	LineTable []byte // co_linetable (3.11+ location table), possibly cut
}

// Line is the source line of code unit instr, or FirstLine when the table
// does not say.
func (c *Code) Line(instr int) int {
	if l, ok := LineOf(c.LineTable, c.FirstLine, instr); ok {
		return l
	}
	return c.FirstLine
}

// userLimit is the end of x86-64 user space (47-bit addresses).
const userLimit = 1 << 47

func validPointer(addr uint64) bool { return addr >= 4096 && addr < userLimit && addr%8 == 0 }

// ReadCode reads the code object at addr of process p from mem (its
// /proc/PID/mem). Every pointer is checked, every object's type compared
// with the interpreter's type objects, every length bounded.
func ReadCode(mem io.ReaderAt, p *Process, addr uint64, lim Limits) (*Code, error) {
	l := p.Layout
	if !validPointer(addr) {
		return nil, fmt.Errorf("%w: code object address %#x", ErrInvalid, addr)
	}
	hdr := make([]byte, l.CodeUnits)
	if _, err := mem.ReadAt(hdr, int64(addr)); err != nil {
		return nil, fmt.Errorf("%w: read code object at %#x: %v", ErrInvalid, addr, err)
	}
	le := binary.LittleEndian
	if t := le.Uint64(hdr[objectType:]); t != p.CodeType {
		return nil, fmt.Errorf("%w: object at %#x has type %#x, not PyCode_Type", ErrInvalid, addr, t)
	}
	c := &Code{FirstLine: int(int32(le.Uint32(hdr[l.CodeFirstLine:])))}
	if c.FirstLine < 0 {
		c.FirstLine = 0
	}
	var err error
	if c.Qualname, err = readString(mem, p, le.Uint64(hdr[l.CodeQualname:]), lim.MaxStringBytes); err != nil {
		return nil, fmt.Errorf("co_qualname: %w", err)
	}
	if c.Filename, err = readString(mem, p, le.Uint64(hdr[l.CodeFilename:]), lim.MaxStringBytes); err != nil {
		return nil, fmt.Errorf("co_filename: %w", err)
	}
	// Without its line table a frame still has its function.
	c.LineTable, _ = readBytes(mem, p, le.Uint64(hdr[l.CodeLinetable:]), lim.MaxLineTableBytes)
	return c, nil
}

// readString reads a compact str (every str CPython 3.11+ makes for code
// objects), cut to max bytes of UTF-8.
func readString(mem io.ReaderAt, p *Process, addr uint64, max int) (string, error) {
	l := p.Layout
	if !validPointer(addr) {
		return "", fmt.Errorf("%w: str address %#x", ErrInvalid, addr)
	}
	hdr := make([]byte, l.UnicodeCompact)
	if _, err := mem.ReadAt(hdr, int64(addr)); err != nil {
		return "", fmt.Errorf("%w: read str at %#x: %v", ErrInvalid, addr, err)
	}
	le := binary.LittleEndian
	if t := le.Uint64(hdr[objectType:]); t != p.UnicodeType {
		return "", fmt.Errorf("%w: object at %#x has type %#x, not PyUnicode_Type", ErrInvalid, addr, t)
	}
	n := int64(le.Uint64(hdr[l.UnicodeLength:]))
	state := le.Uint32(hdr[l.UnicodeState:])
	// state: interned:2, kind:3, compact:1, ascii:1 (from the low bit).
	kind, compact, ascii := int(state>>2&7), state>>5&1 == 1, state>>6&1 == 1
	if !compact || n < 0 || (kind != 1 && kind != 2 && kind != 4) {
		return "", fmt.Errorf("%w: str at %#x: state %#x, length %d", ErrInvalid, addr, state, n)
	}
	data := addr + uint64(l.UnicodeCompact)
	if ascii {
		data = addr + uint64(l.UnicodeASCII)
	}
	// Each character is at most 4 bytes of UTF-8: read no more characters
	// than max bytes could hold.
	chars := min(n, int64(max))
	buf := make([]byte, chars*int64(kind))
	if _, err := mem.ReadAt(buf, int64(data)); err != nil {
		return "", fmt.Errorf("%w: read str data at %#x: %v", ErrInvalid, data, err)
	}
	return decodeString(buf, kind, max), nil
}

// decodeString turns kind-byte characters (PEP 393) into UTF-8 of at most
// max bytes, cut at a character boundary.
func decodeString(buf []byte, kind, max int) string {
	var sb strings.Builder
	sb.Grow(min(len(buf), max))
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
	le := binary.LittleEndian
	switch kind {
	case 1:
		for _, b := range buf {
			if !put(rune(b)) {
				break
			}
		}
	case 2:
		for i := 0; i+1 < len(buf); i += 2 {
			r := rune(le.Uint16(buf[i:]))
			if utf16.IsSurrogate(r) {
				r = utf8.RuneError
			}
			if !put(r) {
				break
			}
		}
	case 4:
		for i := 0; i+3 < len(buf); i += 4 {
			if !put(rune(le.Uint32(buf[i:]))) {
				break
			}
		}
	}
	return sb.String()
}

// readBytes reads a bytes object's content, at most max bytes of it.
func readBytes(mem io.ReaderAt, p *Process, addr uint64, max int) ([]byte, error) {
	l := p.Layout
	if !validPointer(addr) {
		return nil, fmt.Errorf("%w: bytes address %#x", ErrInvalid, addr)
	}
	hdr := make([]byte, l.BytesData)
	if _, err := mem.ReadAt(hdr, int64(addr)); err != nil {
		return nil, fmt.Errorf("%w: read bytes at %#x: %v", ErrInvalid, addr, err)
	}
	le := binary.LittleEndian
	if t := le.Uint64(hdr[objectType:]); t != p.BytesType {
		return nil, fmt.Errorf("%w: object at %#x has type %#x, not PyBytes_Type", ErrInvalid, addr, t)
	}
	n := int64(le.Uint64(hdr[l.BytesSize:]))
	if n < 0 {
		return nil, fmt.Errorf("%w: bytes at %#x of length %d", ErrInvalid, addr, n)
	}
	buf := make([]byte, min(n, int64(max)))
	if _, err := mem.ReadAt(buf, int64(addr)+int64(l.BytesData)); err != nil {
		return nil, fmt.Errorf("%w: read bytes data at %#x: %v", ErrInvalid, addr, err)
	}
	return buf, nil
}

// Codes of the location table's entries (Objects/locations.md of CPython
// 3.11+): the top bit of an entry's first byte is set, bits 3-6 hold the
// code, bits 0-2 the number of code units covered minus one.
const (
	locShortMax  = 9  // 0-9: short form, same line
	locOneLine0  = 10 // 10-12: one-line form, line delta 0-2
	locNoColumns = 13 // line delta as a signed varint
	locLong      = 14 // line delta as a signed varint, then end line and columns
	locNone      = 15 // no location
)

// LineOf returns the source line of code unit instr from a 3.11+ location
// table (co_linetable) whose lines start at firstLine; ok is false when the
// table ends first or the unit has no location. It allocates nothing and
// reads each byte once.
func LineOf(table []byte, firstLine, instr int) (line int, ok bool) {
	if instr < 0 {
		return 0, false
	}
	line = firstLine
	unit := 0
	for i := 0; i < len(table); {
		b := table[i]
		if b&0x80 == 0 {
			return 0, false // not the start of an entry
		}
		code, units := int(b>>3&15), int(b&7)+1
		i++
		delta := 0
		switch {
		case code == locNoColumns || code == locLong:
			var v uint64
			v, i = varint(table, i)
			delta = int(v >> 1)
			if v&1 != 0 {
				delta = -delta
			}
		case code >= locOneLine0 && code <= locOneLine0+2:
			delta = code - locOneLine0
		}
		line += delta
		// The rest of the entry (columns, end line) up to the next entry.
		for i < len(table) && table[i]&0x80 == 0 {
			i++
		}
		if instr < unit+units {
			if code == locNone {
				return 0, false
			}
			return line, true
		}
		unit += units
	}
	return 0, false
}

// varint reads CPython's location-table varint (6 bits a byte, bit 6 set
// while more follow) at table[i:], returning the value and the next index.
func varint(table []byte, i int) (uint64, int) {
	var v uint64
	for shift := 0; i < len(table) && shift < 60; shift += 6 {
		b := table[i]
		i++
		v |= uint64(b&63) << shift
		if b&64 == 0 {
			break
		}
	}
	return v, i
}
