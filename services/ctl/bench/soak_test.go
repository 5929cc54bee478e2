package main

import (
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

// TestHourOverHour: RSS at minute 50 of each simulated hour covered whole
// after a covered one; growth within each hour is by design, growth from
// hour to hour is not; a JVM is printed, not judged.
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
		{"flat", at("16:51"), 3 * time.Hour, 0, 3 * time.Minute, []string{"17:51", "18:51"}, true, true, true},
		{"growing 30 MiB an hour", at("16:51"), 3 * time.Hour, 30, 3 * time.Minute, []string{"17:51", "18:51"}, true, false, false},
		{"growing 5 MiB an hour", at("16:51"), 3 * time.Hour, 5, 3 * time.Minute, []string{"17:51", "18:51"}, true, true, true},
		{"starts on the hour: its first whole hour is the warm-up", at("17:00"), 3 * time.Hour, 0, 3 * time.Minute, []string{"18:51", "19:51"}, true, true, true},
		{"too short: 70 minutes", at("16:51"), 70 * time.Minute, 0, 3 * time.Minute, []string{"17:51"}, false, false, false},
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
		for sim := from.Add(3 * time.Minute); !sim.After(from.Add(4 * time.Hour)); sim = sim.Add(3 * time.Minute) {
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
	h := hourOverHour(soak(2*time.Hour), from, from.Add(4*time.Hour), 50*time.Minute, 3*time.Minute)
	if len(h.rows) != 1 || !h.judged {
		t.Fatalf("rows %v judged %v", h.rows, h.judged)
	}
	r := h.rows[0]
	if got := h.at[r.first].Format("15:04"); got != "18:51" || !r.judged || !r.flat || !h.flat {
		t.Errorf("compared from %s judged %v flat %v (rss %v, worst %.2f), want from 18:51, flat", got, r.judged, r.flat, r.rss, r.worst)
	}
	// Compared from the first hour, the growth while filling is not flat.
	if first := r.rss[0]; r.rss[1]/first <= 1.1 {
		t.Errorf("test fleet: %v does not grow in its first hours", r.rss)
	}
	h = hourOverHour(soak(0), from, from.Add(4*time.Hour), 50*time.Minute, 3*time.Minute)
	if r := h.rows[0]; r.judged || h.flat {
		t.Errorf("caches never full: judged %v, flat %v; want neither", r.judged, h.flat)
	}
	// Flat from the first hour: flat, whether its caches filled or not.
	steady := soak(0)
	for i := range steady {
		steady[i].rss["stackstream-rollup"] = 150
	}
	h = hourOverHour(steady, from, from.Add(4*time.Hour), 50*time.Minute, 3*time.Minute)
	if r := h.rows[0]; !r.judged || !r.flat || r.first != 0 || !h.flat {
		t.Errorf("steady with caches filling: judged %v flat %v from hour %d; want flat from the first", r.judged, r.flat, r.first)
	}
}
