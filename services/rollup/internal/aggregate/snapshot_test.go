package aggregate

import (
	"encoding/binary"
	"errors"
	"hash/crc32"
	"math"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/google/pprof/profile"

	"github.com/stackstream/stackstream/pkg/pproftest"
	"github.com/stackstream/stackstream/schemas/indices"
	"github.com/stackstream/stackstream/schemas/record"
)

// genStackRecords is a partition's log of about three hours: four hosts,
// three services, stacks drawn from a dozen functions (so hour tries
// branch, and late profiles bring stacks new to frozen hours), memory
// profiles, and a tenth of the profiles up to 15 minutes late.
func genStackRecords(rng *rand.Rand, n int) []Input {
	funcs := []string{"main", "serve", "work", "hash", "parse", "read", "write", "gc", "lock", "json", "sql", "tls"}
	return genLog(rng, n, 4, 5, func(at time.Time) *profile.Profile {
		b := pproftest.NewCPU(at, time.Second)
		for range 1 + rng.IntN(4) {
			stack := make([]string, 1+rng.IntN(6))
			for j := range stack {
				stack[j] = funcs[rng.IntN(len(funcs))]
			}
			stack[len(stack)-1] = "main"
			b.Sample(svc([]string{"checkout", "api", "cart"}[rng.IntN(3)]), []int64{1, rng.Int64N(100)}, stack...)
		}
		return b.Profile()
	})
}

// TestSnapshotRestoresExactly snapshots a consumer at random points,
// drops its state and goes on from a Restore of the bytes: the stored
// documents, DLQ decisions and commits equal those of a run that never
// stopped, with minute trees and heads on and off, and a restore charges
// the Budget what the state was charged when snapshotted.
func TestSnapshotRestoresExactly(t *testing.T) {
	for seed := range 24 {
		rng := rand.New(rand.NewPCG(uint64(seed), 11))
		cfg := testConfig()
		cfg.NoMinuteTrees = seed%2 == 1
		if seed%3 == 0 {
			cfg.HeadMinNodes = math.MaxInt
		}
		recs := genStackRecords(rng, 500)
		flushEvery := 1 + rng.IntN(20)
		// The Budget's charge is not compared with the whole run's: a
		// trie's nodes are numbered in the order a profile's stacks are
		// met, which is a map's, so two runs charge its branches apart.
		newConsumer := func() (*consumer, *Budget) {
			c := cfg
			c.Budget = &Budget{MaxBytes: 1 << 30}
			return &consumer{p: NewPartition(c, Checkpoint{}), store: map[string]indices.RollupDoc{}, tooLate: map[int64]bool{}}, c.Budget
		}

		whole, _ := newConsumer()
		var wholeCommits []int64
		for i := range recs {
			whole.run(t, recs[i:i+1], 1<<30)
			if (i+1)%flushEvery == 0 {
				whole.flush(false)
				wholeCommits = append(wholeCommits, whole.committed)
			}
		}
		whole.flush(true)

		cut, cutBudget := newConsumer()
		var cutCommits []int64
		restores := 0
		for i, in := range recs {
			if rng.IntN(60) == 0 {
				snap := cut.p.Snapshot(nil)
				at, used := cut.p.SnapshotAt(), cutBudget.Used()
				cut.p.Release()
				if cutBudget.Used() != cutBudget.CacheBytes() {
					t.Fatalf("seed %d: %d bytes charged after the release", seed, cutBudget.Used()-cutBudget.CacheBytes())
				}
				c := cfg
				c.Budget = cutBudget
				p, err := Restore(c, snap)
				if err != nil {
					t.Fatalf("seed %d at %d: %v", seed, i, err)
				}
				if p.SnapshotAt() != at || cutBudget.Used() != used {
					t.Fatalf("seed %d: restored at %d charging %d, snapshot at %d charging %d", seed, p.SnapshotAt(), cutBudget.Used(), at, used)
				}
				cut.p = p
				restores++
			}
			cut.run(t, []Input{in}, 1<<30)
			if (i+1)%flushEvery == 0 {
				cut.flush(false)
				cutCommits = append(cutCommits, cut.committed)
			}
		}
		cut.flush(true)
		if restores == 0 {
			continue
		}

		if !reflect.DeepEqual(cutCommits, wholeCommits) {
			t.Fatalf("seed %d: commits %v, want %v", seed, cutCommits, wholeCommits)
		}
		if cut.cp != whole.cp {
			t.Fatalf("seed %d: checkpoint %+v, want %+v", seed, cut.cp, whole.cp)
		}
		if len(cut.store) != len(whole.store) {
			t.Fatalf("seed %d (%d restores): %d docs, want %d", seed, restores, len(cut.store), len(whole.store))
		}
		for id, want := range whole.store {
			if got := cut.store[id]; !reflect.DeepEqual(got, want) {
				t.Fatalf("seed %d (%d restores): doc %s\n got %+v\nwant %+v", seed, restores, id, got, want)
			}
		}
		if !reflect.DeepEqual(cut.tooLate, whole.tooLate) {
			t.Fatalf("seed %d: too late %v, want %v", seed, cut.tooLate, whole.tooLate)
		}
	}
}

// TestSnapshotWhileReadingAgain: a consumer that crashed reads again from
// its last commit, and is snapshotted and restored while it does (the
// snapshot keeps the checkpoint it was started from, which decides what
// it skips): the documents and DLQ decisions equal an uninterrupted run's.
func TestSnapshotWhileReadingAgain(t *testing.T) {
	cfg := testConfig()
	newConsumer := func(p *Partition, from *consumer) *consumer {
		if from != nil {
			return &consumer{p: p, store: from.store, tooLate: from.tooLate}
		}
		return &consumer{p: p, store: map[string]indices.RollupDoc{}, tooLate: map[int64]bool{}}
	}
	tested := 0
	for seed := range 16 {
		rng := rand.New(rand.NewPCG(uint64(seed), 13))
		recs := genStackRecords(rng, 500)
		flushEvery := 1 + rng.IntN(20)

		whole := newConsumer(NewPartition(cfg, Checkpoint{}), nil)
		whole.run(t, recs, flushEvery)
		whole.flush(true)

		crash := 100 + rng.IntN(len(recs)-100)
		first := newConsumer(NewPartition(cfg, Checkpoint{}), nil)
		first.run(t, recs[:crash], flushEvery)
		second := newConsumer(NewPartition(cfg, first.cp), first)
		if int(first.committed)+2 > crash {
			continue
		}
		// Snapshotted between the commit and the crash point.
		cut := int(first.committed) + 1 + rng.IntN(crash-int(first.committed)-1)
		second.run(t, recs[first.committed:cut], flushEvery)
		p, err := Restore(cfg, second.p.Snapshot(nil))
		if err != nil {
			t.Fatal(err)
		}
		second.p = p
		second.run(t, recs[cut:], flushEvery)
		second.flush(true)
		tested++

		if len(second.store) != len(whole.store) {
			t.Fatalf("seed %d: %d docs, want %d", seed, len(second.store), len(whole.store))
		}
		for id, want := range whole.store {
			if got := second.store[id]; !reflect.DeepEqual(got, want) {
				t.Fatalf("seed %d crash at %d (commit %d, snapshot at %d): doc %s\n got %+v\nwant %+v", seed, crash, first.committed, cut, id, got, want)
			}
		}
		if !reflect.DeepEqual(second.tooLate, whole.tooLate) {
			t.Fatalf("seed %d: too late %v, want %v", seed, second.tooLate, whole.tooLate)
		}
	}
	if tested < 8 {
		t.Fatalf("%d of 16 runs snapshotted while reading again", tested)
	}
}

// snapshotSample is the snapshot of a partition that holds every kind of
// window: hours frozen with late stacks, packed minutes, 10-minute values,
// memory sums, documents still dirty.
func snapshotSample(t testing.TB, n int) []byte {
	rng := rand.New(rand.NewPCG(3, 11))
	c := &consumer{p: NewPartition(testConfig(), Checkpoint{}), store: map[string]indices.RollupDoc{}, tooLate: map[int64]bool{}}
	recs := genStackRecords(rng, n)
	for i, in := range recs {
		if _, err := c.p.Add(in); err != nil {
			t.Fatal(err)
		}
		if i%7 == 0 && i < n-10 {
			c.flush(false)
		}
	}
	return c.p.Snapshot(nil)
}

func TestRestoreRefuses(t *testing.T) {
	snap := snapshotSample(t, 400)
	if _, err := Restore(testConfig(), snap); err != nil {
		t.Fatal(err)
	}
	for name, b := range map[string][]byte{
		"empty":     nil,
		"truncated": snap[:len(snap)/2],
		"flipped":   append(append([]byte{}, snap[:100]...), append([]byte{snap[100] ^ 1}, snap[101:]...)...),
		"version":   append([]byte("rollup-state\x01"), snap[len(snapshotMagic):]...), // before RewriteDelay
	} {
		if _, err := Restore(testConfig(), b); !errors.Is(err, ErrBadSnapshot) {
			t.Errorf("%s: %v, want ErrBadSnapshot", name, err)
		}
	}
	cfg := testConfig()
	cfg.Budget = &Budget{MaxBytes: 1 << 10}
	if _, err := Restore(cfg, snap); !errors.Is(err, ErrStateFull) || cfg.Budget.Used() != 0 {
		t.Errorf("over the budget: %v with %d bytes charged, want ErrStateFull and none", err, cfg.Budget.Used())
	}
}

// FuzzRestore: any bytes with a right header and checksum restore or fail
// with ErrBadSnapshot, and a restored partition folds, writes, evicts and
// snapshots without panicking.
func FuzzRestore(f *testing.F) {
	// A small one: the fuzzer minimizes each input it finds new.
	snap := snapshotSample(f, 30)
	f.Add(snap[len(snapshotMagic) : len(snap)-4])
	f.Fuzz(func(t *testing.T, body []byte) {
		data := append([]byte(snapshotMagic), body...)
		data = binary.BigEndian.AppendUint32(data, crc32.ChecksumIEEE(body))
		cfg := testConfig()
		cfg.Budget = &Budget{MaxBytes: 64 << 20}
		p, err := Restore(cfg, data)
		if err != nil {
			if !errors.Is(err, ErrBadSnapshot) && !errors.Is(err, ErrStateFull) {
				t.Fatalf("error %v", err)
			}
			return
		}
		at := t0.Add(3 * time.Hour)
		prof := pproftest.NewCPU(at, time.Second).Sample(svc("api"), []int64{1, 5}, "serve", "main").Profile()
		for i := range 3 {
			_, _ = p.Add(Input{Profile: prof, Type: record.ProfileCPU, Host: "h1", Offset: p.SnapshotAt() + int64(i) + 1})
			prof = &profile.Profile{}
			*prof = *pproftest.NewCPU(at.Add(-20*time.Minute), time.Second).Sample(svc("checkout"), []int64{1, 5}, "work", "main").Profile()
		}
		MarkStored(p.Pending(true))
		p.Evict()
		p.Commit()
		p.Snapshot(nil)
		p.Release()
	})
}
