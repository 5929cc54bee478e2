package source

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"testing"

	"github.com/stackstream/stackstream/schemas/debuginfo"
	"github.com/stackstream/stackstream/services/symbolizer/internal/symtab"
)

func symbolsValue(t testing.TB, buildID string, nsym, nline int) []byte {
	t.Helper()
	f := &debuginfo.File{BuildID: buildID, Kind: debuginfo.KindSymbols,
		Segments: []debuginfo.Segment{{Offset: 0, Vaddr: 0x1000, Filesz: 0x100000}}}
	for i := 0; i < nsym; i++ {
		f.Symbols = append(f.Symbols, debuginfo.Symbol{Addr: 0x1000 + uint64(i)*16, Size: 16, Name: fmt.Sprintf("fn%d", i)})
	}
	for i := 0; i < nline; i++ {
		f.Lines = append(f.Lines, debuginfo.Line{Addr: 0x1000 + uint64(i)*16, File: "a.c", Line: uint32(i + 1)})
	}
	v, err := debuginfo.Encode(f)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestTopicIntegrity: a value is held only under its own build ID, and
// nothing poorer replaces a table already held.
func TestTopicIntegrity(t *testing.T) {
	ctx := context.Background()
	id := "aa11"
	rich := symbolsValue(t, id, 10, 10)
	for _, tc := range []struct {
		name    string
		key     string
		value   []byte
		wantErr error // nil: accepted
	}{
		{"value without a build id under any key", id, symbolsValue(t, "", 20, 20), debuginfo.ErrBadFormat},
		{"value of another build id", id, symbolsValue(t, "bb22", 20, 20), debuginfo.ErrBadFormat},
		{"key that is no build id", "../x", symbolsValue(t, "../x", 20, 20), debuginfo.ErrBadFormat},
		{"fewer symbols", id, symbolsValue(t, id, 9, 100), ErrNotRicher},
		{"as many symbols, fewer lines", id, symbolsValue(t, id, 10, 9), ErrNotRicher},
		{"no symbols marker", id, debuginfo.Marker(id, debuginfo.KindNoSymbols), ErrNotRicher},
		{"too large marker", id, debuginfo.Marker(id, debuginfo.KindTooLarge), ErrNotRicher},
		{"tombstone", id, nil, ErrNotRicher},
		{"same value again", id, rich, nil},
		{"more symbols", id, symbolsValue(t, id, 11, 0), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			store := NewTopic(1<<20, nil)
			if err := store.Apply([]byte(id), rich); err != nil {
				t.Fatal(err)
			}
			err := store.Apply([]byte(tc.key), tc.value)
			if !errors.Is(err, tc.wantErr) || (tc.wantErr == nil) != (err == nil) {
				t.Fatalf("Apply: %v, want %v", err, tc.wantErr)
			}
			tab, ferr := store.Fetch(ctx, id)
			if ferr != nil {
				t.Fatalf("table of %s gone: %v", id, ferr)
			}
			want := 10
			if tc.wantErr == nil && tc.name == "more symbols" {
				want = 11
			}
			if n := countSymbols(tab); n != want {
				t.Fatalf("table has %d symbols, want %d", n, want)
			}
		})
	}
}

func countSymbols(tab *symtab.Table) int {
	n := 0
	for i := 0; i < 64; i++ {
		if len(tab.Lookup(0x1000+uint64(i)*16)) > 0 {
			n++
		}
	}
	return n
}

// TestTopicBoundedByBytes: values over MaxEncodedBytes are refused, and a
// flood of markers (which hold no value) still counts against the budget.
func TestTopicBoundedByBytes(t *testing.T) {
	const budget = 32 << 10
	store := NewTopic(budget, nil)
	big := make([]byte, debuginfo.MaxEncodedBytes+1)
	if err := store.Apply([]byte("aa11"), big); !errors.Is(err, debuginfo.ErrTooLarge) {
		t.Fatalf("value of %d bytes: %v", len(big), err)
	}
	for i := 0; i < 1000; i++ {
		id := fmt.Sprintf("%040x", i)
		if err := store.Apply([]byte(id), debuginfo.Marker(id, debuginfo.KindNoSymbols)); err != nil {
			t.Fatal(err)
		}
	}
	if store.Bytes() > budget || store.Len() >= 1000 {
		t.Fatalf("%d markers held in %d bytes, budget %d", store.Len(), store.Bytes(), budget)
	}
}

// TestTopicBytesCoverHeap: what the store charges covers the heap its
// values and their bookkeeping take, from tiny values to large ones.
func TestTopicBytesCoverHeap(t *testing.T) {
	for _, nsym := range []int{10, 60, 300, 1000} {
		t.Run(fmt.Sprintf("%d symbols", nsym), func(t *testing.T) {
			// More than the budget holds: about 15 bytes a symbol.
			vals := make([][]byte, min(3000, (4<<20)/(15*nsym)))
			for i := range vals {
				vals[i] = symbolsValue(t, fmt.Sprintf("%040x", i), nsym, 0)
			}
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			store := NewTopic(1<<20, nil)
			for i, v := range vals {
				if err := store.Apply([]byte(fmt.Sprintf("%040x", i)), v); err != nil {
					t.Fatal(err)
				}
			}
			runtime.GC()
			runtime.ReadMemStats(&after)
			heap := int(after.HeapAlloc) - int(before.HeapAlloc)
			t.Logf("values of %d bytes: %d held, charged %d, heap %d", len(vals[0]), store.Len(), store.Bytes(), heap)
			if heap > store.Bytes() || store.Bytes() > 1<<20 {
				t.Fatalf("%d values of %d bytes take %d bytes of heap, charged %d, budget %d", store.Len(), len(vals[0]), heap, store.Bytes(), 1<<20)
			}
			runtime.KeepAlive(vals)
			runtime.KeepAlive(store)
		})
	}
}

type tableSource struct{ nsym int }

func (tableSource) Name() string { return "fake" }
func (s tableSource) Fetch(_ context.Context, id string) (*symtab.Table, error) {
	f := &debuginfo.File{BuildID: id, Kind: debuginfo.KindSymbols}
	for i := 0; i < s.nsym; i++ {
		f.Symbols = append(f.Symbols, debuginfo.Symbol{Addr: uint64(i) * 16, Size: 16, Name: fmt.Sprintf("function_with_a_long_name_%d", i)})
	}
	return symtab.FromDebuginfo(f, "fake"), nil
}

// TestChainBoundedByBytes: tables are evicted by their estimated bytes,
// not only by their count.
func TestChainBoundedByBytes(t *testing.T) {
	const limit = 4 << 20
	chain := NewChain(Options{MaxTables: 1000, MaxTableBytes: limit}, tableSource{nsym: 20_000})
	one := chain.Table(context.Background(), "0001")
	if one.Bytes() < 1<<20 {
		t.Fatalf("a table of 20,000 symbols estimated at %d bytes", one.Bytes())
	}
	for i := 0; i < 20; i++ {
		chain.Table(context.Background(), fmt.Sprintf("%04x", i+2))
	}
	if n := chain.TableBytes(); n > limit {
		t.Fatalf("chain holds %d bytes of tables, limit %d", n, limit)
	}
}

// TestChainBoundedAsCachesGrow: tables that stay in use grow their address
// caches with every new address; the byte budget holds without any table
// being added. Before the budget was checked on use, four tables of 2,000
// symbols grew to 4 MB against a 1 MiB budget.
func TestChainBoundedAsCachesGrow(t *testing.T) {
	const limit = 1 << 20
	ctx := context.Background()
	chain := NewChain(Options{MaxTables: 1000, MaxTableBytes: limit}, tableSource{nsym: 2000})
	ids := []string{"0001", "0002", "0003", "0004"}
	// Each round looks up 250 addresses per table not looked up before
	// (symbols are 16 bytes, offset r into them), as a symbolizer does
	// under a fleet whose stacks keep changing.
	for r := range 16 {
		for _, id := range ids {
			tab := chain.Table(ctx, id)
			for i := range 250 {
				tab.Lookup(uint64(i)*16 + uint64(r))
			}
		}
	}
	for _, id := range ids {
		chain.Table(ctx, id)
	}
	if n := chain.TableBytes(); n > limit {
		t.Fatalf("chain holds %d bytes of tables (%d tables), limit %d", n, chain.Stats().Tables, limit)
	}
	if f := chain.Stats().Fetches; f == len(ids) {
		t.Fatalf("no table evicted and fetched again (%d fetches): the caches did not outgrow the budget", f)
	}
}

// FuzzTopicApply applies arbitrary values (seeded with real ones, markers,
// and gzip of raw bytes) under arbitrary keys after a rich value: no
// panic, the rich value is never replaced by a poorer one, the store stays
// in its byte budget, and one Apply allocates a bounded amount.
func FuzzTopicApply(f *testing.F) {
	rich := symbolsValue(f, "aa11", 50, 50)
	f.Add("aa11", rich)
	f.Add("aa11", symbolsValue(f, "aa11", 60, 0))
	f.Add("aa11", debuginfo.Marker("aa11", debuginfo.KindTooLarge))
	f.Add("bb22", debuginfo.Marker("bb22", debuginfo.KindNoSymbols))
	f.Add("aa11", symbolsValue(f, "", 80, 80))
	var raw bytes.Buffer
	zw := gzip.NewWriter(&raw)
	zw.Write([]byte("SSDI\x01\x01\x04aa11\xff\xff\xff\xff\x0f"))
	zw.Close()
	f.Add("aa11", raw.Bytes())
	noise := make([]byte, 256)
	rand.Read(noise)
	f.Add("cc33", noise)
	const budget = 256 << 10
	f.Fuzz(func(t *testing.T, key string, value []byte) {
		store := NewTopic(budget, nil)
		if err := store.Apply([]byte("aa11"), rich); err != nil {
			t.Fatal(err)
		}
		before := testingAllocs()
		store.Apply([]byte(key), value)
		// gzip inflates at most about 1,000-fold, and the format's counts
		// are checked against the bytes left: what one Apply allocates is
		// bounded by its input.
		if a := testingAllocs() - before; a > 1<<20+20_000*uint64(len(value)) {
			t.Fatalf("one Apply of %d bytes allocated %d bytes", len(value), a)
		}
		if store.Bytes() > budget {
			t.Fatalf("store holds %d bytes, budget %d", store.Bytes(), budget)
		}
		tab, err := store.Fetch(context.Background(), "aa11")
		if err != nil {
			t.Fatalf("rich value replaced: %v", err)
		}
		if n := countSymbols(tab); n < 50 {
			t.Fatalf("rich value replaced by one with %d symbols", n)
		}
	})
}

func testingAllocs() uint64 {
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.TotalAlloc
}

// TestTopicCopiesValues: a record's value is a slice of its fetched batch;
// the store keeps a copy, so it neither holds the batch nor sees it reused.
func TestTopicCopiesValues(t *testing.T) {
	v := symbolsValue(t, "aa11", 10, 10)
	batch := append(append(make([]byte, 0, 3*len(v)), make([]byte, len(v))...), v...)
	store := NewTopic(1<<20, nil)
	if err := store.Apply([]byte("aa11"), batch[len(v):]); err != nil {
		t.Fatal(err)
	}
	clear(batch)
	if _, err := store.Fetch(context.Background(), "aa11"); err != nil {
		t.Fatalf("value changed with its batch: %v", err)
	}
}

// TestChainFallbackOfEvictedTable: a fallback looked up for a table the
// chain has evicted meanwhile (another record's lookup pushed it out) is
// not kept, or the evicted table would stay in memory as its key.
func TestChainFallbackOfEvictedTable(t *testing.T) {
	chain := NewChain(Options{MaxTables: 1}, tableSource{nsym: 10}, tableSource{nsym: 10})
	ctx := context.Background()
	a := chain.Table(ctx, "aa11")
	chain.Table(ctx, "bb22") // evicts aa11
	chain.Fallback(ctx, a)
	b := chain.Table(ctx, "bb22")
	chain.Fallback(ctx, b)
	chain.mu.Lock()
	defer chain.mu.Unlock()
	if _, ok := chain.fallbacks[a]; ok || len(chain.fallbacks) != 1 {
		t.Fatalf("fallbacks kept for %d tables, the evicted one included: %v", len(chain.fallbacks), ok)
	}
}

// gatedSource answers only once release is closed, counting its calls.
type gatedSource struct {
	release chan struct{}
	mu      sync.Mutex
	calls   int
}

func (*gatedSource) Name() string { return "gated" }
func (g *gatedSource) Fetch(ctx context.Context, id string) (*symtab.Table, error) {
	g.mu.Lock()
	g.calls++
	g.mu.Unlock()
	select {
	case <-g.release:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return tableSource{nsym: 10}.Fetch(ctx, id)
}

// TestFallbackOutlivesItsCaller: a record that stops waiting for a
// fallback (its budget ended) leaves the fetch running; its answer is kept
// for the next record instead of being fetched again.
func TestFallbackOutlivesItsCaller(t *testing.T) {
	gated := &gatedSource{release: make(chan struct{})}
	chain := NewChain(Options{MaxTables: 10}, tableSource{nsym: 1}, gated)
	defer chain.Close()
	tab := chain.Table(context.Background(), "aa11")
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		for {
			gated.mu.Lock()
			started := gated.calls > 0
			gated.mu.Unlock()
			if started {
				cancel()
				return
			}
			runtime.Gosched()
		}
	}()
	if fb := chain.Fallback(ctx, tab); fb != nil {
		t.Fatal("fallback answered before its source did")
	}
	close(gated.release)
	if fb := chain.Fallback(context.Background(), tab); fb == nil || fb.Source != "gated" {
		t.Fatalf("fallback: %+v", fb)
	}
	if gated.calls != 1 {
		t.Fatalf("source asked %d times, want once", gated.calls)
	}
}
