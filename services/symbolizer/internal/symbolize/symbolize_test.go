package symbolize

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/stackstream/stackstream/pkg/pproftest"
	"github.com/stackstream/stackstream/schemas/debuginfo"
	"github.com/stackstream/stackstream/schemas/record"
	"github.com/stackstream/stackstream/services/symbolizer/internal/symtab"
)

type fakeTables map[string]*symtab.Table

func (f fakeTables) Table(_ context.Context, id string) *symtab.Table { return f[id] }

func TestProfile(t *testing.T) {
	tab := symtab.FromDebuginfo(&debuginfo.File{
		BuildID:  "aa11",
		Kind:     debuginfo.KindSymbols,
		Segments: []debuginfo.Segment{{Offset: 0x1000, Vaddr: 0x1000, Filesz: 0x1000}},
		Symbols: []debuginfo.Symbol{
			{Addr: 0x1000, Size: 0x100, Name: "_ZN3foo3barEv"},
			{Addr: 0x1100, Size: 0x100, Name: "baz"},
		},
		Lines: []debuginfo.Line{{Addr: 0x1000, File: "foo.cc", Line: 7}, {Addr: 0x1100, File: "baz.c", Line: 3}},
	}, "topic")
	const start = 0x7f0000001000
	b := pproftest.NewCPU(time.Unix(1700000000, 0), 10*time.Second)
	foo := b.Mapping(start, start+0x1000, 0x1000, "/usr/lib/libfoo.so", "aa11")
	bar := b.Mapping(0x400000, 0x500000, 0, "/opt/bar", "bb22")
	b.AddressSample(map[string]string{"comm": "x"}, []int64{1, 10}, foo, start+0x10, start+0x20, start+0x110)
	b.AddressSample(nil, []int64{1, 10}, foo, start+0x800) // outside every symbol
	b.AddressSample(nil, []int64{1, 10}, bar, 0x401234)    // no debug info anywhere
	b.Sample(nil, []int64{1, 10}, "do_syscall_64", "entry_SYSCALL_64")
	p := b.Profile()

	s := &Symbolizer{Tables: fakeTables{"aa11": tab}}
	st := s.Profile(context.Background(), p)
	if st.Resolved["topic"] != 3 || st.Unresolved != 2 || st.Already != 2 {
		t.Fatalf("stats %+v", st)
	}
	if err := p.CheckValid(); err != nil {
		t.Fatalf("invalid profile after symbolization: %v", err)
	}
	want := [][]string{
		{"foo::bar foo.cc:7", "foo::bar foo.cc:7", "baz baz.c:3"},
		{"libfoo.so+0x1800 :0"},
		{"bar+0x1234 :0"},
		{"do_syscall_64 :0", "entry_SYSCALL_64 :0"},
	}
	for i, smp := range p.Sample {
		var got []string
		for _, loc := range smp.Location {
			if len(loc.Line) != 1 {
				t.Fatalf("sample %d: location with %d lines", i, len(loc.Line))
			}
			if loc.Address != 0 && loc.Mapping == nil {
				t.Fatalf("sample %d: location lost its mapping", i)
			}
			l := loc.Line[0]
			got = append(got, l.Function.Name+" "+l.Function.Filename+":"+itoa(l.Line))
		}
		if len(got) != len(want[i]) {
			t.Fatalf("sample %d: %q, want %q", i, got, want[i])
		}
		for j := range got {
			if got[j] != want[i][j] {
				t.Fatalf("sample %d: %q, want %q", i, got, want[i])
			}
		}
	}
	if p.Sample[0].Location[0].Line[0].Function != p.Sample[0].Location[1].Line[0].Function {
		t.Fatal("one function became two")
	}
	if p.Sample[0].Location[0].Line[0].Function.SystemName != "_ZN3foo3barEv" {
		t.Fatal("system name not kept mangled")
	}
	if !foo.HasFunctions || !foo.HasLineNumbers {
		t.Fatal("mapping flags not set")
	}

	// What is written is what is read back.
	enc, err := record.EncodeProfile(p)
	if err != nil {
		t.Fatal(err)
	}
	back, err := record.DecodeProfile(enc)
	if err != nil {
		t.Fatal(err)
	}
	if len(back.Function) != len(p.Function) || back.Sample[1].Location[0].Line[0].Function.Name != "libfoo.so+0x1800" {
		t.Fatalf("round trip lost functions: %d vs %d", len(back.Function), len(p.Function))
	}

	// A second pass leaves a symbolized profile as it is.
	st = s.Profile(context.Background(), back)
	if st.Already != len(back.Location) || len(st.Resolved) != 0 || st.Unresolved != 0 {
		t.Fatalf("second pass changed things: %+v", st)
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
