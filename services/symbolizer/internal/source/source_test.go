package source

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stackstream/stackstream/schemas/debuginfo"
	"github.com/stackstream/stackstream/services/symbolizer/internal/symtab"
	"github.com/stackstream/stackstream/services/symbolizer/internal/testbin"
)

func frameAt(t *testing.T, tab *symtab.Table, b *testbin.Binary, vaddr uint64) symtab.Frame {
	t.Helper()
	base := b.Base(t)
	start, _, off := b.Mapping(base)
	v, ok := tab.Vaddr(b.RuntimeAddr(vaddr, base), start, off)
	if !ok {
		t.Fatalf("%s: no vaddr for %#x", b.Path, vaddr)
	}
	fr := tab.Lookup(v)
	if len(fr) == 0 {
		t.Fatalf("%s: %#x unresolved", b.Path, vaddr)
	}
	return fr[len(fr)-1]
}

// TestDebuginfod fetches a stripped C binary's separate debug file and a
// stripped Go binary (as /executable) from Debian's debuginfod.
func TestDebuginfod(t *testing.T) {
	build, served := t.TempDir(), t.TempDir()
	c := testbin.BuildC(t, build, "cprog")
	g := testbin.BuildGo(t, build, "goprog")
	testbin.CopyFile(t, c.DebugPath, filepath.Join(served, "cprog.debug"))
	testbin.CopyFile(t, c.Path, filepath.Join(served, "cprog"))
	testbin.CopyFile(t, g.Path, filepath.Join(served, "goprog"))
	url := testbin.Debuginfod(t, served, c.BuildID, g.BuildID)

	urls, err := ParseURLs("http://127.0.0.1:1/ " + url)
	if err != nil {
		t.Fatal(err)
	}
	var fetchErrs []string
	chain := NewChain(Options{MissTTL: time.Minute, Metrics: Metrics{FetchError: func(s string) { fetchErrs = append(fetchErrs, s) }}},
		NewDebuginfod(urls[1:], 30*time.Second))
	ctx := context.Background()

	tab := chain.Table(ctx, c.BuildID)
	if tab == nil || tab.Source != "debuginfod" {
		t.Fatalf("C binary: got %+v", tab)
	}
	addr, _ := c.Symbol(t, "leaf_work")
	want := testbin.Addr2Line(t, c.DebugPath, addr+4)
	if f := frameAt(t, tab, c, addr+4); fmt.Sprintf("%s %s:%d", f.Function, filepath.Base(f.File), f.Line) != want[len(want)-1] {
		t.Fatalf("C frame %+v, addr2line says %q", f, want)
	}

	tab = chain.Table(ctx, g.BuildID)
	if tab == nil {
		t.Fatal("Go binary: not found")
	}
	addr, _ = g.Symbol(t, "main.spin")
	if f := frameAt(t, tab, g, addr+8); f.Function != "main.spin" || !strings.HasSuffix(f.File, "main.go") || f.Line < 9 || f.Line > 15 {
		t.Fatalf("Go frame %+v", f)
	}

	if tab := chain.Table(ctx, strings.Repeat("ab", 20)); tab != nil {
		t.Fatalf("unknown build id resolved: %+v", tab)
	}
	if len(fetchErrs) != 0 {
		t.Fatalf("fetch errors for plain not-found: %v", fetchErrs)
	}

	// A download larger than the limit is refused while it streams (this
	// debuginfod sends no Content-Length for files it reads from disk
	// archives... or does; either way it is refused) and counted.
	small := NewDebuginfod(urls[1:], 30*time.Second)
	small.MaxDownloadBytes = 64 << 10
	if _, err := small.Fetch(ctx, g.BuildID); !errors.Is(err, ErrDownloadTooLarge) || !strings.Contains(err.Error(), "STACKSTREAM_SYMBOLIZER_DEBUGINFOD_MAX_BYTES") {
		t.Fatalf("Go binary over a 64 KiB limit: %v", err)
	}
	if entries, _ := filepath.Glob(filepath.Join(os.TempDir(), "stackstream-debuginfod-*")); len(entries) != 0 {
		t.Fatalf("downloads left behind: %v", entries)
	}

	// A server that does not answer is an error worth counting, and the
	// next server still gets asked.
	chain = NewChain(Options{MissTTL: time.Minute, Metrics: Metrics{FetchError: func(s string) { fetchErrs = append(fetchErrs, s) }}},
		NewDebuginfod(urls, 5*time.Second))
	if tab := chain.Table(ctx, c.BuildID); tab == nil {
		t.Fatal("second server not asked after the first failed")
	}
}

func TestDirs(t *testing.T) {
	build, dbg := t.TempDir(), t.TempDir()
	cxx := testbin.BuildCXX(t, build, "cxxprog")
	c := testbin.BuildC(t, build, "cprog")
	testbin.CopyFile(t, cxx.Path, filepath.Join(dbg, ".build-id", cxx.BuildID[:2], cxx.BuildID[2:]+".debug"))
	// The stripped executable alone is no help: the source says not found.
	testbin.CopyFile(t, c.Path, filepath.Join(dbg, ".build-id", c.BuildID[:2], c.BuildID[2:]))

	src := Dirs{Dirs: []string{filepath.Join(build, "missing"), dbg}}
	tab, err := src.Fetch(context.Background(), cxx.BuildID)
	if err != nil {
		t.Fatal(err)
	}
	addr, _ := cxx.Symbol(t, "_ZN3geo5sweepERKNS_4GridEi")
	if f := frameAt(t, tab, cxx, addr); f.Function != "geo::sweep" {
		t.Fatalf("frame %+v", f)
	}
	if _, err := src.Fetch(context.Background(), c.BuildID); !errors.Is(err, ErrNotFound) {
		t.Fatalf("stripped executable: got %v, want ErrNotFound", err)
	}
}

type countingSource struct {
	calls int
	found bool
}

func (s *countingSource) Name() string { return "fake" }
func (s *countingSource) Fetch(_ context.Context, id string) (*symtab.Table, error) {
	s.calls++
	if !s.found {
		return nil, notFound("%s", id)
	}
	return symtab.FromDebuginfo(&debuginfo.File{Kind: debuginfo.KindSymbols}, ""), nil
}

func TestChainCachesHitsAndMisses(t *testing.T) {
	now := time.Unix(1000, 0)
	var hits, misses int
	src := &countingSource{}
	chain := NewChain(Options{
		MaxTables: 1, MissTTL: time.Minute, Now: func() time.Time { return now },
		Metrics: Metrics{CacheHit: func() { hits++ }, CacheMiss: func() { misses++ }},
	}, src)
	ctx := context.Background()
	id := "0123abcd"

	for i := 0; i < 3; i++ {
		if chain.Table(ctx, id) != nil {
			t.Fatal("found a table no source has")
		}
	}
	if src.calls != 1 || hits != 2 || misses != 1 {
		t.Fatalf("calls %d hits %d misses %d; want the miss cached", src.calls, hits, misses)
	}
	now = now.Add(2 * time.Minute)
	chain.Table(ctx, id)
	if src.calls != 2 {
		t.Fatalf("calls %d: miss not expired after its TTL", src.calls)
	}

	src.found = true
	chain.Table(ctx, id) // still a cached miss
	chain.Forget(id)     // new debug info arrived
	if tab := chain.Table(ctx, id); tab == nil || tab.Source != "fake" || tab.BuildID != id {
		t.Fatalf("after Forget: %+v", tab)
	}
	calls := src.calls
	chain.Table(ctx, id)
	if src.calls != calls {
		t.Fatal("found table not cached")
	}
	chain.Table(ctx, "ffff0000") // evicts id (MaxTables 1)
	chain.Table(ctx, id)
	if src.calls != calls+2 {
		t.Fatalf("calls %d, want %d: LRU did not evict", src.calls, calls+2)
	}
	if chain.Table(ctx, "../../etc/passwd") != nil {
		t.Fatal("invalid build id resolved")
	}
}

func TestTopicStore(t *testing.T) {
	var changed []string
	store := NewTopic(1<<20, func(id string) { changed = append(changed, id) })
	ctx := context.Background()
	sym, err := debuginfo.Encode(&debuginfo.File{
		BuildID: "aa11", Kind: debuginfo.KindSymbols,
		Segments: []debuginfo.Segment{{Offset: 0, Vaddr: 0x1000, Filesz: 0x1000}},
		Symbols:  []debuginfo.Symbol{{Addr: 0x1000, Size: 0x10, Name: "f"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Apply([]byte("aa11"), sym); err != nil {
		t.Fatal(err)
	}
	if err := store.Apply([]byte("bb22"), debuginfo.Marker("bb22", debuginfo.KindTooLarge)); err != nil {
		t.Fatal(err)
	}
	if err := store.Apply([]byte("cc33"), []byte("garbage")); !errors.Is(err, debuginfo.ErrBadFormat) {
		t.Fatalf("garbage: %v", err)
	}
	if err := store.Apply([]byte("dd44"), sym); err == nil {
		t.Fatal("value under the wrong key accepted")
	}
	tab, err := store.Fetch(ctx, "aa11")
	if err != nil || tab.Lookup(0x1004) == nil {
		t.Fatalf("symbols: %v %v", tab, err)
	}
	if _, err := store.Fetch(ctx, "bb22"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("too-large marker: %v, want ErrNotFound (next source)", err)
	}
	if err := store.Apply([]byte("bb22"), nil); err != nil {
		t.Fatal(err)
	}
	if _, err := store.Fetch(ctx, "bb22"); !errors.Is(err, ErrNotFound) || store.Len() != 1 {
		t.Fatalf("after tombstone: %v, %d held", err, store.Len())
	}
	if strings.Join(changed, ",") != "aa11,bb22,bb22" {
		t.Fatalf("changes %v", changed)
	}

	small := NewTopic(len(sym)+1, nil)
	for _, id := range []string{"aa11", "aa11"} {
		small.Apply([]byte(id), sym)
	}
	if small.Len() != 1 {
		t.Fatalf("replacing a value counted twice: %d", small.Len())
	}
}
