package api

import (
	"cmp"
	"context"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/stackstream/stackstream/schemas/indices"
	"github.com/stackstream/stackstream/schemas/record"
	"github.com/stackstream/stackstream/services/query/internal/selector"
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
)

// chooseStep returns the requested step rounded up to whole minutes (the
// finest rollup), or an automatic one giving at most autoPoints points per
// line and about pointBudget for all lines (lines is how many are expected;
// 0 when unknown).
func chooseStep(requested, rng time.Duration, lines int) (time.Duration, error) {
	if requested == 0 {
		limit := autoPoints
		if lines > 0 {
			limit = min(autoPoints, max(minAutoPoints, pointBudget/lines))
		}
		for _, s := range niceSteps {
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

// countLines estimates how many lines a chart will have (distinct values of
// groupBy, up to MaxSeries), so the automatic step can keep the chart's
// buckets within pointBudget. One cheap cardinality request.
func (a *API) countLines(ctx context.Context, s selection, groupBy string) (int, error) {
	// The count only steers the step: a minute-old one per chart is fine
	// and saves a request on every refresh.
	key := fmt.Sprintf("%s|%s|%s|%d", groupBy, s.typ, s.sel, s.tr.Duration()/time.Hour)
	a.lines.mu.Lock()
	e, ok := a.lines.m[key]
	a.lines.mu.Unlock()
	if ok && a.opts.Now().Sub(e.at) < linesCacheTTL {
		return e.n, nil
	}
	idx, query := a.sampleIndices(s.tr), a.sampleQuery(s)
	if s.sel.OnlyFields("service", "host") {
		idx, query = a.rollupIndices(s.tr), a.rollupQuery(s, "service", true)
	}
	var out struct {
		Aggregations struct {
			Lines sumAgg `json:"lines"`
		} `json:"aggregations"`
	}
	body := map[string]any{"size": 0, "track_total_hits": false, "query": query, "aggs": map[string]any{
		"lines": map[string]any{"cardinality": map[string]any{"field": groupBy}},
	}}
	if err := a.search(ctx, idx, body, &out, "aggregations.lines.value"); err != nil {
		return 0, fmt.Errorf("count series: %w", err)
	}
	n := min(int(out.Aggregations.Lines.Value), a.opts.MaxSeries)
	a.lines.mu.Lock()
	if len(a.lines.m) >= 1000 {
		clear(a.lines.m)
	}
	a.lines.m[key] = linesEntry{n: n, at: a.opts.Now()}
	a.lines.mu.Unlock()
	return n, nil
}

const linesCacheTTL = time.Minute

// linesCache remembers countLines per chart for linesCacheTTL.
type linesCache struct {
	mu sync.Mutex
	m  map[string]linesEntry
}

type linesEntry struct {
	n  int
	at time.Time
}

// SeriesResponse is the answer of /api/v1/series.
type SeriesResponse struct {
	Type        string   `json:"type"`
	Unit        string   `json:"unit"`
	StepSeconds int64    `json:"step_seconds"`
	Truncated   bool     `json:"truncated,omitempty"`
	Source      string   `json:"source,omitempty"`
	Series      []Series `json:"series"`
}

// Series is one line: its labels and [unix_ms, value] points.
type Series struct {
	Labels map[string]string `json:"labels"`
	Points [][2]float64      `json:"points"`
}

func (a *API) handleSeries(ctx context.Context, _ http.ResponseWriter, r *http.Request) (any, error) {
	q := r.URL.Query()
	s, err := a.parseSelection(q, "query", "from", "to")
	if err != nil {
		return nil, err
	}
	typ, sel, tr := s.typ, s.sel, s.tr
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
	lines := 0
	if fn != "" {
		lines = 1
	} else if reqStep == 0 {
		if lines, err = a.countLines(ctx, selection{typ: typ, sel: sel, tr: tr}, groupBy); err != nil {
			return nil, err
		}
	}
	step, err := chooseStep(reqStep, tr.Duration(), lines)
	if err != nil {
		return nil, err
	}
	if fn != "" && reqStep == 0 && a.fromRollups(selection{sel: sel, tr: tr}) && step < time.Hour {
		// A function's trend over a long range reads the hourly
		// per-function rollups: 60 times fewer documents than minutes.
		step = time.Hour
	}
	// Align to the step so every bucket covers a whole step.
	tr.From = tr.From.Truncate(step)
	if end := tr.To.Truncate(step); end.Before(tr.To) {
		tr.To = end.Add(step)
	}
	resp := &SeriesResponse{Type: string(typ), StepSeconds: int64(step / time.Second), Unit: "bytes"}
	if typ == record.ProfileCPU {
		resp.Unit = "cores"
	}
	if fn != "" {
		if err := a.functionSeries(ctx, resp, selection{typ: typ, sel: sel, tr: tr}, step, fn); err != nil {
			return nil, err
		}
		return resp, nil
	}
	if sel.OnlyFields("service", "host") {
		// Hourly windows only fit steps of whole hours.
		for _, minuteOnly := range []bool{step%time.Hour != 0, true} {
			found, hourly, err := a.rollupSeries(ctx, resp, typ, sel, tr, step, groupBy, minuteOnly)
			if err != nil {
				return nil, err
			}
			if found && (hourly || minuteOnly || !hasWholeHours(tr)) {
				resp.Source = "rollups"
				return resp, nil
			}
			if minuteOnly {
				break
			}
		}
	}
	// Label selectors (and clusters without rollups yet) read the samples.
	if err := a.sampleSeries(ctx, resp, typ, sel, tr, step, groupBy); err != nil {
		return nil, err
	}
	resp.Source = "samples"
	return resp, nil
}

type seriesAggs struct {
	Hourly countAgg `json:"hourly"`
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
	Key   int64   `json:"key"`
	V     sumAgg  `json:"v"`     // samples
	Times *sumAgg `json:"times"` // samples: distinct report times
	H     struct {
		V sumAgg `json:"v"`
	} `json:"h"` // rollups: hourly windows
	M struct {
		V sumAgg `json:"v"`
	} `json:"m"` // rollups: minute windows
}

func seriesBody(query map[string]any, groupBy, valueField string, timeAggs map[string]any, step time.Duration, size int) map[string]any {
	return map[string]any{
		"size": 0, "track_total_hits": 1, "query": query, // only whether anything matched
		"aggs": map[string]any{
			"hourly": hourlyCountAgg,
			"groups": map[string]any{
				"terms": map[string]any{"field": groupBy, "size": size, "order": map[string]any{"gv": "desc"}},
				"aggs": map[string]any{
					"gv": sumOf(valueField), // the heaviest series first
					"time": map[string]any{
						"date_histogram": map[string]any{"field": "@timestamp", "fixed_interval": fmt.Sprintf("%ds", int64(step/time.Second)), "min_doc_count": 1},
						"aggs":           timeAggs,
					},
				},
			},
		},
	}
}

// seriesFilterPath is what seriesAggs reads.
var seriesFilterPath = []string{
	"hits.total", "aggregations.hourly", "aggregations.groups.sum_other_doc_count", "aggregations.groups.buckets.key",
	"aggregations.groups.buckets.time.buckets.key", "aggregations.groups.buckets.time.buckets.v",
	"aggregations.groups.buckets.time.buckets.times", "aggregations.groups.buckets.time.buckets.h.v",
	"aggregations.groups.buckets.time.buckets.m.v",
}

func sumOf(field string) map[string]any { return map[string]any{"sum": map[string]any{"field": field}} }

// rollupSeries reads kind=service rollups; found is false when there are
// none, hourly whether hourly windows were among them.
func (a *API) rollupSeries(ctx context.Context, resp *SeriesResponse, typ record.ProfileType, sel selector.Selector, tr timeRange, step time.Duration, groupBy string, minuteOnly bool) (found, hourly bool, err error) {
	s := selection{typ: typ, sel: sel, tr: tr}
	valueField := "value"
	if typ == record.ProfileMemory {
		valueField = "mem_avg"
	}
	// Minute windows only need a sum; mixed resolutions weigh each apart.
	timeAggs := map[string]any{"v": sumOf(valueField)}
	if !minuteOnly {
		timeAggs = map[string]any{
			"h": map[string]any{"filter": termQ("resolution", "1h"), "aggs": map[string]any{"v": sumOf(valueField)}},
			"m": map[string]any{"filter": termQ("resolution", "1m"), "aggs": map[string]any{"v": sumOf(valueField)}},
		}
	}
	var out struct {
		Hits         hitsTotal  `json:"hits"`
		Aggregations seriesAggs `json:"aggregations"`
	}
	if err := a.search(ctx, a.rollupIndices(tr), seriesBody(a.rollupQuery(s, "service", minuteOnly), groupBy, valueField, timeAggs, step, a.opts.MaxSeries), &out, seriesFilterPath...); err != nil {
		return false, false, fmt.Errorf("series from rollups: %w", err)
	}
	if out.Hits.Total.Value == 0 {
		return false, false, nil
	}
	a.fillSeries(resp, out.Aggregations, groupBy, func(b seriesBucket) float64 {
		if minuteOnly {
			b.M.V = b.V
		}
		if typ == record.ProfileCPU {
			// Nanoseconds used in a step / the step's nanoseconds = cores.
			return (b.H.V.Value + b.M.V.Value) / float64(step)
		}
		// Each window holds its average: weigh it by its length.
		return (b.H.V.Value*float64(time.Hour) + b.M.V.Value*float64(time.Minute)) / float64(step)
	})
	return true, out.Aggregations.Hourly.DocCount > 0, nil
}

// sampleSeries reads the raw samples: CPU as above; other types sum the
// samples of each reporting time and average those sums over the step.
func (a *API) sampleSeries(ctx context.Context, resp *SeriesResponse, typ record.ProfileType, sel selector.Selector, tr timeRange, step time.Duration, groupBy string) error {
	s := selection{typ: typ, sel: sel, tr: tr}
	cpu := typ == record.ProfileCPU
	var out struct {
		Aggregations seriesAggs `json:"aggregations"`
	}
	timeAggs := map[string]any{"v": sumOf("value")}
	if !cpu {
		timeAggs["times"] = map[string]any{"cardinality": map[string]any{"field": "@timestamp"}}
	}
	if err := a.search(ctx, a.sampleIndices(tr), seriesBody(a.sampleQuery(s), groupBy, "value", timeAggs, step, a.opts.MaxSeries), &out, seriesFilterPath...); err != nil {
		return fmt.Errorf("series from samples: %w", err)
	}
	a.fillSeries(resp, out.Aggregations, groupBy, func(b seriesBucket) float64 {
		if cpu {
			return b.V.Value / float64(step)
		}
		if b.Times == nil || b.Times.Value < 1 {
			return b.V.Value
		}
		return b.V.Value / b.Times.Value
	})
	return nil
}

func (a *API) fillSeries(resp *SeriesResponse, aggs seriesAggs, groupBy string, value func(seriesBucket) float64) {
	resp.Truncated = aggs.Groups.SumOtherDocCount > 0
	resp.Series = make([]Series, 0, len(aggs.Groups.Buckets))
	for _, g := range aggs.Groups.Buckets {
		s := Series{Labels: map[string]string{groupBy: g.Key}, Points: make([][2]float64, 0, len(g.Time.Buckets))}
		for _, b := range g.Time.Buckets {
			s.Points = append(s.Points, [2]float64{float64(b.Key), value(b)})
		}
		slices.SortFunc(s.Points, func(x, y [2]float64) int { return cmp.Compare(x[0], y[0]) })
		resp.Series = append(resp.Series, s)
	}
}

// functionSeries is one line: the total (inclusive) value of one function
// per step, as cores for CPU. Long ranges read the per-function rollups;
// short ones (and label selectors) find the selection's stacks holding the
// function, as a flame graph would, and sum their samples per step.
func (a *API) functionSeries(ctx context.Context, resp *SeriesResponse, s selection, step time.Duration, fn string) error {
	hist := map[string]any{"time": map[string]any{
		"date_histogram": map[string]any{"field": "@timestamp", "fixed_interval": fmt.Sprintf("%ds", int64(step/time.Second)), "min_doc_count": 1},
	}}
	type answer struct {
		Hits         hitsTotal `json:"hits"`
		Aggregations struct {
			Time struct {
				Buckets []struct {
					Key int64  `json:"key"`
					V   sumAgg `json:"v"`
				} `json:"buckets"`
			} `json:"time"`
		} `json:"aggregations"`
	}
	fill := func(out answer, source string) {
		line := Series{Labels: map[string]string{"function": fn}, Points: [][2]float64{}}
		for _, b := range out.Aggregations.Time.Buckets {
			v := b.V.Value
			if s.typ == record.ProfileCPU {
				v /= float64(step)
			}
			line.Points = append(line.Points, [2]float64{float64(b.Key), v})
		}
		resp.Series, resp.Source = []Series{line}, source
		if s.typ != record.ProfileCPU {
			resp.Unit = "bytes"
		}
	}
	filterPath := []string{"hits.total", "aggregations.time.buckets.key", "aggregations.time.buckets.v"}
	if a.fromRollups(s) {
		for _, minuteOnly := range []bool{step%time.Hour != 0, true} {
			query := a.rollupQuery(s, "function", minuteOnly)
			query["bool"].(map[string]any)["filter"] = append(query["bool"].(map[string]any)["filter"].([]any), termQ("function", fn))
			hist["time"].(map[string]any)["aggs"] = map[string]any{"v": map[string]any{"sum": map[string]any{"field": "total"}}}
			var out answer
			body := map[string]any{"size": 0, "track_total_hits": 1, "query": query, "aggs": hist}
			if err := a.search(ctx, a.rollupIndices(s.tr), body, &out, filterPath...); err != nil {
				return fmt.Errorf("function series from rollups: %w", err)
			}
			if out.Hits.Total.Value > 0 {
				fill(out, "rollups")
				return nil
			}
			if minuteOnly {
				break
			}
		}
	}
	m, err := a.merge(ctx, s)
	if err != nil {
		return err
	}
	var ids []string
	for id := range m.values {
		// "" (samples without a stack) is in no document's stack_id.
		if id != "" && slices.Contains(m.frames[id], fn) {
			ids = append(ids, id)
		}
	}
	if len(ids) == 0 {
		fill(answer{}, "samples")
		return nil
	}
	slices.Sort(ids)
	// The terms filter finds the documents holding any of the stacks; a
	// document packs all stacks of its profile and label set, so the sum
	// takes only those stacks' values out of it, not its total.
	query := a.sampleQuery(s)
	query["bool"].(map[string]any)["filter"] = append(query["bool"].(map[string]any)["filter"].([]any), map[string]any{"terms": map[string]any{"stack_id": ids}})
	hist["time"].(map[string]any)["aggs"] = map[string]any{"v": map[string]any{"sum": map[string]any{"script": indices.StacksValueScript(ids)}}}
	var out answer
	body := map[string]any{"size": 0, "track_total_hits": false, "query": query, "aggs": hist}
	if err := a.search(ctx, a.sampleIndices(s.tr), body, &out, filterPath...); err != nil {
		return fmt.Errorf("function series from samples: %w", err)
	}
	fill(out, "samples")
	return nil
}
