package symbolize

import (
	"context"
	"reflect"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/google/pprof/profile"

	"github.com/stackstream/stackstream/pkg/pproftest"
	"github.com/stackstream/stackstream/schemas/debuginfo"
	"github.com/stackstream/stackstream/schemas/record"
	"github.com/stackstream/stackstream/services/symbolizer/internal/source"
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

type tableSource struct {
	name  string
	file  *debuginfo.File
	calls int
}

func (s *tableSource) Name() string { return s.name }
func (s *tableSource) Fetch(_ context.Context, id string) (*symtab.Table, error) {
	s.calls++
	if s.file == nil {
		return nil, source.ErrNotFound
	}
	return symtab.FromDebuginfo(s.file, s.name), nil
}

// TestFallbackToLaterSource: the first source knows the binary but only its
// exported symbols; an address outside them is resolved by the next source,
// which is asked once per binary, not once per frame.
func TestFallbackToLaterSource(t *testing.T) {
	seg := []debuginfo.Segment{{Offset: 0, Vaddr: 0, Filesz: 0x10000}}
	topic := &tableSource{name: "topic", file: &debuginfo.File{BuildID: "cc33", Kind: debuginfo.KindSymbols, Segments: seg,
		Symbols: []debuginfo.Symbol{{Addr: 0x1000, Size: 0x100, Name: "exported"}}}}
	local := &tableSource{name: "local", file: &debuginfo.File{BuildID: "cc33", Kind: debuginfo.KindSymbols, Segments: seg,
		Symbols: []debuginfo.Symbol{{Addr: 0x1000, Size: 0x100, Name: "exported"}, {Addr: 0x2000, Size: 0x100, Name: "local_helper"}},
		Lines:   []debuginfo.Line{{Addr: 0x2000, File: "helper.c", Line: 42}}}}
	never := &tableSource{name: "debuginfod"}
	chain := source.NewChain(source.Options{MissTTL: time.Minute}, topic, local, never)
	s := &Symbolizer{Tables: chain}
	for i := 0; i < 3; i++ {
		b := pproftest.NewCPU(time.Unix(1700000000, 0), time.Second)
		m := b.Mapping(0x7f0000000000, 0x7f0000010000, 0, "/lib/libc.so.6", "cc33")
		b.AddressSample(nil, []int64{1, 1}, m, 0x7f0000002010, 0x7f0000001010, 0x7f0000005000)
		p := b.Profile()
		st := s.Profile(context.Background(), p)
		got := testbinNames(p)
		want := []string{"local_helper helper.c:42", "exported :0", "libc.so.6+0x5000 :0"}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("got %q, want %q", got, want)
		}
		if st.Resolved["local"] != 1 || st.Resolved["topic"] != 1 || st.Unresolved != 1 {
			t.Fatalf("stats %+v", st)
		}
	}
	if topic.calls != 1 || local.calls != 1 || never.calls != 1 {
		t.Fatalf("source calls topic %d local %d debuginfod %d, want 1 each", topic.calls, local.calls, never.calls)
	}
}

func testbinNames(p *profile.Profile) []string {
	var out []string
	for _, loc := range p.Sample[0].Location {
		l := loc.Line[0]
		out = append(out, l.Function.Name+" "+l.Function.Filename+":"+itoa(l.Line))
	}
	return out
}

// TestCallerAddressesLookOneByteBack: a caller's address is a return
// address. When the call is a function's last instruction (a call to a
// noreturn function), the return address is already the next function.
func TestCallerAddressesLookOneByteBack(t *testing.T) {
	tab := symtab.FromDebuginfo(&debuginfo.File{BuildID: "dd44", Kind: debuginfo.KindSymbols,
		Segments: []debuginfo.Segment{{Offset: 0, Vaddr: 0, Filesz: 0x10000}},
		Symbols: []debuginfo.Symbol{
			{Addr: 0x1000, Size: 0x10, Name: "calls_abort"},
			{Addr: 0x1010, Size: 0x10, Name: "next_function"},
			{Addr: 0x2000, Size: 0x10, Name: "abort"},
		},
		Lines: []debuginfo.Line{{Addr: 0x1000, File: "a.c", Line: 10}, {Addr: 0x100b, File: "a.c", Line: 11}, {Addr: 0x1010, File: "a.c", Line: 20}},
	}, "topic")
	b := pproftest.NewCPU(time.Unix(1700000000, 0), time.Second)
	m := b.Mapping(0x7f0000000000, 0x7f0000010000, 0, "/bin/a", "dd44")
	b.AddressSample(nil, []int64{1, 1}, m, 0x7f0000002004, 0x7f0000001010) // abort <- return address 0x1010
	p := b.Profile()
	(&Symbolizer{Tables: fakeTables{"dd44": tab}}).Profile(context.Background(), p)
	if got := testbinNames(p); !reflect.DeepEqual(got, []string{"abort :0", "calls_abort a.c:11"}) {
		t.Fatalf("got %q", got)
	}
	if p.Location[1].Address != 0x7f0000001010 {
		t.Fatal("the location's address changed")
	}

	// The same address as some sample's leaf is an exact address.
	b = pproftest.NewCPU(time.Unix(1700000000, 0), time.Second)
	m = b.Mapping(0x7f0000000000, 0x7f0000010000, 0, "/bin/a", "dd44")
	b.AddressSample(nil, []int64{1, 1}, m, 0x7f0000002004, 0x7f0000001010)
	b.AddressSample(nil, []int64{1, 1}, m, 0x7f0000001010)
	p = b.Profile()
	(&Symbolizer{Tables: fakeTables{"dd44": tab}}).Profile(context.Background(), p)
	if got := testbinNames(p); !reflect.DeepEqual(got, []string{"abort :0", "next_function a.c:20"}) {
		t.Fatalf("leaf and caller: got %q", got)
	}
}

// recordingTables counts the build IDs asked for.
type recordingTables struct {
	fakeTables
	asked []string
}

func (r *recordingTables) Table(ctx context.Context, id string) *symtab.Table {
	r.asked = append(r.asked, id)
	return r.fakeTables.Table(ctx, id)
}

// TestAgentNamedFramesPassThrough: frames on record's pseudo-files (kernel,
// python, java, js, jit) are the agent's names: they keep their functions,
// files and lines, are never looked up (not even a pseudo-file that carries
// a build ID, or one whose lines were lost), and count as presymbolized,
// while the native frames of the same samples are resolved.
func TestAgentNamedFramesPassThrough(t *testing.T) {
	tab := symtab.FromDebuginfo(&debuginfo.File{
		BuildID:  "aa11",
		Kind:     debuginfo.KindSymbols,
		Segments: []debuginfo.Segment{{Offset: 0, Vaddr: 0, Filesz: 0x10000}},
		Symbols:  []debuginfo.Symbol{{Addr: 0x1000, Size: 0x100, Name: "_PyEval_EvalFrameDefault"}},
		Lines:    []debuginfo.Line{{Addr: 0x1000, File: "ceval.c", Line: 4200}},
	}, "topic")
	b := pproftest.NewCPU(time.Unix(1700000000, 0), 10*time.Second)
	native := b.Mapping(0x7f0000000000, 0x7f0000010000, 0, "/usr/bin/python3.12", "aa11")
	kernel := b.Mapping(0, 0, 0, record.MappingKernel, "")
	python := b.Mapping(0, 0, 0, record.MappingPython, "")
	java := b.Mapping(0, 0, 0, record.MappingJava, "")
	js := b.Mapping(0, 0, 0, record.MappingJS, "")
	jit := b.Mapping(0x7e0000000000, 0x7e0000100000, 0, record.MappingJIT, "ee55") // a build ID must not cause a lookup
	lost := b.Mapping(0, 0, 0, record.MappingPython, "ff66")                       // lines lost on the way: still not looked up
	b.LocationSample(map[string]string{"comm": "python3"}, []int64{1, 10},
		b.NamedLocation(kernel, 0xffffffff81000010, "do_syscall_64", "", 0),
		b.NamedLocation(python, 0, "Handler.serve", "/srv/app/handler.py", 42),
		b.NamedLocation(python, 0, "<module>", "/srv/app/main.py", 1),
		b.AddressLocation(native, 0x7f0000001010),
	)
	b.LocationSample(map[string]string{"comm": "java"}, []int64{1, 10},
		b.NamedLocation(java, 0x7e0000000100, "com.example.Cart.total", "Cart.java", 88),
		b.NamedLocation(jit, 0x7e0000000200, "LazyCompile:*loop", "", 0),
		b.NamedLocation(js, 0, "(anonymous)", "file:///srv/app/index.js", 7),
	)
	emptyLoc := &profile.Location{ID: uint64(len(b.Profile().Location) + 1), Address: 0x10, Mapping: lost}
	p := b.Profile()
	p.Location = append(p.Location, emptyLoc)
	p.Sample = append(p.Sample, &profile.Sample{Value: []int64{1, 1}, Location: []*profile.Location{emptyLoc}})
	before := map[*profile.Location][]profile.Line{}
	for _, l := range p.Location {
		before[l] = slices.Clone(l.Line)
	}

	tabs := &recordingTables{fakeTables: fakeTables{"aa11": tab}}
	st := (&Symbolizer{Tables: tabs}).Profile(context.Background(), p)
	if !reflect.DeepEqual(tabs.asked, []string{"aa11"}) {
		t.Fatalf("build IDs looked up: %q, want only the native binary's", tabs.asked)
	}
	if st.Already != 7 || st.Resolved["topic"] != 1 || st.Unresolved != 0 {
		t.Fatalf("stats %+v, want 7 presymbolized, 1 resolved, 0 unresolved", st)
	}
	if err := p.CheckValid(); err != nil {
		t.Fatalf("invalid profile after symbolization: %v", err)
	}
	for _, l := range p.Location {
		if l.Mapping == native {
			continue
		}
		if !reflect.DeepEqual(l.Line, before[l]) {
			t.Errorf("location %d on %s changed: %+v, was %+v", l.ID, l.Mapping.File, l.Line, before[l])
		}
	}
	if got := testbinNames(p); !reflect.DeepEqual(got, []string{
		"do_syscall_64 :0", "Handler.serve /srv/app/handler.py:42", "<module> /srv/app/main.py:1", "_PyEval_EvalFrameDefault ceval.c:4200",
	}) {
		t.Fatalf("names %q", got)
	}

	// The names survive the output encoding, with their mappings' files.
	enc, err := record.EncodeProfile(p)
	if err != nil {
		t.Fatal(err)
	}
	back, err := record.DecodeProfile(enc)
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, l := range back.Sample[1].Location {
		kinds = append(kinds, record.FrameKind(l.Mapping.File)+" "+l.Line[0].Function.Name+" "+l.Line[0].Function.Filename+":"+itoa(l.Line[0].Line))
	}
	if want := []string{"java com.example.Cart.total Cart.java:88", "jit LazyCompile:*loop :0", "js (anonymous) file:///srv/app/index.js:7"}; !reflect.DeepEqual(kinds, want) {
		t.Fatalf("after a round trip: %q, want %q", kinds, want)
	}
}

// TestScratchReused: Locations with a Scratch that served other profiles
// gives what it gives with a new one, for a profile smaller and one larger
// than the Scratch's previous one (its slabs grow, its maps are emptied).
func TestScratchReused(t *testing.T) {
	tab := symtab.FromDebuginfo(&debuginfo.File{
		BuildID:  "aa11",
		Kind:     debuginfo.KindSymbols,
		Segments: []debuginfo.Segment{{Offset: 0x1000, Vaddr: 0x1000, Filesz: 0x1000}},
		Symbols: []debuginfo.Symbol{
			{Addr: 0x1000, Size: 0x100, Name: "foo"},
			{Addr: 0x1100, Size: 0x100, Name: "bar"},
		},
		Lines: []debuginfo.Line{{Addr: 0x1000, File: "foo.c", Line: 7}, {Addr: 0x1100, File: "bar.c", Line: 3}},
	}, "topic")
	const start = 0x7f0000001000
	build := func(samples int) *profile.Profile {
		b := pproftest.NewCPU(time.Unix(1700000000, 0), 10*time.Second)
		m := b.Mapping(start, start+0x1000, 0x1000, "/usr/lib/libfoo.so", "aa11")
		other := b.Mapping(0x400000, 0x500000, 0, "/opt/other", "bb22")
		for i := range samples {
			b.AddressSample(nil, []int64{1, 10}, m, start+uint64(i%0x200), start+0x100+uint64(i%0x100))
			b.AddressSample(nil, []int64{1, 10}, other, 0x401000+uint64(i))
		}
		b.Sample(nil, []int64{1, 10}, "do_syscall_64")
		return b.Profile()
	}
	s := &Symbolizer{Tables: fakeTables{"aa11": tab}}
	var sc Scratch
	for _, samples := range []int{50, 3, 600, 10} {
		want := build(samples)
		wantStats := s.Locations(context.Background(), want, callerOnlyLocations(want), nil)
		got := build(samples)
		gotStats := s.Locations(context.Background(), got, callerOnlyLocations(got), &sc)
		gotStats.AddrHits = wantStats.AddrHits // the table's address cache is warm for the second
		if err := got.CheckValid(); err != nil {
			t.Fatalf("%d samples: invalid profile: %v", samples, err)
		}
		if got.String() != want.String() || !reflect.DeepEqual(gotStats, wantStats) {
			t.Fatalf("%d samples, Scratch reused:\n%s\n%+v\nwant\n%s\n%+v", samples, got, gotStats, want, wantStats)
		}
	}
}
