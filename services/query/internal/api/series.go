package api

import (
	"context"
	"net/http"
	"time"

	"github.com/stackstream/stackstream/schemas/record"
)

// maxPoints bounds one series, so a tiny step over a long range is refused.
const maxPoints = 11000

// niceSteps are the automatic steps: the first giving few enough points.
var niceSteps = []time.Duration{
	time.Minute, 2 * time.Minute, 5 * time.Minute, 10 * time.Minute, 15 * time.Minute, 30 * time.Minute,
	time.Hour, 2 * time.Hour, 3 * time.Hour, 6 * time.Hour, 12 * time.Hour, 24 * time.Hour,
}

const (
	// autoPoints is the most points of one line with an automatic step.
	autoPoints = 300
	// pointBudget bounds lines x points of a chart with an automatic step:
	// the aggregation's buckets and the answer grow with it (100 hosts x
	// 288 points is an 840 KB answer), and 100 lines cannot show 300
	// points each anyway.
	pointBudget = 10000
	// minAutoPoints keeps many-line charts from getting too coarse.
	minAutoPoints = 48
	// longRange and longRangeStep: an automatic step over 12 hours or
	// more is a whole multiple of 10 minutes (10m, 30m, 1h, ...), so the
	// chart reads the rollup's 10-minute (or hourly) windows: a tenth of
	// the minutes; 72 to 300 points per line from 12 to 50 hours.
	longRange, longRangeStep = 12 * time.Hour, 10 * time.Minute
)

// chooseStep returns the requested step rounded up to whole minutes (the
// finest rollup), or an automatic one giving at most autoPoints points per
// line and about pointBudget for all lines (lines is how many are expected;
// 0 when unknown), and a multiple of longRangeStep over longRange or more.
func chooseStep(requested, rng time.Duration, lines int) (time.Duration, error) {
	if requested == 0 {
		limit := autoPoints
		if lines > 0 {
			limit = min(autoPoints, max(minAutoPoints, pointBudget/lines))
		}
		for _, s := range niceSteps {
			if rng >= longRange && s%longRangeStep != 0 {
				continue
			}
			if rng/s <= time.Duration(limit) {
				return s, nil
			}
		}
		return niceSteps[len(niceSteps)-1], nil
	}
	step := (requested + time.Minute - 1) / time.Minute * time.Minute
	if n := rng / step; n > maxPoints {
		return 0, badParam("step", "%s over %s gives %d points, more than %d: use a larger step", requested, rng, n, maxPoints)
	}
	return step, nil
}

// SeriesResponse is the answer of /api/v1/series.
type SeriesResponse struct {
	Type        string   `json:"type"`
	Unit        string   `json:"unit"`
	StepSeconds int64    `json:"step_seconds"`
	Source      string   `json:"source,omitempty"`
	Series      []Series `json:"series"`
	// TotalSeries counts the groups of the selection: the lines of Series
	// plus those summed in the "other" line (absent for a function's trend).
	TotalSeries int `json:"total_series,omitempty"`
}

// Series is one line: its labels and [unix_ms, value] points. The "other"
// line has no labels, Other set and Folded the number of groups it sums.
type Series struct {
	Labels map[string]string `json:"labels"`
	Other  bool              `json:"other,omitempty"`
	Folded int               `json:"folded,omitempty"`
	Points [][2]float64      `json:"points"`
}

// defaultTop is how many lines a chart shows when the request says no top.
const defaultTop = 10

func (a *API) handleSeries(ctx context.Context, _ http.ResponseWriter, r *http.Request) (any, error) {
	q := r.URL.Query()
	s, err := a.parseSelection(q, "query", "from", "to")
	if err != nil {
		return nil, err
	}
	reqStep, err := parseStep(q, a.opts.MaxRange)
	if err != nil {
		return nil, err
	}
	groupBy := q.Get("group_by")
	switch groupBy {
	case "":
		groupBy = "service"
	case "service", "host":
	default:
		return nil, badParam("group_by", "%q: use service or host", truncate(groupBy, 64))
	}
	fn := q.Get("function")
	if len(fn) > 1024 {
		return nil, badParam("function", "longer than 1024 bytes")
	}
	top, err := parseInt(q, "top", defaultTop, 1, a.opts.MaxSeries)
	if err != nil {
		return nil, err
	}
	lines := 0
	if fn != "" {
		lines = 1
	} else if reqStep == 0 {
		if lines, err = a.store.CountLines(ctx, s, groupBy); err != nil {
			return nil, err
		}
		// The top lines and "other".
		lines = min(lines, top+1)
	}
	step, err := chooseStep(reqStep, s.Range.Duration(), lines)
	if err != nil {
		return nil, err
	}
	if fn != "" && reqStep == 0 && a.store.FromRollups(s) && step < time.Hour {
		// A function's trend over a long range reads the hourly
		// per-function rollups: 60 times fewer documents than minutes.
		step = time.Hour
	}
	// Align to the step so every bucket covers a whole step.
	s.Range.From = s.Range.From.Truncate(step)
	if end := s.Range.To.Truncate(step); end.Before(s.Range.To) {
		s.Range.To = end.Add(step)
	}
	resp := &SeriesResponse{Type: string(s.Type), StepSeconds: int64(step / time.Second), Unit: "bytes"}
	switch s.Type {
	case record.ProfileCPU:
		resp.Unit = "cores"
	case record.ProfileOffCPU:
		// Nanoseconds blocked per nanosecond: threads off the CPU on average.
		resp.Unit = "threads"
	}
	if fn != "" {
		points, source, err := a.store.FunctionSeries(ctx, s, step, fn)
		if err != nil {
			return nil, err
		}
		resp.Series = []Series{{Labels: map[string]string{"function": fn}, Points: points}}
		resp.Source = source
		return resp, nil
	}
	chart, err := a.store.Series(ctx, s, step, groupBy, top)
	if err != nil {
		return nil, err
	}
	resp.Source, resp.TotalSeries = chart.Source, chart.Total
	resp.Series = make([]Series, 0, len(chart.Lines)+1)
	for _, l := range chart.Lines {
		resp.Series = append(resp.Series, Series{Labels: map[string]string{groupBy: l.Key}, Points: l.Points})
	}
	if chart.Other != nil {
		resp.Series = append(resp.Series, Series{Labels: map[string]string{}, Other: true, Folded: chart.Total - len(chart.Lines), Points: chart.Other.Points})
	}
	return resp, nil
}
