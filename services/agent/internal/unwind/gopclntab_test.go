package unwind

import (
	"debug/elf"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

const goProgram = `package main

var sink uint64

//go:noinline
func leaf(n uint64) uint64 {
	var x uint64
	for i := uint64(0); i < n; i++ {
		x += i * i
	}
	return x
}

//go:noinline
func middle(n uint64) uint64 {
	var buf [32]uint64
	for i := range buf {
		buf[i] = leaf(n + uint64(i))
	}
	return buf[n%32]
}

func main() {
	for {
		sink += middle(100000)
	}
}
`

// buildGo builds goProgram with the given linker flags (and environment,
// such as GOARCH=arm64).
func buildGo(t *testing.T, ldflags string, env ...string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module prog\n\ngo 1.22\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(goProgram), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "prog")
	cmd := exec.Command("go", "build", "-ldflags="+ldflags, "-o", bin, ".")
	cmd.Dir = dir
	cmd.Env = append(append(os.Environ(), "GOWORK=off", "CGO_ENABLED=0", "GOFLAGS=-mod=mod"), env...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// TestGoPclntab: a stripped Go binary (no .debug_frame) gets its rows from
// .gopclntab, and they give the CFA the same build's .debug_frame gives at
// every address it describes.
func TestGoPclntab(t *testing.T) {
	bin := buildGo(t, "")
	withDWARF := compileFile(t, bin)
	stripped := compileFile(t, buildGo(t, "-s -w"))
	if len(stripped.Rows) == 0 {
		t.Fatal("no rows from .gopclntab")
	}
	checked, differ := 0, 0
	for i, r := range withDWARF.Rows {
		if r.Rule != RuleRSP {
			continue
		}
		// Every address of the row, sampled at its start and end.
		pcs := []uint64{uint64(r.PC)}
		if i+1 < len(withDWARF.Rows) && withDWARF.Rows[i+1].PC > r.PC+1 {
			pcs = append(pcs, uint64(withDWARF.Rows[i+1].PC)-1)
		}
		for _, pc := range pcs {
			got, ok := stripped.Lookup(pc)
			if got.Rule == RuleEnd {
				continue // runtime.goexit, mstart, rt0_go: roots by design
			}
			checked++
			if !ok || got.Rule != RuleRSP || got.Offset != r.Offset {
				differ++
				if differ <= 10 {
					t.Errorf("%#x: .debug_frame CFA rsp+%d, .gopclntab %+v", pc, r.CFAOffset(), got)
				}
			}
		}
	}
	t.Logf("%d addresses checked, %d differ; .debug_frame %d rows, .gopclntab %d rows (%d bytes), rules %v",
		checked, differ, len(withDWARF.Rows), len(stripped.Rows), stripped.Bytes(), stripped.Stats.Rules)
	if checked < 1000 || differ*1000 > checked {
		t.Fatalf("%d of %d addresses differ", differ, checked)
	}
	if stripped.Stats.Rules[RuleEnd] == 0 {
		t.Errorf("no end-of-stack row (runtime.goexit): rules %v", stripped.Stats.Rules)
	}
	// With DWARF too, runtime.mstart and goexit end the stack: .debug_frame
	// alone gave mstart a return address, and a sysmon thread's walk went
	// on past it into garbage.
	for _, name := range []string{"runtime.mstart", "runtime.goexit"} {
		if r, ok := withDWARF.Lookup(goSymbol(t, bin, name)); !ok || r.Rule != RuleEnd {
			t.Errorf("%s: row %+v (found %v), want the end of the stack", name, r, ok)
		}
	}
}

// goSymbol is the address of a function of a Go binary.
func goSymbol(t *testing.T, bin, name string) uint64 {
	t.Helper()
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	syms, err := f.Symbols()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range syms {
		if s.Name == name || s.Name == name+".abi0" {
			return s.Value
		}
	}
	t.Fatalf("%s not in %s", name, bin)
	return 0
}

// FuzzPcsp: hostile pcsp tables decode to instructions the interpreter
// runs, or to a sentinel error.
func FuzzPcsp(f *testing.F) {
	f.Add([]byte{0x02, 0x01, 0x10, 0x04, 0x0f, 0x20, 0x00}, uint16(64))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0x0f, 0x01}, uint16(8))
	normal := &cie{codeAlign: 1, dataAlign: -8, raReg: regRA, initial: []byte{cfaDefCFA, regRSP, 8, cfaOffset | regRA, 1}}
	f.Fuzz(func(t *testing.T, b []byte, size uint16) {
		if size == 0 {
			return
		}
		ins, err := pcspInstructions(nil, b, 0, uint64(size), ArchX86_64, 1)
		if err != nil {
			if !errors.Is(err, ErrInvalid) && !errors.Is(err, ErrUnsupported) && !errors.Is(err, ErrTooLarge) {
				t.Fatalf("error %v is not a sentinel", err)
			}
			return
		}
		fd := fde{cie: normal, start: 0x1000, end: 0x1000 + uint64(size), instructions: ins}
		var stack []frameState
		if err := runFDE(&fd, DefaultLimits, &stack, func(Row) error { return nil }); err != nil {
			t.Fatalf("instructions from a decoded pcsp table fail: %v", err)
		}
	})
}
