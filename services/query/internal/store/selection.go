package store

import (
	"time"

	"github.com/stackstream/stackstream/schemas/indices"
	"github.com/stackstream/stackstream/schemas/record"
	"github.com/stackstream/stackstream/services/query/internal/selector"
)

// This file decides where a selection is read: which indices, and which
// documents of them (samples, or rollup windows of one resolution).

// TimeRange is [From, To); Now is when the request was parsed (zero in
// tests that do not care), so recent hours are read from minute windows.
type TimeRange struct{ From, To, Now time.Time }

func (r TimeRange) Duration() time.Duration { return r.To.Sub(r.From) }

// Selection is what most queries read: a profile type, a selector and a
// time range.
type Selection struct {
	Type     record.ProfileType
	Selector selector.Selector
	Range    TimeRange
}

// FromRollups reports whether a selection reads the per-stack and
// per-function rollups instead of the raw samples: for ranges longer than
// RawMaxRange, when the selector only names fields the rollups have.
func (s *Store) FromRollups(sel Selection) bool {
	return sel.Range.Duration() > s.opts.RawMaxRange && sel.Selector.OnlyFields("service", "host")
}

// sampleQuery selects the samples of sel, and extra.
func sampleQuery(sel Selection, extra ...Query) Query {
	filter, mustNot := sel.Selector.Clauses()
	filter = append(append([]Query{timeFilter(sel.Range), term("type", string(sel.Type))}, filter...), extra...)
	return allOf(filter, mustNot)
}

// rollupQuery selects the rollup windows of one kind (service, stack or
// function) of sel, and extra.
func rollupQuery(sel Selection, kind string, minuteOnly bool, extra ...Query) Query {
	filter, mustNot := sel.Selector.Clauses()
	filter = append(append([]Query{term("kind", kind), term("type", string(sel.Type)), rollupTime(sel.Range, minuteOnly)}, filter...), extra...)
	return allOf(filter, mustNot)
}

// stackRollupQuery selects the stack rollups of sel, of both kinds
// (indices.KindStacks, and indices.KindStack from before rollups schema 3),
// and extra.
func stackRollupQuery(sel Selection, minuteOnly bool, extra ...Query) Query {
	filter, mustNot := sel.Selector.Clauses()
	filter = append(append([]Query{termsOf("kind", []string{indices.KindStack, indices.KindStacks}), term("type", string(sel.Type)), rollupTime(sel.Range, minuteOnly)}, filter...), extra...)
	return allOf(filter, mustNot)
}

// hourSettle is how long after an hour ends its hourly rollup documents are
// surely written: the rollup service writes an hour once its watermark has
// passed the hour's end by the allowed lateness (default 2m). Until then the
// hour is read from its minute windows, which are exact too.
const hourSettle = 15 * time.Minute

// hourlySpan is the part of tr read from hourly rollups: the whole hours
// inside it that ended at least hourSettle before tr.Now.
func hourlySpan(tr TimeRange) (TimeRange, bool) {
	hFrom := tr.From.Truncate(time.Hour)
	if hFrom.Before(tr.From) {
		hFrom = hFrom.Add(time.Hour)
	}
	end := tr.To
	if settled := tr.Now.Add(-hourSettle); !tr.Now.IsZero() && settled.Before(end) {
		end = settled
	}
	hTo := end.Truncate(time.Hour)
	return TimeRange{From: hFrom, To: hTo}, hFrom.Before(hTo)
}

// hasWholeHours reports whether rollupTime would read hourly documents.
func hasWholeHours(tr TimeRange) bool {
	_, ok := hourlySpan(tr)
	return ok
}

// rollupTime selects rollup windows starting in tr: hourly documents for the
// whole hours of hourlySpan and minute documents for the rest, so a day
// reads ~24 documents per key instead of 1440 and the sums stay exact.
// minuteOnly is the fallback when no hourly rollups exist.
func rollupTime(tr TimeRange, minuteOnly bool) Query {
	minute := func(r TimeRange) Query {
		return allOf([]Query{term("resolution", "1m"), timeFilter(r)}, nil)
	}
	hours, ok := hourlySpan(tr)
	if minuteOnly || !ok {
		return minute(tr)
	}
	should := []Query{allOf([]Query{term("resolution", "1h"), timeFilter(hours)}, nil)}
	if tr.From.Before(hours.From) {
		should = append(should, minute(TimeRange{From: tr.From, To: hours.From}))
	}
	if hours.To.Before(tr.To) {
		should = append(should, minute(TimeRange{From: hours.To, To: tr.To}))
	}
	return anyOf(should...)
}

// sampleIndices are the daily samples indices that can hold events of tr.
func (s *Store) sampleIndices(tr TimeRange) []string {
	var out []string
	day := tr.From.UTC().Truncate(24 * time.Hour)
	for ; day.Before(tr.To); day = day.Add(24 * time.Hour) {
		out = append(out, s.names.Samples(day))
	}
	return out
}

// rollupIndices are the monthly rollups indices that can hold windows of tr.
func (s *Store) rollupIndices(tr TimeRange) []string {
	var out []string
	f := tr.From.UTC()
	month := time.Date(f.Year(), f.Month(), 1, 0, 0, 0, 0, time.UTC)
	for ; month.Before(tr.To); month = month.AddDate(0, 1, 0) {
		out = append(out, s.names.Rollups(month))
	}
	return out
}
