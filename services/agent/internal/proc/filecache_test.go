package proc

import (
	"debug/elf"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/stackstream/stackstream/pkg/testenv"
	"github.com/stackstream/stackstream/services/agent/internal/workload"
)

// TestFileCache maps two real binaries: each is read once however often it
// is asked for, a read error is kept like a result, and past its bound the
// cache reads again.
func TestFileCache(t *testing.T) {
	testenv.Root(t)
	fs := FS{Root: "/proc"}
	bin := t.TempDir()
	if err := os.Mkdir(filepath.Join(bin, "b"), 0o755); err != nil {
		t.Fatal(err)
	}
	pidA, mA := exeMapping(t, workload.BuildC(t, bin, "a", false))
	pidB, mB := exeMapping(t, workload.BuildC(t, filepath.Join(bin, "b"), "b", false))

	reads := 0
	bad := errors.New("not wanted")
	read := func(r io.ReaderAt, size int64) (int64, error) {
		reads++
		var magic [4]byte
		_, err := r.ReadAt(magic[:], 0)
		return size, err
	}
	c := NewFileCache(2, read)
	for range 3 {
		size, err := c.Get(fs, pidA, mA, true)
		if err != nil || size == 0 {
			t.Fatalf("Get = %d, %v", size, err)
		}
	}
	if _, err := c.Get(fs, pidB, mB, false); err != nil {
		t.Fatal(err)
	}
	if reads != 2 {
		t.Fatalf("A three times and B once read %d files, want 2", reads)
	}

	failed := 0
	failing := NewFileCache(1, func(r io.ReaderAt, size int64) (int, error) { failed++; return 0, bad })
	for range 2 {
		if _, err := failing.Get(fs, pidA, mA, true); !errors.Is(err, bad) {
			t.Fatalf("Get = %v, want %v", err, bad)
		}
	}
	if failed != 1 {
		t.Fatalf("a failing file read %d times, want once", failed)
	}

	reads = 0
	one := NewFileCache(1, read)
	for _, p := range []struct {
		pid int
		m   Mapping
	}{{pidA, mA}, {pidB, mB}, {pidA, mA}} {
		if _, err := one.Get(fs, p.pid, p.m, true); err != nil {
			t.Fatal(err)
		}
	}
	if reads != 3 {
		t.Fatalf("%d reads through a cache of one file for A, B, A; want 3", reads)
	}
}

func TestLoadBias(t *testing.T) {
	loads := []elf.ProgHeader{
		{Type: elf.PT_LOAD, Off: 0, Vaddr: 0, Filesz: 0x1000},
		{Type: elf.PT_LOAD, Off: 0x1000, Vaddr: 0x401000, Filesz: 0x2000},
	}
	bias, ok := LoadBias(loads, Mapping{Start: 0x7f0000001000, Offset: 0x1000})
	if !ok || bias != 0x7f0000001000-0x401000 {
		t.Fatalf("LoadBias = %#x, %v", bias, ok)
	}
	if _, ok := LoadBias(loads, Mapping{Start: 0x7f0000005000, Offset: 0x5000}); ok {
		t.Fatal("an offset past every PT_LOAD has a bias")
	}
}
