package main

import (
	"math"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestWarmUp: the warm-up ends after the first sixth, or once every bounded
// cache has been full or cleared; caches that fill only in the last sixth
// leave nothing to judge.
func TestWarmUp(t *testing.T) {
	// soak makes 12 samples, the given cache's entries at each (bound 100).
	soak := func(entries ...float64) []rssSample {
		var out []rssSample
		for i := range 12 {
			s := rssSample{at: time.Duration(i) * time.Minute, caches: map[string]map[string]cacheFill{}}
			if entries != nil {
				s.caches["svc"] = map[string]cacheFill{"c": {entries: entries[i], max: 100}}
			}
			out = append(out, s)
		}
		return out
	}
	tests := []struct {
		name string
		rss  []rssSample
		want int
		why  string
	}{
		{"no caches", soak(), 2, warmSixth},
		{"full before the first sixth", soak(95, 95, 95, 95, 95, 95, 95, 95, 95, 95, 95, 95), 2, warmSixth},
		{"full at the 6th sample", soak(10, 20, 30, 40, 50, 95, 95, 95, 95, 95, 95, 95), 5, warmCaches},
		{"cleared at the 5th sample", soak(10, 20, 30, 40, 5, 15, 25, 35, 45, 55, 65, 75), 4, warmCaches},
		{"full only in the last sixth", soak(10, 20, 30, 40, 50, 60, 70, 80, 85, 88, 89, 95), 11, warmFilling},
		{"never full", soak(10, 20, 30, 40, 50, 60, 70, 80, 82, 84, 86, 88), 11, warmFilling},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, why := warmUp(tt.rss, "svc")
			if got != tt.want || why != tt.why {
				t.Fatalf("warmUp = %d (%s), want %d (%s)", got, why, tt.want, tt.why)
			}
		})
	}
}

// TestHourOverHour: the median RSS over minutes 45-55 of each simulated
// hour covered whole after a covered one; growth within each hour is by
// design, growth from hour to hour is not; a JVM is printed, not judged.
func TestHourOverHour(t *testing.T) {
	at := func(hhmm string) time.Time {
		v, err := time.Parse("2006-01-02 15:04", "2026-12-03 "+hhmm)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	// soak samples [from, from+d] every 3 minutes; the rollup's RSS grows
	// through each hour (100 MiB at :00 to 160 at :60) plus perHour for
	// every hour since from; kafka's grows 50% an hour.
	soak := func(from time.Time, d time.Duration, perHour float64) []rssSample {
		var out []rssSample
		for sim := from.Add(3 * time.Minute); !sim.After(from.Add(d)); sim = sim.Add(3 * time.Minute) {
			inHour := sim.Sub(sim.Truncate(time.Hour)).Hours()
			since := sim.Sub(from).Hours()
			out = append(out, rssSample{sim: sim, rss: map[string]float64{
				"stackstream-rollup": 100 + 60*inHour + perHour*since,
				"kafka":              500 * (1 + 0.5*since),
			}})
		}
		return out
	}
	tests := []struct {
		name       string
		from       time.Time
		d          time.Duration
		perHour    float64
		tol        time.Duration
		wantAt     []string
		judged     bool
		flat       bool
		rollupFlat bool
	}{
		{"flat", at("16:51"), 3 * time.Hour, 0, 5 * time.Minute, []string{"17:50", "18:50"}, true, true, true},
		{"growing 30 MiB an hour", at("16:51"), 3 * time.Hour, 30, 5 * time.Minute, []string{"17:50", "18:50"}, true, false, false},
		{"growing 5 MiB an hour", at("16:51"), 3 * time.Hour, 5, 5 * time.Minute, []string{"17:50", "18:50"}, true, true, true},
		{"starts on the hour: its first whole hour is the warm-up", at("17:00"), 3 * time.Hour, 0, 5 * time.Minute, []string{"18:50", "19:50"}, true, true, true},
		{"too short: 70 minutes", at("16:51"), 70 * time.Minute, 0, 5 * time.Minute, []string{"17:50"}, false, false, false},
		{"no sample near minute 50", at("16:51"), 3 * time.Hour, 0, 30 * time.Second, nil, false, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := hourOverHour(soak(tt.from, tt.d, tt.perHour), tt.from, tt.from.Add(tt.d), 50*time.Minute, tt.tol)
			var got []string
			for _, a := range h.at {
				got = append(got, a.Format("15:04"))
			}
			if strings.Join(got, ",") != strings.Join(tt.wantAt, ",") {
				t.Errorf("hours sampled at %v, want %v", got, tt.wantAt)
			}
			if h.judged != tt.judged || h.flat != tt.flat {
				t.Fatalf("judged %v flat %v, want %v %v", h.judged, h.flat, tt.judged, tt.flat)
			}
			for _, r := range h.rows {
				want := tt.rollupFlat
				if r.name == "kafka" {
					want = false // grows, but is not judged
				}
				if r.flat != want {
					t.Errorf("%s: flat %v (rss %v, last/first %.2f, max/first %.2f), want %v", r.name, r.flat, r.rss, r.last, r.worst, want)
				}
			}
			if tt.judged && len(h.rows) != 2 {
				t.Errorf("%d rows, want 2", len(h.rows))
			}
		})
	}
}

// TestHourOverHourAfterWarmUp: a process that grew from its first hour is
// compared again from its first hour after its bounded caches were full
// once (its memory grows up to their bounds by design), and not judged
// while they never fill; one flat from its first hour is flat.
func TestHourOverHourAfterWarmUp(t *testing.T) {
	from := time.Date(2026, 12, 3, 16, 51, 0, 0, time.UTC)
	// The rollup's RSS grows through each hour and by 40 MiB an hour for
	// its first two hours, while its stack cache fills; its cache gives
	// way at fillAt (never when zero).
	soak := func(fillAt time.Duration) []rssSample {
		var out []rssSample
		for sim := from.Add(3 * time.Minute); !sim.After(from.Add(5 * time.Hour)); sim = sim.Add(3 * time.Minute) {
			since := sim.Sub(from)
			inHour := sim.Sub(sim.Truncate(time.Hour)).Hours()
			full := fillAt > 0 && since >= fillAt
			out = append(out, rssSample{sim: sim, at: since,
				rss:    map[string]float64{"stackstream-rollup": 100 + 60*inHour + 40*min(since, 2*time.Hour).Hours()},
				caches: map[string]map[string]cacheFill{"stackstream-rollup": {"stacks MiB": {entries: 50, gaveWay: full}}},
			})
		}
		return out
	}
	h := hourOverHour(soak(2*time.Hour), from, from.Add(5*time.Hour), 50*time.Minute, 5*time.Minute)
	if len(h.rows) != 1 || !h.judged {
		t.Fatalf("rows %v judged %v", h.rows, h.judged)
	}
	// Full at 18:51, within 18:50's window: 19:50's is the first after.
	r := h.rows[0]
	if got := h.at[r.first].Format("15:04"); got != "19:50" || !r.judged || !r.flat || !h.flat {
		t.Errorf("compared from %s judged %v flat %v (rss %v, worst %.2f), want from 19:50, flat", got, r.judged, r.flat, r.rss, r.worst)
	}
	// Compared from the first hour, the growth while filling is not flat.
	if first := r.rss[0]; r.rss[1]/first <= 1.1 {
		t.Errorf("test fleet: %v does not grow in its first hours", r.rss)
	}
	h = hourOverHour(soak(0), from, from.Add(5*time.Hour), 50*time.Minute, 5*time.Minute)
	if r := h.rows[0]; r.judged || h.flat || !slices.Equal(h.unjudged(), []string{r.name}) {
		t.Errorf("caches never full: judged %v, flat %v, unjudged %v; want neither, and the process named", r.judged, h.flat, h.unjudged())
	}
	// Flat from the first hour: flat, whether its caches filled or not.
	steady := soak(0)
	for i := range steady {
		steady[i].rss["stackstream-rollup"] = 150
	}
	h = hourOverHour(steady, from, from.Add(5*time.Hour), 50*time.Minute, 5*time.Minute)
	if r := h.rows[0]; !r.judged || !r.flat || r.first != 0 || !h.flat {
		t.Errorf("steady with caches filling: judged %v flat %v from hour %d; want flat from the first", r.judged, r.flat, r.first)
	}
}

// TestHourOverHourCacheCleared: a process whose bounded cache is cleared
// at its bound drops and refills; after the clear it is compared with the
// largest hour up to then, so refilling below that peak is flat and
// passing it by more than 10% is not. One sample far off the hour's
// median (a collector's cycle) does not move it.
func TestHourOverHourCacheCleared(t *testing.T) {
	from := time.Date(2026, 12, 3, 16, 51, 0, 0, time.UTC)
	clear := from.Add(189 * time.Minute) // 20:00
	// soak: the indexer's RSS in each hour from 17:00 by hour, its cache
	// growing by 10 entries a sample until cleared at 20:00.
	soak := func(byHour ...float64) []rssSample {
		var out []rssSample
		entries := 0.0
		for sim := from.Add(3 * time.Minute); !sim.After(from.Add(6 * time.Hour)); sim = sim.Add(3 * time.Minute) {
			entries += 10
			if sim.Equal(clear) {
				entries = 0
			}
			v := byHour[max(sim.Hour()-17, 0)]
			if sim.Minute() == 48 {
				v *= 1.4 // a collector's peak
			}
			out = append(out, rssSample{sim: sim, at: sim.Sub(from),
				rss:    map[string]float64{"stackstream-indexer": v},
				caches: map[string]map[string]cacheFill{"stackstream-indexer": {"label_sets": {entries: entries, max: 1e9}}},
			})
		}
		return out
	}
	tests := []struct {
		name   string
		byHour []float64
		flat   bool
		worst  float64
	}{
		{"refills below its peak", []float64{100, 115, 130, 90, 105, 120}, true, 105.0 / 130},
		{"passes its peak after the clear", []float64{100, 115, 130, 90, 150, 120}, false, 150.0 / 130},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := hourOverHour(soak(tt.byHour...), from, from.Add(6*time.Hour), 50*time.Minute, 5*time.Minute)
			r := h.rows[0]
			if r.rss[0] != 100 {
				t.Errorf("first hour's median %.1f, want 100 (the collector's peak is one sample of four)", r.rss[0])
			}
			if got := h.at[r.first].Format("15:04"); got != "20:50" || r.base != 130 || !r.judged || r.flat != tt.flat || math.Abs(r.worst-tt.worst) > 1e-9 {
				t.Errorf("compared from %s with %.1f: judged %v flat %v worst %.3f; want from 20:50 with 130, flat %v worst %.3f",
					got, r.base, r.judged, r.flat, r.worst, tt.flat, tt.worst)
			}
		})
	}
}

// TestLagPeaks: each group's peak, and where a group passed the bound.
func TestLagPeaks(t *testing.T) {
	sim := time.Date(2026, 12, 3, 17, 0, 0, 0, time.UTC)
	var rss []rssSample
	for i, lag := range [][3]int64{{1, 10, 5}, {2, 1200, 6}, {0, 950, 7}, {3, 20, 4}} {
		rss = append(rss, rssSample{at: time.Duration(i) * 5 * time.Second, sim: sim.Add(time.Duration(i) * 30 * time.Second), lag: lag})
	}
	peak, over := lagPeaks(rss, 890)
	if peak != [3]int64{3, 1200, 7} {
		t.Errorf("peaks %v", peak)
	}
	want := "indexer 1200 at 5s (simulated 17:00:30 UTC), 2 of 4 samples over"
	if len(over) != 1 || over[0] != want {
		t.Errorf("over %q, want [%q]", over, want)
	}
}
