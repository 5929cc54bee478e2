package aggregate

import (
	"errors"
	"fmt"
	"math"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/google/pprof/profile"

	"github.com/stackstream/stackstream/pkg/pproftest"
	"github.com/stackstream/stackstream/schemas/record"
)

// TestAddRejectsTimeOutOfRange: 1970 and 2262 each used to create a monthly
// rollups index (and the 2262 one moved the watermark, closing every
// window of the partition); the window is [now-MaxAge, now+MaxClockSkew].
func TestAddRejectsTimeOutOfRange(t *testing.T) {
	now := t0.Add(24 * time.Hour)
	cfg := testConfig()
	cfg.MaxAge, cfg.MaxClockSkew = 7*24*time.Hour, 10*time.Minute
	tests := []struct {
		name string
		at   int64
		ok   bool
	}{
		{"1970", 1, false},
		{"2262", math.MaxInt64, false},
		{"just older than max age", now.Add(-7*24*time.Hour - time.Nanosecond).UnixNano(), false},
		{"max age", now.Add(-7 * 24 * time.Hour).UnixNano(), true},
		{"max skew", now.Add(10 * time.Minute).UnixNano(), true},
		{"past max skew", now.Add(10*time.Minute + time.Nanosecond).UnixNano(), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := NewPartition(cfg, Checkpoint{})
			prof := cpu(t0)
			prof.TimeNanos = tt.at
			_, err := p.Add(Input{Profile: prof, Type: record.ProfileCPU, Host: "web-1"})
			if tt.ok != (err == nil) || (!tt.ok && !errors.Is(err, record.ErrTimeOutOfRange)) {
				t.Fatalf("Add at %d = %v, want ok=%v or ErrTimeOutOfRange", tt.at, err, tt.ok)
			}
			if !tt.ok && (p.Watermark().UnixNano() != 0 || p.OpenWindows() != 0) {
				t.Fatalf("a refused profile moved the watermark to %s or opened %d windows", p.Watermark(), p.OpenWindows())
			}
		})
	}
}

// flood is a CPU profile of n distinct stacks of distinct functions under
// one service per profile: what a hostile producer sends to grow the state.
func flood(at time.Time, seq, n int) *profile.Profile {
	b := pproftest.NewCPU(at, 10*time.Second)
	for i := range n {
		f := fmt.Sprintf("f%d_%d", seq, i)
		b.Sample(svc(fmt.Sprintf("svc%d", seq)), []int64{1, 1}, f, "main")
	}
	return b.Profile()
}

// TestBudgetBoundsState: a flood of distinct functions, stacks and services
// fills the budget and no more; the profiles that would pass it are refused
// whole (ErrStateFull) and change nothing; a steady host whose documents
// exist goes on; the budget comes back as windows are written and evicted,
// and when a partition is released.
func TestBudgetBoundsState(t *testing.T) {
	cfg := testConfig()
	cfg.Budget = &Budget{MaxBytes: 1 << 20}
	p := NewPartition(cfg, Checkpoint{})
	add(t, p, cpu(t0), record.ProfileCPU, 0) // the steady host's documents exist
	refused := 0
	for i := 1; i <= 100; i++ {
		_, err := p.Add(Input{Profile: flood(t0, i, 200), Type: record.ProfileCPU, Host: "web-1", Offset: int64(i)})
		if errors.Is(err, ErrStateFull) {
			refused++
		} else if err != nil {
			t.Fatal(err)
		}
		if used := cfg.Budget.Used(); used > cfg.Budget.MaxBytes {
			t.Fatalf("after profile %d: %d bytes, budget %d", i, used, cfg.Budget.MaxBytes)
		}
	}
	if refused == 0 || refused == 100 {
		t.Fatalf("%d of 100 flood profiles refused", refused)
	}
	// The state's charge: the Budget's is that and the stack cache, which
	// gives way to the state (TestStackCacheCharged).
	full := p.bytes
	before := docsOf(p)
	// The steady host's next profile adds nothing new: it is counted.
	if _, err := p.Add(Input{Profile: cpu(t0.Add(time.Second)), Type: record.ProfileCPU, Host: "web-1", Offset: 101}); err != nil {
		t.Fatalf("steady host refused: %v", err)
	}
	if p.bytes != full || len(docsOf(p)) != len(before) {
		t.Fatalf("steady profile changed the state: %d -> %d bytes", full, p.bytes)
	}
	// A new flood profile is still refused, and changes nothing.
	if _, err := p.Add(Input{Profile: flood(t0, 999, 200), Type: record.ProfileCPU, Host: "web-1", Offset: 102}); !errors.Is(err, ErrStateFull) {
		t.Fatalf("flood profile at the limit: %v", err)
	}
	if p.bytes != full || len(docsOf(p)) != len(before) {
		t.Fatal("a refused profile changed the state")
	}
	// Windows written and evicted give their bytes back. The profile that
	// moves the watermark opens new windows, which need room the flood
	// left or not (a few KB, by how close its last profile came).
	cfg.Budget.MaxBytes += 64 << 10
	add(t, p, cpu(t0.Add(3*time.Hour)), record.ProfileCPU, 103)
	MarkStored(p.Pending(false))
	p.Evict()
	if p.bytes >= full/10 {
		t.Fatalf("after eviction %d bytes, before %d", p.bytes, full)
	}
	p.Release()
	if used := cfg.Budget.Used(); used != p.stacks.bytes {
		t.Fatalf("after release %d bytes, the stack cache %d", used, p.stacks.bytes)
	}
}

func docsOf(p *Partition) map[string]bool {
	out := map[string]bool{}
	for k, w := range p.windows {
		for sk, s := range w.series {
			for name := range s.docs {
				out[fmt.Sprint(k, sk, name)] = true
			}
			s.eachFrozen(func(id []byte, _ docState) {
				out[fmt.Sprint(k, sk, string(id))] = true
			})
			for n := range s.stacks {
				out[fmt.Sprint(k, sk, w.table.stacks[n].key.id())] = true
			}
			s.eachFrozenStack(func(n int32, _ int64) {
				out[fmt.Sprint(k, sk, w.table.stacks[n].key.id())] = true
			})
		}
	}
	return out
}

// TestStateBytesBound: what the Budget charges is above the heap the window
// state holds, for floods of short names, long names, many services, and
// memory profiles.
func TestStateBytesBound(t *testing.T) {
	if testing.Short() {
		t.Skip("holds about 100 MB")
	}
	long := strings.Repeat("x", 200)
	tests := []struct {
		name string
		prof func(i int) (*profile.Profile, record.ProfileType)
	}{
		{"distinct stacks", func(i int) (*profile.Profile, record.ProfileType) { return flood(t0, i, 1000), record.ProfileCPU }},
		{"long function names", func(i int) (*profile.Profile, record.ProfileType) {
			b := pproftest.NewCPU(t0, 10*time.Second)
			for j := range 1000 {
				b.Sample(svc("a"), []int64{1, 1}, fmt.Sprintf("%s%d_%d", long, i, j))
			}
			return b.Profile(), record.ProfileCPU
		}},
		{"distinct frames of another kind", func(i int) (*profile.Profile, record.ProfileType) {
			// Python frames: a trie keeps them by the whole frame
			// (frameTable.other), its costlier entries (trieFrameCost).
			b := pproftest.NewCPU(t0, 10*time.Second)
			py := b.Mapping(0, 0, 0, record.MappingPython, "")
			main := b.NamedLocation(py, 0, "main", "app.py", 1)
			for j := range 1000 {
				f := b.NamedLocation(py, 0, fmt.Sprintf("handle%d_%d", i, j), "app.py", int64(j))
				b.LocationSample(svc("a"), []int64{1, 1}, f, main)
			}
			return b.Profile(), record.ProfileCPU
		}},
		{"distinct services", func(i int) (*profile.Profile, record.ProfileType) {
			b := pproftest.NewCPU(t0, 10*time.Second)
			for j := range 1000 {
				b.Sample(svc(fmt.Sprintf("svc%d_%d", i, j)), []int64{1, 1}, "main")
			}
			return b.Profile(), record.ProfileCPU
		}},
		{"memory profiles", func(i int) (*profile.Profile, record.ProfileType) {
			b := pproftest.NewMemory(t0, 10*time.Second)
			for j := range 1000 {
				b.Sample(svc(fmt.Sprintf("svc%d", j)), []int64{1})
			}
			return b.Profile(), record.ProfileMemory
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := testConfig()
			cfg.Budget = &Budget{MaxBytes: math.MaxInt64}
			profs := make([]*profile.Profile, 100)
			typ := record.ProfileCPU
			for i := range profs {
				profs[i], typ = tt.prof(i)
			}
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			p := NewPartition(cfg, Checkpoint{})
			for i, prof := range profs {
				add(t, p, prof, typ, int64(i))
			}
			p.stacks.reset() // bounded on its own, its charge returned
			p.out, p.deltas, p.frames = nil, nil, nil
			runtime.GC()
			runtime.ReadMemStats(&after)
			held := int64(after.HeapAlloc) - int64(before.HeapAlloc)
			t.Logf("held %d bytes, charged %d (%.0f%%)", held, cfg.Budget.Used(), 100*float64(held)/float64(cfg.Budget.Used()))
			if held > cfg.Budget.Used() {
				t.Fatalf("state holds %d bytes, the budget charged %d", held, cfg.Budget.Used())
			}
			runtime.KeepAlive(p)
			runtime.KeepAlive(profs)
		})
	}
}

// TestBudgetNearlyFullMemory: with the budget nearly full the charge of a
// profile is looked up document by document; a memory profile of services
// not held yet used to dereference a missing document there (a panic, so
// the record went to the DLQ as "panic" instead of being counted or refused).
func TestBudgetNearlyFullMemory(t *testing.T) {
	cfg := testConfig()
	cfg.Budget = &Budget{MaxBytes: 1 << 20}
	p := NewPartition(cfg, Checkpoint{})
	// Fill until a profile is refused: the budget is then within one
	// profile's charge of its end.
	for i := 1; ; i++ {
		_, err := p.Add(Input{Profile: flood(t0, i, 50), Type: record.ProfileCPU, Host: "web-1", Offset: int64(i)})
		if errors.Is(err, ErrStateFull) {
			break
		} else if err != nil || i == 10000 {
			t.Fatalf("profile %d: %v", i, err)
		}
	}
	b := pproftest.NewMemory(t0, 10*time.Second)
	for j := range 500 {
		b.Sample(svc(fmt.Sprintf("memsvc%d", j)), []int64{int64(100 + j)})
	}
	if _, err := p.Add(Input{Profile: b.Profile(), Type: record.ProfileMemory, Host: "web-1", Offset: 5000}); err != nil && !errors.Is(err, ErrStateFull) {
		t.Fatalf("memory profile near a full budget: %v", err)
	}
	if used := cfg.Budget.Used(); used > cfg.Budget.MaxBytes {
		t.Fatalf("%d bytes used, budget %d", used, cfg.Budget.MaxBytes)
	}
}

// TestChargeSharedPrefixes: a deep profile whose stacks share a long
// prefix, folded into an hour that already has a trie, is charged about
// what it holds: each stack's own cost against the trie counted the shared
// prefix once per stack (pprof's large.cpu, 20,000 stacks, came to 277 MB
// against 62 MB held, and the e2e refused it past 256 MiB).
func TestChargeSharedPrefixes(t *testing.T) {
	cfg := testConfig()
	cfg.Budget = &Budget{MaxBytes: 32 << 20}
	p := NewPartition(cfg, Checkpoint{})
	add(t, p, cpu(t0), record.ProfileCPU, 0)
	prefix := make([]string, 200)
	for i := range prefix {
		prefix[i] = fmt.Sprintf("runtime.deep_shared_prefix_frame_%03d", i)
	}
	b := pproftest.NewCPU(t0.Add(time.Second), 10*time.Second)
	for i := range 2000 {
		b.Sample(svc("deep"), []int64{1, 1}, append([]string{fmt.Sprintf("leaf%d", i)}, prefix...)...)
	}
	before := cfg.Budget.Used()
	add(t, p, b.Profile(), record.ProfileCPU, 1)
	if held := cfg.Budget.Used() - before; held > 16<<20 {
		t.Fatalf("the deep profile holds %d bytes, want it well under the budget for this test to mean anything", held)
	}
}
