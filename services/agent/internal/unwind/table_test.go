package unwind

import (
	"bytes"
	"cmp"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
)

func compileFile(t testing.TB, path string) *Table {
	t.Helper()
	return compileFileArch(t, path, hostArch)
}

// compileFileArch compiles the table of path as a file of arch, which the
// table must say it is.
func compileFileArch(t testing.TB, path string, arch Arch) *Table {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	tab, err := compileArch(f, fi.Size(), arch, DefaultLimits)
	if err != nil {
		t.Fatalf("compile %s: %v", path, err)
	}
	if tab.Arch != arch {
		t.Fatalf("%s: table of %v", path, tab.Arch)
	}
	return tab
}

// buildC compiles a C source with gcc and the given flags.
func buildC(t testing.TB, src string, flags ...string) string {
	t.Helper()
	dir := t.TempDir()
	c := filepath.Join(dir, "prog.c")
	if err := os.WriteFile(c, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "prog")
	args := append(append([]string{}, flags...), "-o", bin, c)
	if out, err := exec.Command("gcc", args...).CombinedOutput(); err != nil {
		t.Fatalf("gcc %v: %v\n%s", args, err, out)
	}
	return bin
}

// buildRust compiles a Rust source in release mode.
func buildRust(t testing.TB, src string) string {
	t.Helper()
	if _, err := exec.LookPath("rustc"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("rustc: %v", err)
		}
		t.Skipf("rustc: %v", err)
	}
	dir := t.TempDir()
	rs := filepath.Join(dir, "main.rs")
	if err := os.WriteFile(rs, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "prog")
	if out, err := exec.Command("rustc", "-C", "opt-level=3", "-o", bin, rs).CombinedOutput(); err != nil {
		t.Fatalf("rustc: %v\n%s", err, out)
	}
	return bin
}

const chainC = `
#include <stdlib.h>
volatile unsigned long sink;
__attribute__((noinline, noipa)) unsigned long leaf(unsigned long n) {
	unsigned long x = n;
	for (unsigned long i = 0; i < n; i++) x = x * 6364136223846793005UL + i;
	return x;
}
__attribute__((noinline, noipa)) unsigned long b(unsigned long n) { unsigned long buf[64]; for (int i = 0; i < 64; i++) buf[i] = leaf(n + i); return buf[n % 64] + 1; }
__attribute__((noinline, noipa)) unsigned long a(unsigned long n) { return b(n) * 3 + 1; }
int main(int argc, char **argv) {
	unsigned long n = argc > 1 ? strtoul(argv[1], 0, 10) : 1000;
	for (;;) sink += a(n);
}
`

const chainRust = `
#[inline(never)] fn leaf(n: u64) -> u64 { let mut x = n; for i in 0..n { x = x.wrapping_mul(6364136223846793005).wrapping_add(i); } x }
#[inline(never)] fn b(n: u64) -> u64 { let v: Vec<u64> = (0..64).map(|i| leaf(n + i)).collect(); v[(n % 64) as usize] + 1 }
#[inline(never)] fn a(n: u64) -> u64 { b(n) * 3 + 1 }
fn main() { let n: u64 = std::env::args().nth(1).map(|s| s.parse().unwrap()).unwrap_or(1000); let mut s = 0u64; loop { s = s.wrapping_add(a(n)); if s == 42 { println!("{}", s); } } }
`

func python3Path(t testing.TB) string {
	p, err := filepath.EvalSymlinks("/usr/bin/python3")
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// cc1Path is gcc's compiler proper, the largest table (~430k rows) a build's
// process churn makes the agent compile.
func cc1Path(t testing.TB) string {
	out, err := exec.Command("gcc", "-print-prog-name=cc1").Output()
	if err != nil {
		t.Fatalf("find cc1: %v", err)
	}
	return strings.TrimSpace(string(out))
}

// checkRows compares the table's row at every address readelf lists.
func checkRows(t *testing.T, tab *Table, ref []readelfRow) (checked, plt, deref, cfaReg int) {
	t.Helper()
	bad := 0
	for i, r := range ref {
		// Overlapping FDEs: the later one wins in the table.
		if i+1 < len(ref) && ref[i+1].pc < r.fdeEnd && ref[i+1].fdeStart != r.fdeStart && ref[i+1].fdeStart <= r.pc {
			continue
		}
		got, ok := tab.Lookup(r.pc)
		if !ok {
			t.Errorf("%#x: no row", r.pc)
			bad++
			continue
		}
		want, exact := r.want()
		if !exact {
			if got.Rule != RulePLT && got.Rule != RuleUnsupported {
				t.Errorf("%#x: readelf CFA %s, got rule %v", r.pc, r.cfa, got.Rule)
				bad++
			}
			if got.Rule == RulePLT {
				plt++
			}
			continue
		}
		if _, ok := want.CFARegister(); ok {
			cfaReg++
		}
		if want.Rule == RuleDeref {
			deref++
		}
		if !got.sameRule(want) {
			t.Errorf("%#x: readelf CFA %s %s rbp %q ra %q: got %+v, want %+v", r.pc, r.cfa, r.expr, r.rbp, r.ra, got, want)
			bad++
		}
		if bad > 20 {
			t.Fatal("too many mismatches")
		}
		checked++
	}
	return checked, plt, deref, cfaReg
}

// symbolAddr is the address of a function symbol, by nm.
func symbolAddr(t *testing.T, path, name string) uint64 {
	t.Helper()
	out, err := exec.Command("nm", path).Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) == 3 && f[2] == name {
			v, err := strconv.ParseUint(f[0], 16, 64)
			if err != nil {
				t.Fatal(err)
			}
			return v
		}
	}
	t.Fatalf("no symbol %s in %s", name, path)
	return 0
}

// TestCompileMatchesReadelf compiles real binaries and checks the row at every
// address readelf interprets in .eh_frame.
func TestCompileMatchesReadelf(t *testing.T) {
	cases := []struct {
		name string
		path func(t *testing.T) string
		// Rows readelf shows with CFA *(rsp+N)+K and reg+N at least.
		deref, cfaReg int
	}{
		{"xz", func(t *testing.T) string { return "/usr/bin/xz" }, 0, 0},
		{"libc", func(t *testing.T) string { return "/lib/x86_64-linux-gnu/libc.so.6" }, 0, 0},
		{"python3", func(t *testing.T) string { return python3Path(t) }, 0, 0},
		// Perlasm code: CFA expressions *(rsp+N)+K and CFAs in rax, rsi,
		// r9, r11, ... (RuleDeref, CFARegister).
		{"libcrypto", func(t *testing.T) string { return "/lib/x86_64-linux-gnu/libcrypto.so.3" }, 50, 500},
		{"openssl", func(t *testing.T) string { return "/usr/bin/openssl" }, 0, 0},
		{"ld.so", func(t *testing.T) string { return "/lib64/ld-linux-x86-64.so.2" }, 0, 0},
		{"cc1", func(t *testing.T) string { return cc1Path(t) }, 0, 0},
		{"c-O2-omit-frame-pointer", func(t *testing.T) string {
			return buildC(t, chainC, "-O2", "-fomit-frame-pointer")
		}, 0, 0},
		{"c-O0-frame-pointer", func(t *testing.T) string {
			return buildC(t, chainC, "-O0", "-fno-omit-frame-pointer")
		}, 0, 0},
		{"rust-release", func(t *testing.T) string { return buildRust(t, chainRust) }, 0, 0},
	}
	debugFrameCases := []struct {
		name string
		path func(t *testing.T) string
	}{
		{"c-debug-frame", func(t *testing.T) string {
			return buildC(t, chainC, "-O2", "-g", "-fomit-frame-pointer", "-fno-asynchronous-unwind-tables", "-fno-unwind-tables")
		}},
		{"c-debug-frame-compressed", func(t *testing.T) string {
			return buildC(t, chainC, "-O2", "-g", "-gz=zlib", "-fomit-frame-pointer", "-fno-asynchronous-unwind-tables", "-fno-unwind-tables")
		}},
	}
	for _, tc := range debugFrameCases {
		t.Run(tc.name, func(t *testing.T) {
			path := tc.path(t)
			tab := compileFile(t, path)
			ref := readelfRows(t, path, ".debug_frame")
			if len(ref) == 0 {
				t.Fatalf("readelf printed no .debug_frame rows for %s", path)
			}
			checkRows(t, tab, ref)
			if tab.Stats.DebugFrameFDEs == 0 {
				t.Errorf("no .debug_frame FDE kept: %+v", tab.Stats)
			}
			for _, fn := range []string{"leaf", "a", "b", "main"} {
				addr := symbolAddr(t, path, fn)
				if r, ok := tab.Lookup(addr); !ok || r.Rule != RuleRSP {
					t.Errorf("%s at %#x: row %+v, want an rsp rule from .debug_frame", fn, addr, r)
				}
			}
		})
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			path := tc.path(t)
			tab := compileFile(t, path)
			ref := readelfRows(t, path, ".eh_frame")
			if len(ref) == 0 {
				t.Fatalf("readelf printed no rows for %s", path)
			}
			checked, plt, deref, cfaReg := checkRows(t, tab, ref)
			t.Logf("%s: %d readelf rows checked, %d PLT rows, %d *(rsp+N)+K, %d reg+N; table %d rows (%d bytes) from %d FDEs, %d before dedupe; rules %v",
				filepath.Base(path), checked, plt, deref, cfaReg, len(tab.Rows), tab.Bytes(), tab.Stats.FDEs, tab.Stats.RowsBeforeDedupe, tab.Stats.Rules)
			if deref < tc.deref || cfaReg < tc.cfaReg {
				t.Errorf("%d rows *(rsp+N)+K, %d reg+N; want at least %d, %d", deref, cfaReg, tc.deref, tc.cfaReg)
			}
		})
	}
}

// TestBias: lld's layout puts the text segment's first page in the
// read-only one's last: the mapping's offset names the segment.
func TestBias(t *testing.T) {
	tab := &Table{Loads: []Load{
		{Offset: 0, Vaddr: 0, FileSize: 0x12dcc},
		{Offset: 0x12dd0, Vaddr: 0x13dd0, FileSize: 0x3d720},
	}}
	cases := []struct {
		name          string
		start, offset uint64
		want          uint64
	}{
		{"read-only", 0x55d6f8e6a000, 0, 0x55d6f8e6a000},
		{"text sharing a page", 0x55d6f8e7d000, 0x12000, 0x55d6f8e7d000 - 0x13000},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := tab.Bias(tc.start, tc.offset)
			if !ok || got != tc.want {
				t.Fatalf("bias %#x %v, want %#x", got, ok, tc.want)
			}
		})
	}
}

// TestCompileConcurrent: compiles share a pool of scratch rows (build); a
// table must not keep a buffer another compile reuses.
func TestCompileConcurrent(t *testing.T) {
	paths := []string{"/lib/x86_64-linux-gnu/libc.so.6", python3Path(t), "/usr/bin/xz"}
	want := make([]*Table, len(paths))
	for i, p := range paths {
		want[i] = compileFile(t, p)
	}
	got := make([][]*Table, 4)
	var wg sync.WaitGroup
	for g := range got {
		got[g] = make([]*Table, len(paths))
		wg.Go(func() {
			for i, p := range paths {
				data, err := os.ReadFile(p)
				if err != nil {
					t.Error(err)
					return
				}
				if got[g][i], err = Compile(bytes.NewReader(data), int64(len(data)), DefaultLimits); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	for g := range got {
		for i, p := range paths {
			if got[g][i] == nil || !slices.Equal(got[g][i].Rows, want[i].Rows) {
				t.Errorf("goroutine %d: %s: rows differ from a compile alone", g, p)
			}
		}
	}
}

// TestSortByStart: FDEs of equal start (told apart by their end) end in the
// order slices.SortFunc gives the FDEs themselves, which the rows depend on.
func TestSortByStart(t *testing.T) {
	for _, n := range []int{0, 1, 2, 12, 13, 50, 1000, 45201} {
		rng := rand.New(rand.NewPCG(uint64(n), 1))
		fdes := make([]fde, n)
		for i := range fdes {
			start := rng.Uint64N(uint64(n/3 + 1))
			fdes[i] = fde{start: start, end: start + uint64(i) + 1}
		}
		want := slices.Clone(fdes)
		slices.SortFunc(want, func(a, b fde) int { return cmp.Compare(a.start, b.start) })
		sortByStart(fdes)
		if !slices.EqualFunc(fdes, want, func(a, b fde) bool { return a.start == b.start && a.end == b.end }) {
			t.Errorf("%d FDEs: order differs from slices.SortFunc", n)
		}
	}
}
