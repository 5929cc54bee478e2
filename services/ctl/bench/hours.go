package main

import (
	"fmt"
	"strings"
	"time"
)

// The rollup writes an hour window once a partition's newest profile is
// past the hour's end, and the hour in progress at its idle flush
// (docs/ROLLUP.md). A fleet whose profiles cross an hour therefore has its
// hosts' hourly documents written for both hours: the ended hour's and the
// new one's (one part E round across 16:00 on 2026-12-03 spent 2.35 s of
// its 3.5 s more CPU than the round before writing the ended hour). Its CPU
// and documents written are not comparable with a fleet's that stayed in
// one hour, so the bench reports the hours.

// alignMargin is left between a fleet's planned last profile and the next
// hour by -scale-align, for the time between planning the round and
// loadgen's start (the idle interval is counted in the plan; the CPU and
// counter reads after it take seconds on a loaded machine).
const alignMargin = time.Minute

// profileHours are the UTC hours that the profiles of a fleet simulating
// [from, to) are stamped in, in order. loadgen stamps host h's interval i
// (from 1) at from + phase(h) + (i-1) x interval with phase below the
// interval, and runs whole intervals, so every stamp is in [from, to). An
// hour that begins in the fleet's last interval is listed though only some
// hosts' last profiles (or none) may be stamped in it.
func profileHours(from, to time.Time) []time.Time {
	var out []time.Time
	// Truncate counts from the zero time, so it cuts at UTC hours.
	for h := from.Truncate(time.Hour); h.Before(to); h = h.Add(time.Hour) {
		out = append(out, h.UTC())
	}
	return out
}

// hoursNote says when a fleet's profiles are stamped and which hours they
// cross: "13:54:10-14:06:10 UTC, crosses 14:00".
func hoursNote(from, to time.Time) string {
	note := from.UTC().Format("15:04:05") + "-" + to.UTC().Format("15:04:05") + " UTC"
	hours := profileHours(from, to)
	switch crossed := hours[min(1, len(hours)):]; {
	case len(crossed) == 0:
		return note
	case len(crossed) <= 3:
		var names []string
		for _, h := range crossed {
			names = append(names, h.Format("15:04"))
		}
		return note + ", crosses " + strings.Join(names, ", ")
	default:
		return fmt.Sprintf("%s, crosses %d hours (%s to %s)", note, len(crossed), crossed[0].Format("15:04"), crossed[len(crossed)-1].Format("15:04"))
	}
}

// crossesHour says whether a fleet's profiles fall in more than one hour.
func crossesHour(from, to time.Time) bool { return len(profileHours(from, to)) > 1 }

// alignWait is how long to wait before a fleet whose profiles would be
// stamped from from over d, so that they stay in one UTC hour with margin
// to spare before the next: 0 when they do, else until from reaches the
// next hour. The wait is at most d + margin, and only possible while
// d + margin is under an hour.
func alignWait(from time.Time, d, margin time.Duration) time.Duration {
	next := from.Truncate(time.Hour).Add(time.Hour)
	if !from.Add(d + margin).After(next) {
		return 0
	}
	return next.Sub(from)
}
