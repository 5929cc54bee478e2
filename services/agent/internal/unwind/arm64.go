package unwind

import (
	"debug/elf"
	"encoding/binary"
	"io"
)

// arm64 (AArch64) rows. The return address is not pushed by the call as on
// x86-64: `bl` leaves it in x30 (the link register), and a function that
// calls others saves x30 in its frame, usually next to x29 (the frame
// pointer) as a frame record {x29, x30}. So an arm64 row says where the
// return address is, in the bits of the Rule byte above the rule (ruleMask):
//
//   - RAInLR: in x30, not saved (a leaf function, a prologue before its
//     store, a PLT stub). Only the first frame of a walk, or the frame a
//     signal interrupted, has x30; elsewhere the walk stops. RBP says where
//     x29 is, as on x86-64 (unchanged, CFA+8n, lost).
//   - RAFrame: x29 saved at the slot, x30 at the slot + 8.
//   - RASaved: x30 saved at the slot, x29 unchanged.
//   - RASavedFPLost: x30 saved at the slot, x29 not recoverable.
//
// The slot is RBP*8 bytes from the CFA, or with SlotFromReg from the CFA
// rule's register (sp or x29): GCC up to 13 saves registers at the bottom of
// the frame, kilobytes below the CFA in a frame with large locals but a few
// bytes above sp; clang and later GCC save them at its top, near the CFA.
// The rule itself is RuleRSP (CFA = sp + 8*Offset) or RuleRBP (CFA = x29 +
// 8*Offset), RuleEnd, RuleSignal (__kernel_rt_sigreturn in the vDSO: the
// registers come from the kernel's struct rt_sigframe), RuleUnsupported or
// RuleNone; RulePLT is x86-64's only. Every return address read is stripped
// of its pointer authentication code (pac-ret) by the walk, whatever
// DW_CFA_AARCH64_negate_ra_state says.
const (
	RAInLR        Rule = 0 << 3
	RAFrame       Rule = 1 << 3
	RASaved       Rule = 2 << 3
	RASavedFPLost Rule = 3 << 3
	raMask        Rule = 3 << 3
	SlotFromReg   Rule = 1 << 5
)

// arm64 DWARF register numbers (AArch64 DWARF ABI, "DWARF register names").
const (
	arm64FP = 29 // x29
	arm64LR = 30 // x30
	arm64SP = 31
)

// arm64Row reduces a frame state to an arm64 row; row has handled the end
// of the stack and the signal trampoline.
func (s *frameState) arm64Row(pc uint64) Row {
	r := Row{PC: uint32(pc)}
	ra := s.regs[arm64LR]
	unsupported := Row{PC: uint32(pc), Rule: RuleUnsupported}
	if s.cfa.expr != nil {
		return unsupported
	}
	switch s.cfa.reg {
	case arm64SP:
		r.Rule = RuleRSP
	case arm64FP:
		r.Rule = RuleRBP
	default:
		return unsupported
	}
	cfa := s.cfa.off
	if cfa < 0 || cfa%8 != 0 || cfa/8 > 0xffff {
		return unsupported
	}
	r.Offset = uint16(cfa / 8)
	fp := s.regs[arm64FP]
	var slot int64
	switch {
	case ra.kind == regSame:
		switch fp.kind {
		case regSame:
			r.RBP = RBPUnchanged
			return r
		case regOffset:
			// A slot that fits from the CFA only: 0 means unchanged here.
			if n, ok := slotUnits(fp.off); ok && n != 0 {
				r.RBP = int8(n)
				return r
			}
		}
		r.RBP = RBPLost
		return r
	case ra.kind != regOffset:
		return unsupported
	case fp.kind == regOffset && fp.off+8 == ra.off:
		r.Rule |= RAFrame
		slot = fp.off
	case fp.kind == regSame:
		r.Rule |= RASaved
		slot = ra.off
	default:
		r.Rule |= RASavedFPLost
		slot = ra.off
	}
	if n, ok := slotUnits(slot); ok {
		r.RBP = int8(n)
	} else if n, ok := slotUnits(slot + cfa); ok {
		r.Rule |= SlotFromReg
		r.RBP = int8(n)
	} else {
		return unsupported
	}
	return r
}

// slotUnits is a byte offset in the 8-byte units of a row's RBP, when it
// fits (-128 stays RBPLost).
func slotUnits(off int64) (int64, bool) {
	n := off / 8
	return n, off%8 == 0 && n >= -127 && n <= 127
}

// arm64PLTFDEs describes the PLT sections of f: AArch64's linkers write no
// call-frame information for them, and their stubs (adrp, ldr, add, br x17)
// touch neither sp nor x30, so the caller's return address is still in x30:
// the row of a function's first instruction. Without them a sample in a stub
// would step with frame pointers and lose its caller. The first 32 bytes of
// .plt (PLT0, lazy binding's path to the resolver) push x16 and x30 with
// `stp x16, x30, [sp, #-16]!` (after a `bti c` with BTI): the CFA is sp+16
// after it, the return address still in x30.
func arm64PLTFDEs(f *elf.File) []fde {
	plt := &cie{arch: ArchArm64, codeAlign: 4, dataAlign: -8, raReg: arm64LR,
		initial: []byte{cfaDefCFA, arm64SP, 0}}
	const plt0Bytes = 32
	var fdes []fde
	for _, s := range f.Sections {
		if (s.Name != ".plt" && s.Name != ".iplt") || s.Type != elf.SHT_PROGBITS || s.Flags&elf.SHF_EXECINSTR == 0 || s.Size == 0 {
			continue
		}
		fd := fde{cie: plt, start: s.Addr, end: s.Addr + s.Size}
		var head [8]byte
		if _, err := io.ReadFull(s.Open(), head[:]); err == nil && s.Size > plt0Bytes {
			for i := 0; i < 2; i++ {
				if binary.LittleEndian.Uint32(head[4*i:]) == stpX16X30 {
					fd.instructions = []byte{cfaAdvanceLoc | byte(i+1), cfaDefCFAOffset, 16,
						cfaAdvanceLoc | byte(plt0Bytes/4-i-1), cfaDefCFAOffset, 0}
				}
			}
		}
		fdes = append(fdes, fd)
	}
	return fdes
}

// stpX16X30 is `stp x16, x30, [sp, #-16]!`.
const stpX16X30 = 0xa9bf7bf0

// arm64GoCIEs are the CIEs of Go's arm64 functions: at entry the CFA is sp
// and the return address in x30; the root functions end the stack.
func arm64GoCIEs() (normal, root *cie) {
	normal = &cie{arch: ArchArm64, codeAlign: 1, dataAlign: -8, raReg: arm64LR,
		initial: []byte{cfaDefCFA, arm64SP, 0}}
	root = &cie{arch: ArchArm64, codeAlign: 1, dataAlign: -8, raReg: arm64LR,
		initial: []byte{cfaDefCFA, arm64SP, 0, cfaUndefined, arm64LR}}
	return normal, root
}

// arm64PcspRow appends the instructions of one pcsp row of a Go arm64
// function whose sp is delta below its entry sp. Go's arm64 prologue
// (cmd/internal/obj/arm64) stores x30 at the new sp and x29 at sp-8 in the
// instruction that moves sp, or before it for a large frame: once delta is
// not zero, the frame record {x29, x30} is at sp-8, that is CFA-delta-8.
// (For the one instruction after the store of a small frame and before the
// store of x29, the x29 read is stale: the next frames use sp.)
func arm64PcspRow(ins []byte, delta uint64) []byte {
	ins = append(ins, cfaDefCFA, arm64SP)
	ins = binary.AppendUvarint(ins, delta)
	if delta == 0 {
		return append(ins, cfaRestore|arm64LR, cfaRestore|arm64FP)
	}
	ins = append(ins, cfaOffset|arm64LR)
	ins = binary.AppendUvarint(ins, delta/8)
	ins = append(ins, cfaOffset|arm64FP)
	return binary.AppendUvarint(ins, delta/8+1)
}
