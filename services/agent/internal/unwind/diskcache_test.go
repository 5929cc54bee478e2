package unwind

import (
	"bytes"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/stackstream/stackstream/pkg/testenv"
	"github.com/stackstream/stackstream/services/agent/internal/proc"
)

// keyedTable compiles path and returns its key with the table.
func keyedTable(t *testing.T, path string) (Key, *Table) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	k, tab, err := inspect(f, info.Size(), DefaultLimits, func(Key) bool { return true })
	if err != nil || tab == nil || !cacheable(k) {
		t.Fatalf("compile %s: key %+v, %v", path, k, err)
	}
	return k, tab
}

// TestDiskCacheRoundTrip: a stored table loads back with the same rows and
// PT_LOAD headers (gcc's cc1, ~430k rows, among them).
func TestDiskCacheRoundTrip(t *testing.T) {
	c, err := OpenDiskCache(t.TempDir(), 1<<30)
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{"/lib/x86_64-linux-gnu/libc.so.6", "/usr/bin/xz", cc1Path(t)} {
		t.Run(filepath.Base(path), func(t *testing.T) {
			k, tab := keyedTable(t, path)
			if got := c.load(k, DefaultLimits); got != nil {
				t.Fatal("a table before it was stored")
			}
			if err := c.store(k, tab); err != nil {
				t.Fatal(err)
			}
			got := c.load(k, DefaultLimits)
			if got == nil {
				t.Fatal("stored table not loaded")
			}
			if got.Arch != tab.Arch || !slices.Equal(got.Rows, tab.Rows) || !slices.Equal(got.Loads, tab.Loads) {
				t.Fatalf("loaded %d rows, %v; stored %d rows, %v", len(got.Rows), got.Loads, len(tab.Rows), tab.Loads)
			}
			other := k
			other.Loads += "x"
			if c.load(other, DefaultLimits) != nil {
				t.Fatal("another PT_LOAD layout's key loaded the table")
			}
		})
	}
}

// TestDiskCacheRejects: a file that is not the key's table decodes to
// ErrBadCacheFile, and load removes it.
func TestDiskCacheRejects(t *testing.T) {
	k, tab := keyedTable(t, "/usr/bin/xz")
	const agent = "agent-build"
	good := encodeTable(agent, k, tab)
	flip := func(i int) []byte {
		b := bytes.Clone(good)
		b[i] ^= 1
		return b
	}
	otherID := k
	otherID.BuildID = "00" + k.BuildID[2:]
	for _, tc := range []struct {
		name  string
		file  []byte
		agent string
		key   Key
		arch  Arch
	}{
		{"a flipped bit in a row", flip(len(good) - 10), agent, k, tab.Arch},
		{"a flipped bit in the header", flip(3), agent, k, tab.Arch},
		{"truncated", good[:len(good)-RowBytes], agent, k, tab.Arch},
		{"empty", nil, agent, k, tab.Arch},
		{"another build ID", good, agent, otherID, tab.Arch},
		{"another architecture", good, agent, k, tab.Arch ^ 1},
		{"another agent build", good, "other-build", k, tab.Arch},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := decodeTable(tc.file, tc.agent, tc.key, tc.arch, DefaultLimits); !errors.Is(err, ErrBadCacheFile) {
				t.Fatalf("decode: %v, want ErrBadCacheFile", err)
			}
		})
	}
	if _, err := decodeTable(good, agent, k, tab.Arch, Limits{MaxRows: len(tab.Rows) - 1}); !errors.Is(err, ErrBadCacheFile) {
		t.Fatalf("more rows than the limit: %v, want ErrBadCacheFile", err)
	}
	c, err := OpenDiskCache(t.TempDir(), 1<<30)
	if err != nil {
		t.Fatal(err)
	}
	path := c.path(k, hostArch)
	own := encodeTable(c.agent, k, tab)
	if err := os.WriteFile(path, own[:len(own)-1], 0o600); err != nil {
		t.Fatal(err)
	}
	if c.load(k, DefaultLimits) != nil {
		t.Fatal("a damaged file loaded")
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatalf("damaged file kept: %v", err)
	}
}

// TestDiskCacheBound: past its bound the cache removes the least recently
// used files; a load counts as a use.
func TestDiskCacheBound(t *testing.T) {
	kx, xz := keyedTable(t, "/usr/bin/xz")
	kl, libc := keyedTable(t, "/lib/x86_64-linux-gnu/libc.so.6")
	kp, py := keyedTable(t, python3Path(t))
	c, err := OpenDiskCache(t.TempDir(), 0)
	if err != nil {
		t.Fatal(err)
	}
	size := func(k Key, tab *Table) int64 { return int64(len(encodeTable(c.agent, k, tab))) }
	// Room for libc and python3 or libc and xz, not all three.
	c.maxBytes = size(kl, libc) + size(kp, py)
	for _, kt := range []struct {
		k   Key
		tab *Table
	}{{kx, xz}, {kl, libc}} {
		if err := c.store(kt.k, kt.tab); err != nil {
			t.Fatal(err)
		}
	}
	// xz was stored first but used since: python3 takes libc's room.
	for i, k := range []Key{kx, kl} {
		at := time.Now().Add(time.Duration(i-2) * time.Hour)
		if err := os.Chtimes(c.path(k, hostArch), at, at); err != nil {
			t.Fatal(err)
		}
	}
	if c.load(kx, DefaultLimits) == nil {
		t.Fatal("xz not loaded")
	}
	if err := c.store(kp, py); err != nil {
		t.Fatal(err)
	}
	if c.load(kl, DefaultLimits) != nil {
		t.Fatal("libc, the least recently used, kept past the bound")
	}
	if c.load(kx, DefaultLimits) == nil || c.load(kp, DefaultLimits) == nil {
		t.Fatal("xz or python3 removed")
	}
}

// TestRegistryDiskCache: a second registry (an agent restarted) over the
// same cache compiles nothing for a process whose files the first one met,
// and loads the same rows.
func TestRegistryDiskCache(t *testing.T) {
	testenv.Root(t) // map_files
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	fs := proc.FS{Root: "/proc"}
	dir := t.TempDir()
	pid := startProcess(t, python3Path(t), "-c", "import time; time.sleep(60)")
	rows := func(r *Registry, l *fakeLoader) (Prepared, map[Key][]Row) {
		p, err := r.Prepare(pid, true, false)
		if err != nil {
			t.Fatal(err)
		}
		out := map[Key][]Row{}
		for _, pm := range p.mappings {
			if pm.table != nil {
				out[pm.key] = pm.table.Rows
			}
		}
		if err := r.Commit(p); err != nil {
			t.Fatal(err)
		}
		return p, out
	}
	var first map[Key][]Row
	for i := range 2 {
		c, err := OpenDiskCache(dir, 1<<30)
		if err != nil {
			t.Fatal(err)
		}
		l := newFakeLoader(1 << 22)
		r := NewRegistry(log, fs, l, DefaultLimits)
		r.UseDiskCache(c)
		p, got := rows(r, l)
		t.Logf("registry %d: %d compiled, %d from the cache, %d failed", i, p.Compiled, p.Cached, p.Failed)
		if i == 0 {
			if p.Compiled < 3 || p.Cached != 0 {
				t.Fatalf("first registry: %d compiled, %d cached", p.Compiled, p.Cached)
			}
			first = got
			continue
		}
		// The vDSO's table is built from memory (not counted), never cached.
		if p.Compiled != 0 || p.Cached != len(first)-1 {
			t.Fatalf("second registry: %d compiled, %d cached, want 0 and %d", p.Compiled, p.Cached, len(first)-1)
		}
		for k, r := range first {
			if !slices.Equal(got[k], r) {
				t.Fatalf("%s: %d rows from the cache, %d compiled", k.BuildID, len(got[k]), len(r))
			}
		}
		if st := r.Stats(); st.Tables != len(first) {
			t.Fatalf("stats %+v, want %d tables", st, len(first))
		}
	}
}

func FuzzDecodeTable(f *testing.F) {
	k := Key{BuildID: "0123456789abcdef", Loads: "\x00\x01"}
	f.Add(encodeTable("agent", k, &Table{Rows: []Row{{PC: 16, Rule: RuleRSP, Offset: 1}, {PC: 32, Rule: RuleRBP, RBP: -2, Offset: 2}}, Loads: []Load{{Offset: 0, Vaddr: 0, FileSize: 4096}}}))
	f.Add([]byte(cacheMagic))
	f.Fuzz(func(t *testing.T, b []byte) {
		tab, err := decodeTable(b, "agent", k, ArchX86_64, Limits{MaxRows: 1 << 16})
		if err != nil {
			if !errors.Is(err, ErrBadCacheFile) {
				t.Fatalf("error %v is not ErrBadCacheFile", err)
			}
			return
		}
		if !bytes.Equal(encodeTable("agent", k, tab), b) {
			t.Fatal("decoded table encodes to other bytes")
		}
	})
}
