package store

import (
	"testing"
	"time"
)

func TestHourlySpan(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 20, 0, 0, time.UTC)
	at := func(h, m int) time.Time { return time.Date(2026, 11, 30, h, m, 0, 0, time.UTC) }
	tests := []struct {
		name     string
		tr       TimeRange
		want     TimeRange
		wantSome bool
	}{
		{"whole hours inside", TimeRange{From: at(1, 30), To: at(9, 10), Now: now}, TimeRange{From: at(2, 0), To: at(9, 0)}, true},
		{"up to now", TimeRange{From: at(1, 0), To: now, Now: now}, TimeRange{From: at(1, 0), To: at(12, 0)}, true},
		// At 12:10 the 11:00 hour may not be written yet: read it from minutes.
		{"hour just ended", TimeRange{From: at(1, 0), To: at(12, 10), Now: at(12, 10)}, TimeRange{From: at(1, 0), To: at(11, 0)}, true},
		{"less than an hour", TimeRange{From: at(3, 10), To: at(3, 50), Now: now}, TimeRange{From: at(4, 0), To: at(3, 0)}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := hourlySpan(tc.tr)
			if ok != tc.wantSome || (ok && got != tc.want) {
				t.Fatalf("hourlySpan = %v %v, want %v %v", got, ok, tc.want, tc.wantSome)
			}
		})
	}
}
