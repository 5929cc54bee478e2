package aggregate

import (
	"fmt"
	"math"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stackstream/stackstream/pkg/pproftest"
	"github.com/stackstream/stackstream/pkg/pprofx"
	"github.com/stackstream/stackstream/schemas/indices"
	"github.com/stackstream/stackstream/schemas/record"
)

// TestStackCacheCharged: the partitions sharing a Budget share one stack
// cache (a stack seen by one is a hit in the other), its bytes are charged
// to the Budget, and it gives way to the state: a Budget that holds the
// state of a profile but not the cache too drops the cache instead of
// refusing the profile.
func TestStackCacheCharged(t *testing.T) {
	profs, hostOf := fleetProfiles(2, 1)
	b := &Budget{MaxBytes: math.MaxInt64}
	cfg := testConfig()
	cfg.Budget = b
	p0, p1 := NewPartition(cfg, Checkpoint{}), NewPartition(cfg, Checkpoint{})
	if _, err := p0.Add(Input{Profile: profs[0], Type: record.ProfileCPU, Host: hostOf[0]}); err != nil {
		t.Fatal(err)
	}
	cached := p0.stacks.bytes
	if cached == 0 || b.Used() != p0.bytes+cached || b.CacheBytes() != cached {
		t.Fatalf("charged %d, want the state %d + the cache %d", b.Used(), p0.bytes, cached)
	}
	// The same stacks on another host of another partition: all hits.
	n := p1.stacks.n
	if _, err := p1.Add(Input{Profile: profs[0], Type: record.ProfileCPU, Host: "other"}); err != nil {
		t.Fatal(err)
	}
	if p1.stacks != p0.stacks || p1.stacks.n != n {
		t.Fatalf("the second partition cached %d stacks again", p1.stacks.n-n)
	}
	// A budget with room for the state of the next profile only: the
	// cache goes, the profile is folded in.
	b.MaxBytes = b.Used() - cached + p0.newBytes(nil, 0) + 1<<20
	before := p0.bytes
	if _, err := p0.Add(Input{Profile: profs[1], Type: record.ProfileCPU, Host: hostOf[1], Offset: 1}); err != nil {
		t.Fatalf("with the cache dropped the state fits: %v", err)
	}
	if p0.bytes == before || b.Used() > b.MaxBytes {
		t.Fatalf("state %d -> %d, charged %d of %d", before, p0.bytes, b.Used(), b.MaxBytes)
	}
	if b.Used() != p0.bytes+p1.bytes+p0.stacks.bytes {
		t.Fatalf("charged %d, want state %d + %d and cache %d", b.Used(), p0.bytes, p1.bytes, p0.stacks.bytes)
	}
}

// TestStackCacheBound: the Budget's CacheMaxBytes bounds the cache by
// itself, whatever room the Budget has: past it, the cache gives way and
// keeps what it held last under the bound.
func TestStackCacheBound(t *testing.T) {
	profs, hostOf := fleetProfiles(20, 3)
	b := &Budget{MaxBytes: math.MaxInt64, CacheMaxBytes: 1 << 20}
	cfg := testConfig()
	cfg.Budget = b
	p := NewPartition(cfg, Checkpoint{})
	var peak int64
	for i, prof := range profs {
		if _, err := p.Add(Input{Profile: prof, Type: record.ProfileCPU, Host: hostOf[i], Offset: int64(i)}); err != nil {
			t.Fatal(err)
		}
		peak = max(peak, b.CacheBytes())
		if b.CacheBytes() > b.CacheMaxBytes {
			t.Fatalf("profile %d: the cache holds %d bytes, bound %d", i, b.CacheBytes(), b.CacheMaxBytes)
		}
	}
	st := b.CacheStats()
	t.Logf("%d profiles: cache peak %d bytes, %d stacks held, built %d, gave way %d, resets %d", len(profs), peak, p.stacks.n, st.Built, st.GaveWay, st.Resets)
	if st.GaveWay == 0 || p.stacks.n == 0 || peak < b.CacheMaxBytes/2 {
		t.Fatalf("the cache never reached its bound (peak %d of %d, gave way %d times, %d held)", peak, b.CacheMaxBytes, st.GaveWay, p.stacks.n)
	}
	// Without a bound set, the default.
	if c := newStackCache(&Budget{MaxBytes: math.MaxInt64}); c.maxBytes != DefaultStackCacheBytes {
		t.Fatalf("default bound %d, want %d", c.maxBytes, DefaultStackCacheBytes)
	}
}

// TestStackCacheGivesWayInPart: giving way to the state drops what it must
// and an eighth of the stacks' bytes more, not the whole cache, and the
// charge stays the stacks held and the frame table; giving way more than
// the stacks hold drops the table too.
func TestStackCacheGivesWayInPart(t *testing.T) {
	profs, hostOf := fleetProfiles(4, 1)
	b := &Budget{MaxBytes: math.MaxInt64}
	cfg := testConfig()
	cfg.Budget = b
	p := NewPartition(cfg, Checkpoint{})
	for i, prof := range profs {
		if _, err := p.Add(Input{Profile: prof, Type: record.ProfileCPU, Host: hostOf[i], Offset: int64(i)}); err != nil {
			t.Fatal(err)
		}
	}
	c := p.stacks
	n, bytes, used := c.n, c.bytes, b.Used()
	if n < 100 {
		t.Fatalf("%d stacks cached", n)
	}
	// Every stack cached was built once; nothing gave way yet.
	if st := b.CacheStats(); st.Built != int64(n) || st.GaveWay != 0 || st.Resets != 0 {
		t.Fatalf("stats %+v after caching %d stacks in an unbounded budget", st, n)
	}
	stacks := bytes - c.tableBytes
	c.giveWay(stacks / 10)
	freed := bytes - c.bytes
	if freed < stacks/10 || freed > stacks/10+stacks/8+stacks/20 || c.n == 0 || c.n == n {
		t.Fatalf("gave %d of %d bytes of stacks (%d -> %d stacks) for %d", freed, stacks, n, c.n, stacks/10)
	}
	var held int64
	for _, st := range c.m {
		held += st.cachedBytes
	}
	if held+c.tableBytes != c.bytes || len(c.m) != c.n || b.Used() != used-freed {
		t.Fatalf("held %d, charged %d; %d entries, %d counted; budget %d, want %d", held, c.bytes, len(c.m), c.n, b.Used(), used-freed)
	}
	// All the stacks: the table stays.
	c.giveWay(c.bytes - c.tableBytes)
	if c.n != 0 || len(c.m) != 0 || c.bytes != c.tableBytes || len(c.table.frames) == 0 || b.Used() != used-bytes+c.tableBytes {
		t.Fatalf("after giving way all the stacks: %d stacks, %d bytes (table %d), %d frames, budget %d", c.n, c.bytes, c.tableBytes, len(c.table.frames), b.Used())
	}
	if st := b.CacheStats(); st.GaveWay != 2 || st.Resets != 0 {
		t.Fatalf("stats %+v after giving way twice in part", st)
	}
	// More than the stacks hold: the table goes too.
	c.giveWay(1)
	if c.n != 0 || c.bytes != 0 || len(c.table.frames) != 0 || b.Used() != used-bytes {
		t.Fatalf("after giving way more than the stacks: %d stacks, %d bytes, %d frames, budget %d", c.n, c.bytes, len(c.table.frames), b.Used())
	}
	if st := b.CacheStats(); st.GaveWay != 3 || st.Resets != 1 || st.Built != int64(n) {
		t.Fatalf("stats %+v after a reset, want 3 give-ways, 1 reset, %d built", st, n)
	}
}

// TestStackCacheKeepsUsedStacks: a cache held full by its Budget, into
// which new stacks come every round beside a set of stacks used every
// round, gives way with the new ones: after the first round none of the
// used set is built again, and the charge stays what is held. Dropping
// stacks in the map's order (until 2026-12-02) built 7,005 of the used
// set's 20,000 again.
func TestStackCacheKeepsUsedStacks(t *testing.T) {
	const hot, coldPerRound, rounds = 500, 200, 40
	// Stack i; the others' frames are those of the used set, as a new
	// stack's are mostly known: the frame table does not grow.
	stack := func(i int) (key [2]uint64, frames []indices.Frame) {
		for j := range 20 {
			frames = append(frames, indices.Frame{Function: fmt.Sprintf("f%d.%d", i%hot, j), File: "a.go", Line: int64(j)})
		}
		return [2]uint64{uint64(i), 1}, frames
	}
	b := &Budget{MaxBytes: math.MaxInt64}
	c := newStackCache(b)
	for i := range hot {
		c.add(stack(i))
	}
	// Room for the used set and as many others, table included.
	b.MaxBytes = 2*c.bytes - c.tableBytes
	next, built := hot, 0
	for round := range rounds {
		for i := range hot {
			key, frames := stack(i)
			if c.get(key) == nil {
				c.add(key, frames)
				built++
			}
		}
		for range coldPerRound {
			c.add(stack(next))
			next++
		}
		if round == 0 && built > 0 {
			t.Fatalf("the first round built %d of the used stacks again", built)
		}
		var held int64
		for _, st := range c.m {
			held += st.cachedBytes
		}
		if held+c.tableBytes != c.bytes || len(c.m) != c.n || b.Used() != c.bytes || b.Used() > b.MaxBytes {
			t.Fatalf("round %d: held %d + table %d, charged %d; %d entries, %d counted; budget %d of %d",
				round, held, c.tableBytes, c.bytes, len(c.m), c.n, b.Used(), b.MaxBytes)
		}
	}
	t.Logf("%d of %d stacks held, %d generations", c.n, next, c.gen)
	if c.n >= next {
		t.Fatalf("the cache held all %d stacks: it never gave way", next)
	}
	if built > 0 {
		t.Fatalf("the used stacks were built again %d times in %d rounds", built, rounds)
	}
}

// wireRecords are fleet profiles as the symbolizer stores them, with the
// loadgen corpus's CPU records (their locations inlined, unresolved,
// kernel and interpreter frames).
func wireRecords(t testing.TB, hosts, intervals int) [][]byte {
	profs, _ := fleetProfiles(hosts, intervals)
	var out [][]byte
	for _, p := range profs {
		out = append(out, stored(t, p))
	}
	for _, r := range corpusRecords(t) {
		if r.typ == record.ProfileCPU {
			out = append(out, r.value)
		}
	}
	return out
}

// TestWireStacksNamedAsFrames: a stack built from its locations' kept
// frames (wireStack) has the ID, the table frames and the trie bound of
// the same stack built from its frames (as google/pprof's profile names
// them), whether its locations were kept by earlier stacks or not, and
// after the cache was dropped in the middle of a profile; and the
// locations kept are charged as the table is.
func TestWireStacksNamedAsFrames(t *testing.T) {
	values := wireRecords(t, 10, 3)
	p := NewPartition(testConfig(), Checkpoint{})
	dec := NewDecoder(record.Limits{})
	var built, reused, samples int
	for _, v := range values {
		in, err := dec.Decode(v)
		if err != nil || in.Wire == nil {
			t.Fatalf("decoded %v, %v", in.Wire != nil, err)
		}
		prof, err := record.DecodeProfileLimits(v, record.DefaultLimits())
		if err != nil {
			t.Fatal(err)
		}
		w := in.Wire
		if len(w.sampleRows) != len(prof.Sample) {
			t.Fatalf("%d rows, %d samples", len(w.sampleRows), len(prof.Sample))
		}
		for i, row := range w.sampleRows {
			if row.locs[1] == row.locs[0] {
				continue
			}
			locs := w.locs[row.locs[0]:row.locs[1]]
			if samples++; samples%997 == 0 {
				// Dropped in the middle of a profile: the locations
				// the profile looked up (Wire.locFrames) go too.
				p.stacks.reset()
			}
			n, kept := p.stacks.n, len(p.stacks.locs)
			st := p.wireStack(w, locs)
			if p.stacks.n > n {
				built++
				if len(p.stacks.locs)-kept < len(locs) {
					reused++
				}
			}
			frames := pprofx.StackFrames(prof.Sample[i])
			if st.id != indices.StackID(frames) {
				t.Fatalf("stack %d: ID %s, of its frames %s", i, st.id, indices.StackID(frames))
			}
			if len(st.frames.ids) != len(frames) {
				t.Fatalf("stack %d: %d frames, want %d", i, len(st.frames.ids), len(frames))
			}
			for j, id := range st.frames.ids {
				if got, want := st.frames.table.frames[id], trieFrame(frames[j]); got != want {
					t.Fatalf("stack %d frame %d: %+v, want %+v", i, j, got, want)
				}
			}
			if want := (*frameTrie)(nil).cost(st.frames); st.trieBound != want {
				t.Fatalf("stack %d: trie bound %d, want %d", i, st.trieBound, want)
			}
		}
	}
	c := p.stacks
	var tableBytes, held int64
	for _, f := range c.table.frames {
		tableBytes += frameCost(f)
	}
	for _, lf := range c.locs {
		tableBytes += locBytes(lf)
	}
	for _, st := range c.m {
		held += st.cachedBytes
	}
	t.Logf("%d stacks built, %d of them from a location kept before; %d locations, %d frames", built, reused, len(c.locs), len(c.table.frames))
	if built < 100 || reused < built/2 || tableBytes != c.tableBytes || held+c.tableBytes != c.bytes {
		t.Fatalf("%d stacks built (%d reusing locations); table charged %d, counted %d; cache charged %d, counted %d",
			built, reused, c.tableBytes, tableBytes, c.bytes, held+c.tableBytes)
	}
}

// TestLocationBytesBound: what the stack cache holds of the stacks built
// from a Wire (the stacks, the frame table, the locations kept) is at
// most what it charges.
func TestLocationBytesBound(t *testing.T) {
	values := wireRecords(t, 10, 6)
	dec := NewDecoder(record.Limits{})
	if _, err := dec.Decode(values[0]); err != nil {
		t.Fatal(err)
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	p := NewPartition(testConfig(), Checkpoint{})
	for _, v := range values {
		in, err := dec.Decode(v)
		if err != nil || in.Wire == nil {
			t.Fatalf("decoded %v, %v", in.Wire != nil, err)
		}
		w := in.Wire
		for _, row := range w.sampleRows {
			if row.locs[1] > row.locs[0] {
				p.wireStack(w, w.locs[row.locs[0]:row.locs[1]])
			}
		}
	}
	p.frames, p.keyBuf, p.locKey = nil, nil, nil
	runtime.GC()
	runtime.ReadMemStats(&after)
	// The decoder's buffers, grown by the larger profiles, are counted
	// as held: an overstatement.
	held := int64(after.HeapAlloc) - int64(before.HeapAlloc)
	c := p.stacks
	t.Logf("%d stacks, %d frames, %d locations: held %d bytes, counted %d (%.0f%%), of which the table and locations %d", c.n, len(c.table.frames), len(c.locs), held, c.bytes, 100*float64(held)/float64(c.bytes), c.tableBytes)
	if held > c.bytes {
		t.Fatalf("the stack cache holds %d bytes, counted %d", held, c.bytes)
	}
	runtime.KeepAlive(p)
	runtime.KeepAlive(dec)
	runtime.KeepAlive(values)
}

// TestLongStackID: a stack whose text passes what the cache holds at once
// (maxStackTextBytes: long names, deep recursion) has the ID of its
// frames, through a Wire and through google/pprof's profile.
func TestLongStackID(t *testing.T) {
	long := func(i int) string { return fmt.Sprintf("%s.f%d", strings.Repeat("n", 4000), i) }
	b := pproftest.NewCPU(t0, 10*time.Second)
	var deep, wide []string
	for i := range 300 {
		deep = append(deep, long(0))
		wide = append(wide, long(i))
	}
	b.Sample(svc("a"), []int64{1, 1}, deep...)
	b.Sample(svc("a"), []int64{1, 1}, wide...)
	b.Sample(svc("a"), []int64{1, 1}, "short", "main")
	prof := b.Profile()
	in, err := NewDecoder(record.Limits{}).Decode(stored(t, prof))
	if err != nil || in.Wire == nil {
		t.Fatalf("decoded %v, %v", in.Wire != nil, err)
	}
	w := in.Wire
	p, general := NewPartition(testConfig(), Checkpoint{}), NewPartition(testConfig(), Checkpoint{})
	for i, row := range w.sampleRows {
		want := indices.StackID(pprofx.StackFrames(prof.Sample[i]))
		if got := p.wireStack(w, w.locs[row.locs[0]:row.locs[1]]).id; got != want {
			t.Errorf("stack %d from the wire: %s, want %s", i, got, want)
		}
		if got := general.stack(prof.Sample[i]).id; got != want {
			t.Errorf("stack %d from the profile: %s, want %s", i, got, want)
		}
	}
	if len(p.stacks.text) > maxStackTextBytes {
		t.Errorf("held %d bytes of a stack's text", len(p.stacks.text))
	}
}
