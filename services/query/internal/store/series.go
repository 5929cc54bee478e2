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

// Lines are a chart's lines.
type Lines struct {
	Lines     []Line
	Truncated bool   // more groups than MaxSeries: only the heaviest are in Lines
	Source    string // "samples" or "rollups"
}

// Line is one group's [unix_ms, value] points, in time order: cores for
// CPU, bytes for the other types.
type Line struct {
	Key    string
	Points [][2]float64
}

// CountLines estimates how many lines a chart of sel grouped by groupBy
// will have (distinct values, up to MaxSeries), so an automatic step can
// keep the chart's buckets bounded. One cheap cardinality request.
func (s *Store) CountLines(ctx context.Context, sel Selection, groupBy string) (int, error) {
	// The count only steers the step: a minute-old one per chart is fine
	// and saves a request on every refresh.
	key := fmt.Sprintf("%s|%s|%s|%d", groupBy, sel.Type, sel.Selector, sel.Range.Duration()/time.Hour)
	if c, ok := s.lines.Get(key); ok && s.opts.Now().Sub(c.at) < linesCacheTTL {
		return c.n, nil
	}
	idx, query := s.sampleIndices(sel.Range), sampleQuery(sel)
	if sel.Selector.OnlyFields("service", "host") {
		idx, query = s.rollupIndices(sel.Range), rollupQuery(sel, "service", true)
	}
	var out struct {
		Aggregations struct {
			Lines sumValue `json:"lines"`
		} `json:"aggregations"`
	}
	if err := s.search(ctx, idx, aggsRequest(query, Aggs{"lines": cardinalityOf(groupBy)}), &out, "aggregations.lines.value"); err != nil {
		return 0, fmt.Errorf("count series: %w", err)
	}
	n := min(int(out.Aggregations.Lines.Value), s.opts.MaxSeries)
	s.lines.Put(key, cachedLines{n: n, at: s.opts.Now()}, 0)
	return n, nil
}

const linesCacheTTL = time.Minute

// maxCachedLines bounds the charts whose line counts are remembered.
const maxCachedLines = 1000

// cachedLines is a chart's line count as of at.
type cachedLines struct {
	n  int
	at time.Time
}

// Series is sel's value per step grouped by groupBy ("service" or "host"),
// the heaviest MaxSeries groups. sel.Range must be aligned to step.
// Selectors of service and host read the per-service rollups (hourly
// windows when step is whole hours and they exist, else minute windows);
// label selectors, and clusters without rollups yet, read the samples.
func (s *Store) Series(ctx context.Context, sel Selection, step time.Duration, groupBy string) (*Lines, error) {
	if sel.Selector.OnlyFields("service", "host") {
		// Hourly windows only fit steps of whole hours.
		for _, minuteOnly := range []bool{step%time.Hour != 0, true} {
			lines, hourly, err := s.rollupSeries(ctx, sel, step, groupBy, minuteOnly)
			if err != nil {
				return nil, err
			}
			if lines != nil && (hourly || minuteOnly || !hasWholeHours(sel.Range)) {
				return lines, nil
			}
			if minuteOnly {
				break
			}
		}
	}
	return s.sampleSeries(ctx, sel, step, groupBy)
}

type seriesAggs struct {
	Hourly docCount `json:"hourly"`
	Groups struct {
		SumOtherDocCount int64 `json:"sum_other_doc_count"`
		Buckets          []struct {
			Key  string `json:"key"`
			Time struct {
				Buckets []seriesBucket `json:"buckets"`
			} `json:"time"`
		} `json:"buckets"`
	} `json:"groups"`
}

type seriesBucket struct {
	Key   int64     `json:"key"`
	V     sumValue  `json:"v"`     // samples
	Times *sumValue `json:"times"` // samples: distinct report times
	H     struct {
		V sumValue `json:"v"`
	} `json:"h"` // rollups: hourly windows
	M struct {
		V sumValue `json:"v"`
	} `json:"m"` // rollups: minute windows
}

// seriesRequest groups by groupBy (the heaviest first), then buckets each
// group's documents by step with timeAggs.
func seriesRequest(query Query, groupBy, valueField string, timeAggs Aggs, step time.Duration, size int) *Request {
	return matchedRequest(query, Aggs{
		"hourly": hourlyCount,
		"groups": {
			Terms: &Terms{Field: groupBy, Size: size, Order: map[string]string{"gv": "desc"}},
			Aggs: Aggs{
				"gv":   sumOf(valueField), // the heaviest series first
				"time": histogram(step, timeAggs),
			},
		},
	})
}

// seriesFilterPath is what seriesAggs reads.
var seriesFilterPath = []string{
	"hits.total", "aggregations.hourly", "aggregations.groups.sum_other_doc_count", "aggregations.groups.buckets.key",
	"aggregations.groups.buckets.time.buckets.key", "aggregations.groups.buckets.time.buckets.v",
	"aggregations.groups.buckets.time.buckets.times", "aggregations.groups.buckets.time.buckets.h.v",
	"aggregations.groups.buckets.time.buckets.m.v",
}

// rollupSeries reads kind=service rollups; lines is nil when there are
// none, hourly whether hourly windows were among them.
func (s *Store) rollupSeries(ctx context.Context, sel Selection, step time.Duration, groupBy string, minuteOnly bool) (lines *Lines, hourly bool, err error) {
	valueField := "value"
	if sel.Type == record.ProfileMemory {
		valueField = "mem_avg"
	}
	// Minute windows only need a sum; mixed resolutions weigh each apart.
	timeAggs := Aggs{"v": sumOf(valueField)}
	if !minuteOnly {
		timeAggs = Aggs{
			"h": {Filter: term("resolution", "1h"), Aggs: Aggs{"v": sumOf(valueField)}},
			"m": {Filter: term("resolution", "1m"), Aggs: Aggs{"v": sumOf(valueField)}},
		}
	}
	var out struct {
		Hits         hitsTotal  `json:"hits"`
		Aggregations seriesAggs `json:"aggregations"`
	}
	req := seriesRequest(rollupQuery(sel, "service", minuteOnly), groupBy, valueField, timeAggs, step, s.opts.MaxSeries)
	if err := s.search(ctx, s.rollupIndices(sel.Range), req, &out, seriesFilterPath...); err != nil {
		return nil, false, fmt.Errorf("series from rollups: %w", err)
	}
	if out.Hits.Total.Value == 0 {
		return nil, false, nil
	}
	lines = toLines(out.Aggregations, "rollups", func(b seriesBucket) float64 {
		if minuteOnly {
			b.M.V = b.V
		}
		if sel.Type.Time() {
			// Nanoseconds used in a step / the step's nanoseconds = cores
			// (cpu), or threads blocked on average (offcpu).
			return (b.H.V.Value + b.M.V.Value) / float64(step)
		}
		// Each window holds its average: weigh it by its length.
		return (b.H.V.Value*float64(time.Hour) + b.M.V.Value*float64(time.Minute)) / float64(step)
	})
	return lines, out.Aggregations.Hourly.DocCount > 0, nil
}

// sampleSeries reads the raw samples: CPU as above; other types sum the
// samples of each reporting time and average those sums over the step.
func (s *Store) sampleSeries(ctx context.Context, sel Selection, step time.Duration, groupBy string) (*Lines, error) {
	cpu := sel.Type.Time()
	var out struct {
		Aggregations seriesAggs `json:"aggregations"`
	}
	timeAggs := Aggs{"v": sumOf("value")}
	if !cpu {
		timeAggs["times"] = cardinalityOf("@timestamp")
	}
	req := seriesRequest(sampleQuery(sel), groupBy, "value", timeAggs, step, s.opts.MaxSeries)
	if err := s.search(ctx, s.sampleIndices(sel.Range), req, &out, seriesFilterPath...); err != nil {
		return nil, fmt.Errorf("series from samples: %w", err)
	}
	return toLines(out.Aggregations, "samples", func(b seriesBucket) float64 {
		if cpu {
			return b.V.Value / float64(step)
		}
		if b.Times == nil || b.Times.Value < 1 {
			return b.V.Value
		}
		return b.V.Value / b.Times.Value
	}), nil
}

func toLines(aggs seriesAggs, source string, value func(seriesBucket) float64) *Lines {
	out := &Lines{Truncated: aggs.Groups.SumOtherDocCount > 0, Source: source, Lines: make([]Line, 0, len(aggs.Groups.Buckets))}
	for _, g := range aggs.Groups.Buckets {
		l := Line{Key: g.Key, Points: make([][2]float64, 0, len(g.Time.Buckets))}
		for _, b := range g.Time.Buckets {
			l.Points = append(l.Points, [2]float64{float64(b.Key), value(b)})
		}
		slices.SortFunc(l.Points, func(x, y [2]float64) int { return cmp.Compare(x[0], y[0]) })
		out.Lines = append(out.Lines, l)
	}
	return out
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
		for _, minuteOnly := range []bool{step%time.Hour != 0, true} {
			var out answer
			req := matchedRequest(rollupQuery(sel, "function", minuteOnly, term("function", fn)),
				Aggs{"time": histogram(step, Aggs{"v": sumOf("total")})})
			if err := s.search(ctx, s.rollupIndices(sel.Range), req, &out, filterPath...); err != nil {
				return nil, "", fmt.Errorf("function series from rollups: %w", err)
			}
			if out.Hits.Total.Value > 0 {
				return toPoints(out), "rollups", nil
			}
			if minuteOnly {
				break
			}
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
