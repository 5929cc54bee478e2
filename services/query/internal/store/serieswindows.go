package store

import (
	"cmp"
	"context"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/stackstream/stackstream/schemas/indices"
)

// windowSettle is how long after a 10-minute window ends a chart expects
// its 10-minute service documents: the rollup writes them once the
// partition's watermark passes the window's end by the allowed lateness
// (default 2m). Windows ending later are read from their minutes; those
// ending earlier are read from their 10-minute documents, checked first.
const windowSettle = 5 * time.Minute

// windowSeriesSteps reports whether windowSeries can answer a chart of
// step: whole hours dividing a day, or a whole number of 10 minutes
// dividing an hour. Such steps start on the same instants counted from the
// Unix epoch (OpenSearch's buckets) and from Go's zero time (the windows
// summed into them), both whole days apart.
func windowSeriesSteps(step time.Duration) bool {
	return step%time.Hour == 0 && (24*time.Hour)%step == 0 || tenMinuteSteps(step)
}

// spanSums is a selection's sum of value and document count per window.
type spanSums map[int64]sumCount

type sumCount struct {
	sum   float64
	count int64
}

// windowSeries answers a chart of a CPU or off-CPU selection of service and
// host fields (windowSeriesSteps, sel.Range aligned to step) from the
// fewest documents that make it exact, or returns nil lines when they are
// not complete (the caller then reads the chart as before):
//
//   - the settled hours from their hourly documents when step is whole
//     hours, else from their 10-minute documents, which must add up to the
//     hour's hourly ones over the selection;
//   - the 10-minute windows outside them that ended windowSettle ago from
//     their 10-minute documents, which must add up to their minutes' over
//     the selection; the rest (the windows still filling) from minutes.
//
// A 10-minute document is never above its minutes (it is their sum, or an
// older one), so equal sums over the selection mean each is complete.
// Groups are ranked from those documents (an hour of 1,000 hosts is 1,000
// hourly or 6,000 10-minute documents, against 60,000 minutes); "other" is
// the selection's total per step less the top lines. The settled hours and
// closed windows are read per unit (an hour, a 10-minute window: each
// group's sum, the totals per window, the top groups' lines) and
// remembered, and read again only when their documents changed
// (closedwindows.go); the windows still filling are read from their
// minutes on every request.
func (s *Store) windowSeries(ctx context.Context, sel Selection, step time.Duration, groupBy string, top int) (*Lines, error) {
	hours, whole := hourlySpan(sel.Range)
	var unsettled []TimeRange
	if whole {
		unsettled = minuteSpans(sel.Range, hours)
	} else {
		unsettled = []TimeRange{sel.Range}
	}
	closed, open := splitClosed(unsettled, sel.Range.Now)
	fine := step%time.Hour != 0 // settled hours from 10-minute documents
	var settledTens []TimeRange
	if whole && fine {
		settledTens = append(settledTens, hours)
	}
	tens := append(slices.Clone(settledTens), closed...)
	var hourSpans []TimeRange
	if whole {
		hourSpans = []TimeRange{hours}
	}
	// The settled hours and closed windows (units), from memory where
	// unchanged, and the windows still filling from their minutes: each
	// group's sum per 10-minute window, which ranks, totals and draws them.
	var (
		wg         sync.WaitGroup
		units      map[unitKey]closedUnit
		byGroup    map[string]float64
		remembered int
		filling    []windowGroup
		errs       [2]error
	)
	wg.Go(func() {
		units, byGroup, remembered, errs[0] = s.closedWindows(ctx, sel, groupBy, closedUnits(hours, whole, closed))
	})
	if len(open) > 0 {
		minutes := allOf([]Query{term("resolution", indices.ResolutionMinute), anyOf(timeFilters(open)...)}, nil)
		wg.Go(func() {
			filling, errs[1] = s.groupsPerWindow(ctx, s.rollupIndices(sel.Range), windowQuery(sel, groupBy, minutes), groupBy)
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	tenSums, hourSums, mins := spanSums{}, spanSums{}, spanSums{}
	byGroup = maps.Clone(byGroup) // remembered: not to be changed
	for _, u := range units {
		maps.Copy(tenSums, u.sums[indices.ResolutionTenMinutes])
		maps.Copy(hourSums, u.sums[indices.ResolutionHour])
		maps.Copy(mins, u.sums[indices.ResolutionMinute])
	}
	for _, g := range filling {
		byGroup[g.key] += g.sum
		mins[g.window] = sumCount{mins[g.window].sum + g.sum, mins[g.window].count + g.count}
	}
	groups := make([]groupTotal, 0, len(byGroup))
	for k, v := range byGroup {
		groups = append(groups, groupTotal{key: k, value: v})
	}
	if len(groups) > MaxGroups { // as groupTotals: the first MaxGroups keys
		slices.SortFunc(groups, func(x, y groupTotal) int { return cmp.Compare(x.key, y.key) })
		groups = groups[:MaxGroups]
	}
	if whole && len(hourSums) == 0 {
		return nil, nil // no hourly documents yet
	}
	if whole && fine && !tensMatchHours(tenSums, hourSums, hours) {
		return nil, nil
	}
	for _, r := range closed {
		if !tensMatchMinutes(tenSums, mins, r) {
			return nil, nil
		}
	}
	if len(groups) == 0 {
		return nil, nil // perhaps no rollups yet: the caller reads the samples
	}
	// The selection's total per step, from the documents that answer.
	totals := spanSums{}
	addSpans := func(sums spanSums, spans []TimeRange) {
		for ms, sc := range sums {
			t := time.UnixMilli(ms)
			if inSpans(t, spans) {
				k := t.Truncate(step).UnixMilli()
				totals[k] = sumCount{totals[k].sum + sc.sum, totals[k].count + sc.count}
			}
		}
	}
	addSpans(tenSums, tens)
	if !fine {
		addSpans(hourSums, hourSpans)
	}
	addSpans(mins, open)

	sortGroups(groups)
	keys := make([]string, 0, min(top, len(groups)))
	for _, g := range groups[:min(top, len(groups))] {
		keys = append(keys, g.key)
	}
	// The top lines: the closed windows' from memory where held.
	if err := s.unitLines(ctx, sel, groupBy, keys, units); err != nil {
		return nil, err
	}
	lines := map[string]spanSums{}
	addLine := func(key string, sums spanSums) {
		if lines[key] == nil {
			lines[key] = spanSums{}
		}
		for ms, sc := range sums {
			t := time.UnixMilli(ms).Truncate(step).UnixMilli()
			lines[key][t] = sumCount{lines[key][t].sum + sc.sum, lines[key][t].count + sc.count}
		}
	}
	for k, u := range units {
		res := indices.ResolutionTenMinutes
		if k.hour && !fine {
			res = indices.ResolutionHour
		}
		for _, key := range keys {
			addLine(key, u.lines[key][res])
		}
	}
	for _, g := range filling {
		if slices.Contains(keys, g.key) {
			addLine(g.key, spanSums{g.window: {g.sum, g.count}})
		}
	}
	out := &Lines{Lines: make([]Line, 0, len(keys)), Total: len(groups), Source: "rollups", Remembered: remembered}
	rest := totals
	for _, k := range keys { // in rank order
		out.Lines = append(out.Lines, Line{Key: k, Points: windowPoints(lines[k], step)})
		for ms, sc := range lines[k] {
			rest[ms] = sumCount{rest[ms].sum - sc.sum, rest[ms].count - sc.count}
		}
	}
	if len(groups) > len(keys) {
		for ms, sc := range rest {
			if sc.count <= 0 {
				delete(rest, ms) // no document of another group in this step
			}
		}
		out.Other = &Line{Points: windowPoints(rest, step)}
	}
	return out, nil
}

// splitClosed cuts spans (aligned to 10 minutes) into the 10-minute
// windows that ended windowSettle before now (all of them when now is
// zero) and the rest.
func splitClosed(spans []TimeRange, now time.Time) (closed, open []TimeRange) {
	for _, r := range spans {
		end := r.To
		if !now.IsZero() {
			if cut := now.Add(-windowSettle).Truncate(tenMinutes); cut.Before(end) {
				end = cut
			}
		}
		if r.From.Before(end) {
			closed = append(closed, TimeRange{From: r.From, To: end, Now: r.Now})
		} else {
			end = r.From
		}
		if end.Before(r.To) {
			open = append(open, TimeRange{From: end, To: r.To, Now: r.Now})
		}
	}
	return closed, open
}

// tensMatchHours reports whether, in every hour of hours, the selection's
// 10-minute documents add up to its hourly ones (and exist, unless the
// hour has no document at all).
func tensMatchHours(tens, hourSums spanSums, hours TimeRange) bool {
	for h := hours.From; h.Before(hours.To); h = h.Add(time.Hour) {
		var ten sumCount
		for w := h; w.Before(h.Add(time.Hour)); w = w.Add(tenMinutes) {
			sc := tens[w.UnixMilli()]
			ten.sum += sc.sum
			ten.count += sc.count
		}
		if !complete(ten, hourSums[h.UnixMilli()]) {
			return false
		}
	}
	return true
}

// tensMatchMinutes reports the same of every 10-minute window of r against
// its minutes.
func tensMatchMinutes(tens, mins spanSums, r TimeRange) bool {
	for w := r.From; w.Before(r.To); w = w.Add(tenMinutes) {
		if !complete(tens[w.UnixMilli()], mins[w.UnixMilli()]) {
			return false
		}
	}
	return true
}

// complete: the 10-minute documents of a span hold what the finer
// documents of it (hourly, or minutes) do. Both empty is complete; 10-minute
// documents missing are not (data from before the rollup wrote them).
func complete(ten, finer sumCount) bool {
	if ten.count == 0 {
		return finer.count == 0
	}
	return ten.sum == finer.sum
}

func inSpans(t time.Time, spans []TimeRange) bool {
	for _, r := range spans {
		if !t.Before(r.From) && t.Before(r.To) {
			return true
		}
	}
	return false
}

// windowPoints turns sums per step into a line's points (cores or
// threads: nanoseconds per nanosecond of the step), in time order.
func windowPoints(sums spanSums, step time.Duration) [][2]float64 {
	pts := make([][2]float64, 0, len(sums))
	for ms, sc := range sums {
		pts = append(pts, [2]float64{float64(ms), sc.sum / float64(step)})
	}
	slices.SortFunc(pts, func(x, y [2]float64) int { return cmp.Compare(x[0], y[0]) })
	return pts
}

// windowQuery selects the service documents of sel having groupBy and
// matching read.
func windowQuery(sel Selection, groupBy string, read Query, extra ...Query) Query {
	filter, mustNot := sel.Selector.Clauses()
	filter = append(append([]Query{term("kind", indices.KindService), term("type", string(sel.Type)), exists(groupBy), read}, filter...), extra...)
	return allOf(filter, mustNot)
}

// keyedWindows are the buckets of a terms aggregation holding a histogram
// ("time") of value sums ("v"), and of the largest _seq_no ("seq") when
// asked for (sumsPerWindow).
type keyedWindows struct {
	Buckets []struct {
		Key  string        `json:"key"`
		Time windowBuckets `json:"time"`
	} `json:"buckets"`
}

// windowBuckets are the buckets of a 10-minute histogram ("time") of value
// sums ("v") and, when asked for, of the largest _seq_no ("seq").
type windowBuckets struct {
	Buckets []struct {
		Key      int64    `json:"key"`
		DocCount int64    `json:"doc_count"`
		V        sumValue `json:"v"`
		Seq      sumValue `json:"seq"`
	} `json:"buckets"`
}

func (k keyedWindows) byKey() map[string]spanSums {
	out := make(map[string]spanSums, len(k.Buckets))
	for _, b := range k.Buckets {
		sums := make(spanSums, len(b.Time.Buckets))
		for _, t := range b.Time.Buckets {
			sums[t.Key] = sumCount{t.V.Value, t.DocCount}
		}
		out[b.Key] = sums
	}
	return out
}
