package perfmap

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParseEdgeCases(t *testing.T) {
	lim := DefaultLimits
	lim.MaxLineBytes = 80
	long := "0x5000 0x10 " + strings.Repeat("x", 100)
	in := strings.Join([]string{
		"0x00007f4b7cec7620 0x00000000000000b8 long Hot.hotJavaMethod(long)",
		"7f8298005b80 138 JS:^hotJsFunction /tmp/jx/hot.js:1:23",
		"1000 0 zero size",                  // empty range: dropped
		"zz 10 not hex",                     // malformed
		"2000",                              // short
		"3000 20",                           // no name
		"ffffffffffffffff 2 wraps",          // start+size overflows
		"0x4000 0x10 name with  spaces ",    // name keeps inner spaces
		long,                                // over MaxLineBytes: skipped
		"0x6000 0x100 old",                  // replaced below
		"0x6000 0x100 new",                  // same start, later wins
		"0x6080 0x10 inner",                 // nested in 0x6000
		"0x12345678901234567 0x10 too long", // 17 hex digits
		"0x7000 0x10 crlf\r",
	}, "\n")
	tab, err := Parse([]byte(in), lim)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		addr uint64
		want string
	}{
		{0x7f4b7cec7620, "long Hot.hotJavaMethod(long)"},
		{0x7f4b7cec7620 + 0xb7, "long Hot.hotJavaMethod(long)"},
		{0x7f4b7cec7620 + 0xb8, ""},
		{0x7f8298005b80 + 0x100, "JS:^hotJsFunction /tmp/jx/hot.js:1:23"},
		{0x1000, ""},
		{0x2000, ""},
		{0x3000, ""},
		{0x4008, "name with  spaces"},
		{0x5000, ""},
		{0x6000, "new"},
		{0x6085, "inner"},
		{0x6095, "new"}, // past inner, still in new
		{0x7000, "crlf"},
		{0, ""},
		{^uint64(0), ""},
	} {
		t.Run(fmt.Sprintf("%#x", c.addr), func(t *testing.T) {
			got, ok := tab.Lookup(c.addr)
			if got != c.want || ok != (c.want != "") {
				t.Errorf("Lookup(%#x) = %q, %v; want %q", c.addr, got, ok, c.want)
			}
		})
	}
	if tab.Len() != 7 {
		t.Errorf("%d entries, want 7", tab.Len())
	}
}

func TestParseBounds(t *testing.T) {
	var b strings.Builder
	for i := 0; i < 100; i++ {
		fmt.Fprintf(&b, "%x 10 f%d\n", 0x1000+i*0x10, i)
	}
	lim := DefaultLimits
	lim.MaxEntries = 10
	lim.MaxNameBytes = 2
	tab, err := Parse([]byte(b.String()), lim)
	if err == nil || tab.Len() != 10 {
		t.Fatalf("entries %d, err %v; want 10 and ErrTooLarge", tab.Len(), err)
	}
	if n, _ := tab.Lookup(0x1095); n != "f9" {
		t.Errorf("entry 9 named %q", n)
	}
	if n, _ := tab.Lookup(0x10a0); n != "" {
		t.Errorf("entry 10 kept: %q", n)
	}
	if n, _ := tab.Lookup(0x1000); n != "f0" {
		t.Errorf("cut name %q", n)
	}
	lim = DefaultLimits
	lim.MaxFileBytes = 30
	tab, _ = Parse([]byte(b.String()), lim)
	if tab.Len() != 2 {
		t.Errorf("%d entries within 30 bytes, want 2", tab.Len())
	}
}

// TestReaderIncremental: appends are parsed once, a line being written is
// read when complete, and a rewritten or replaced file is read again whole.
func TestReaderIncremental(t *testing.T) {
	path := filepath.Join(t.TempDir(), "perf-1.map")
	write := func(flag int, s string) {
		f, err := os.OpenFile(path, flag|os.O_WRONLY|os.O_CREATE, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.WriteString(s); err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	lim := DefaultLimits
	lim.MaxReadBytes = 64
	lim.MaxLineBytes = 40
	r := NewReader(lim)
	update := func() int {
		t.Helper()
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		n, err := r.Update(f)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	name := func(addr uint64) string { n, _ := r.Lookup(addr); return n }

	write(os.O_TRUNC, "1000 10 a\n2000 10 b\n3000 10 par")
	if n := update(); n != 2 || name(0x1000) != "a" || name(0x3000) != "" {
		t.Fatalf("first read: %d entries, 0x3000 %q", n, name(0x3000))
	}
	write(os.O_APPEND, "tial\n")
	if n := update(); n != 1 || name(0x3000) != "partial" {
		t.Fatalf("append: %d entries, 0x3000 %q", n, name(0x3000))
	}
	// More than MaxReadBytes appended: read over two updates.
	var more strings.Builder
	for i := 0; i < 8; i++ {
		fmt.Fprintf(&more, "%x 10 m%d\n", 0x4000+i*0x10, i)
	}
	write(os.O_APPEND, more.String())
	total := update()
	total += update()
	if total != 8 || name(0x4070) != "m7" || r.Table().Len() != 11 {
		t.Fatalf("chunks: %d new, %d in all, 0x4070 %q", total, r.Table().Len(), name(0x4070))
	}
	if n := update(); n != 0 {
		t.Fatalf("nothing new: %d entries", n)
	}
	// A line over MaxLineBytes, split over reads, is skipped whole.
	write(os.O_APPEND, "5000 10 "+strings.Repeat("y", 80)+"\n6000 10 after\n")
	update()
	update()
	if name(0x5000) != "" || name(0x6000) != "after" {
		t.Fatalf("long line: 0x5000 %q, 0x6000 %q", name(0x5000), name(0x6000))
	}
	// Rewritten in place (HotSpot's Compiler.perfmap): longer than before,
	// another content: read again from the start.
	before := r.Table().Len()
	var rewrite strings.Builder
	for i := 0; i < 20; i++ {
		fmt.Fprintf(&rewrite, "%x 8 r%d\n", 0x9000+i*8, i)
	}
	write(os.O_TRUNC, rewrite.String())
	for range 10 {
		update()
	}
	if name(0x1000) != "" || name(0x9000+19*8) != "r19" || r.Table().Len() != 20 {
		t.Fatalf("rewrite: %d entries (before %d), 0x1000 %q", r.Table().Len(), before, name(0x1000))
	}
	// Replaced by another file (new inode).
	os.Remove(path)
	write(os.O_TRUNC, "a000 10 replaced\n")
	update()
	if name(0x9000) != "" || name(0xa000) != "replaced" {
		t.Fatalf("replaced: 0x9000 %q, 0xa000 %q", name(0x9000), name(0xa000))
	}
}

func TestSymbolize(t *testing.T) {
	for _, c := range []struct {
		rt   Runtime
		in   string
		want Frame
	}{
		{RuntimeJava, "long Hot.hotJavaMethod(long)", Frame{Kind: KindJava, Function: "Hot.hotJavaMethod"}},
		{RuntimeJava, "void java.lang.Object.<init>()", Frame{Kind: KindJava, Function: "java.lang.Object.<init>"}},
		{RuntimeJava, "java.lang.Object jdk.internal.misc.Unsafe.getReferenceVolatile(java.lang.Object, long)", Frame{Kind: KindJava, Function: "jdk.internal.misc.Unsafe.getReferenceVolatile"}},
		{RuntimeJava, "Interpreter", Frame{Kind: KindJava, Function: "Interpreter"}},
		{RuntimeJava, "StubRoutines (1)", Frame{Kind: KindJava, Function: "StubRoutines (1)"}},
		{RuntimeJava, "I2C/C2I adapters(0xabc)", Frame{Kind: KindJava, Function: "I2C/C2I adapters(0xabc)"}},
		{RuntimeNode, "JS:*hotJsFunction /tmp/jx/hot.js:1:23", Frame{Kind: KindJS, Function: "hotJsFunction", File: "/tmp/jx/hot.js", Line: 1, Column: 23}},
		{RuntimeNode, "JS:~ /tmp/jx/hot.js:1:1", Frame{Kind: KindJS, Function: "(anonymous)", File: "/tmp/jx/hot.js", Line: 1, Column: 1}},
		{RuntimeNode, "LazyCompile:~foo", Frame{Kind: KindJS, Function: "foo"}},
		{RuntimeNode, "LazyCompile:*get x file:///srv/a.js:10:2", Frame{Kind: KindJS, Function: "get x", File: "file:///srv/a.js", Line: 10, Column: 2}},
		{RuntimeNode, "JS:~runMain node:internal/modules/run_main:121:24", Frame{Kind: KindJS, Function: "runMain", File: "node:internal/modules/run_main", Line: 121, Column: 24}},
		{RuntimeNode, "Script:~ a.js:7", Frame{Kind: KindJS, Function: "(anonymous)", File: "a.js", Line: 7}},
		{RuntimeNode, "JS:*two words", Frame{Kind: KindJS, Function: "two words"}},
		{RuntimeNode, "Builtin:ArrayPrototypePush", Frame{Kind: KindJS, Function: "Builtin:ArrayPrototypePush"}},
		{RuntimeUnknown, "py::Worker.run:/srv/app/worker.py", Frame{Kind: KindPython, Function: "Worker.run", File: "/srv/app/worker.py"}},
		{RuntimeJava, "py::f:C:/x.py", Frame{Kind: KindPython, Function: "f", File: "C:/x.py"}},
		{RuntimeUnknown, "LuaJIT trace 12", Frame{Kind: KindJIT, Function: "LuaJIT trace 12"}},
	} {
		t.Run(c.in, func(t *testing.T) {
			got := Symbolize(c.rt, c.in)
			c.want.SystemName = c.in
			if got != c.want {
				t.Errorf("got %+v, want %+v", got, c.want)
			}
		})
	}
}
