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
// host: the figure that says how many hosts the default Budget holds. It
// checks twice: at the end of the hour, when the hour window holds the
// most (the peak of the charge), and 5 minutes later (the hour frozen, the
// next one begun).
func TestFleetStateBytes(t *testing.T) {
	if testing.Short() {
		t.Skip("folds 3,900 profiles")
	}
	const hosts, intervals, hourEnd = 10, 390, 359
	cfg := testConfig()
	cfg.Retention = 10 * time.Minute // the service's default
	cfg.Budget = &Budget{MaxBytes: math.MaxInt64}
	next := fleetGenerator(hosts)
	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	p := NewPartition(cfg, Checkpoint{})
	// held logs and checks the heap the window state holds (stateHeap).
	held := func(when string) {
		heap := stateHeap(&before, p)
		used := cfg.Budget.Used()
		byRes := map[string]int64{}
		counts := map[string]int{}
		for _, w := range p.windows {
			byRes[w.key.res] += w.bytes
			for sk, ws := range w.series {
				counts[w.key.res+" "+sk.kind] += ws.count()
			}
		}
		t.Logf("%s: %d hosts, %d windows: held %d bytes, charged %d (%.0f%%); per host: held %d, charged %d; the default budget holds %d hosts; charged per resolution %v; documents per resolution and kind %v",
			when, hosts, p.OpenWindows(), heap, used, 100*float64(heap)/float64(used), heap/hosts, used/hosts, DefaultMaxStateBytes/(used/hosts), byRes, counts)
		if heap > used {
			t.Fatalf("%s: the state holds %d bytes, the budget charged %d", when, heap, used)
		}
	}
	off, peak := int64(0), int64(0)
	for i := range intervals {
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
		if i == hourEnd {
			held("end of the hour")
		}
	}
	held("5 minutes later")
	t.Logf("peak charge %d, %d per host: the default budget holds %d hosts", peak, peak/hosts, DefaultMaxStateBytes/(peak/hosts))
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

// stateHeap is the heap the partitions' window state holds above before:
// their stack cache is emptied first (bounded on its own, its charge
// returned; its stacks are built again after), and the scratch of one
// profile let go.
func stateHeap(before *runtime.MemStats, parts ...*Partition) int64 {
	for _, p := range parts {
		p.out, p.deltas, p.frames = nil, nil, nil
		p.stacks.reset()
	}
	var after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&after)
	return int64(after.HeapAlloc) - int64(before.HeapAlloc)
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
