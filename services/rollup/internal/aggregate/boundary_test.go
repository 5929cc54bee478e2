package aggregate

import (
	"errors"
	"math"
	"syscall"
	"testing"
	"time"

	"github.com/stackstream/stackstream/pkg/pproftest"
	"github.com/stackstream/stackstream/schemas/indices"
	"github.com/stackstream/stackstream/schemas/record"
)

// TestHourBoundaryBudget: a fleet whose hour fills 70% of the state budget
// crosses an hour boundary with nothing refused, and every total is exact,
// late profiles of the hour just ended included. Until the ended hour was
// frozen (freeze.go) it stayed whole in memory for lateness + retention
// while the next hour filled with the same stacks, so the state nearly
// doubled and profiles went to the DLQ as state_full (docs/ROLLUP.md).
func TestHourBoundaryBudget(t *testing.T) {
	if testing.Short() {
		t.Skip("folds 4,000 profiles")
	}
	const hosts = 5
	cfg := testConfig()
	cfg.Retention = 10 * time.Minute // the service's default

	// The window state of the first hour, measured at its last interval;
	// the stack cache takes what is left of the budget and gives way.
	cal := cfg
	cal.Budget = &Budget{MaxBytes: math.MaxInt64}
	hour := boundaryRun(t, cal, hosts, 360).peak
	t.Logf("the hour 10:00 of %d hosts: %d bytes of window state charged", hosts, hour)

	cfg.Budget = &Budget{MaxBytes: hour * 7 / 5}
	// 11:00 + lateness + retention: the hour 10:00 is evicted at 11:12.
	r := boundaryRun(t, cfg, hosts, 6*75)
	t.Logf("budget %d: peak window state %d (%.0f%% of the budget, %.2f times the hour), %d refused, max RSS %d MiB",
		cfg.Budget.MaxBytes, r.peak, 100*float64(r.peak)/float64(cfg.Budget.MaxBytes), float64(r.peak)/float64(hour), r.refused, maxRSS()>>20)
	if r.refused > 0 {
		t.Fatalf("%d profiles refused state_full crossing the hour boundary (first at %s)", r.refused, r.firstRefused.Format("15:04:05"))
	}
	for _, start := range []time.Time{t0, t0.Add(time.Hour)} {
		got := int64(0)
		for _, d := range r.store {
			if d.Kind == indices.KindService && d.Resolution == indices.ResolutionHour && d.Timestamp.Equal(start) {
				got += d.Value
			}
		}
		trees := int64(0)
		for _, d := range r.store {
			if d.Kind == indices.KindPartitionTree && d.Resolution == indices.ResolutionHour && d.Timestamp.Equal(start) {
				trees += d.Value
			}
		}
		if want := r.produced[start.UnixNano()]; got != want || trees != want {
			t.Errorf("hour %s: service documents %d, partition trees %d, produced %d", start.Format("15:04"), got, trees, want)
		}
	}
	minutes := int64(0)
	for _, d := range r.store {
		if d.Kind == indices.KindService && d.Resolution == indices.ResolutionMinute {
			minutes += d.Value
		}
	}
	if want := r.produced[t0.UnixNano()] + r.produced[t0.Add(time.Hour).UnixNano()]; minutes != want {
		t.Errorf("minute service documents %d, produced %d", minutes, want)
	}
	if r.late == 0 {
		t.Fatal("no late profile of the ended hour was counted")
	}
}

type boundaryResult struct {
	peak         int64 // the window state's charge, without the stack cache
	refused      int
	firstRefused time.Time
	late         int
	store        map[string]indices.RollupDoc
	produced     map[int64]int64 // CPU ns by hour
}

// boundaryRun folds intervals of the fleet through one partition as the
// consumer does, and from 11:05 on one late profile per interval stamped
// in the hour 10:00's last ten minutes (within lateness + retention of
// its minute); then writes everything.
func boundaryRun(t *testing.T, cfg Config, hosts, intervals int) boundaryResult {
	t.Helper()
	r := boundaryResult{store: map[string]indices.RollupDoc{}, produced: map[int64]int64{}}
	p := NewPartition(cfg, Checkpoint{})
	next := fleetGenerator(hosts)
	flush := func(all bool) {
		docs := p.Pending(all)
		for _, d := range docs {
			r.store[d.ID] = d.Doc
		}
		MarkStored(docs)
		p.Evict()
		if o, cp, ok := p.Commit(); ok {
			p.Committed(o, cp)
		}
	}
	off := int64(0)
	fold := func(in Input) {
		in.Offset = off
		off++
		out, err := p.Add(in)
		switch {
		case errors.Is(err, ErrStateFull):
			if r.refused == 0 {
				r.firstRefused = time.Unix(0, in.Profile.TimeNanos).UTC()
			}
			r.refused++
		case err != nil:
			t.Fatalf("offset %d: %v", in.Offset, err)
		case out != Added:
			t.Fatalf("offset %d: outcome %d", in.Offset, out)
		default:
			for _, s := range in.Profile.Sample {
				r.produced[truncate(in.Profile.TimeNanos, time.Hour)] += s.Value[1]
			}
		}
		r.peak = max(r.peak, cfg.Budget.Used()-cfg.Budget.CacheBytes())
		if p.HoldsEndedHour() { // as the consumer does
			flush(false)
		}
	}
	var again Input
	for iv := range intervals {
		profs, hostOf := next()
		for i, prof := range profs {
			fold(Input{Profile: prof, Type: record.ProfileCPU, Host: hostOf[i]})
		}
		switch iv {
		case 6 * 58: // 10:58: read again at 11:06, as a replayed record would be
			again = Input{Profile: profs[0], Type: record.ProfileCPU, Host: hostOf[0]}
		case 6 * 66:
			fold(again)
			r.late++
		}
		if at := t0.Add(time.Duration(iv) * 10 * time.Second); at.After(t0.Add(65*time.Minute)) && at.Before(t0.Add(71*time.Minute)) {
			late := pproftest.NewCPU(at.Add(-12*time.Minute+30*time.Second), 10*time.Second).
				Sample(svc("late"), []int64{1, 1000 + int64(iv)}, "lateleaf", "latemain").Profile()
			fold(Input{Profile: late, Type: record.ProfileCPU, Host: hostOf[iv%hosts]})
			r.late++
		}
		flush(false)

	}
	flush(true)
	return r
}

// maxRSS is the test process's largest resident set so far.
func maxRSS() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Maxrss << 10
}
