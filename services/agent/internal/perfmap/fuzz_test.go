package perfmap

import (
	"testing"
)

// FuzzParse: any content parses without panicking, within the bounds, and
// what it allocates is bounded by the input's size, not by what it claims.
func FuzzParse(f *testing.F) {
	f.Add([]byte("0x00007f4b7cec7620 0x00000000000000b8 long Hot.hotJavaMethod(long)\n"))
	f.Add([]byte("7f8298005b80 138 JS:^hotJsFunction /tmp/jx/hot.js:1:23\n1000 ffffffffffff x\n"))
	f.Add([]byte("ffffffffffffffff 1 a\n0 0 b\n\n\n 1 2 3"))
	lim := Limits{MaxFileBytes: 1 << 16, MaxReadBytes: 1 << 16, MaxLineBytes: 256, MaxEntries: 512, MaxNameBytes: 64}
	f.Fuzz(func(t *testing.T, b []byte) {
		var tab *Table
		allocs := testing.AllocsPerRun(1, func() { tab, _ = Parse(b, lim) })
		// Entries and names grow by doubling: a few dozen allocations for
		// the largest input, whatever it holds.
		if allocs > 100 {
			t.Fatalf("%.0f allocations for %d bytes", allocs, len(b))
		}
		{
			if tab.Len() > lim.MaxEntries {
				t.Fatalf("%d entries over the bound %d", tab.Len(), lim.MaxEntries)
			}
			if tab.Bytes() > 64*int64(len(b))+4096 {
				t.Fatalf("table of %d bytes from %d input bytes", tab.Bytes(), len(b))
			}
			for _, e := range tab.entries {
				name, ok := tab.Lookup(e.start)
				if !ok || len(name) > lim.MaxNameBytes {
					t.Fatalf("entry at %#x: %q %v", e.start, name, ok)
				}
				_ = Symbolize(RuntimeNode, name)
				_ = Symbolize(RuntimeJava, name)
			}
		}
	})
}
