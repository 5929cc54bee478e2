package testbin

import (
	"debug/elf"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/google/pprof/profile"

	"github.com/stackstream/stackstream/pkg/pproftest"
	"github.com/stackstream/stackstream/schemas/debuginfo"
)

// Corpus is a set of built binaries, where their debug information is
// published, and profiles whose addresses point into them.
type Corpus struct {
	C, CXX, Go, Topic *Binary
	// Served is a directory for debuginfod: the stripped C binary with its
	// separate debug file, and the stripped Go binary.
	Served string
	// DebugDir has the .build-id layout with the C++ binary's debug info.
	DebugDir string
	// AllDir has the .build-id layout with the debug info of every binary.
	AllDir string
	// TopicValue is the debuginfo topic value of Topic (symbols only).
	TopicValue []byte

	stacks []stack
}

type stack struct {
	bin   *Binary
	addrs []uint64 // virtual addresses, leaf first
	want  []string // function names of the locations' lines, leaf first
}

// BuildCorpus builds the binaries into dir and lays out their debug info.
func BuildCorpus(t testing.TB, dir string) *Corpus {
	t.Helper()
	c := &Corpus{
		C:        BuildC(t, dir, "cprog"),
		CXX:      BuildCXX(t, dir, "cxxprog"),
		Go:       BuildGo(t, dir, "goprog"),
		Topic:    BuildC(t, dir, "ctopic"),
		Served:   filepath.Join(dir, "served"),
		DebugDir: filepath.Join(dir, "debug"),
		AllDir:   filepath.Join(dir, "all"),
	}
	CopyFile(t, c.C.DebugPath, filepath.Join(c.Served, "cprog.debug"))
	CopyFile(t, c.C.Path, filepath.Join(c.Served, "cprog"))
	CopyFile(t, c.Go.Path, filepath.Join(c.Served, "goprog"))
	buildIDPath := func(root string, b *Binary, file string) {
		CopyFile(t, file, filepath.Join(root, ".build-id", b.BuildID[:2], b.BuildID[2:]+".debug"))
	}
	buildIDPath(c.DebugDir, c.CXX, c.CXX.DebugPath)
	for _, b := range []*Binary{c.C, c.CXX, c.Topic} {
		buildIDPath(c.AllDir, b, b.DebugPath)
	}
	buildIDPath(c.AllDir, c.Go, c.Go.Path)
	c.TopicValue = topicValue(t, c.Topic)

	sym := func(b *Binary, name string, off uint64) uint64 {
		a, _ := b.Symbol(t, name)
		return a + off
	}
	c.stacks = []stack{
		{c.C, []uint64{sym(c.C, "leaf_work", 4), sym(c.C, "middle", 4), sym(c.C, "main", 8)}, []string{"leaf_work", "middle", "main"}},
		{c.Go, []uint64{sym(c.Go, "main.spin", 8), sym(c.Go, "main.outer", 8)}, []string{"main.spin", "main.outer"}},
		{c.CXX, []uint64{inlinedAddr(t, c.CXX)}, []string{"geo::Grid::cell", "geo::sweep"}},
		{c.Topic, []uint64{sym(c.Topic, "leaf_work", 2), sym(c.Topic, "middle", 2)}, []string{"leaf_work", "middle"}},
	}
	return c
}

// inlinedAddr finds an address of geo::sweep where addr2line sees the
// inlined geo::Grid::cell.
func inlinedAddr(t testing.TB, b *Binary) uint64 {
	addr, size := b.Symbol(t, "_ZN3geo5sweepERKNS_4GridEi")
	for d := uint64(0); d < size; d++ {
		if fr := Addr2Line(t, b.Path, addr+d); len(fr) == 2 {
			return addr + d
		}
	}
	t.Fatal("g++ inlined nothing into geo::sweep")
	return 0
}

// topicValue builds the debuginfo value an agent would publish for b:
// executable segments of the binary, function symbols of its debug file.
func topicValue(t testing.TB, b *Binary) []byte {
	ef, err := elf.Open(b.DebugPath)
	if err != nil {
		t.Fatal(err)
	}
	defer ef.Close()
	f := &debuginfo.File{BuildID: b.BuildID, Kind: debuginfo.KindSymbols,
		Segments: []debuginfo.Segment{{Offset: b.Exec.Off, Vaddr: b.Exec.Vaddr, Filesz: b.Exec.Filesz}}}
	syms, err := ef.Symbols()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range syms {
		if elf.ST_TYPE(s.Info) == elf.STT_FUNC && s.Value != 0 {
			f.Symbols = append(f.Symbols, debuginfo.Symbol{Addr: s.Value, Size: s.Size, Name: s.Name})
		}
	}
	v, err := debuginfo.Encode(f)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// Profile is raw CPU profile number seq: one sample per binary plus a
// kernel stack the agent already symbolized. Every sample carries the label
// seq, so outputs can be matched with inputs.
func (c *Corpus) Profile(t testing.TB, seq int) *profile.Profile {
	b := pproftest.NewCPU(time.Unix(1700000000+int64(seq), 0), 10*time.Second)
	labels := map[string]string{"seq": strconv.Itoa(seq), "comm": "corpus"}
	for i, s := range c.stacks {
		base := s.bin.Base(t)
		start, limit, off := s.bin.Mapping(base)
		m := b.Mapping(start, limit, off, "/opt/corpus/"+filepath.Base(s.bin.Path), s.bin.BuildID)
		addrs := make([]uint64, len(s.addrs))
		for j, a := range s.addrs {
			addrs[j] = s.bin.RuntimeAddr(a, base)
		}
		b.AddressSample(labels, []int64{int64(i + 1), int64(i+1) * 10_000_000}, m, addrs...)
	}
	b.Sample(labels, []int64{1, 10_000_000}, "do_syscall_64", "entry_SYSCALL_64")
	return b.Profile()
}

// Want is what the samples of Profile become once symbolized: function
// names of every line, leaf first, per sample.
func (c *Corpus) Want() [][]string {
	out := make([][]string, 0, len(c.stacks)+1)
	for _, s := range c.stacks {
		out = append(out, s.want)
	}
	return append(out, []string{"do_syscall_64", "entry_SYSCALL_64"})
}

// Names lists, per sample of p, the function names of every line, leaf
// first.
func Names(p *profile.Profile) [][]string {
	out := make([][]string, 0, len(p.Sample))
	for _, s := range p.Sample {
		var names []string
		for _, loc := range s.Location {
			for _, l := range loc.Line {
				names = append(names, l.Function.Name)
			}
		}
		out = append(out, names)
	}
	return out
}

// CopyFile copies a test binary or debug file to to, creating its directory.
func CopyFile(t testing.TB, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o755); err != nil {
		t.Fatal(err)
	}
}
