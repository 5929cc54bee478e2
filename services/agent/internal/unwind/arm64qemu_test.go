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
	src, err := os.ReadFile("testdata/arm64snap.c")
	if err != nil {
		t.Fatal(err)
	}
	bin := buildArm64(t, arm64CC, string(src), flags...)
	// -L: the dynamic loader and libc of Debian's arm64 cross packages.
	return runArm64(t, exec.Command(needTool(t, "qemu-aarch64-static"), "-L", arm64Sysroot, bin), mode), bin
}

// runArm64 runs cmd with the snapshot's path and mode as arguments and
// reads the snapshot.
func runArm64(t *testing.T, cmd *exec.Cmd, mode string) *arm64Snapshot {
	t.Helper()
	out := filepath.Join(t.TempDir(), "snapshot")
	cmd.Args = append(cmd.Args, out, mode)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%v: %v\n%s", cmd.Args, err, b)
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
	return s
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

// dropTable empties the table of the image named name ("" none): its frames
// step with frame pointers, as code without call-frame information does.
func dropTable(t *testing.T, images []arm64Image, name string) {
	t.Helper()
	if name == "" {
		return
	}
	for i := range images {
		if filepath.Base(images[i].path) == name {
			images[i].tab = &Table{Arch: ArchArm64, Loads: images[i].tab.Loads}
			return
		}
	}
	t.Fatalf("no %s mapped", name)
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
		want  []string // the functions from the leaf, "libc" for frames in libc.so.6, then _start
		drop  string   // a library whose table is dropped: walked with frame pointers
	}{
		{"O2-omit-frame-pointer", "plain", []string{"-O2", "-fomit-frame-pointer"},
			append(append([]string{}, deep...), "big", "b", "dyn", "a", "main", "libc", "_start"), ""},
		{"O2-pac-ret", "plain", []string{"-O2", "-fomit-frame-pointer", "-mbranch-protection=pac-ret"},
			append(append([]string{}, deep...), "big", "b", "dyn", "a", "main", "libc", "_start"), ""},
		{"O0-frame-pointer", "plain", []string{"-O0", "-fno-omit-frame-pointer"},
			append(append([]string{}, deep...), "big", "b", "dyn", "a", "main", "libc", "_start"), ""},
		{"signal-pac-ret", "signal", []string{"-O2", "-fomit-frame-pointer", "-mbranch-protection=pac-ret"},
			[]string{"leaf", "hchain", "handler", "restorer", "spin", "main", "libc", "_start"}, ""},
		// Frame records in libc (Debian builds it with them) carry the walk
		// to main, whose row from sp is then not used: its record is.
		{"qsort", "qsort", []string{"-O2"},
			[]string{"leaf", "cmp", "libc", "main", "libc", "_start"}, ""},
		{"qsort-libc-frame-pointers", "qsort", []string{"-O2"},
			[]string{"leaf", "cmp", "libc", "main", "libc", "_start"}, "libc.so.6"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			snap, bin := runArm64Snap(t, tc.mode, tc.flags...)
			images := loadArm64Images(t, snap.maps)
			dropTable(t, images, tc.drop)
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
					if len(got) == 0 || got[len(got)-1] != "libc" {
						got = append(got, "libc")
					}
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

// arm64GoSnapshot builds testdata/arm64snapgo with its symbols and
// stripped, and runs the first under qemu: the same code at the same
// addresses in both.
func arm64GoSnapshot(t *testing.T) (snap *arm64Snapshot, stripped string) {
	t.Helper()
	qemu := needTool(t, "qemu-aarch64-static")
	build := func(ldflags string) string {
		bin := filepath.Join(t.TempDir(), "snapgo")
		cmd := exec.Command("go", "build", "-ldflags="+ldflags, "-o", bin, ".")
		cmd.Dir = "testdata/arm64snapgo"
		cmd.Env = append(os.Environ(), "GOARCH=arm64", "CGO_ENABLED=0", "GOWORK=off", "GOFLAGS=-mod=mod")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go build: %v\n%s", err, out)
		}
		return bin
	}
	cmd := exec.Command(qemu, build(""))
	cmd.Env = append(os.Environ(), "GOGC=off")
	return runArm64(t, cmd, "plain"), build("-s -w")
}

// TestArm64WalkSnapshotGo: an arm64 Go program (testdata/arm64snapgo) copies
// its goroutine's stack at main.leaf <- main.mid <- main.main under qemu; the
// walk with its .debug_frame rows, and with the stripped build's .gopclntab
// rows, reaches runtime.goexit.
func TestArm64WalkSnapshotGo(t *testing.T) {
	snap, stripped := arm64GoSnapshot(t)
	names := loadArm64Images(t, snap.maps)
	if len(names) != 1 {
		t.Fatalf("%d executable mappings, want the static program only: %+v", len(names), snap.maps)
	}
	im := names[0]
	want := "main.snap.abi0 <- main.leaf <- main.mid <- main.main <- runtime.main <- runtime.goexit.abi0"
	for _, tc := range []struct {
		name string
		tab  *Table
	}{{"debug_frame", im.tab}, {"gopclntab", compileArm64File(t, stripped)}} {
		t.Run(tc.name, func(t *testing.T) {
			rows := func(pc uint64) (Row, bool) {
				if pc < im.start || pc >= im.limit {
					return Row{}, false
				}
				return tc.tab.Lookup(pc - im.bias)
			}
			frames, end, err := walkArm64(snap.regs, snap.mem, rows, 128)
			var got []string
			for _, f := range frames {
				got = append(got, im.name(f.pc))
				t.Logf("%#x %-22s %v", f.pc, got[len(got)-1], f.row)
			}
			if err != nil || !end {
				t.Fatalf("walk stopped after %d frames, end %v: %v", len(frames), end, err)
			}
			if strings.Join(got, " <- ") != want {
				t.Fatalf("chain\n %s\nwant\n %s", strings.Join(got, " <- "), want)
			}
			if tc.name != "gopclntab" {
				return // .debug_frame does not say where Go saves x29
			}
			// Go points x29 at sp-8 in every frame that has one: the x29
			// recovered from each frame record says where its caller's is.
			for _, f := range frames[1 : len(frames)-1] {
				if !f.fpOK || f.fp != f.sp-8 {
					t.Errorf("%s: x29 %#x (known %v), sp %#x: want sp-8", im.name(f.pc), f.fp, f.fpOK, f.sp)
				}
			}
		})
	}
}
