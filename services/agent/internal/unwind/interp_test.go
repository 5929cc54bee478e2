package unwind

import "testing"

// TestCompileRealignedCFA: the CFA rules of perlasm code that realigns its
// stack (OpenSSL's libcrypto): *(rsp+N)+K as DW_CFA_def_cfa_expression, and
// another general register plus an offset. Every other expression, and
// values that do not fit a row, stay unsupported.
func TestCompileRealignedCFA(t *testing.T) {
	expr := func(e ...byte) []byte { return append([]byte{cfaDefCFAExpression, byte(len(e))}, e...) }
	const (
		breg7  = 0x77
		deref  = 0x06
		plusU  = 0x23
		breg9  = 0x79
		lit8   = 0x38
		opMul  = 0x1e
		opPlus = 0x22
	)
	// A prologue pushing rbp (CFA-16), then the CFA in rax, then the
	// expression: rbp stays saved at CFA-16 under each rule.
	prologue := []byte{cfaAdvanceLoc | 1, cfaDefCFAOffset, 16, cfaOffset | regRBP, 2, cfaAdvanceLoc | 1}
	cases := []struct {
		name string
		ins  []byte
		want Row // at 0x1002
	}{
		{"rsp+120 deref plus 8", expr(breg7, 0xf8, 0x00, deref, plusU, 8), Row{Rule: RuleDeref, RBP: -2, Offset: 15 | 1<<8}},
		{"rsp-8 deref plus 8", expr(breg7, 0x78, deref, plusU, 8), Row{Rule: RuleDeref, RBP: -2, Offset: 0xff | 1<<8}},
		{"rsp+0 deref plus 64", expr(breg7, 0, deref, plusU, 0x40), Row{Rule: RuleDeref, RBP: -2, Offset: 8 << 8}},
		{"rsp+160 deref", expr(breg7, 0xa0, 0x01, deref), Row{Rule: RuleDeref, RBP: -2, Offset: 20}},
		{"rsp+1016 deref plus 2040", expr(breg7, 0xf8, 0x07, deref, plusU, 0xf8, 0x0f), Row{Rule: RuleDeref, RBP: -2, Offset: 127 | 255<<8}},
		{"rsp+1024 deref: N too large", expr(breg7, 0x80, 0x08, deref), Row{Rule: RuleUnsupported}},
		{"rsp-1032 deref: N too small", expr(breg7, 0xf8, 0x77, deref), Row{Rule: RuleUnsupported}},
		{"rsp+2048 plus 2048: K too large", expr(breg7, 0, deref, plusU, 0x80, 0x10), Row{Rule: RuleUnsupported}},
		{"rsp+4 deref: N unaligned", expr(breg7, 4, deref, plusU, 8), Row{Rule: RuleUnsupported}},
		{"rsp+8 deref plus 4: K unaligned", expr(breg7, 8, deref, plusU, 4), Row{Rule: RuleUnsupported}},
		{"rbp+120 deref plus 8", expr(0x76, 0xf8, 0x00, deref, plusU, 8), Row{Rule: RuleUnsupported}},
		{"rsp+8 deref plus 8 deref", expr(breg7, 8, deref, plusU, 8, deref), Row{Rule: RuleUnsupported}},
		{"rsp+8 no deref", expr(breg7, 8), Row{Rule: RuleUnsupported}},
		{"rsp+8+r9*8 deref plus 8", expr(breg7, 8, breg9, 0, lit8, opMul, opPlus, deref, plusU, 8), Row{Rule: RuleUnsupported}},
		{"truncated", expr(breg7, 0x80), Row{Rule: RuleUnsupported}},
		{"rax+8", []byte{cfaDefCFA, 0, 8}, Row{Rule: RuleUnsupported | 1<<cfaRegShift, RBP: -2, Offset: 1}},
		{"rsi+8", []byte{cfaDefCFA, 4, 8}, Row{Rule: RuleUnsupported | 5<<cfaRegShift, RBP: -2, Offset: 1}},
		{"r15+64", []byte{cfaDefCFA, 15, 64}, Row{Rule: RuleUnsupported | 16<<cfaRegShift, RBP: -2, Offset: 8}},
		{"r9 register then offset", []byte{cfaDefCFARegister, 9, cfaDefCFAOffset, 24}, Row{Rule: RuleUnsupported | 10<<cfaRegShift, RBP: -2, Offset: 3}},
		{"rax+4: unaligned", []byte{cfaDefCFA, 0, 4}, Row{Rule: RuleUnsupported}},
		{"rip+8: not a general register", []byte{cfaDefCFA, 16, 8}, Row{Rule: RuleUnsupported}},
		{"xmm0+8", []byte{cfaDefCFA, 17, 8}, Row{Rule: RuleUnsupported}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ins := append(append([]byte{}, prologue...), tc.ins...)
			tab, err := compileSection(ehSection(ins), DefaultLimits)
			if err != nil {
				t.Fatal(err)
			}
			got, ok := tab.Lookup(0x1002)
			tc.want.PC = 0x1002
			if !ok || got != tc.want {
				t.Fatalf("row %+v (%v), want %+v (%v)", got, got.Rule, tc.want, tc.want.Rule)
			}
			if first, _ := tab.Lookup(0x1001); first.Rule != RuleRSP || first.Offset != 2 || first.RBP != -2 {
				t.Errorf("prologue row %+v", first)
			}
		})
	}
}

// TestRowAccessors: Deref and CFARegister unpack what row packed.
func TestRowAccessors(t *testing.T) {
	if n, k := (Row{Rule: RuleDeref, Offset: 0xff | 8<<8}).Deref(); n != -8 || k != 64 {
		t.Errorf("Deref: %d, %d, want -8, 64", n, k)
	}
	if reg, ok := (Row{Rule: RuleUnsupported | 16<<cfaRegShift}).CFARegister(); !ok || reg != 15 {
		t.Errorf("CFARegister: %d %v, want r15", reg, ok)
	}
	for _, r := range []Row{{Rule: RuleUnsupported}, {Rule: RuleRSP}, {Rule: RuleRSP | RAFrame}, {Rule: RuleDeref}} {
		if reg, ok := r.CFARegister(); ok {
			t.Errorf("%+v: CFARegister %d", r, reg)
		}
	}
	if RuleDeref.String() != "deref" || (RuleUnsupported|3<<cfaRegShift).String() != "unsupported" {
		t.Errorf("names %v %v", RuleDeref, RuleUnsupported|3<<cfaRegShift)
	}
}
