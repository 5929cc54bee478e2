package unwind

import (
	"encoding/binary"
	"fmt"
)

// This file is the Go mirror of the arm64 step of the BPF walk
// (bpf/profiler/unwind.h, arm64_step): the tests check the rows' meaning
// against readelf with decodeArm64 and walk real arm64 stacks with walkArm64.

// arm64Sem is what an arm64 row says, in bytes from the CFA.
type arm64Sem struct {
	rule   Rule  // RuleRSP (CFA from sp), RuleRBP (from x29), or a rule without a CFA
	cfaOff int64 // CFA = base + cfaOff
	raInLR bool  // else the return address is saved at CFA+raOff
	raOff  int64
	fp     string // "same", "saved" (at CFA+fpOff), "lost"
	fpOff  int64
}

func (s arm64Sem) String() string {
	if s.rule != RuleRSP && s.rule != RuleRBP {
		return s.rule.String()
	}
	base := map[Rule]string{RuleRSP: "sp", RuleRBP: "x29"}[s.rule]
	ra := "x30"
	if !s.raInLR {
		ra = fmt.Sprintf("c%+d", s.raOff)
	}
	fp := s.fp
	if fp == "saved" {
		fp = fmt.Sprintf("c%+d", s.fpOff)
	}
	return fmt.Sprintf("cfa=%s+%d ra=%s x29=%s", base, s.cfaOff, ra, fp)
}

// decodeArm64 is the meaning of an arm64 row, as arm64_step reads it.
func decodeArm64(r Row) arm64Sem {
	s := arm64Sem{rule: r.Rule & ruleMask}
	if s.rule != RuleRSP && s.rule != RuleRBP {
		return s
	}
	s.cfaOff = int64(r.Offset) * 8
	slot := int64(r.RBP) * 8
	if r.Rule&SlotFromReg != 0 {
		slot -= s.cfaOff
	}
	switch r.Rule & raMask {
	case RAInLR:
		s.raInLR = true
		switch r.RBP {
		case RBPUnchanged:
			s.fp = "same"
		case RBPLost:
			s.fp = "lost"
		default:
			s.fp, s.fpOff = "saved", slot
		}
	case RAFrame:
		s.raOff, s.fp, s.fpOff = slot+8, "saved", slot
	case RASaved:
		s.raOff, s.fp = slot, "same"
	case RASavedFPLost:
		s.raOff, s.fp = slot, "lost"
	}
	return s
}

// arm64UserVA strips a return address of its pointer authentication code:
// user addresses have 48 bits (ARM64_VA_BITS 48; a 52-bit process opts in
// with mmap hints above 2^48).
const arm64UserVA = 1<<48 - 1

// The rt_sigframe layout (arch/arm64/kernel/signal.c, uapi asm/ucontext.h,
// asm/sigcontext.h): struct siginfo (128 bytes), then struct ucontext, whose
// uc_mcontext (struct sigcontext, 16-aligned) is 176 bytes in and holds
// fault_address, regs[31], sp, pc. At __kernel_rt_sigreturn sp is the frame.
const (
	arm64SigframeRegs = 128 + 176 + 8
	arm64SigframeFP   = arm64SigframeRegs + 29*8
	arm64SigframeLR   = arm64SigframeRegs + 30*8
	arm64SigframeSP   = arm64SigframeRegs + 31*8
	arm64SigframePC   = arm64SigframeRegs + 32*8
)

// arm64Regs are the registers a walk starts from.
type arm64Regs struct{ pc, sp, fp, lr uint64 }

// arm64Frame is one frame of a walk and how the walk left it.
type arm64Frame struct {
	pc, sp uint64
	fp     uint64 // x29 in the frame; fpOK false when the walk lost it
	fpOK   bool
	row    arm64Sem
	signed bool // its return address had a pointer authentication code
}

// walkArm64 unwinds from regs through memory read by mem, looking rows up by
// address (rows returns false where no table covers it: a frame-pointer
// step). It ends at a row whose return address is undefined or at x29 0
// (end true), or where the BPF walk would stop (err says why).
func walkArm64(regs arm64Regs, mem func(addr uint64, n int) ([]byte, bool), rows func(pc uint64) (Row, bool), max int) (frames []arm64Frame, end bool, err error) {
	read := func(addr uint64) (uint64, bool) {
		b, ok := mem(addr, 8)
		if !ok {
			return 0, false
		}
		return binary.LittleEndian.Uint64(b), true
	}
	pc, sp, fp, lr := regs.pc, regs.sp, regs.fp, regs.lr
	lrValid, fpValid, spValid, exact := true, true, true, true
	for len(frames) < max {
		lookup := pc
		if !exact {
			lookup = pc - 1 // a return address: the call is before it
		}
		row, ok := rows(lookup)
		sem := decodeArm64(row)
		if !ok {
			sem.rule = RuleNone
		}
		frames = append(frames, arm64Frame{pc: pc, sp: sp, fp: fp, fpOK: fpValid, row: sem})
		exact = false
		if sem.rule == RuleNone || sem.rule == RuleRSP && !spValid {
			// Frame pointers: x29 points at {caller's x29, x30}; the
			// caller's sp is unknown, so its rows from sp are not used.
			switch {
			case !fpValid:
				return frames, false, fmt.Errorf("%#x: frame-pointer step with x29 lost", pc)
			case fp == 0:
				return frames, true, nil
			}
			rec, ok := mem(fp, 16)
			if !ok {
				return frames, false, fmt.Errorf("%#x: frame record at %#x unreadable", pc, fp)
			}
			sp, fp, pc = fp+16, binary.LittleEndian.Uint64(rec), binary.LittleEndian.Uint64(rec[8:])&arm64UserVA
			lrValid, spValid = false, false
			continue
		}
		switch sem.rule {
		case RuleEnd:
			return frames, true, nil
		case RuleSignal:
			regs := [4]uint64{}
			for i, off := range []uint64{arm64SigframePC, arm64SigframeSP, arm64SigframeFP, arm64SigframeLR} {
				if regs[i], ok = read(sp + off); !ok {
					return frames, false, fmt.Errorf("%#x: signal frame at %#x unreadable", pc, sp)
				}
			}
			pc, sp, fp, lr = regs[0], regs[1], regs[2], regs[3]
			lrValid, fpValid, spValid, exact = true, true, true, true
			continue
		case RuleRSP, RuleRBP:
		default:
			return frames, false, fmt.Errorf("%#x: rule %v", pc, sem.rule)
		}
		base := sp
		if sem.rule == RuleRBP {
			if !fpValid {
				return frames, false, fmt.Errorf("%#x: CFA from a lost x29", pc)
			}
			base = fp
		}
		cfa := base + uint64(sem.cfaOff)
		var ra uint64
		if sem.raInLR {
			if !lrValid {
				return frames, false, fmt.Errorf("%#x: return address in x30 past the first frame", pc)
			}
			ra = lr
		} else if ra, ok = read(cfa + uint64(sem.raOff)); !ok {
			return frames, false, fmt.Errorf("%#x: return address at %#x unreadable", pc, cfa+uint64(sem.raOff))
		}
		switch sem.fp {
		case "saved":
			if fp, ok = read(cfa + uint64(sem.fpOff)); !ok {
				return frames, false, fmt.Errorf("%#x: x29 at %#x unreadable", pc, cfa+uint64(sem.fpOff))
			}
			fpValid = true
		case "lost":
			fpValid = false
		}
		frames[len(frames)-1].signed = ra&^arm64UserVA != 0
		sp, pc, lrValid, spValid = cfa, ra&arm64UserVA, false, true
		if pc == 0 {
			return frames, true, nil
		}
	}
	return frames, false, fmt.Errorf("deeper than %d frames", max)
}
