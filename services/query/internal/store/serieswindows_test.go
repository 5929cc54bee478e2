package store

import (
	"testing"
	"time"
)

func TestWindowSeriesSteps(t *testing.T) {
	for _, tc := range []struct {
		step time.Duration
		want bool
	}{
		{10 * time.Minute, true}, {20 * time.Minute, true}, {30 * time.Minute, true},
		{time.Hour, true}, {3 * time.Hour, true}, {24 * time.Hour, true},
		{5 * time.Minute, false}, {40 * time.Minute, false}, {90 * time.Minute, false},
		// Buckets of 5 or 48 hours from the epoch are not those from Go's
		// zero time (or not every day the same).
		{5 * time.Hour, false}, {48 * time.Hour, false},
	} {
		if got := windowSeriesSteps(tc.step); got != tc.want {
			t.Errorf("windowSeriesSteps(%v) = %v, want %v", tc.step, got, tc.want)
		}
	}
}

func TestSplitClosed(t *testing.T) {
	at := func(hm string) time.Time {
		v, _ := time.Parse("15:04", hm)
		return time.Date(2026, 11, 30, v.Hour(), v.Minute(), 0, 0, time.UTC)
	}
	for _, tc := range []struct {
		name         string
		spans        []TimeRange
		now          time.Time
		closed, open []TimeRange
	}{
		{"window still filling", []TimeRange{{From: at("11:00"), To: at("12:00")}}, at("12:00"),
			[]TimeRange{{From: at("11:00"), To: at("11:50")}}, []TimeRange{{From: at("11:50"), To: at("12:00")}}},
		{"ended 4 minutes ago", []TimeRange{{From: at("11:00"), To: at("12:00")}}, at("12:04"),
			[]TimeRange{{From: at("11:00"), To: at("11:50")}}, []TimeRange{{From: at("11:50"), To: at("12:00")}}},
		{"ended 5 minutes ago", []TimeRange{{From: at("11:00"), To: at("12:00")}}, at("12:05"),
			[]TimeRange{{From: at("11:00"), To: at("12:00")}}, nil},
		{"before and after settled hours", []TimeRange{{From: at("06:20"), To: at("07:00")}, {From: at("11:00"), To: at("11:40")}}, at("11:43"),
			[]TimeRange{{From: at("06:20"), To: at("07:00")}, {From: at("11:00"), To: at("11:30")}}, []TimeRange{{From: at("11:30"), To: at("11:40")}}},
		{"all open", []TimeRange{{From: at("11:40"), To: at("12:00")}}, at("11:41"),
			nil, []TimeRange{{From: at("11:40"), To: at("12:00")}}},
		{"no now", []TimeRange{{From: at("11:00"), To: at("12:00")}}, time.Time{},
			[]TimeRange{{From: at("11:00"), To: at("12:00")}}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			closed, open := splitClosed(tc.spans, tc.now)
			if !sameRanges(closed, tc.closed) || !sameRanges(open, tc.open) {
				t.Fatalf("closed %v open %v, want %v and %v", closed, open, tc.closed, tc.open)
			}
		})
	}
}

func sameRanges(a, b []TimeRange) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !a[i].From.Equal(b[i].From) || !a[i].To.Equal(b[i].To) {
			return false
		}
	}
	return true
}
