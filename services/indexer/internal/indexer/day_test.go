package indexer

import (
	"testing"
	"time"

	"github.com/stackstream/stackstream/schemas/indices"
)

// TestDayOfOrdersAsDayStrings: the day numbers the stack caches compare are
// equal exactly when indices.DayOf's strings are, and ordered as they are.
func TestDayOfOrdersAsDayStrings(t *testing.T) {
	times := []time.Time{
		time.Unix(-86401, 0), time.Unix(-86400, 0), time.Unix(-1, 0), time.Unix(0, 0), time.Unix(86399, 999),
		time.Unix(86400, 0), time.Date(2026, 12, 1, 23, 59, 59, 0, time.UTC),
		time.Date(2026, 12, 2, 0, 30, 0, 0, time.FixedZone("UTC+1", 3600)), // 2026-12-01 in UTC
		time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC),
	}
	for _, a := range times {
		for _, b := range times {
			da, db := indices.DayOf(a), indices.DayOf(b)
			if (da < db) != (dayOf(a) < dayOf(b)) || (da == db) != (dayOf(a) == dayOf(b)) {
				t.Errorf("%v (%s, %d) vs %v (%s, %d): day numbers not ordered as the strings", a, da, dayOf(a), b, db, dayOf(b))
			}
		}
	}
}
