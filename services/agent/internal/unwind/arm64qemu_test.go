package unwind

import (
	"debug/elf"
	"encoding/binary"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/stackstream/stackstream/services/agent/internal/proc"
)

// arm64Snapshot is what testdata/arm64snap.c wrote: its registers at the
// capture, a copy of its stack from sp, and its maps.
type arm64Snapshot struct {
	regs  arm64Regs
	base  uint64
	stack []byte
	maps  []proc.Mapping
}

func (s *arm64Snapshot) mem(addr uint64, n int) ([]byte, bool) {
	if addr < s.base || addr-s.base+uint64(n) > uint64(len(s.stack)) {
		return nil, false
	}
	return s.stack[addr-s.base : addr-s.base+uint64(n)], true
}

// runArm64Snap builds testdata/arm64snap.c with flags and runs it under
// qemu-aarch64-static in mode (plain, signal).
func runArm64Snap(t *testing.T, mode string, flags ...string) (*arm64Snapshot, string) {
	t.Helper()
	qemu := needTool(t, "qemu-aarch64-static")
	src, err := os.ReadFile("testdata/arm64snap.c")
	if err != nil {
		t.Fatal(err)
	}
	bin := buildArm64(t, arm64CC, string(src), flags...)
	out := filepath.Join(t.TempDir(), "snapshot")
	// -L: the dynamic loader and libc of Debian's arm64 cross packages.
	if b, err := exec.Command(qemu, "-L", arm64Sysroot, bin, out, mode).CombinedOutput(); err != nil {
		t.Fatalf("qemu %s %s: %v\n%s", bin, mode, err, b)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) < 48 {
		t.Fatalf("snapshot of %d bytes", len(b))
	}
	le := binary.LittleEndian
	s := &arm64Snapshot{regs: arm64Regs{pc: le.Uint64(b), sp: le.Uint64(b[8:]), fp: le.Uint64(b[16:]), lr: le.Uint64(b[24:])}, base: le.Uint64(b[32:])}
	n := le.Uint64(b[40:])
	if n == 0 || n > uint64(len(b)-48) {
		t.Fatalf("stack copy of %d bytes in a %d-byte snapshot", n, len(b))
	}
	s.stack = b[48 : 48+n]
	if s.maps, err = proc.ParseMaps(b[48+n:]); err != nil {
		t.Fatalf("maps: %v", err)
	}
	return s, bin
}

// arm64Image is one executable mapping with its table and symbols.
type arm64Image struct {
	start, limit, bias uint64
	path               string
	tab                *Table
	syms               []elf.Symbol // functions, by address
}

func loadArm64Images(t *testing.T, maps []proc.Mapping) []arm64Image {
	t.Helper()
	var images []arm64Image
	for _, m := range maps {
		if !strings.HasPrefix(m.Path, "/") { // ParseMaps keeps executable mappings only
			continue
		}
		tab := compileArm64File(t, m.Path)
		bias, ok := tab.Bias(m.Start, m.Offset)
		if !ok {
			t.Fatalf("%s: no PT_LOAD at offset %#x", m.Path, m.Offset)
		}
		f, err := elf.Open(m.Path)
		if err != nil {
			t.Fatal(err)
		}
		syms, _ := f.Symbols()
		dyn, _ := f.DynamicSymbols()
		f.Close()
		var funcs []elf.Symbol
		for _, s := range append(syms, dyn...) {
			if elf.ST_TYPE(s.Info) == elf.STT_FUNC && s.Value != 0 {
				funcs = append(funcs, s)
			}
		}
		sort.Slice(funcs, func(i, j int) bool { return funcs[i].Value < funcs[j].Value })
		images = append(images, arm64Image{start: m.Start, limit: m.Limit, bias: bias, path: m.Path, tab: tab, syms: funcs})
	}
	return images
}

func findImage(images []arm64Image, pc uint64) *arm64Image {
	for i := range images {
		if pc >= images[i].start && pc < images[i].limit {
			return &images[i]
		}
	}
	return nil
}

// name is the function at pc: its symbol, or "?" past every symbol's end.
func (im *arm64Image) name(pc uint64) string {
	v := pc - im.bias
	i := sort.Search(len(im.syms), func(i int) bool { return im.syms[i].Value > v }) - 1
	if i < 0 || (im.syms[i].Size != 0 && v >= im.syms[i].Value+im.syms[i].Size) {
		return "?"
	}
	return im.syms[i].Name
}

// TestArm64WalkSnapshot runs a cross-built program under qemu that copies
// its stack at a known call chain and walks the copy with the tables of the
// files it maps (the program, Debian's arm64 libc and ld.so), as the BPF
// walk would: the chain from the leaf to _start, and nothing after it.
func TestArm64WalkSnapshot(t *testing.T) {
	deep := []string{"leaf", "deep", "deep", "deep", "deep", "deep", "deep"}
	cases := []struct {
		name  string
		mode  string
		flags []string
		want  []string // the functions from the leaf, "libc" for any frame in libc.so.6, then _start
	}{
		{"O2-omit-frame-pointer", "plain", []string{"-O2", "-fomit-frame-pointer"},
			append(append([]string{}, deep...), "big", "b", "a", "main", "libc", "libc", "_start")},
		{"O2-pac-ret", "plain", []string{"-O2", "-fomit-frame-pointer", "-mbranch-protection=pac-ret"},
			append(append([]string{}, deep...), "big", "b", "a", "main", "libc", "libc", "_start")},
		{"O0-frame-pointer", "plain", []string{"-O0", "-fno-omit-frame-pointer"},
			append(append([]string{}, deep...), "big", "b", "a", "main", "libc", "libc", "_start")},
		{"signal-pac-ret", "signal", []string{"-O2", "-fomit-frame-pointer", "-mbranch-protection=pac-ret"},
			[]string{"leaf", "hchain", "handler", "restorer", "spin", "main", "libc", "libc", "_start"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			snap, bin := runArm64Snap(t, tc.mode, tc.flags...)
			images := loadArm64Images(t, snap.maps)
			rows := func(pc uint64) (Row, bool) {
				im := findImage(images, pc)
				if im == nil {
					return Row{}, false
				}
				return im.tab.Lookup(pc - im.bias)
			}
			frames, end, err := walkArm64(snap.regs, snap.mem, rows, 128)
			var got []string
			signed := 0
			for _, f := range frames {
				im := findImage(images, f.pc)
				switch {
				case im == nil:
					got = append(got, "?")
				case filepath.Base(im.path) == "libc.so.6":
					got = append(got, "libc")
				case im.path == bin:
					got = append(got, im.name(f.pc))
				default:
					got = append(got, filepath.Base(im.path)+":"+im.name(f.pc))
				}
				t.Logf("%#x %-10s %v signed %v", f.pc, got[len(got)-1], f.row, f.signed)
				if f.signed {
					signed++
				}
			}
			// qemu's default CPU has pointer authentication: pac-ret signs
			// the return addresses saved by the program's functions.
			if pac := strings.Contains(strings.Join(tc.flags, " "), "pac-ret"); pac != (signed > 0) {
				t.Errorf("%d signed return addresses with flags %v", signed, tc.flags)
			}
			if err != nil || !end {
				t.Fatalf("walk stopped after %d frames, end %v: %v", len(frames), end, err)
			}
			if strings.Join(got, " <- ") != strings.Join(tc.want, " <- ") {
				t.Fatalf("chain\n %s\nwant\n %s", strings.Join(got, " <- "), strings.Join(tc.want, " <- "))
			}
		})
	}
}
