package record

import (
	"errors"
	"fmt"
	"time"
)

// ErrTimeOutOfRange means a profile's own time lies outside the window a
// consumer accepts: older than its retention (the index would be deleted at
// once, or never created) or later than now plus the allowed clock skew (an
// index for a future day that retention would never delete).
var ErrTimeOutOfRange = errors.New("profile time out of range")

// DefaultMaxClockSkew is how far in the future a profile may be stamped by
// default: agents' clocks drift, but not by hours.
const DefaultMaxClockSkew = 10 * time.Minute

// CheckTime returns ErrTimeOutOfRange unless now-maxAge <= t <= now+maxSkew.
// A maxAge of zero or less accepts any past time.
func CheckTime(t, now time.Time, maxAge, maxSkew time.Duration) error {
	if t.After(now.Add(maxSkew)) {
		return fmt.Errorf("%w: %s is more than %s after now (%s)", ErrTimeOutOfRange,
			t.UTC().Format(time.RFC3339), maxSkew, now.UTC().Format(time.RFC3339))
	}
	if maxAge > 0 && t.Before(now.Add(-maxAge)) {
		return fmt.Errorf("%w: %s is more than %s before now (%s)", ErrTimeOutOfRange,
			t.UTC().Format(time.RFC3339), maxAge, now.UTC().Format(time.RFC3339))
	}
	return nil
}
