package loadgen

import (
	"testing"
	"time"
)

// TestSimTime: a run starts Duration - Span back from its wall start and
// ends at the wall clock; at speed 1 simulated time is the wall clock.
func TestSimTime(t *testing.T) {
	wall0 := time.Date(2026, 12, 3, 16, 0, 0, 0, time.UTC)
	tests := []struct {
		name            string
		duration        time.Duration
		speed           float64
		after           time.Duration // real time since wall0
		wantStart, want time.Time
	}{
		{"speed 1", 30 * time.Minute, 1, 10 * time.Minute, wall0, wall0.Add(10 * time.Minute)},
		{"3h at speed 6, halfway", 3 * time.Hour, 6, 15 * time.Minute, wall0.Add(-150 * time.Minute), wall0.Add(-60 * time.Minute)},
		{"3h at speed 6, at the end", 3 * time.Hour, 6, 30 * time.Minute, wall0.Add(-150 * time.Minute), wall0.Add(30 * time.Minute)},
		{"70m at speed 60", 70 * time.Minute, 60, 70 * time.Second, wall0.Add(-70*time.Minute + 70*time.Second), wall0.Add(70 * time.Second)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := DefaultConfig()
			c.Duration, c.Speed = tt.duration, tt.speed
			if got := c.SimStart(wall0); !got.Equal(tt.wantStart) {
				t.Errorf("SimStart = %v, want %v", got, tt.wantStart)
			}
			if got := c.SimTime(wall0, wall0.Add(tt.after)); !got.Equal(tt.want) {
				t.Errorf("SimTime after %v = %v, want %v", tt.after, got, tt.want)
			}
		})
	}
}
