package store_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stackstream/stackstream/schemas/indices"
	"github.com/stackstream/stackstream/services/query/internal/querytest"
	"github.com/stackstream/stackstream/services/query/internal/selector"
	"github.com/stackstream/stackstream/services/query/internal/store"
)

// TestCountLinesFromHours: a chart's line count is read from the hourly
// documents of its settled hours and the minutes of the rest, and from the
// minutes alone when no hourly document matches (data from before the
// rollup wrote them). Each case counts a wrong number when its path is not
// taken:
//
//   - "hourly documents": 3 hosts ran only in the first hour, whose minutes
//     are gone (as minute retention, 14 days, leaves the older hours of a
//     longer range); reading minutes only counts 4, reading the hours
//     without the minutes after them 5.
//   - "minutes only": no hourly documents, 5 hosts ran only in the settled
//     hours and 2 only in the last hour; falling back only when the first
//     count is 0 (the minutes of the last hour count 2), or not at all,
//     counts 2.
func TestCountLinesFromHours(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	// Settled hours 08:00-11:00 (an hour settles 15 minutes after it
	// ends), minutes 11:00-12:00.
	rng := store.TimeRange{From: now.Add(-4 * time.Hour), To: now, Now: now}
	lastHour := now.Add(-time.Hour)
	sel, err := selector.Parse("")
	if err != nil {
		t.Fatal(err)
	}
	type host struct {
		from, to        time.Time
		minutes, hourly bool
	}
	hosts := func(n int, h host) []host {
		out := make([]host, n)
		for i := range out {
			out[i] = h
		}
		return out
	}
	for _, tc := range []struct {
		name  string
		hosts []host
	}{
		{"hourly documents", append(append(
			hosts(3, host{from: rng.From, to: rng.From.Add(time.Hour), hourly: true}),
			hosts(2, host{from: rng.From, to: now, minutes: true, hourly: true})...),
			hosts(2, host{from: lastHour, to: now, minutes: true, hourly: true})...)},
		{"minutes only", append(
			hosts(5, host{from: rng.From, to: lastHour, minutes: true}),
			hosts(2, host{from: lastHour, to: now, minutes: true})...)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cl, names := querytest.Setup(t)
			var docs []querytest.Doc
			doc := func(host string, at time.Time, res string, minutes int) {
				docs = append(docs, querytest.Rollup(names, indices.RollupDoc{Timestamp: at, Resolution: res, Kind: indices.KindService,
					Type: "cpu", Service: "svc", Host: host, Value: int64(minutes) * 1e9, StackValue: int64(minutes) * 1e9}))
			}
			for i, h := range tc.hosts {
				name := fmt.Sprintf("h-%d", i)
				for m := h.from; m.Before(h.to); m = m.Add(time.Minute) {
					if h.minutes {
						doc(name, m, indices.ResolutionMinute, 1)
					}
					// The rollup writes an hour's document once it settled.
					if h.hourly && m.Minute() == 0 && m.Before(lastHour) {
						doc(name, m, indices.ResolutionHour, 60)
					}
				}
			}
			querytest.Index(t, cl, names, docs)
			st := store.New(cl, names, store.Options{Now: func() time.Time { return now }})
			n, err := st.CountLines(context.Background(), store.Selection{Type: "cpu", Selector: sel, Range: rng}, "host")
			if err != nil || n != len(tc.hosts) {
				t.Fatalf("CountLines = %d, %v; want %d", n, err, len(tc.hosts))
			}
		})
	}
}

// TestCountLinesKept: a chart's line count is used again while its range
// moved less than a hundredth of its length (at least a minute): a day's
// for 14.4 minutes, an hour's for a minute; then it is read again. A range
// of the same length elsewhere (the one before it) is counted at once.
func TestCountLinesKept(t *testing.T) {
	start := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	sel, err := selector.Parse("")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name          string
		rng           time.Duration
		kept, recount time.Duration // clock moves: still the old count, then the new one
	}{
		{"day", 24 * time.Hour, 14 * time.Minute, 15 * time.Minute},
		{"hour", time.Hour, 59 * time.Second, 61 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cl, names := querytest.Setup(t)
			hosts := func(from, n int, at time.Time) {
				var docs []querytest.Doc
				for i := from; i < from+n; i++ {
					docs = append(docs, querytest.Rollup(names, indices.RollupDoc{Timestamp: at, Resolution: indices.ResolutionMinute,
						Kind: indices.KindService, Type: "cpu", Service: "svc", Host: fmt.Sprintf("h-%d", i), Value: 1e9, StackValue: 1e9}))
				}
				querytest.Index(t, cl, names, docs)
			}
			now := start
			st := store.New(cl, names, store.Options{Now: func() time.Time { return now }})
			count := func(want int, earlier ...time.Duration) {
				t.Helper()
				end := now
				for _, e := range earlier {
					end = end.Add(-e)
				}
				rng := store.TimeRange{From: end.Add(-tc.rng), To: end, Now: now}
				if n, err := st.CountLines(context.Background(), store.Selection{Type: "cpu", Selector: sel, Range: rng}, "host"); err != nil || n != want {
					t.Fatalf("at %s: CountLines = %d, %v; want %d", now.Format("15:04:05"), n, err, want)
				}
			}
			hosts(0, 3, start.Add(-30*time.Second))
			count(3)
			hosts(3, 2, start.Add(-20*time.Second)) // in every range ending at now below
			now = start.Add(tc.kept)
			count(3)
			now = start.Add(tc.recount)
			count(5)
			count(0, tc.rng) // the range before, counted at once: no host
		})
	}
}
