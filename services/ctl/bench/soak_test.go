package main

import (
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
