package aggregate

import (
	"math"
	"os"
	"runtime"
	"runtime/pprof"
	"testing"
	"time"

	"github.com/stackstream/stackstream/schemas/record"
)

// TestFleetStateBytes feeds an hour and 5 minutes of fleetProfiles hosts
// through one Partition as the consumer does (documents written, windows
// evicted and the offset committed after each 10-second interval of the
// fleet), then checks, as TestStateBytesBound does for floods, that the
// Budget's charge is above the heap the window state holds (minute windows,
// the hour window with its stack frames, its trees), and logs both per
// host-hour: the figure that says how many hosts the default Budget holds.
func TestFleetStateBytes(t *testing.T) {
	if testing.Short() {
		t.Skip("folds 3,900 profiles")
	}
	const hosts, intervals = 10, 390
	cfg := testConfig()
	cfg.Retention = 10 * time.Minute // the service's default
	cfg.Budget = &Budget{MaxBytes: math.MaxInt64}
	next := fleetGenerator(hosts)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	p := NewPartition(cfg, Checkpoint{})
	off := int64(0)
	peak := int64(0)
	for range intervals {
		profs, hostOf := next()
		for i, prof := range profs {
			if _, err := p.Add(Input{Profile: prof, Type: record.ProfileCPU, Host: hostOf[i], Offset: off}); err != nil {
				t.Fatalf("offset %d: %v", off, err)
			}
			off++
		}
		MarkStored(p.Pending(false))
		p.Evict()
		if o, cp, ok := p.Commit(); ok {
			p.Committed(o, cp)
		}
		peak = max(peak, p.bytes) // the window state, without the stack cache
	}
	p.out, p.deltas, p.frames = nil, nil, nil
	runtime.GC()
	runtime.ReadMemStats(&after)
	withCache := int64(after.HeapAlloc) - int64(before.HeapAlloc)
	p.stacks.reset() // bounded on its own, its charge returned
	runtime.GC()
	runtime.ReadMemStats(&after)
	held := int64(after.HeapAlloc) - int64(before.HeapAlloc)
	used := cfg.Budget.Used() // the cache's charge was returned with it
	t.Logf("%d hosts, %d windows: held %d bytes (%d with the stack cache), charged %d (%.0f%%), peak charge %d; per host: held %d, charged %d; default budget holds %d hosts",
		hosts, p.OpenWindows(), held, withCache, used, 100*float64(held)/float64(used), peak, held/hosts, used/hosts, DefaultMaxStateBytes/(peak/hosts))
	if held > used {
		t.Fatalf("state holds %d bytes, the budget charged %d", held, used)
	}
	counts := map[string]int{}
	for _, w := range p.windows {
		for sk, ws := range w.series {
			counts[w.key.res+" "+sk.kind] += len(ws.docs) + len(ws.packed)
		}
	}
	t.Logf("documents held per resolution and kind: %v", counts)
	if f := os.Getenv("FLEET_HEAP_PROFILE"); f != "" {
		out, err := os.Create(f)
		if err != nil {
			t.Fatal(err)
		}
		defer out.Close()
		if err := pprof.WriteHeapProfile(out); err != nil {
			t.Fatal(err)
		}
	}
	runtime.KeepAlive(p)
}

// TestStackBytesBound: the stack cache's count of its bytes (stackBytes per
// stack, frameCost per frame of its table) is above the heap its stacks
// and table hold, for fleet-shaped stacks.
func TestStackBytesBound(t *testing.T) {
	profs, _ := fleetProfiles(10, 6)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	p := NewPartition(testConfig(), Checkpoint{})
	for _, prof := range profs {
		for _, s := range prof.Sample {
			p.stack(s)
		}
	}
	p.frames = nil
	runtime.GC()
	runtime.ReadMemStats(&after)
	held := int64(after.HeapAlloc) - int64(before.HeapAlloc)
	counted := p.stacks.bytes
	t.Logf("%d stacks, %d frames: held %d bytes, counted %d (%.0f%%)", p.stacks.n, len(p.stacks.table.frames), held, counted, 100*float64(held)/float64(counted))
	if held > counted {
		t.Fatalf("the stack cache holds %d bytes, counted %d", held, counted)
	}
	runtime.KeepAlive(p)
	runtime.KeepAlive(profs)
}
