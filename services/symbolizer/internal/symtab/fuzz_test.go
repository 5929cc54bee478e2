package symtab

import (
	"bytes"
	"os"
	"testing"

	"github.com/stackstream/stackstream/services/symbolizer/internal/testbin"
)

// FuzzFromELF feeds mutated ELF files (seeded with a real debug file) to
// the table builder and looks the result up: no panic, no hang.
func FuzzFromELF(f *testing.F) {
	b := testbin.BuildC(f, f.TempDir(), "seed")
	for _, path := range []string{b.Path, b.DebugPath} {
		data, err := os.ReadFile(path)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte("\x7fELF"))
	f.Fuzz(func(t *testing.T, data []byte) {
		tab, err := FromELF(bytes.NewReader(data), "ab", "fuzz")
		if err != nil {
			return
		}
		for _, a := range []uint64{0, 0x1000, 0x1139, 0x1150, 1 << 40} {
			if v, ok := tab.Vaddr(a, 0, 0); ok {
				tab.Lookup(v)
			}
			tab.Lookup(a)
		}
	})
}
