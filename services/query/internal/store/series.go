package store

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/stackstream/stackstream/schemas/indices"
	"github.com/stackstream/stackstream/schemas/record"
)

// Lines are a chart's lines: the heaviest groups and the rest summed.
type Lines struct {
	Lines  []Line
	Other  *Line  // the groups not in Lines summed per step; nil when none is left out
	Total  int    // groups in the selection (Lines plus those summed in Other)
	Source string // "samples" or "rollups"
	// Remembered counts the closed windows (settled hours, closed
	// 10-minute windows) answered from memory (windowSeries).
	Remembered int
}

// Line is one group's [unix_ms, value] points, in time order: cores for
// CPU, bytes for the other types.
type Line struct {
	Key    string
	Points [][2]float64
}

// MaxGroups bounds the groups ranked for one chart: their totals are paged
// in memory (a few dozen bytes each). Past it, the ranking covers the first
// MaxGroups keys in key order and Total stops there; Other still holds
// every group left out, since it is summed by OpenSearch.
const MaxGroups = 100000

// CountLines estimates how many lines a chart of sel grouped by groupBy
// will have (distinct values, up to MaxSeries), so an automatic step can
// keep the chart's buckets bounded. One cheap cardinality request (two
// when the range's settled hours have no hourly documents).
func (s *Store) CountLines(ctx context.Context, sel Selection, groupBy string) (int, error) {
	// The count only steers the step: one counted less than a hundredth
	// of the range's length ago (at least a minute), of a range starting
	// less than that apart, is fine and saves a request on most refreshes.
	key := fmt.Sprintf("%s|%s|%s|%d", groupBy, sel.Type, sel.Selector, sel.Range.Duration()/time.Hour)
	kept := linesKept(sel.Range.Duration())
	if c, ok := s.lines.Get(key); ok && s.opts.Now().Sub(c.at) < kept && sel.Range.From.Sub(c.from).Abs() < kept {
		return c.n, nil
	}
	// count is the distinct values of groupBy of query's documents and,
	// of rollups, how many of them are hourly.
	count := func(idx []string, query Query, rollups bool) (n int, hourly int64, err error) {
		var out struct {
			Aggregations struct {
				Lines  sumValue `json:"lines"`
				Hourly docCount `json:"hourly"`
			} `json:"aggregations"`
		}
		aggs := Aggs{"lines": cardinalityOf(groupBy)}
		if rollups {
			aggs["hourly"] = hourlyCount
		}
		req := aggsRequest(query, aggs)
		if err := s.search(ctx, idx, req, &out, "aggregations.lines.value", "aggregations.hourly.doc_count"); err != nil {
			return 0, 0, fmt.Errorf("count series: %w", err)
		}
		return int(out.Aggregations.Lines.Value), out.Aggregations.Hourly.DocCount, nil
	}
	var n int
	var err error
	if sel.Selector.OnlyFields("service", "host") {
		// Settled hours from their hourly documents (a day of 1,000 hosts:
		// 24,000 documents, not 1.44 M minutes), the rest from minutes; the
		// whole range from minutes when no hourly document matched (data
		// from before the rollup wrote them), as groupTotals and CPUTotal
		// do. Lines counted in the other minutes do not make the hours
		// counted.
		var hourly int64
		n, hourly, err = count(s.rollupIndices(sel.Range), rollupQuery(sel, "service", false), true)
		if err == nil && hourly == 0 && hasWholeHours(sel.Range) {
			n, _, err = count(s.rollupIndices(sel.Range), rollupQuery(sel, "service", true), true)
		}
	} else {
		n, _, err = count(s.sampleIndices(sel.Range), sampleQuery(sel), false)
	}
	if err != nil {
		return 0, err
	}
	n = min(n, s.opts.MaxSeries)
	s.lines.Put(key, cachedLines{n: n, at: s.opts.Now(), from: sel.Range.From}, 0)
	return n, nil
}

// linesKept is how long a line count of a range of length rng is used: a
// hundredth of it, at least a minute (a day's: 14.4 minutes).
func linesKept(rng time.Duration) time.Duration {
	return max(time.Minute, rng/100)
}

// maxCachedLines bounds the charts whose line counts are remembered.
const maxCachedLines = 1000

// cachedLines is the line count of a chart starting at from, as of at.
type cachedLines struct {
	n        int
	at, from time.Time
}

// Series is sel's value per step grouped by groupBy ("service" or "host"):
// the top groups of the largest total over the range (at most MaxSeries)
// as lines, the others summed per step in Other. sel.Range must be aligned
// to step. Selectors of service and host read the per-service rollups:
// groups are ranked from hourly windows for the range's settled whole
// hours (when they exist; minute windows for the rest), whatever the step,
// and lines read hourly windows too when step is whole hours, else minute
// windows. Label selectors, and clusters without rollups yet, read the
// samples. CPU and off-CPU charts of whole hours or of 10, 20 or 30
// minutes are read by windowSeries when its documents are complete; other
// steps of 10, 20 or 30 minutes read the 10-minute windows where they are
// complete (tenMinutePlan).
func (s *Store) Series(ctx context.Context, sel Selection, step time.Duration, groupBy string, top int) (*Lines, error) {
	top = min(max(top, 1), s.opts.MaxSeries)
	if sel.Selector.OnlyFields("service", "host") {
		if sel.Type.Time() && windowSeriesSteps(step) {
			lines, err := s.windowSeries(ctx, sel, step, groupBy, top)
			if err != nil {
				return nil, fmt.Errorf("series from rollups: %w", err)
			}
			if lines != nil {
				return lines, nil
			}
		}
		rank, minute := s.rollupPlan(sel, false), s.rollupPlan(sel, true)
		groups, matched, hourly, err := s.groupTotals(ctx, rank, groupBy, sel.Range.Duration())
		if err == nil && hasWholeHours(sel.Range) && !hourly {
			// No hourly windows yet: the whole range from minutes.
			rank = minute
			groups, matched, _, err = s.groupTotals(ctx, rank, groupBy, sel.Range.Duration())
		}
		if err != nil {
			return nil, fmt.Errorf("series from rollups: %w", err)
		}
		if matched {
			plot := rank
			switch {
			case step%time.Hour == 0:
			case tenMinuteSteps(step):
				// 10-minute windows where they are complete (hourly
				// windows only fit steps of whole hours).
				lines, err := s.topSeries(ctx, s.tenMinutePlan(sel), groups, step, groupBy, top)
				if err != nil {
					return nil, fmt.Errorf("series from rollups: %w", err)
				}
				if lines != nil {
					return lines, nil
				}
				plot = minute // a settled hour without complete 10-minute windows
			default:
				plot = minute
			}
			lines, err := s.topSeries(ctx, plot, groups, step, groupBy, top)
			if err != nil {
				return nil, fmt.Errorf("series from rollups: %w", err)
			}
			return lines, nil
		}
	}
	p := s.samplePlan(sel)
	groups, matched, _, err := s.groupTotals(ctx, p, groupBy, sel.Range.Duration())
	if err != nil {
		return nil, fmt.Errorf("series from samples: %w", err)
	}
	if !matched {
		return &Lines{Lines: []Line{}, Source: "samples"}, nil
	}
	lines, err := s.topSeries(ctx, p, groups, step, groupBy, top)
	if err != nil {
		return nil, fmt.Errorf("series from samples: %w", err)
	}
	return lines, nil
}

// seriesPlan is where a chart's values come from: the documents, the
// metrics of one time bucket, and the value of a bucket of a given length.
type seriesPlan struct {
	indices []string
	query   Query
	aggs    Aggs
	value   func(b seriesBucket, length time.Duration) float64
	source  string
	// prepare, when set, sees every histogram bucket of the lines and
	// "other" before value is applied to them, and may refuse the answer
	// (topSeries then returns nil lines).
	prepare func(answer [][]seriesBucket) bool
}

type seriesBucket struct {
	Key   any       `json:"key"`   // composite: {groupBy: value}; histogram: unix ms
	V     sumValue  `json:"v"`     // samples, minute windows
	Times *sumValue `json:"times"` // samples: distinct report times
	H     struct {
		V sumValue `json:"v"`
		C sumValue `json:"c"`
	} `json:"h"` // rollups: hourly windows (C: value, tenMinutePlan's check)
	T struct {
		V sumValue `json:"v"`
		C sumValue `json:"c"`
	} `json:"t"` // rollups: 10-minute windows
	M struct {
		V sumValue `json:"v"`
		C sumValue `json:"c"`
	} `json:"m"` // rollups: minute windows
}

// rollupPlan reads kind=service rollups.
func (s *Store) rollupPlan(sel Selection, minuteOnly bool) seriesPlan {
	valueField := "value"
	if sel.Type == record.ProfileMemory {
		valueField = "mem_avg"
	}
	// Minute windows only need a sum; mixed resolutions weigh each apart.
	aggs := Aggs{"v": sumOf(valueField)}
	if !minuteOnly {
		aggs = Aggs{
			"h": {Filter: term("resolution", "1h"), Aggs: Aggs{"v": sumOf(valueField)}},
			"m": {Filter: term("resolution", "1m"), Aggs: Aggs{"v": sumOf(valueField)}},
		}
	}
	return seriesPlan{
		indices: s.rollupIndices(sel.Range), query: rollupQuery(sel, "service", minuteOnly), aggs: aggs, source: "rollups",
		value: func(b seriesBucket, length time.Duration) float64 {
			if minuteOnly {
				b.M.V = b.V
			}
			if sel.Type.Time() {
				// Nanoseconds used in a bucket / its nanoseconds = cores
				// (cpu), or threads blocked on average (offcpu).
				return (b.H.V.Value + b.M.V.Value) / float64(length)
			}
			// Each window holds its average: weigh it by its length.
			return (b.H.V.Value*float64(time.Hour) + b.M.V.Value*float64(time.Minute)) / float64(length)
		},
	}
}

// samplePlan reads the raw samples: CPU as above; other types sum the
// samples of each reporting time and average those sums over the bucket.
func (s *Store) samplePlan(sel Selection) seriesPlan {
	cpu := sel.Type.Time()
	aggs := Aggs{"v": sumOf("value")}
	if !cpu {
		aggs["times"] = cardinalityOf("@timestamp")
	}
	return seriesPlan{
		indices: s.sampleIndices(sel.Range), query: sampleQuery(sel), aggs: aggs, source: "samples",
		value: func(b seriesBucket, length time.Duration) float64 {
			if cpu {
				return b.V.Value / float64(length)
			}
			if b.Times == nil || b.Times.Value < 1 {
				return b.V.Value
			}
			return b.V.Value / b.Times.Value
		},
	}
}

// groupTotal is one group's value over the whole range.
type groupTotal struct {
	key   string
	value float64
}

// topSeries reads, for groups ranked over the whole range (groupTotals:
// a composite aggregation paged over the groups, so the ranking and the
// count are exact), the top groups per step and the rest summed per step
// from p's documents, both by OpenSearch, in one search.
func (s *Store) topSeries(ctx context.Context, p seriesPlan, groups []groupTotal, step time.Duration, groupBy string, top int) (*Lines, error) {
	sortGroups(groups)
	keys := make([]string, 0, min(top, len(groups)))
	for _, g := range groups[:min(top, len(groups))] {
		keys = append(keys, g.key)
	}
	lines := &Lines{Lines: make([]Line, 0, len(keys)), Total: len(groups), Source: p.source}
	if len(keys) == 0 {
		return lines, nil
	}
	folded := len(groups) > len(keys)
	aggs := topSeriesAggs(groupBy, keys, step, p.aggs, folded)
	var out struct {
		Aggregations struct {
			Top struct {
				Groups struct {
					Buckets []struct {
						Key  string `json:"key"`
						Time struct {
							Buckets []seriesBucket `json:"buckets"`
						} `json:"time"`
					} `json:"buckets"`
				} `json:"groups"`
			} `json:"top"`
			Rest struct {
				Time struct {
					Buckets []seriesBucket `json:"buckets"`
				} `json:"time"`
			} `json:"rest"`
		} `json:"aggregations"`
	}
	if err := s.search(ctx, p.indices, aggsRequest(p.query, aggs), &out, "aggregations.top.groups.buckets.key",
		"aggregations.top.groups.buckets.time.buckets", "aggregations.rest.time.buckets"); err != nil {
		return nil, err
	}
	if p.prepare != nil {
		answer := [][]seriesBucket{out.Aggregations.Rest.Time.Buckets}
		for _, g := range out.Aggregations.Top.Groups.Buckets {
			answer = append(answer, g.Time.Buckets)
		}
		if !p.prepare(answer) {
			return nil, nil
		}
	}
	points := func(buckets []seriesBucket) [][2]float64 {
		pts := make([][2]float64, 0, len(buckets))
		for _, b := range buckets {
			ms, _ := b.Key.(float64)
			pts = append(pts, [2]float64{ms, p.value(b, step)})
		}
		slices.SortFunc(pts, func(x, y [2]float64) int { return cmp.Compare(x[0], y[0]) })
		return pts
	}
	byKey := map[string][][2]float64{}
	for _, g := range out.Aggregations.Top.Groups.Buckets {
		byKey[g.Key] = points(g.Time.Buckets)
	}
	for _, k := range keys { // in rank order
		lines.Lines = append(lines.Lines, Line{Key: k, Points: byKey[k]})
	}
	if folded {
		lines.Other = &Line{Points: points(out.Aggregations.Rest.Time.Buckets)}
	}
	return lines, nil
}

// sortGroups puts the heaviest groups first, ties in key order.
func sortGroups(groups []groupTotal) {
	slices.SortFunc(groups, func(x, y groupTotal) int {
		if c := cmp.Compare(y.value, x.value); c != 0 {
			return c
		}
		return cmp.Compare(x.key, y.key)
	})
}

// topSeriesAggs buckets the documents of the groups keys by group and step,
// and, when folded, every other document with groupBy by step ("rest").
func topSeriesAggs(groupBy string, keys []string, step time.Duration, metrics Aggs, folded bool) Aggs {
	aggs := Aggs{"top": {Filter: termsOf(groupBy, keys), Aggs: Aggs{"groups": {
		Terms: &Terms{Field: groupBy, Size: len(keys)},
		Aggs:  Aggs{"time": histogram(step, metrics)},
	}}}}
	if folded {
		// Every document of a group outside the top, the groups past
		// MaxGroups included.
		aggs["rest"] = Agg{
			Filter: allOf([]Query{exists(groupBy)}, []Query{termsOf(groupBy, keys)}),
			Aggs:   Aggs{"time": histogram(step, metrics)},
		}
	}
	return aggs
}

// groupTotals pages through every group of p's documents (up to MaxGroups)
// with its value over the range; matched says whether any document matched.
func (s *Store) groupTotals(ctx context.Context, p seriesPlan, groupBy string, length time.Duration) (groups []groupTotal, matched, hourly bool, err error) {
	var after map[string]any
	for {
		size := min(s.opts.PageSize, MaxGroups-len(groups))
		aggs := Aggs{"groups": {
			Composite: &Composite{Size: size, Sources: []map[string]Agg{{"g": {Terms: &Terms{Field: groupBy}}}}, After: after},
			Aggs:      p.aggs,
		}}
		if after == nil {
			aggs["hourly"] = hourlyCount
		}
		var out struct {
			Hits         hitsTotal `json:"hits"`
			Aggregations struct {
				Hourly docCount `json:"hourly"`
				Groups struct {
					AfterKey map[string]any `json:"after_key"`
					Buckets  []seriesBucket `json:"buckets"`
				} `json:"groups"`
			} `json:"aggregations"`
		}
		if err := s.search(ctx, p.indices, matchedRequest(p.query, aggs), &out, "hits.total", "aggregations.hourly",
			"aggregations.groups.after_key", "aggregations.groups.buckets"); err != nil {
			return nil, false, false, fmt.Errorf("rank series: %w", err)
		}
		if after == nil {
			matched, hourly = out.Hits.Total.Value > 0, out.Aggregations.Hourly.DocCount > 0
		}
		for _, b := range out.Aggregations.Groups.Buckets {
			k, _ := b.Key.(map[string]any)
			key, _ := k["g"].(string)
			groups = append(groups, groupTotal{key: key, value: p.value(b, length)})
		}
		after = out.Aggregations.Groups.AfterKey
		// A page shorter than asked for is the last: asking for the next
		// would pass over every document again for nothing.
		if len(out.Aggregations.Groups.Buckets) < size || after == nil || len(groups) >= MaxGroups {
			return groups, matched, hourly, nil
		}
	}
}

// FunctionSeries is the total (inclusive) value of function fn per step,
// as cores for CPU; sel.Range must be aligned to step. Long ranges read
// the per-function rollups; short ones (and label selectors) find the
// selection's stacks holding the function, as a flame graph would, and sum
// their samples per step.
func (s *Store) FunctionSeries(ctx context.Context, sel Selection, step time.Duration, fn string) (points [][2]float64, source string, err error) {
	type answer struct {
		Hits         hitsTotal `json:"hits"`
		Aggregations struct {
			Time struct {
				Buckets []struct {
					Key int64    `json:"key"`
					V   sumValue `json:"v"`
				} `json:"buckets"`
			} `json:"time"`
		} `json:"aggregations"`
	}
	toPoints := func(out answer) [][2]float64 {
		points := [][2]float64{}
		for _, b := range out.Aggregations.Time.Buckets {
			v := b.V.Value
			if sel.Type.Time() {
				v /= float64(step)
			}
			points = append(points, [2]float64{float64(b.Key), v})
		}
		return points
	}
	filterPath := []string{"hits.total", "aggregations.time.buckets.key", "aggregations.time.buckets.v"}
	if s.FromRollups(sel) {
		// Whole settled hours (when the step is whole hours) from the
		// hourly function documents; the minutes (all of them without
		// hourly documents) from the minute stack documents holding fn
		// (minutefuncs.go).
		sums := map[int64]float64{}
		add := func(out answer) {
			for _, b := range out.Aggregations.Time.Buckets {
				sums[b.Key] += b.V.Value
			}
		}
		minutes := []TimeRange{sel.Range}
		if hours, ok := hourlySpan(sel.Range); ok && step%time.Hour == 0 {
			hourSel := sel
			hourSel.Range = hours // aligned: only hourly documents
			var out answer
			req := matchedRequest(rollupQuery(hourSel, "function", false, term("function", fn)),
				Aggs{"time": histogram(step, Aggs{"v": sumOf("total")})})
			if err := s.search(ctx, s.rollupIndices(hours), req, &out, filterPath...); err != nil {
				return nil, "", fmt.Errorf("function series from rollups: %w", err)
			}
			if out.Hits.Total.Value > 0 {
				add(out)
				minutes = minuteSpans(sel.Range, hours)
			}
		}
		found := len(sums) > 0
		for _, r := range minutes {
			ids, sv, err := s.minuteStackIDs(ctx, sel, r, func(f string) bool { return f == fn })
			if err != nil {
				return nil, "", fmt.Errorf("function series from rollups: %w", err)
			}
			if len(ids) == 0 {
				continue
			}
			found = true
			list := make([]string, 0, len(ids))
			for id := range ids {
				list = append(list, id)
			}
			slices.Sort(list)
			es := sel
			es.Range = r
			// A stacks document packs every stack of its window: the sum
			// takes only the function's stacks out of it.
			var out answer
			req := aggsRequest(stackRollupQuery(es, true, termsOf("stack_id", list)),
				Aggs{"time": histogram(step, Aggs{"v": {Sum: &Metric{Script: indices.StackRollupsValueScript(list, sv.skip)}}})})
			if err := s.search(ctx, s.rollupIndices(r), req, &out, filterPath...); err != nil {
				return nil, "", fmt.Errorf("function series from rollups: %w", err)
			}
			add(out)
		}
		if found {
			keys := make([]int64, 0, len(sums))
			for k := range sums {
				keys = append(keys, k)
			}
			slices.Sort(keys)
			var out answer
			for _, k := range keys {
				b := out.Aggregations.Time.Buckets
				out.Aggregations.Time.Buckets = append(b, struct {
					Key int64    `json:"key"`
					V   sumValue `json:"v"`
				}{Key: k, V: sumValue{Value: sums[k]}})
			}
			return toPoints(out), "rollups", nil
		}
	}
	st, err := s.Stacks(ctx, sel)
	if err != nil {
		return nil, "", err
	}
	var ids []string
	for id := range st.Values {
		// "" (samples without a stack) is in no document's stack_id.
		if id != "" && slices.Contains(st.Frames[id], fn) {
			ids = append(ids, id)
		}
	}
	if len(ids) == 0 {
		return toPoints(answer{}), "samples", nil
	}
	slices.Sort(ids)
	// The terms filter finds the documents holding any of the stacks; a
	// document packs all stacks of its profile and label set, so the sum
	// takes only those stacks' values out of it, not its total.
	var out answer
	req := aggsRequest(sampleQuery(sel, termsOf("stack_id", ids)),
		Aggs{"time": histogram(step, Aggs{"v": {Sum: &Metric{Script: indices.StacksValueScript(ids)}}})})
	if err := s.search(ctx, s.sampleIndices(sel.Range), req, &out, filterPath...); err != nil {
		return nil, "", fmt.Errorf("function series from samples: %w", err)
	}
	return toPoints(out), "samples", nil
}
