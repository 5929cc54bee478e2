package unwind

import (
	"bufio"
	"bytes"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// readelfRow is one row of `readelf --debug-dump=frames-interp`.
type readelfRow struct {
	pc       uint64
	cfa      string // rsp+8, rbp+16, exp
	expr     string // the CFA expression of an exp row (readelfCFAExpressions)
	rbp, ra  string // c-16, u, ...; "" when the column is absent
	x29      string // arm64's frame pointer, as rbp
	raColumn string // the CIE's return-address register
	signal   bool   // the FDE's CIE has augmentation S
	fdeStart uint64
	fdeEnd   uint64
}

// readelfRows runs readelf on path and returns the interpreted rows of its
// .eh_frame (or .debug_frame) section, the last row for each address of an
// FDE, and for an FDE without instructions the row of its CIE at its start.
func readelfRows(t testing.TB, path, section string) []readelfRow {
	t.Helper()
	out, err := exec.Command("readelf", "--wide", "-wN", "--debug-dump=frames-interp", path).Output()
	if err != nil {
		t.Fatalf("readelf %s: %v", path, err)
	}
	type cieInfo struct {
		signal   bool
		raColumn string
		row      readelfRow
	}
	cies := map[string]*cieInfo{}
	var rows []readelfRow
	var cols []string
	var cur *cieInfo // the CIE being read
	var fde *readelfRow
	fdeRows := 0
	in := false
	flushFDE := func() {
		if fde != nil && fdeRows == 0 {
			r := *fde
			if c := cies[fde.cfa]; c != nil {
				r.cfa, r.rbp, r.ra, r.x29 = c.row.cfa, c.row.rbp, c.row.ra, c.row.x29
				r.pc = fde.fdeStart
				rows = append(rows, r)
			}
		}
		fde = nil
	}
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "Contents of the ") {
			flushFDE()
			in = strings.HasPrefix(line, "Contents of the "+section+" section")
			continue
		}
		if !in {
			continue
		}
		var f []string
		for _, w := range strings.Fields(line) {
			// "r10 (r10)" is one value.
			if strings.HasPrefix(w, "(") && len(f) > 0 {
				f[len(f)-1] += " " + w
				continue
			}
			f = append(f, w)
		}
		switch {
		case len(f) >= 4 && f[3] == "CIE":
			flushFDE()
			cur = &cieInfo{signal: strings.Contains(f[4], "S"), raColumn: strings.TrimPrefix(f[len(f)-1], "ra=")}
			cies[f[0]] = cur
		case len(f) >= 6 && f[3] == "FDE":
			flushFDE()
			cur = nil
			cieOff := strings.TrimPrefix(f[4], "cie=")
			lo, hi, _ := strings.Cut(strings.TrimPrefix(f[5], "pc="), "..")
			start, _ := strconv.ParseUint(lo, 16, 64)
			end, _ := strconv.ParseUint(hi, 16, 64)
			c := cies[cieOff]
			fde = &readelfRow{fdeStart: start, fdeEnd: end, cfa: cieOff, signal: c != nil && c.signal}
			if c != nil {
				fde.raColumn = c.raColumn
			}
			fdeRows = 0
		case len(f) >= 2 && f[0] == "LOC":
			cols = f[1:]
		case len(f) >= 2 && len(f[0]) == 16:
			pc, err := strconv.ParseUint(f[0], 16, 64)
			if err != nil {
				continue
			}
			r := readelfRow{pc: pc}
			for i, v := range f[1:] {
				if i >= len(cols) {
					break
				}
				switch cols[i] {
				case "CFA":
					r.cfa = v
				case "rbp":
					r.rbp = v
				case "ra":
					r.ra = v
				case "x29":
					r.x29 = v
				}
			}
			if cur != nil {
				cur.row = r
				continue
			}
			if fde == nil {
				continue
			}
			r.signal, r.fdeStart, r.fdeEnd, r.raColumn = fde.signal, fde.fdeStart, fde.fdeEnd, fde.raColumn
			if len(rows) > 0 && fdeRows > 0 && rows[len(rows)-1].pc == pc {
				rows[len(rows)-1] = r
			} else {
				rows = append(rows, r)
			}
			fdeRows++
		}
	}
	flushFDE()
	exprs := readelfCFAExpressions(t, path, section)
	for i := range rows {
		if rows[i].cfa == "exp" {
			rows[i].expr = exprs[rows[i].pc]
		}
	}
	return rows
}

// readelfCFAExpressions returns, by address, the CFA expression of every
// row of path's section whose CFA is one, from readelf's uninterpreted
// instructions (--debug-dump=frames): "DW_OP_breg7 (rsp): 8; DW_OP_deref".
// FDEs only: a CIE's initial instructions define none in the files checked.
func readelfCFAExpressions(t testing.TB, path, section string) map[uint64]string {
	t.Helper()
	out, err := exec.Command("readelf", "--wide", "-wN", "--debug-dump=frames", path).Output()
	if err != nil {
		t.Fatalf("readelf %s: %v", path, err)
	}
	exprs := map[uint64]string{}
	var cur string
	var stack []string
	var loc uint64
	in, inFDE := false, false
	// The state at loc is the one after its last instruction.
	flush := func() {
		if in && inFDE && cur != "" {
			exprs[loc] = cur
		}
	}
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		f := strings.Fields(line)
		switch {
		case strings.HasPrefix(line, "Contents of the "):
			flush()
			inFDE = false
			in = strings.HasPrefix(line, "Contents of the "+section+" section")
		case len(f) >= 6 && f[3] == "FDE":
			flush()
			inFDE, cur, stack = true, "", nil
			lo, _, _ := strings.Cut(strings.TrimPrefix(f[5], "pc="), "..")
			loc, _ = strconv.ParseUint(lo, 16, 64)
		case len(f) >= 4 && f[3] == "CIE":
			flush()
			inFDE = false
		case strings.HasPrefix(line, "DW_CFA_advance_loc"):
			flush()
			_, to, _ := strings.Cut(line, " to ")
			loc, _ = strconv.ParseUint(to, 16, 64)
		case strings.HasPrefix(line, "DW_CFA_def_cfa_expression ("):
			cur = strings.TrimSuffix(strings.TrimPrefix(line, "DW_CFA_def_cfa_expression ("), ")")
		case strings.HasPrefix(line, "DW_CFA_def_cfa:"), strings.HasPrefix(line, "DW_CFA_def_cfa_sf:"),
			strings.HasPrefix(line, "DW_CFA_def_cfa_register:"):
			cur = ""
		case line == "DW_CFA_remember_state":
			stack = append(stack, cur)
		case line == "DW_CFA_restore_state" && len(stack) > 0:
			cur, stack = stack[len(stack)-1], stack[:len(stack)-1]
		}
	}
	flush()
	return exprs
}

// derefExpr matches the expressions RuleDeref follows, as readelf prints
// them: CFA = *(rsp + N) + K.
var derefExpr = regexp.MustCompile(`^DW_OP_breg7 \(rsp\): (-?[0-9]+); DW_OP_deref(?:; DW_OP_plus_uconst: ([0-9]+))?$`)

// gpRegs are the DWARF numbers of the registers readelf names that a
// RuleUnsupported row's CFA may be based on (CFARegister).
var gpRegs = map[string]uint64{"rax": 0, "rdx": 1, "rcx": 2, "rbx": 3, "rsi": 4, "rdi": 5,
	"r8": 8, "r9": 9, "r10": 10, "r11": 11, "r12": 12, "r13": 13, "r14": 14, "r15": 15}

// wantRow is what Compile should make of a readelf row. ok is false for an
// expression CFA, which may be the PLT rule or unsupported.
func (r readelfRow) want() (Row, bool) {
	w := Row{PC: uint32(r.pc)}
	switch {
	case r.ra == "u":
		w.Rule = RuleEnd
		return w, true
	case r.signal:
		w.Rule = RuleSignal
		return w, true
	case r.ra != "c-8":
		w.Rule = RuleUnsupported
		return w, true
	case r.cfa == "exp" && (r.expr == "" || strings.Contains(r.expr, "DW_OP_breg16 (rip)")):
		// The PLT rule, or an expression of its kind: unsupported.
		return w, false
	case r.cfa == "exp":
		m := derefExpr.FindStringSubmatch(r.expr)
		var n, k int
		if m != nil {
			n, _ = strconv.Atoi(m[1])
			k, _ = strconv.Atoi("0" + m[2])
		}
		if m == nil || n%8 != 0 || n/8 < -128 || n/8 > 127 || k%8 != 0 || k/8 > 255 {
			w.Rule = RuleUnsupported
			return w, true
		}
		w.Rule, w.Offset = RuleDeref, uint16(uint8(int8(n/8)))|uint16(k/8)<<8
	default:
		reg, off, ok := strings.Cut(r.cfa, "+")
		n, err := strconv.Atoi(off)
		gp, isGP := gpRegs[reg]
		switch {
		case !ok || err != nil || n%8 != 0 || n < 0:
			w.Rule = RuleUnsupported
			return w, true
		case reg == "rsp":
			w.Rule = RuleRSP
		case reg == "rbp":
			w.Rule = RuleRBP
		case isGP:
			w.Rule = RuleUnsupported | Rule(gp+1)<<cfaRegShift
		default:
			w.Rule = RuleUnsupported
			return w, true
		}
		w.Offset = uint16(n / 8)
	}
	switch {
	case r.rbp == "" || r.rbp == "u" || r.rbp == "s":
		w.RBP = RBPUnchanged
	case strings.HasPrefix(r.rbp, "c"):
		v, err := strconv.Atoi(r.rbp[1:])
		if err != nil || v%8 != 0 || v/8 < -127 || v/8 > 127 {
			w.RBP = RBPLost
		} else {
			w.RBP = int8(v / 8)
		}
	default:
		w.RBP = RBPLost
	}
	return w, true
}
