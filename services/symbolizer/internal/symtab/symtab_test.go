package symtab

import (
	"debug/elf"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stackstream/stackstream/schemas/debuginfo"
	"github.com/stackstream/stackstream/services/symbolizer/internal/testbin"
)

func open(t *testing.T, path, buildID string) *Table {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tab, err := FromELF(f, buildID, "test")
	if err != nil {
		t.Fatalf("FromELF(%s): %v", path, err)
	}
	return tab
}

func render(frames []Frame) []string {
	out := make([]string, 0, len(frames))
	for _, f := range frames {
		file := f.File
		if file != "" {
			file = filepath.Base(file)
		}
		out = append(out, fmt.Sprintf("%s %s:%d", f.Function, file, f.Line))
	}
	return out
}

// TestStrippedCWithDebugFile resolves addresses of a stripped PIE through its
// separate debug file, whose program headers lost their file offsets, and
// compares every instruction's frames with binutils' addr2line.
func TestStrippedCWithDebugFile(t *testing.T) {
	b := testbin.BuildC(t, t.TempDir(), "cprog")
	f, err := os.Open(b.Path)
	if err != nil {
		t.Fatal(err)
	}
	_, err = FromELF(f, b.BuildID, "test")
	f.Close()
	if !errors.Is(err, ErrNoSymbols) {
		t.Fatalf("stripped binary: got %v, want ErrNoSymbols", err)
	}

	tab := open(t, b.DebugPath, b.BuildID)
	base := b.Base(t)
	start, _, offset := b.Mapping(base)
	for _, fn := range []string{"leaf_work", "middle"} {
		addr, size := b.Symbol(t, fn)
		for _, d := range []uint64{0, size / 3, size / 2, size - 1} {
			vaddr, ok := tab.Vaddr(b.RuntimeAddr(addr+d, base), start, offset)
			if !ok || vaddr != addr+d {
				t.Fatalf("%s+%d: Vaddr = %#x, %v; want %#x", fn, d, vaddr, ok, addr+d)
			}
			got := render(tab.Lookup(vaddr))
			want := testbin.Addr2Line(t, b.DebugPath, vaddr)
			if strings.Join(got, "|") != strings.Join(want, "|") {
				t.Errorf("%s+%d (%#x): got %q, addr2line says %q", fn, d, vaddr, got, want)
			}
			if !strings.HasPrefix(got[len(got)-1], fn+" cprog.c:") {
				t.Errorf("%s+%d: outermost frame %q", fn, d, got[len(got)-1])
			}
		}
	}
}

// TestCXXInlineAndDemangle checks that an always_inline member function shows
// as its own frame above its caller, with demangled names, over every
// address of the caller.
func TestCXXInlineAndDemangle(t *testing.T) {
	b := testbin.BuildCXX(t, t.TempDir(), "cxxprog")
	tab := open(t, b.Path, b.BuildID)
	addr, size := b.Symbol(t, "_ZN3geo5sweepERKNS_4GridEi")
	inlined := 0
	for d := uint64(0); d < size; d++ {
		frames := tab.Lookup(addr + d)
		got := render(frames)
		want := testbin.Addr2Line(t, b.Path, addr+d)
		if strings.Join(got, "|") != strings.Join(want, "|") {
			t.Errorf("sweep+%d: got %q, addr2line says %q", d, got, want)
		}
		if frames[len(frames)-1].Function != "geo::sweep" || frames[len(frames)-1].SystemName != "_ZN3geo5sweepERKNS_4GridEi" {
			t.Fatalf("sweep+%d: outermost %+v", d, frames[len(frames)-1])
		}
		if len(frames) == 2 && frames[0].Function == "geo::Grid::cell" {
			inlined++
			if frames[1].File == "" || frames[1].Line == 0 {
				t.Errorf("sweep+%d: caller frame lacks the call site: %+v", d, frames[1])
			}
		}
	}
	if inlined == 0 {
		t.Fatal("no address of geo::sweep resolved to the inlined geo::Grid::cell")
	}
}

// TestStrippedGoPclntab resolves a -s -w Go binary from pclntab alone.
func TestStrippedGoPclntab(t *testing.T) {
	b := testbin.BuildGo(t, t.TempDir(), "goprog")
	tab := open(t, b.Path, b.BuildID)
	if len(tab.syms) != 0 || len(tab.subs) != 0 {
		t.Fatalf("stripped Go binary still has %d symbols, %d DWARF functions", len(tab.syms), len(tab.subs))
	}
	ref := open(t, b.DebugPath, b.BuildID) // unstripped: DWARF
	for _, fn := range []string{"main.spin", "main.outer"} {
		addr, size := b.Symbol(t, fn)
		for _, d := range []uint64{0, size / 2, size - 1} {
			vaddr, ok := tab.Vaddr(b.RuntimeAddr(addr+d, 0), b.Exec.Vaddr&^4095, b.Exec.Off&^4095)
			if !ok || vaddr != addr+d {
				t.Fatalf("%s+%d: Vaddr = %#x, %v", fn, d, vaddr, ok)
			}
			got := tab.Lookup(vaddr)
			if len(got) != 1 || got[0].Function != fn || !strings.HasSuffix(got[0].File, "main.go") || got[0].Line < 9 || got[0].Line > 19 {
				t.Fatalf("%s+%d: got %+v", fn, d, got)
			}
			want := ref.Lookup(vaddr)
			if w := want[len(want)-1]; w.Function != fn {
				t.Fatalf("%s+%d: DWARF reference says %+v", fn, d, want)
			}
			if w := want[0]; w.Line != got[0].Line {
				t.Errorf("%s+%d: pclntab line %d, DWARF line %d", fn, d, got[0].Line, w.Line)
			}
		}
	}
}

// TestFromDebuginfo resolves from the topic format the agent publishes.
func TestFromDebuginfo(t *testing.T) {
	f := &debuginfo.File{
		BuildID:  "abc",
		Kind:     debuginfo.KindSymbols,
		Segments: []debuginfo.Segment{{Offset: 0x1000, Vaddr: 0x401000, Filesz: 0x2000}},
		Symbols: []debuginfo.Symbol{
			{Addr: 0x401000, Size: 0x100, Name: "_ZN3foo3barEv"},
			{Addr: 0x401200, Name: "_RNvCs1234_5crate4main"},
			{Addr: 0x401400, Size: 0x10, Name: "plain_c"},
		},
		Lines: []debuginfo.Line{{Addr: 0x401000, File: "foo.cc", Line: 10}, {Addr: 0x401010, File: "foo.cc", Line: 11}},
	}
	tab := FromDebuginfo(f, "topic")
	tests := []struct {
		fileOff uint64
		want    string
	}{
		{0x1000, "foo::bar foo.cc:10"},
		{0x1020, "foo::bar foo.cc:11"},
		{0x1250, "crate::main :0"},
		{0x1405, "plain_c :0"},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprintf("%#x", tc.fileOff), func(t *testing.T) {
			v, ok := tab.Vaddr(0x7f0000000000+tc.fileOff, 0x7f0000000000, 0)
			if !ok {
				t.Fatal("no vaddr")
			}
			got := render(tab.Lookup(v))
			if len(got) != 1 || got[0] != tc.want {
				t.Fatalf("got %q, want %q", got, tc.want)
			}
		})
	}
	for _, off := range []uint64{0x1100, 0x1410, 0x3000} {
		if v, ok := tab.Vaddr(off, 0, 0); ok && tab.Lookup(v) != nil {
			t.Errorf("file offset %#x resolved outside every symbol", off)
		}
	}
}

func TestDemangle(t *testing.T) {
	tests := map[string]string{
		"_ZN3geo5sweepERKNS_4GridEi":                      "geo::sweep",
		"_ZNSt6vectorIiSaIiEE9push_backEOi":               "std::vector<int, std::allocator<int> >::push_back",
		"_ZN4core3ptr13drop_in_place17h0123456789abcdefE": "core::ptr::drop_in_place",
		"main.main":    "main.main",
		"leaf_work":    "leaf_work",
		"_Z_not_valid": "_Z_not_valid",
	}
	for in, want := range tests {
		if got := Demangle(in); got != want {
			t.Errorf("Demangle(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestELFHeaderSanity guards the test binaries' assumption that the debug
// file's executable segment lost its file offset (else the debug-file path
// of Vaddr is not exercised).
func TestELFHeaderSanity(t *testing.T) {
	b := testbin.BuildC(t, t.TempDir(), "cprog")
	ef, err := elf.Open(b.DebugPath)
	if err != nil {
		t.Fatal(err)
	}
	defer ef.Close()
	for _, p := range ef.Progs {
		if p.Type == elf.PT_LOAD && p.Flags&elf.PF_X != 0 && p.Filesz != 0 {
			t.Skip("this objcopy keeps file sizes in debug files")
		}
	}
}

// TestConcurrentLookups shares one table between goroutines, as instances
// of the chain do; run with -race.
func TestConcurrentLookups(t *testing.T) {
	b := testbin.BuildCXX(t, t.TempDir(), "cxxprog")
	tab := open(t, b.Path, b.BuildID)
	addr, size := b.Symbol(t, "_ZN3geo5sweepERKNS_4GridEi")
	want := render(tab.Lookup(addr))
	done := make(chan []string, 8)
	for g := 0; g < 8; g++ {
		go func() {
			var last []string
			for i := 0; i < 200; i++ {
				for d := uint64(0); d < size; d += 3 {
					tab.Lookup(addr + d)
				}
				last = render(tab.Lookup(addr))
			}
			done <- last
		}()
	}
	for g := 0; g < 8; g++ {
		if got := <-done; strings.Join(got, "|") != strings.Join(want, "|") {
			t.Fatalf("got %q, want %q", got, want)
		}
	}
}
