package main

import (
	"testing"
	"time"
)

func TestParseTime(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		in      string
		want    time.Time
		wantErr bool
	}{
		{"2026-11-30T10:00:00Z", time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC), false},
		{"now-2h", now.Add(-2 * time.Hour), false},
		{"-30m", now.Add(-30 * time.Minute), false},
		{"now", now, false},
		{"now+1h", time.Time{}, true},
		{"yesterday", time.Time{}, true},
		{"", time.Time{}, true},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := parseTime(tt.in, now)
			if (err != nil) != tt.wantErr || !got.Equal(tt.want) {
				t.Fatalf("parseTime(%q) = %v, %v", tt.in, got, err)
			}
		})
	}
}
