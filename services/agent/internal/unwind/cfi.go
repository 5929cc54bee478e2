package unwind

import (
	"encoding/binary"
	"fmt"
)

// Which call-frame section a buffer holds: they differ in the CIE id, in how
// an FDE names its CIE and in how addresses are encoded.
type sectionKind int

const (
	ehFrame sectionKind = iota
	debugFrame
)

// x86-64 DWARF register numbers (psABI, figure 3.36); arm64's are in arm64.go.
const (
	regRBP = 6
	regRSP = 7
	regRA  = 16
	// Registers whose rules the compiler keeps: the ones an unwinder needs
	// (arm64's x30 is the highest).
	numRegs = 32
)

// raRegister is the return-address column a CIE of arch must name.
func raRegister(arch Arch) uint64 {
	if arch == ArchArm64 {
		return arm64LR
	}
	return regRA
}

// Pointer encodings (DW_EH_PE_*, LSB "Exception Frames").
const (
	peAbsptr   = 0x00
	peULEB128  = 0x01
	peUdata2   = 0x02
	peUdata4   = 0x03
	peUdata8   = 0x04
	peSLEB128  = 0x09
	peSdata2   = 0x0a
	peSdata4   = 0x0b
	peSdata8   = 0x0c
	pePCRel    = 0x10
	peIndirect = 0x80
	peOmit     = 0xff
)

// cie is what an FDE inherits from its Common Information Entry.
type cie struct {
	arch         Arch
	codeAlign    uint64
	dataAlign    int64
	raReg        uint64
	fdeEncoding  byte
	lsdaEncoding byte
	signalFrame  bool
	hasAugData   bool   // 'z': FDEs carry augmentation data
	initial      []byte // initial instructions

	// The state after initial, computed by the first FDE run (runFDE).
	ran          bool
	initialState frameState
	initialErr   error
}

// fde is one Frame Description Entry: a pc range and its instructions.
type fde struct {
	cie          *cie
	start, end   uint64
	instructions []byte
}

// reader decodes DWARF primitives from a bounded buffer. The first error
// sticks: callers check err once after a sequence of reads.
type reader struct {
	b   []byte
	off int
	err error
}

func (r *reader) fail(format string, args ...any) {
	if r.err == nil {
		r.err = fmt.Errorf("%w: "+format, append([]any{ErrInvalid}, args...)...)
	}
}

func (r *reader) need(n int) bool {
	if r.err != nil {
		return false
	}
	if n < 0 || len(r.b)-r.off < n {
		r.fail("truncated at offset %d (need %d bytes)", r.off, n)
		return false
	}
	return true
}

func (r *reader) u8() byte {
	if !r.need(1) {
		return 0
	}
	v := r.b[r.off]
	r.off++
	return v
}

func (r *reader) u16() uint16 {
	if !r.need(2) {
		return 0
	}
	v := binary.LittleEndian.Uint16(r.b[r.off:])
	r.off += 2
	return v
}

func (r *reader) u32() uint32 {
	if !r.need(4) {
		return 0
	}
	v := binary.LittleEndian.Uint32(r.b[r.off:])
	r.off += 4
	return v
}

func (r *reader) u64() uint64 {
	if !r.need(8) {
		return 0
	}
	v := binary.LittleEndian.Uint64(r.b[r.off:])
	r.off += 8
	return v
}

func (r *reader) bytes(n uint64) []byte {
	if n > uint64(len(r.b)) || !r.need(int(n)) {
		r.fail("block of %d bytes past the end at offset %d", n, r.off)
		return nil
	}
	v := r.b[r.off : r.off+int(n)]
	r.off += int(n)
	return v
}

func (r *reader) uleb() uint64 {
	var v uint64
	for shift := uint(0); ; shift += 7 {
		b := r.u8()
		if r.err != nil {
			return 0
		}
		if shift < 64 {
			v |= uint64(b&0x7f) << shift
		}
		if b&0x80 == 0 {
			return v
		}
		if shift > 70 {
			r.fail("LEB128 longer than 10 bytes at offset %d", r.off)
			return 0
		}
	}
}

func (r *reader) sleb() int64 {
	var v int64
	var shift uint
	var b byte
	for {
		b = r.u8()
		if r.err != nil {
			return 0
		}
		if shift < 64 {
			v |= int64(b&0x7f) << shift
		}
		shift += 7
		if b&0x80 == 0 {
			break
		}
		if shift > 70 {
			r.fail("LEB128 longer than 10 bytes at offset %d", r.off)
			return 0
		}
	}
	if shift < 64 && b&0x40 != 0 {
		v |= -1 << shift
	}
	return v
}

// pointer decodes an encoded pointer; sectionAddr is the address the buffer
// is loaded at, for pc-relative values.
func (r *reader) pointer(enc byte, sectionAddr uint64) uint64 {
	if enc == peOmit {
		return 0
	}
	pos := sectionAddr + uint64(r.off)
	var v uint64
	switch enc & 0x0f {
	case peAbsptr, peUdata8:
		v = r.u64()
	case peULEB128:
		v = r.uleb()
	case peUdata2:
		v = uint64(r.u16())
	case peUdata4:
		v = uint64(r.u32())
	case peSLEB128:
		v = uint64(r.sleb())
	case peSdata2:
		v = uint64(int64(int16(r.u16())))
	case peSdata4:
		v = uint64(int64(int32(r.u32())))
	case peSdata8:
		v = r.u64()
	default:
		r.fail("pointer encoding %#x", enc)
		return 0
	}
	switch enc & 0x70 {
	case 0:
	case pePCRel:
		v += pos
	default:
		// textrel/datarel/funcrel need bases .eh_frame does not use on
		// x86-64 or arm64.
		r.fail("pointer application %#x", enc&0x70)
	}
	if enc&peIndirect != 0 {
		r.fail("indirect pointer %#x", enc)
	}
	return v
}

// parseEntries walks the CIEs and FDEs of a call-frame section and returns its
// FDEs. Each FDE is bounded by its length field, so one bad entry ends the walk
// only when its length cannot be trusted.
func parseEntries(b []byte, addr uint64, kind sectionKind, arch Arch, lim Limits, st *Stats) ([]fde, error) {
	cies := map[int]*cie{}
	fdes := make([]fde, 0, countEntries(b, lim.MaxEntries))
	entries := 0
	for off := 0; off < len(b); {
		r := &reader{b: b, off: off}
		length := uint64(r.u32())
		is64 := false
		if length == 0xffffffff {
			length = r.u64()
			is64 = true
		}
		if r.err != nil {
			return fdes, r.err
		}
		if length == 0 {
			if kind == ehFrame {
				break // the terminator
			}
			off = r.off
			continue
		}
		if length > uint64(len(b)-r.off) {
			return fdes, fmt.Errorf("%w: entry at offset %d of %d bytes past the section end", ErrInvalid, off, length)
		}
		entries++
		if entries > lim.MaxEntries {
			return fdes, fmt.Errorf("%w: more than %d call-frame entries", ErrTooLarge, lim.MaxEntries)
		}
		body := r.off
		end := r.off + int(length)
		next := end
		er := &reader{b: b[:end], off: r.off}
		var id uint64
		if is64 {
			id = er.u64()
		} else {
			id = uint64(er.u32())
		}
		isCIE := (kind == ehFrame && id == 0) || (kind == debugFrame && (id == 0xffffffff || (is64 && id == ^uint64(0))))
		if isCIE {
			c, err := parseCIE(er, kind, addr, arch)
			if err != nil {
				st.BadEntries++
			} else {
				cies[off] = c
				st.CIEs++
			}
			off = next
			continue
		}
		var cieOff int
		if kind == ehFrame {
			// Relative to the id field itself.
			cieOff = body - int(id)
			if int(id) < 0 || id > uint64(body) {
				cieOff = -1
			}
		} else {
			cieOff = int(id)
			if id >= uint64(len(b)) {
				cieOff = -1
			}
		}
		c, ok := cies[cieOff]
		if !ok && cieOff >= 0 {
			// A CIE after its FDE (allowed in .debug_frame).
			cr := &reader{b: b, off: cieOff}
			c, ok = parseCIEAt(cr, kind, addr, arch)
			if ok {
				cies[cieOff] = c
			}
		}
		if !ok {
			st.BadEntries++
			off = next
			continue
		}
		f, err := parseFDE(er, c, kind, addr)
		if err != nil {
			st.BadEntries++
		} else if f.end > f.start {
			fdes = append(fdes, f)
			st.FDEs++
		}
		off = next
	}
	return fdes, nil
}

// countEntries counts the entries of a call-frame section by their length
// fields alone, up to max (what parseEntries accepts), so that parseEntries
// allocates its FDEs once. Zero lengths (padding, the terminator) are no
// entries.
func countEntries(b []byte, max int) int {
	n := 0
	for off := 0; off+4 <= len(b) && n < max; {
		length := uint64(binary.LittleEndian.Uint32(b[off:]))
		off += 4
		if length == 0xffffffff {
			if off+8 > len(b) {
				break
			}
			length = binary.LittleEndian.Uint64(b[off:])
			off += 8
		}
		if length > uint64(len(b)-off) {
			break
		}
		if length > 0 {
			n++
		}
		off += int(length)
	}
	return n
}

// parseCIEAt parses the CIE whose length field is at r.off.
func parseCIEAt(r *reader, kind sectionKind, addr uint64, arch Arch) (*cie, bool) {
	length := uint64(r.u32())
	is64 := length == 0xffffffff
	if is64 {
		length = r.u64()
	}
	if r.err != nil || length == 0 || length > uint64(len(r.b)-r.off) {
		return nil, false
	}
	er := &reader{b: r.b[:r.off+int(length)], off: r.off}
	var id uint64
	if is64 {
		id = er.u64()
	} else {
		id = uint64(er.u32())
	}
	if kind == ehFrame && id != 0 || kind == debugFrame && id != 0xffffffff && id != ^uint64(0) {
		return nil, false
	}
	c, err := parseCIE(er, kind, addr, arch)
	return c, err == nil
}

// parseCIE parses a CIE's fields after its id.
func parseCIE(r *reader, kind sectionKind, addr uint64, arch Arch) (*cie, error) {
	c := &cie{arch: arch, fdeEncoding: peAbsptr, lsdaEncoding: peOmit}
	version := r.u8()
	if version != 1 && version != 3 && version != 4 {
		r.fail("CIE version %d", version)
		return nil, r.err
	}
	var aug []byte
	for {
		ch := r.u8()
		if r.err != nil {
			return nil, r.err
		}
		if ch == 0 {
			break
		}
		if len(aug) >= 16 {
			r.fail("augmentation string longer than 16 bytes")
			return nil, r.err
		}
		aug = append(aug, ch)
	}
	if version == 4 {
		if as := r.u8(); as != 8 {
			r.fail("address size %d", as)
		}
		if ss := r.u8(); ss != 0 {
			r.fail("segment selector size %d", ss)
		}
	}
	if len(aug) >= 2 && aug[0] == 'e' && aug[1] == 'h' {
		r.u64() // the old GCC "eh" pointer
		aug = aug[2:]
	}
	c.codeAlign = r.uleb()
	c.dataAlign = r.sleb()
	if version == 1 {
		c.raReg = uint64(r.u8())
	} else {
		c.raReg = r.uleb()
	}
	if len(aug) > 0 && aug[0] == 'z' {
		c.hasAugData = true
		n := r.uleb()
		data := r.bytes(n)
		if r.err != nil {
			return nil, r.err
		}
		ar := &reader{b: data}
		for _, ch := range aug[1:] {
			switch ch {
			case 'R':
				c.fdeEncoding = ar.u8()
			case 'L':
				c.lsdaEncoding = ar.u8()
			case 'P':
				enc := ar.u8()
				// The personality routine's address: not needed, but its
				// encoding must be one we can skip.
				ar.pointer(enc&^peIndirect, 0)
			case 'S':
				c.signalFrame = true
			case 'B', 'G':
				// AArch64 BTI / MTE markers: no data.
			default:
				ar.fail("augmentation %q", aug)
			}
		}
		if ar.err != nil {
			return nil, ar.err
		}
	} else if len(aug) > 0 {
		r.fail("augmentation %q", aug)
	}
	if r.err != nil {
		return nil, r.err
	}
	if c.codeAlign == 0 || c.codeAlign > 1<<16 {
		r.fail("code alignment factor %d", c.codeAlign)
		return nil, r.err
	}
	if c.dataAlign == 0 || c.dataAlign > 1<<16 || c.dataAlign < -(1<<16) {
		r.fail("data alignment factor %d", c.dataAlign)
		return nil, r.err
	}
	if want := raRegister(arch); c.raReg != want {
		r.fail("return address register %d (%v uses %d)", c.raReg, arch, want)
		return nil, r.err
	}
	c.initial = r.b[r.off:]
	return c, nil
}

// parseFDE parses an FDE's fields after its CIE pointer.
func parseFDE(r *reader, c *cie, kind sectionKind, addr uint64) (fde, error) {
	f := fde{cie: c}
	if kind == ehFrame {
		f.start = r.pointer(c.fdeEncoding, addr)
		// The range has the format of the start but is never relative.
		f.end = f.start + r.pointer(c.fdeEncoding&0x0f, 0)
		if c.hasAugData {
			n := r.uleb()
			r.bytes(n)
		}
	} else {
		f.start = r.u64()
		f.end = f.start + r.u64()
	}
	if r.err != nil {
		return f, r.err
	}
	if f.end < f.start {
		return f, fmt.Errorf("%w: FDE range %#x+%#x wraps", ErrInvalid, f.start, f.end-f.start)
	}
	f.instructions = r.b[r.off:]
	return f, nil
}
