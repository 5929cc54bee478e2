package main

import (
	"slices"
	"testing"
	"time"
)

// TestProfileHours: the UTC hours a fleet's profiles are stamped in, and
// the note a round's row carries.
func TestProfileHours(t *testing.T) {
	at := func(hhmmss string) time.Time {
		t.Helper()
		v, err := time.Parse(time.DateTime, "2026-12-03 "+hhmmss)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	// Not UTC: the hours are UTC's whatever the zone of the times given.
	kolkata := time.FixedZone("IST", 5*3600+1800)
	for _, c := range []struct {
		name     string
		from, to time.Time
		want     []string
		note     string
	}{
		{"within one hour", at("13:40:00"), at("13:52:00"), []string{"13:00"}, "13:40:00-13:52:00 UTC"},
		{"crossing 14:00", at("13:54:10"), at("14:06:10"), []string{"13:00", "14:00"}, "13:54:10-14:06:10 UTC, crosses 14:00"},
		{"starting on the hour", at("14:00:00"), at("14:12:00"), []string{"14:00"}, "14:00:00-14:12:00 UTC"},
		{"ending on the hour: the last stamp is before it", at("13:48:00"), at("14:00:00"), []string{"13:00"}, "13:48:00-14:00:00 UTC"},
		{"a second past the hour", at("13:48:01"), at("14:00:01"), []string{"13:00", "14:00"}, "13:48:01-14:00:01 UTC, crosses 14:00"},
		{"two boundaries", at("13:30:00"), at("15:10:00"), []string{"13:00", "14:00", "15:00"}, "13:30:00-15:10:00 UTC, crosses 14:00, 15:00"},
		{"many", at("01:30:00"), at("07:10:00"), []string{"01:00", "02:00", "03:00", "04:00", "05:00", "06:00", "07:00"}, "01:30:00-07:10:00 UTC, crosses 6 hours (02:00 to 07:00)"},
		{"zone of half an hour", at("13:54:10").In(kolkata), at("14:06:10").In(kolkata), []string{"13:00", "14:00"}, "13:54:10-14:06:10 UTC, crosses 14:00"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var got []string
			for _, h := range profileHours(c.from, c.to) {
				got = append(got, h.Format("15:04"))
			}
			if !slices.Equal(got, c.want) {
				t.Errorf("profileHours = %v, want %v", got, c.want)
			}
			if crosses := crossesHour(c.from, c.to); crosses != (len(c.want) > 1) {
				t.Errorf("crossesHour = %v, want %v", crosses, len(c.want) > 1)
			}
			if note := hoursNote(c.from, c.to); note != c.note {
				t.Errorf("hoursNote = %q, want %q", note, c.note)
			}
		})
	}
}

// TestAlignWait: a round that would cross an hour waits until its first
// profile is stamped at the next hour; one that ends before the next hour
// with the margin to spare does not wait.
func TestAlignWait(t *testing.T) {
	hour := time.Date(2026, 12, 3, 14, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		name string
		from time.Time
		d    time.Duration
		want time.Duration
	}{
		{"ends a minute before the hour", hour.Add(-13 * time.Minute), 12 * time.Minute, 0},
		{"ends within the margin", hour.Add(-12*time.Minute - 30*time.Second), 12 * time.Minute, 12*time.Minute + 30*time.Second},
		{"crosses", hour.Add(-6 * time.Minute), 12 * time.Minute, 6 * time.Minute},
		{"starts on the hour", hour, 12 * time.Minute, 0},
		{"59 minutes from the hour", hour, 59 * time.Minute, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := alignWait(c.from, c.d, time.Minute)
			if got != c.want {
				t.Fatalf("alignWait(%v, %v) = %v, want %v", c.from.Format("15:04:05"), c.d, got, c.want)
			}
			if got > c.d+time.Minute {
				t.Fatalf("waits %v, more than the round and the margin (%v)", got, c.d+time.Minute)
			}
			if from := c.from.Add(got); crossesHour(from, from.Add(c.d+time.Minute)) {
				t.Fatalf("after the wait the round's profiles with the margin still cross an hour: %s", hoursNote(from, from.Add(c.d+time.Minute)))
			}
		})
	}
}
