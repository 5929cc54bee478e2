package unwind

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"fmt"
)

// Go binaries carry no .eh_frame, and stripping (-s -w) drops .debug_frame,
// but the runtime's own unwinder needs .gopclntab, which always survives:
// its pcsp table gives, for every pc, how far rsp is below the function's
// entry rsp. This file turns it into synthetic FDEs (CFA = rsp + delta + 8;
// rbp saved at CFA-16 once the prologue pushed it) so that build treats Go
// code like any other. On arm64 (arm64.go) the CFA is sp + delta, and once
// the prologue has moved sp, x30 is saved at sp and x29 below it.

// pclntab header magics (runtime/symtab.go) of the layout read here: Go
// 1.18-1.19 and 1.20+.
const (
	pclntabMagic118 = 0xfffffff0
	pclntabMagic120 = 0xfffffff1
)

// Functions at whose frame a goroutine's or thread's stack begins, and
// those that switch to the thread's g0 stack and call the scheduler or
// newstack at its base: what called them is on the goroutine's stack, out of
// an unwinder's reach (Go's own profiles end there too). Walked on, the
// return address read is a stale word of g0's stack.
var goRoots = map[string]bool{"runtime.goexit": true, "runtime.mstart": true, "runtime.rt0_go": true,
	"runtime.mcall": true, "runtime.morestack": true}

// goFDEs reads the pcsp tables of .gopclntab; rootsOnly, those of the
// functions that end a stack (goRoots) only.
func goFDEs(f *elf.File, fileSize int64, arch Arch, lim Limits, st *Stats, rootsOnly bool) ([]fde, error) {
	s := f.Section(".gopclntab")
	if s == nil || s.Type == elf.SHT_NOBITS {
		return nil, nil
	}
	b, err := sectionData(s, fileSize, lim)
	if err != nil {
		return nil, err
	}
	le := binary.LittleEndian
	if len(b) < 72 {
		return nil, fmt.Errorf("%w: .gopclntab of %d bytes", ErrInvalid, len(b))
	}
	magic := le.Uint32(b)
	if magic != pclntabMagic118 && magic != pclntabMagic120 {
		return nil, nil // an older layout: frame pointers
	}
	// The quantum is the instruction size unit: 1 on x86-64, 4 on arm64.
	quantum := uint64(b[6])
	if quantum != map[Arch]uint64{ArchX86_64: 1, ArchArm64: 4}[arch] || b[7] != 8 {
		return nil, fmt.Errorf("%w: .gopclntab quantum %d, pointer size %d", ErrUnsupported, b[6], b[7])
	}
	word := func(i int) uint64 { return le.Uint64(b[8+8*i:]) }
	nfunc, textStart := word(0), word(2)
	funcnames, pctab, pcln := word(3), word(6), word(7)
	if textStart == 0 {
		// Filled in at run time by some linkers: entries are relative to
		// runtime.text, the start of .text.
		text := f.Section(".text")
		if text == nil {
			return nil, fmt.Errorf("%w: .gopclntab without .text", ErrInvalid)
		}
		textStart = text.Addr
	}
	if nfunc > uint64(lim.MaxEntries) {
		return nil, fmt.Errorf("%w: .gopclntab declares %d functions", ErrTooLarge, nfunc)
	}
	if pcln > uint64(len(b)) || (nfunc+1)*8 > uint64(len(b))-pcln || funcnames > uint64(len(b)) || pctab > uint64(len(b)) {
		return nil, fmt.Errorf("%w: .gopclntab tables past its end", ErrInvalid)
	}
	normal := &cie{codeAlign: 1, dataAlign: -8, raReg: regRA,
		initial: []byte{cfaDefCFA, regRSP, 8, cfaOffset | regRA, 1}}
	root := &cie{codeAlign: 1, dataAlign: -8, raReg: regRA,
		initial: []byte{cfaDefCFA, regRSP, 8, cfaUndefined, regRA}}
	if arch == ArchArm64 {
		normal, root = arm64GoCIEs()
	}
	functab := b[pcln:]
	fdes := make([]fde, 0, min(nfunc, uint64(len(functab)/8)))
	// The functions' instructions share one buffer rather than a slice
	// each, sized from the pc tables' bytes (the instructions took 0.48-0.54
	// of them in the Go toolchain and this agent); past it, it grows (the
	// FDEs made before keep the old array).
	var arena []byte
	if pcln > pctab && !rootsOnly {
		arena = make([]byte, 0, (pcln-pctab)*5/8)
	}
	// Functions may share a pcsp table: bound what they add up to.
	budget := lim.MaxSectionBytes
	for i := uint64(0); i < nfunc; i++ {
		entry := uint64(le.Uint32(functab[8*i:]))
		end := uint64(le.Uint32(functab[8*(i+1):]))
		off := pcln + uint64(le.Uint32(functab[8*i+4:]))
		if end <= entry || off > uint64(len(b))-44 {
			st.BadEntries++
			continue
		}
		fn := b[off:]
		nameOff := uint64(le.Uint32(fn[4:]))
		pcsp := uint64(le.Uint32(fn[16:]))
		c := normal
		if goRoots[string(cString(b, funcnames+nameOff))] {
			c = root
		} else if rootsOnly {
			continue
		}
		from := len(arena)
		grown, err := pcspInstructions(arena, b, pctab+pcsp, end-entry, arch, quantum)
		if err != nil {
			st.BadEntries++
			continue
		}
		arena = grown
		ins := arena[from:len(arena):len(arena)]
		if budget -= int64(len(ins)); budget < 0 {
			return nil, fmt.Errorf("%w: .gopclntab pcsp tables over %d bytes", ErrTooLarge, lim.MaxSectionBytes)
		}
		fdes = append(fdes, fde{cie: c, start: textStart + entry, end: textStart + end, instructions: ins})
		st.FDEs++
	}
	return fdes, nil
}

// cString returns the NUL-terminated name at off (at most 255 bytes), nil
// when there is none.
func cString(b []byte, off uint64) []byte {
	if off >= uint64(len(b)) {
		return nil
	}
	s := b[off:]
	if i := bytes.IndexByte(s, 0); i >= 0 && i < 256 {
		return s[:i]
	}
	return nil
}

// pcspInstructions decodes a pcsp table (runtime.step: zig-zag value
// deltas from -1, pc deltas, both varints) into call-frame instructions,
// appended to ins.
func pcspInstructions(ins, b []byte, off, size uint64, arch Arch, quantum uint64) ([]byte, error) {
	if off >= uint64(len(b)) {
		return nil, fmt.Errorf("%w: pcsp table past the end", ErrInvalid)
	}
	r := &reader{b: b, off: int(off)}
	start := len(ins)
	val := int64(-1)
	var pc uint64
	saved := false
	for first := true; ; first = false {
		uv := r.uleb()
		if r.err != nil {
			return nil, r.err
		}
		if uv == 0 && !first {
			return ins, nil
		}
		val += int64(-(uv & 1) ^ (uv >> 1))
		delta := r.uleb()
		if r.err != nil {
			return nil, r.err
		}
		// Frames past what a row holds (runtime.call1048576) become
		// unsupported rows in build, not a lost function.
		if val < 0 && arch != ArchArm64 || val%8 != 0 || val > 1<<40 {
			return nil, fmt.Errorf("%w: sp delta %d", ErrUnsupported, val)
		}
		// The row for [pc, pc+delta).
		delta *= quantum
		switch {
		case arch == ArchArm64 && val < 0:
			// runtime.asyncPreempt and debugCallV2 store below sp before
			// moving it: a row the walk stops at, not a lost function.
			ins = append(ins, cfaDefCFAExpression, 0)
		case arch == ArchArm64:
			ins = arm64PcspRow(ins, uint64(val))
		default:
			ins = append(ins, cfaDefCFAOffset)
			ins = binary.AppendUvarint(ins, uint64(val)+8)
			if val >= 8 && !saved {
				ins = append(ins, cfaOffset|regRBP, 2)
				saved = true
			} else if val == 0 && saved {
				ins = append(ins, cfaRestore|regRBP)
				saved = false
			}
		}
		pc += delta
		if pc >= size {
			return ins, nil
		}
		ins = append(ins, cfaAdvanceLoc4)
		ins = binary.LittleEndian.AppendUint32(ins, uint32(delta))
		if len(ins)-start > 1<<20 {
			return nil, fmt.Errorf("%w: pcsp table", ErrTooLarge)
		}
	}
}
