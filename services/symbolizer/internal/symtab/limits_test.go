package symtab

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/stackstream/stackstream/pkg/testenv"
	"github.com/stackstream/stackstream/services/symbolizer/internal/testbin"
)

// TestCompressedSectionBomb reads a real debug file to which objcopy added
// a zlib-compressed DWARF section of 256 MiB of zeros (about 256 KB in the
// file). debug/elf would inflate it to the size it states; within the
// limits it is not read, the error names it and the variable, and the
// symbol table still names the functions.
func TestCompressedSectionBomb(t *testing.T) {
	testbin.Need(t, "objcopy")
	dir := t.TempDir()
	c := testbin.BuildC(t, dir, "cprog")
	zeros := filepath.Join(dir, "zeros")
	f, err := os.Create(zeros)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(256 << 20); err != nil {
		t.Fatal(err)
	}
	f.Close()
	plain, bomb := filepath.Join(dir, "plain.debug"), filepath.Join(dir, "bomb.debug")
	testenv.Run(t, dir, nil, "objcopy", "--add-section", ".debug_junk="+zeros, c.DebugPath, plain)
	testenv.Run(t, dir, nil, "objcopy", "--compress-debug-sections=zlib", plain, bomb)
	os.Remove(zeros)
	os.Remove(plain)
	st, err := os.Stat(bomb)
	if err != nil {
		t.Fatal(err)
	}
	addr, _ := c.Symbol(t, "leaf_work")

	for _, tc := range []struct {
		name    string
		lim     Limits
		wantVar string
	}{
		{"per section", DefaultLimits(), "STACKSTREAM_SYMBOLIZER_MAX_SECTION_BYTES"},
		{"per file", Limits{MaxSectionBytes: 1 << 30, MaxFileBytes: 64 << 20}, "STACKSTREAM_SYMBOLIZER_MAX_ELF_BYTES"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, err := os.Open(bomb)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			tab, err := FromELFLimits(f, c.BuildID, "test", tc.lim)
			runtime.ReadMemStats(&after)
			if err != nil {
				t.Fatal(err)
			}
			alloc := after.TotalAlloc - before.TotalAlloc
			t.Logf("%d byte file: %d bytes allocated; skipped: %v", st.Size(), alloc, tab.Skipped)
			if st.Size() > 1<<20 || alloc > 32<<20 {
				t.Fatalf("reading a %d byte file allocated %d bytes", st.Size(), alloc)
			}
			if !errors.Is(tab.Skipped, ErrSectionTooLarge) || !strings.Contains(tab.Skipped.Error(), ".debug_junk") || !strings.Contains(tab.Skipped.Error(), tc.wantVar) {
				t.Fatalf("skipped: %v", tab.Skipped)
			}
			if fr := tab.Lookup(addr + 4); len(fr) == 0 || fr[0].Function != "leaf_work" {
				t.Fatalf("leaf_work from the symbol table: %+v", fr)
			}
		})
	}
}
