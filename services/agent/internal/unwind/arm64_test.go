package unwind

import (
	"bufio"
	"bytes"
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stackstream/stackstream/bpf/profiler"
)

// The cross toolchain of Debian (gcc-aarch64-linux-gnu) and its arm64
// libraries (libc6-arm64-cross: Debian's own arm64 glibc build).
const (
	arm64CC      = "aarch64-linux-gnu-gcc"
	arm64CXX     = "aarch64-linux-gnu-g++"
	arm64Sysroot = "/usr/aarch64-linux-gnu"
)

func needTool(t testing.TB, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s: %v (.ci/run installs it)", name, err)
		}
		t.Skipf("%s: %v", name, err)
	}
	return p
}

// buildArm64 cross-compiles a C or C++ source (by the compiler) with flags.
func buildArm64(t testing.TB, compiler, src string, flags ...string) string {
	t.Helper()
	cc := needTool(t, compiler)
	dir := t.TempDir()
	ext := ".c"
	if compiler == arm64CXX {
		ext = ".cc"
	}
	file := filepath.Join(dir, "prog"+ext)
	if err := os.WriteFile(file, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "prog")
	args := append(append([]string{}, flags...), "-o", bin, file)
	if out, err := exec.Command(cc, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s %v: %v\n%s", compiler, args, err, out)
	}
	return bin
}

func compileArm64File(t testing.TB, path string) *Table {
	t.Helper()
	return compileFileArch(t, path, ArchArm64)
}

const cxxExceptions = `
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>
__attribute__((noinline)) unsigned long leaf(unsigned long n) {
	if (n == 7) throw std::runtime_error("seven " + std::to_string(n));
	std::vector<unsigned long> v(n % 32 + 1, n);
	unsigned long x = 0;
	for (auto e : v) x = x * 31 + e;
	return x;
}
__attribute__((noinline)) unsigned long middle(unsigned long n) {
	try { return leaf(n) + 1; } catch (const std::exception &e) { return std::puts(e.what()); }
}
int main(int argc, char **argv) {
	unsigned long s = 0;
	for (unsigned long i = 0; i < (argc > 1 ? std::strtoul(argv[1], 0, 10) : 100); i++) s += middle(i);
	std::printf("%lu\n", s);
}
`

// arm64Undefined returns, per FDE start, the first address at which
// DW_CFA_undefined x30 holds, from readelf's raw dump: frames-interp prints
// "u" both for it and for a register not yet mentioned, which on arm64 is
// the return address still in x30.
func arm64Undefined(t testing.TB, path, section string) map[uint64]uint64 {
	t.Helper()
	out, err := exec.Command("readelf", "--wide", "-wf", path).Output()
	if err != nil {
		t.Fatalf("readelf -wf %s: %v", path, err)
	}
	undef := map[uint64]uint64{}
	var fdeStart, loc uint64
	in, inFDE := false, false
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		f := strings.Fields(line)
		switch {
		case strings.HasPrefix(line, "Contents of the "):
			in = strings.HasPrefix(line, "Contents of the "+section+" section")
			inFDE = false
		case !in || len(f) == 0:
		case len(f) >= 6 && f[3] == "FDE":
			lo, _, _ := strings.Cut(strings.TrimPrefix(f[5], "pc="), "..")
			fdeStart, _ = strconv.ParseUint(lo, 16, 64)
			loc, inFDE = fdeStart, true
		case len(f) >= 4 && f[3] == "CIE":
			inFDE = false
		case inFDE && strings.HasPrefix(f[0], "DW_CFA_advance_loc") && len(f) >= 4:
			loc, _ = strconv.ParseUint(f[len(f)-1], 16, 64)
		case inFDE && f[0] == "DW_CFA_undefined:" && len(f) >= 2 && f[1] == "r30":
			if _, ok := undef[fdeStart]; !ok {
				undef[fdeStart] = loc
			}
		}
	}
	return undef
}

// wantArm64 is the meaning of a readelf row on arm64; ok false when readelf
// gives a rule the rows do not follow (an expression, another register).
func (r readelfRow) wantArm64(undef map[uint64]uint64) arm64Sem {
	unsupported := arm64Sem{rule: RuleUnsupported}
	from, isUndef := undef[r.fdeStart]
	switch {
	case r.ra == "u" && isUndef && r.pc >= from:
		return arm64Sem{rule: RuleEnd}
	case r.signal:
		return arm64Sem{rule: RuleSignal}
	}
	var s arm64Sem
	reg, off, ok := strings.Cut(r.cfa, "+")
	n, err := strconv.ParseInt(off, 10, 64)
	switch {
	case !ok || err != nil || n%8 != 0 || n < 0:
		return unsupported
	case reg == "sp":
		s.rule = RuleRSP
	case reg == "x29":
		s.rule = RuleRBP
	default:
		return unsupported
	}
	s.cfaOff = n
	switch {
	case r.ra == "u" || r.ra == "s" || r.ra == "":
		s.raInLR = true
	case strings.HasPrefix(r.ra, "c-") || strings.HasPrefix(r.ra, "c+"):
		s.raOff, _ = strconv.ParseInt(r.ra[1:], 10, 64)
	default:
		return unsupported
	}
	switch {
	case r.x29 == "" || r.x29 == "u" || r.x29 == "s":
		s.fp = "same"
	case strings.HasPrefix(r.x29, "c-") || strings.HasPrefix(r.x29, "c+"):
		s.fp = "saved"
		s.fpOff, _ = strconv.ParseInt(r.x29[1:], 10, 64)
	default:
		s.fp = "lost"
	}
	return s
}

// arm64Fits reports whether a row can say what s says: the slots within
// +-1016 bytes of the CFA or of the CFA's register, a frame record's x30 8
// bytes above its x29.
func arm64Fits(s arm64Sem) bool {
	fits := func(off int64) bool {
		_, a := slotUnits(off)
		_, b := slotUnits(off + s.cfaOff)
		return a || b
	}
	switch {
	case s.rule != RuleRSP && s.rule != RuleRBP:
		return true
	case s.cfaOff/8 > 0xffff:
		return false
	case s.raInLR:
		return true // x29 may come out lost: checked by the caller
	case s.fp == "saved" && s.fpOff+8 == s.raOff:
		return fits(s.fpOff)
	}
	return fits(s.raOff)
}

// checkArm64Rows compares the table's row at every address readelf lists.
func checkArm64Rows(t *testing.T, tab *Table, ref []readelfRow, undef map[uint64]uint64) (checked, unfit, fpLost, otherRA int) {
	t.Helper()
	bad := 0
	for i, r := range ref {
		if i+1 < len(ref) && ref[i+1].pc < r.fdeEnd && ref[i+1].fdeStart != r.fdeStart && ref[i+1].fdeStart <= r.pc {
			continue // overlapping FDEs: the later one wins in the table
		}
		row, ok := tab.Lookup(r.pc)
		if !ok {
			t.Errorf("%#x: no row", r.pc)
			bad++
			continue
		}
		got, want := decodeArm64(row), r.wantArm64(undef)
		switch {
		case r.raColumn != "30" && (got.rule == RuleNone || got.rule == RuleUnsupported):
			// glibc's rawmemchr names x15: its CIE is rejected.
			otherRA++
		case got == want:
		case got.rule == RuleUnsupported && !arm64Fits(want):
			unfit++
		case got.fp == "lost" && want.fp == "saved" && (want.raInLR || want.fpOff+8 != want.raOff) &&
			got.rule == want.rule && got.cfaOff == want.cfaOff && got.raInLR == want.raInLR && got.raOff == want.raOff:
			// x29 saved apart from x30, or out of reach with x30 in x30.
			fpLost++
		default:
			t.Errorf("%#x: readelf cfa %s x29 %q ra %q: row %+v means %v, want %v", r.pc, r.cfa, r.x29, r.ra, row, got, want)
			bad++
		}
		if bad > 20 {
			t.Fatal("too many mismatches")
		}
		checked++
	}
	return checked, unfit, fpLost, otherRA
}

// TestCompileArm64MatchesReadelf compiles Debian's arm64 libraries and
// programs cross-compiled here and checks the meaning of the row at every
// address readelf interprets.
func TestCompileArm64MatchesReadelf(t *testing.T) {
	lib := func(name string) func(t *testing.T) string {
		return func(t *testing.T) string {
			p := filepath.Join(arm64Sysroot, "lib", name)
			if _, err := os.Stat(p); err != nil {
				needTool(t, arm64CC) // fails under CI when the toolchain is missing
				t.Fatal(err)
			}
			return p
		}
	}
	type tc struct {
		name    string
		section string
		path    func(t *testing.T) string
	}
	cases := []tc{
		{"libc", ".eh_frame", lib("libc.so.6")},
		{"ld.so", ".eh_frame", lib("ld-linux-aarch64.so.1")},
		{"libstdc++", ".eh_frame", lib("libstdc++.so.6")},
		{"libgcc_s", ".eh_frame", lib("libgcc_s.so.1")},
		{"c-O2-omit-frame-pointer", ".eh_frame", func(t *testing.T) string {
			return buildArm64(t, arm64CC, chainC, "-O2", "-fomit-frame-pointer")
		}},
		{"c-O2-pac-ret", ".eh_frame", func(t *testing.T) string {
			src, err := os.ReadFile("testdata/arm64snap.c")
			if err != nil {
				t.Fatal(err)
			}
			return buildArm64(t, arm64CC, string(src), "-O2", "-fomit-frame-pointer", "-mbranch-protection=pac-ret")
		}},
		{"c-O0-frame-pointer", ".eh_frame", func(t *testing.T) string {
			return buildArm64(t, arm64CC, chainC, "-O0", "-fno-omit-frame-pointer")
		}},
		{"c++-exceptions", ".eh_frame", func(t *testing.T) string {
			return buildArm64(t, arm64CXX, cxxExceptions, "-O2", "-fomit-frame-pointer", "-mbranch-protection=standard")
		}},
		{"c-debug-frame", ".debug_frame", func(t *testing.T) string {
			return buildArm64(t, arm64CC, chainC, "-O2", "-g", "-fomit-frame-pointer", "-fno-asynchronous-unwind-tables", "-fno-unwind-tables")
		}},
	}
	// Other arm64 files to check, such as Debian's xz and liblzma from the
	// arm64 packages (colon-separated paths).
	for _, p := range filepath.SplitList(os.Getenv("STACKSTREAM_ARM64_ELFS")) {
		cases = append(cases, tc{filepath.Base(p), ".eh_frame", func(*testing.T) string { return p }})
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			path := tc.path(t)
			tab := compileArm64File(t, path)
			ref := readelfRows(t, path, tc.section)
			if len(ref) == 0 {
				t.Fatalf("readelf printed no %s rows for %s", tc.section, path)
			}
			checked, unfit, fpLost, otherRA := checkArm64Rows(t, tab, ref, arm64Undefined(t, path, tc.section))
			t.Logf("%s: %d readelf rows checked, %d beyond a row's reach (unsupported), %d with x29 lost, %d of a CIE whose return address is not x30; table %d rows (%d bytes) from %d FDEs; rules %v",
				filepath.Base(path), checked, unfit, fpLost, otherRA, len(tab.Rows), tab.Bytes(), tab.Stats.FDEs, tab.Stats.Rules)
			if unfit*100 > checked {
				t.Errorf("%d of %d rows beyond reach", unfit, checked)
			}
		})
	}
}

// TestArm64PLT: a sample in a PLT stub keeps its caller (x30); in PLT0,
// after its push of x16 and x30, the CFA is sp+16.
func TestArm64PLT(t *testing.T) {
	for _, tc := range []struct {
		name  string
		flags []string
		stp   uint64 // offset of PLT0's stp
	}{
		{"plain", []string{"-O2"}, 0},
		{"bti", []string{"-O2", "-mbranch-protection=standard", "-Wl,-z,force-bti"}, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := buildArm64(t, arm64CC, chainC, tc.flags...)
			f, err := elf.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			plt := f.Section(".plt")
			if plt == nil {
				t.Fatal("no .plt")
			}
			tab := compileArm64File(t, path)
			for pc := plt.Addr; pc < plt.Addr+plt.Size; pc += 4 {
				row, ok := tab.Lookup(pc)
				got := decodeArm64(row)
				want := int64(0)
				if pc > plt.Addr+tc.stp && pc < plt.Addr+32 {
					want = 16
				}
				if !ok || got.rule != RuleRSP || got.cfaOff != want || !got.raInLR || got.fp != "same" {
					t.Fatalf("%#x in .plt: row %+v means %v, want cfa=sp+%d ra=x30 x29=same", pc, row, got, want)
				}
			}
		})
	}
}

// TestArm64RowConstants: the arm64 bits of a row are the BPF walk's.
func TestArm64RowConstants(t *testing.T) {
	for name, c := range map[string][2]int{
		"RA_IN_LR": {int(RAInLR), profiler.RAInLR}, "RA_FRAME": {int(RAFrame), profiler.RAFrame},
		"RA_SAVED": {int(RASaved), profiler.RASaved}, "RA_SAVED_FP_LOST": {int(RASavedFPLost), profiler.RASavedFPLost},
		"RA_MASK": {int(raMask), profiler.RAMask}, "SLOT_FROM_REG": {int(SlotFromReg), profiler.SlotFromReg},
		"RULE_MASK":       {int(ruleMask), profiler.RuleMask},
		"SIGFRAME_A64_FP": {arm64SigframeFP, profiler.SigframeA64FP}, "SIGFRAME_A64_LR": {arm64SigframeLR, profiler.SigframeA64LR},
		"SIGFRAME_A64_SP": {arm64SigframeSP, profiler.SigframeA64SP}, "SIGFRAME_A64_PC": {arm64SigframePC, profiler.SigframeA64PC},
	} {
		if c[0] != c[1] {
			t.Errorf("%s: Go %#x, profiler %#x", name, c[0], c[1])
		}
	}
	if profiler.UserVAMask != arm64UserVA {
		t.Errorf("USER_VA_MASK %#x, Go %#x", uint64(profiler.UserVAMask), uint64(arm64UserVA))
	}
}

// TestGoPclntabArm64: a stripped arm64 Go binary gets its rows from
// .gopclntab (x30 at sp, x29 below it once the prologue moved sp), and they
// give the CFA and the return address the same build's .debug_frame gives at
// every address it describes.
func TestGoPclntabArm64(t *testing.T) {
	withDWARF := compileArm64File(t, buildGo(t, "", "GOARCH=arm64"))
	stripped := compileArm64File(t, buildGo(t, "-s -w", "GOARCH=arm64"))
	if len(stripped.Rows) == 0 {
		t.Fatal("no rows from .gopclntab")
	}
	checked, differ, framed := 0, 0, 0
	for i, r := range withDWARF.Rows {
		want := decodeArm64(r)
		if want.rule != RuleRSP {
			continue
		}
		pcs := []uint64{uint64(r.PC)}
		if i+1 < len(withDWARF.Rows) && withDWARF.Rows[i+1].PC > r.PC+4 {
			pcs = append(pcs, uint64(withDWARF.Rows[i+1].PC)-4)
		}
		for _, pc := range pcs {
			row, ok := stripped.Lookup(pc)
			got := decodeArm64(row)
			if got.rule == RuleEnd {
				continue // runtime.goexit, mstart, rt0_go: roots by design
			}
			checked++
			if !got.raInLR {
				framed++
			}
			if !ok || got.rule != RuleRSP || got.cfaOff != want.cfaOff || got.raInLR != want.raInLR || got.raOff != want.raOff ||
				(!got.raInLR && (got.fp != "saved" || got.fpOff != got.raOff-8)) {
				differ++
				if differ <= 10 {
					t.Errorf("%#x: .debug_frame %v, .gopclntab %v", pc, want, got)
				}
			}
		}
	}
	t.Logf("%d addresses checked (%d with x30 saved), %d differ; .debug_frame %d rows, .gopclntab %d rows (%d bytes), rules %v",
		checked, framed, differ, len(withDWARF.Rows), len(stripped.Rows), stripped.Bytes(), stripped.Stats.Rules)
	if checked < 1000 || framed < checked/4 || differ*1000 > checked {
		t.Fatalf("%d of %d addresses differ (%d with x30 saved)", differ, checked, framed)
	}
	if stripped.Stats.Rules[RuleEnd] == 0 {
		t.Errorf("no end-of-stack row (runtime.goexit): rules %v", stripped.Stats.Rules)
	}
}
