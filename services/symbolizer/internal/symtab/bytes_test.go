package symtab

import (
	"fmt"
	"runtime"
	"testing"

	"github.com/stackstream/stackstream/schemas/debuginfo"
)

// TestBytesCoverHeap: what Bytes charges a table covers the heap it takes,
// its lookup caches included, from a binary looked up once to one with
// thousands of addresses. The chain evicts by Bytes, so an undercharge is
// memory past STACKSTREAM_SYMBOLIZER_MAX_TABLE_BYTES: the caches' maps
// made for 1,024 entries took 213 KB a table, charged 224 bytes for one
// address looked up.
func TestBytesCoverHeap(t *testing.T) {
	for _, tc := range []struct {
		name   string
		format string // symbol names
		addrs  int    // symbols, each looked up once
		tables int
	}{
		{"one address", "service.func%d", 1, 200},
		{"a few dozen", "service.func%d", 30, 200},
		{"thousands", "service.func%d", 5000, 4},
		{"mangled, a few dozen", "_ZN7service4funcEv%d", 30, 200},
		{"mangled, a thousand", "_ZN7service4funcEv%d", 1000, 20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			tabs := make([]*Table, tc.tables)
			for k := range tabs {
				// The table owns its names, as one decoded from the
				// debuginfo topic does once the value is dropped.
				f := &debuginfo.File{BuildID: "aa11", Kind: debuginfo.KindSymbols, Segments: []debuginfo.Segment{{Filesz: 1 << 30}}}
				for i := range tc.addrs {
					f.Symbols = append(f.Symbols, debuginfo.Symbol{Addr: uint64(i) * 256, Size: 256, Name: fmt.Sprintf(tc.format, i)})
				}
				tabs[k] = FromDebuginfo(f, "topic")
				for i := range tc.addrs {
					if len(tabs[k].Lookup(uint64(i)*256+16)) == 0 {
						t.Fatalf("address %d not resolved", i)
					}
				}
			}
			runtime.GC()
			runtime.ReadMemStats(&after)
			charged := 0
			for _, tab := range tabs {
				charged += tab.Bytes()
			}
			heap := int(after.HeapAlloc) - int(before.HeapAlloc)
			t.Logf("%d tables: heap %d bytes, charged %d (%.2f)", tc.tables, heap, charged, float64(charged)/float64(heap))
			if heap > charged {
				t.Fatalf("%d tables of %d addresses looked up take %d bytes of heap, charged %d", tc.tables, tc.addrs, heap, charged)
			}
			runtime.KeepAlive(tabs)
		})
	}
}
