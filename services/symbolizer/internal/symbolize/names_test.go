package symbolize

import (
	"context"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stackstream/stackstream/pkg/pproftest"
	"github.com/stackstream/stackstream/schemas/debuginfo"
	"github.com/stackstream/stackstream/services/symbolizer/internal/symtab"
)

// TestLongNamesCapped: debug info naming a function with 200 KB (as a
// hostile debuginfo value can) gives a name of at most MaxNameBytes, cut on
// a UTF-8 boundary and marked, for the function, its system name and file.
func TestLongNamesCapped(t *testing.T) {
	long := strings.Repeat("é", 100_000)
	tab := symtab.FromDebuginfo(&debuginfo.File{
		BuildID: "aa11", Kind: debuginfo.KindSymbols,
		Segments: []debuginfo.Segment{{Offset: 0, Vaddr: 0x1000, Filesz: 0x1000}},
		Symbols:  []debuginfo.Symbol{{Addr: 0x1000, Size: 0x100, Name: "x" + long}},
		Lines:    []debuginfo.Line{{Addr: 0x1000, File: long + ".c", Line: 3}},
	}, "topic")
	b := pproftest.NewCPU(time.Unix(1700000000, 0), time.Second)
	m := b.Mapping(0x10000, 0x11000, 0, "/lib/a.so", "aa11")
	b.AddressSample(nil, []int64{1, 1}, m, 0x10010)
	p := b.Profile()
	(&Symbolizer{Tables: fakeTables{"aa11": tab}}).Profile(context.Background(), p)
	f := p.Location[0].Line[0].Function
	for what, s := range map[string]string{"name": f.Name, "system name": f.SystemName, "file": f.Filename} {
		if len(s) > MaxNameBytes || !utf8.ValidString(s) || !strings.HasSuffix(s, "…") || !strings.HasPrefix(s, long[:100]) && !strings.HasPrefix(s, "x") {
			t.Fatalf("%s: %d bytes, valid UTF-8 %v, ends %q", what, len(s), utf8.ValidString(s), s[max(0, len(s)-8):])
		}
	}
}
