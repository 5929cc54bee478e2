package unwind

import (
	"bytes"
	"fmt"
)

// DWARF call-frame instructions (DWARF 5, section 6.4.2; GNU extensions).
const (
	cfaAdvanceLoc       = 0x40 // high two bits; delta in the low six
	cfaOffset           = 0x80
	cfaRestore          = 0xc0
	cfaNop              = 0x00
	cfaSetLoc           = 0x01
	cfaAdvanceLoc1      = 0x02
	cfaAdvanceLoc2      = 0x03
	cfaAdvanceLoc4      = 0x04
	cfaOffsetExtended   = 0x05
	cfaRestoreExtended  = 0x06
	cfaUndefined        = 0x07
	cfaSameValue        = 0x08
	cfaRegister         = 0x09
	cfaRememberState    = 0x0a
	cfaRestoreState     = 0x0b
	cfaDefCFA           = 0x0c
	cfaDefCFARegister   = 0x0d
	cfaDefCFAOffset     = 0x0e
	cfaDefCFAExpression = 0x0f
	cfaExpression       = 0x10
	cfaOffsetExtendedSF = 0x11
	cfaDefCFASF         = 0x12
	cfaDefCFAOffsetSF   = 0x13
	cfaValOffset        = 0x14
	cfaValOffsetSF      = 0x15
	cfaValExpression    = 0x16
	cfaGNUWindowSave    = 0x2d // arm64: DW_CFA_AARCH64_negate_ra_state
	cfaGNUArgsSize      = 0x2e
	cfaGNUNegOffsetExt  = 0x2f
)

// How a register is recovered in the caller.
type regRuleKind uint8

const (
	regSame      regRuleKind = iota // unchanged (also "not mentioned")
	regUndefined                    // not recoverable
	regOffset                       // saved at CFA + off
	regOther                        // val_offset, register, expression: not followed
)

type regRule struct {
	kind regRuleKind
	off  int64
}

type cfaRule struct {
	reg  uint64
	off  int64
	expr []byte // non-nil: DW_CFA_def_cfa_expression
}

type frameState struct {
	cfa  cfaRule
	regs [numRegs]regRule
}

// pltExpression is the CFA expression binutils' ld writes for .plt entries of
// 16 bytes: rsp + 8 + ((rip & 15) >= N ? 8 : 0), N at index pltThresholdAt
// (a DW_OP_litN). The stub pushes once after its first jump.
var pltExpression = []byte{
	0x77, 0x08, // DW_OP_breg7 (rsp) 8
	0x80, 0x00, // DW_OP_breg16 (rip) 0
	0x3f, // DW_OP_lit15
	0x1a, // DW_OP_and
	0x30, // DW_OP_litN: the threshold
	0x2a, // DW_OP_ge
	0x33, // DW_OP_lit3
	0x24, // DW_OP_shl
	0x22, // DW_OP_plus
}

const pltThresholdAt = 6

// pltThreshold reports whether expr is the PLT expression and its threshold.
func pltThreshold(expr []byte) (uint16, bool) {
	if len(expr) != len(pltExpression) {
		return 0, false
	}
	n := expr[pltThresholdAt]
	if n < 0x30 || n > 0x4f {
		return 0, false
	}
	if !bytes.Equal(expr[:pltThresholdAt], pltExpression[:pltThresholdAt]) ||
		!bytes.Equal(expr[pltThresholdAt+1:], pltExpression[pltThresholdAt+1:]) {
		return 0, false
	}
	return uint16(n - 0x30), true
}

// derefOffset reports whether expr is DW_OP_breg7 (rsp) N; DW_OP_deref,
// optionally followed by DW_OP_plus_uconst K: CFA = *(rsp + N) + K, written
// by perlasm code that realigned the stack after saving its entry rsp (or
// that minus K) at rsp+N. It packs N/8 and K/8 as a RuleDeref row's Offset
// (Row.Deref).
func derefOffset(expr []byte) (uint16, bool) {
	const (
		opDeref      = 0x06
		opPlusUconst = 0x23
		opBregRSP    = 0x70 + regRSP
	)
	r := &reader{b: expr}
	if r.u8() != opBregRSP {
		return 0, false
	}
	n := r.sleb()
	if r.u8() != opDeref {
		return 0, false
	}
	var k uint64
	if r.off < len(r.b) {
		if r.u8() != opPlusUconst {
			return 0, false
		}
		k = r.uleb()
	}
	if r.err != nil || r.off != len(r.b) || n%8 != 0 || n/8 < -128 || n/8 > 127 || k%8 != 0 || k/8 > 255 {
		return 0, false
	}
	return uint16(uint8(int8(n/8))) | uint16(k/8)<<8, true
}

// row reduces a frame state to what the BPF unwinder can follow.
func (s *frameState) row(pc uint64, c *cie) Row {
	r := Row{PC: uint32(pc)}
	// On both architectures an undefined return address ends the stack and
	// a signal CIE is the trampoline.
	switch {
	case s.regs[raRegister(c.arch)].kind == regUndefined:
		r.Rule = RuleEnd
		return r
	case c.signalFrame:
		r.Rule = RuleSignal
		return r
	case c.arch == ArchArm64:
		return s.arm64Row(pc)
	}
	if ra := s.regs[regRA]; ra.kind != regOffset || ra.off != -8 {
		r.Rule = RuleUnsupported
		return r
	}
	switch {
	case s.cfa.expr != nil:
		if n, ok := pltThreshold(s.cfa.expr); ok {
			r.Rule, r.Offset = RulePLT, n
			return r
		}
		off, ok := derefOffset(s.cfa.expr)
		if !ok {
			r.Rule = RuleUnsupported
			return r
		}
		r.Rule, r.Offset = RuleDeref, off
	case s.cfa.off < 0 || s.cfa.off%8 != 0 || s.cfa.off/8 > 0xffff:
		r.Rule = RuleUnsupported
		return r
	case s.cfa.reg == regRSP:
		r.Rule, r.Offset = RuleRSP, uint16(s.cfa.off/8)
	case s.cfa.reg == regRBP:
		r.Rule, r.Offset = RuleRBP, uint16(s.cfa.off/8)
	case s.cfa.reg <= 15:
		r.Rule, r.Offset = RuleUnsupported|Rule(s.cfa.reg+1)<<cfaRegShift, uint16(s.cfa.off/8)
	default:
		r.Rule = RuleUnsupported
		return r
	}
	switch bp := s.regs[regRBP]; bp.kind {
	case regSame:
		r.RBP = RBPUnchanged
	case regOffset:
		if bp.off%8 != 0 || bp.off == 0 || bp.off/8 < -127 || bp.off/8 > 127 {
			r.RBP = RBPLost
		} else {
			r.RBP = int8(bp.off / 8)
		}
	default:
		r.RBP = RBPLost
	}
	return r
}

// runFDE executes the CIE's initial instructions, then the FDE's, emitting a
// row at the FDE's start and after every advance within its range. stack is
// scratch for DW_CFA_remember_state, reused across FDEs.
func runFDE(f *fde, lim Limits, stack *[]frameState, emit func(Row) error) error {
	if f.start >= f.end {
		return nil // no instruction runs, no row
	}
	c := f.cie
	// The state after the CIE's instructions depends on the CIE alone: run
	// them once for all its FDEs.
	if !c.ran {
		c.ran = true
		c.initialErr = execute(c.initial, c, f, lim, &c.initialState, nil, stack, nil)
	}
	if c.initialErr != nil {
		return fmt.Errorf("CIE initial instructions: %w", c.initialErr)
	}
	state := c.initialState
	return execute(f.instructions, c, f, lim, &state, &c.initialState, stack, emit)
}

// execute runs instructions over state. initial is the state after the CIE
// (for DW_CFA_restore); emit is nil while running the CIE.
func execute(ins []byte, c *cie, f *fde, lim Limits, state *frameState, initial *frameState, scratch *[]frameState, emit func(Row) error) error {
	r := &reader{b: ins}
	loc := f.start
	stack := (*scratch)[:0]
	defer func() { *scratch = stack[:0] }()
	advance := func(delta uint64) error {
		if emit == nil {
			return nil // location moves are meaningless in a CIE
		}
		if err := emit(state.row(loc, c)); err != nil {
			return err
		}
		next := loc + delta*c.codeAlign
		if next < loc || delta > 1<<32 {
			return fmt.Errorf("%w: advance of %d overflows", ErrInvalid, delta)
		}
		loc = next
		return nil
	}
	setReg := func(reg uint64, rule regRule) {
		// Rules for registers the unwinder ignores are parsed and dropped.
		if reg < numRegs {
			state.regs[reg] = rule
		}
	}
	restoreReg := func(reg uint64) {
		if reg >= numRegs {
			return
		}
		if initial != nil {
			state.regs[reg] = initial.regs[reg]
		} else {
			state.regs[reg] = regRule{}
		}
	}
	for r.off < len(r.b) && r.err == nil && loc < f.end {
		op := r.b[r.off] // in bounds and without error: the loop's condition
		r.off++
		var err error
		switch op & 0xc0 {
		case cfaAdvanceLoc:
			err = advance(uint64(op & 0x3f))
		case cfaOffset:
			setReg(uint64(op&0x3f), regRule{kind: regOffset, off: int64(r.uleb()) * c.dataAlign})
		case cfaRestore:
			restoreReg(uint64(op & 0x3f))
		default:
			switch op {
			case cfaNop:
			case cfaSetLoc:
				if emit == nil || c.fdeEncoding&0x70 != 0 {
					return fmt.Errorf("%w: DW_CFA_set_loc in a CIE or relative to an unknown base", ErrInvalid)
				}
				to := r.pointer(c.fdeEncoding, 0)
				if to < loc {
					return fmt.Errorf("%w: DW_CFA_set_loc backwards to %#x", ErrInvalid, to)
				}
				err = advance(0)
				loc = to
			case cfaAdvanceLoc1:
				err = advance(uint64(r.u8()))
			case cfaAdvanceLoc2:
				err = advance(uint64(r.u16()))
			case cfaAdvanceLoc4:
				err = advance(uint64(r.u32()))
			case cfaOffsetExtended:
				reg := r.uleb()
				setReg(reg, regRule{kind: regOffset, off: int64(r.uleb()) * c.dataAlign})
			case cfaOffsetExtendedSF:
				reg := r.uleb()
				setReg(reg, regRule{kind: regOffset, off: r.sleb() * c.dataAlign})
			case cfaGNUNegOffsetExt:
				reg := r.uleb()
				setReg(reg, regRule{kind: regOffset, off: -int64(r.uleb()) * c.dataAlign})
			case cfaRestoreExtended:
				restoreReg(r.uleb())
			case cfaUndefined:
				setReg(r.uleb(), regRule{kind: regUndefined})
			case cfaSameValue:
				setReg(r.uleb(), regRule{kind: regSame})
			case cfaRegister:
				reg := r.uleb()
				r.uleb()
				setReg(reg, regRule{kind: regOther})
			case cfaRememberState:
				if len(stack) >= lim.MaxStateDepth {
					return fmt.Errorf("%w: DW_CFA_remember_state nested deeper than %d", ErrTooLarge, lim.MaxStateDepth)
				}
				stack = append(stack, *state)
			case cfaRestoreState:
				if len(stack) == 0 {
					return fmt.Errorf("%w: DW_CFA_restore_state without remember_state", ErrInvalid)
				}
				// The CFA rule is part of the remembered state (DWARF 5).
				*state = stack[len(stack)-1]
				stack = stack[:len(stack)-1]
			case cfaDefCFA:
				state.cfa = cfaRule{reg: r.uleb(), off: int64(r.uleb())}
			case cfaDefCFASF:
				reg := r.uleb()
				state.cfa = cfaRule{reg: reg, off: r.sleb() * c.dataAlign}
			case cfaDefCFARegister:
				state.cfa.reg = r.uleb()
				state.cfa.expr = nil
			case cfaDefCFAOffset:
				state.cfa.off = int64(r.uleb())
			case cfaDefCFAOffsetSF:
				state.cfa.off = r.sleb() * c.dataAlign
			case cfaDefCFAExpression:
				expr := r.bytes(r.uleb())
				state.cfa = cfaRule{expr: expr[:len(expr):len(expr)]}
				if state.cfa.expr == nil {
					state.cfa.expr = []byte{}
				}
			case cfaExpression, cfaValExpression:
				reg := r.uleb()
				r.bytes(r.uleb())
				setReg(reg, regRule{kind: regOther})
			case cfaValOffset, cfaValOffsetSF:
				reg := r.uleb()
				if op == cfaValOffset {
					r.uleb()
				} else {
					r.sleb()
				}
				setReg(reg, regRule{kind: regOther})
			case cfaGNUArgsSize:
				r.uleb()
			case cfaGNUWindowSave:
				// On arm64 the saved x30 is signed from here (pac-ret):
				// the walk strips every return address's pointer
				// authentication code, signed or not (arm64.go).
			default:
				return fmt.Errorf("%w: call-frame instruction %#x", ErrInvalid, op)
			}
		}
		if err != nil {
			return err
		}
	}
	if r.err != nil {
		return r.err
	}
	if emit != nil && loc < f.end {
		return emit(state.row(loc, c))
	}
	return nil
}
