package store

import (
	"context"
	"fmt"
	"time"

	"github.com/stackstream/stackstream/schemas/indices"
	"github.com/stackstream/stackstream/schemas/record"
)

// tenMinutePlan reads a chart of sel whose step is a whole number of 10
// minutes (sel.Range aligned to it) from the rollup's 10-minute service
// documents where they are complete, and from its minute documents
// elsewhere: a day of 10-minute windows is a tenth of its minutes. Whether
// the 10-minute documents are complete is one search (tenMinutesComplete):
// a settled hour's 10-minute sums against its hourly document, a window
// outside the settled hours against its minutes. ok is false when no
// window is complete (data from before the rollup wrote them).
func (s *Store) tenMinutePlan(ctx context.Context, sel Selection) (seriesPlan, bool, error) {
	complete, err := s.tenMinutesComplete(ctx, sel)
	if err != nil || len(complete) == 0 {
		return seriesPlan{}, false, err
	}
	var tens, minutes []TimeRange
	for w := sel.Range.From; w.Before(sel.Range.To); w = w.Add(tenMinutes) {
		if complete[w.UnixMilli()] {
			tens = addWindow(tens, w, tenMinutes)
			continue
		}
		minutes = addWindow(minutes, w, tenMinutes)
	}
	when := []Query{allOf([]Query{term("resolution", ResolutionTenMinutes), anyOf(timeFilters(tens)...)}, nil)}
	if len(minutes) > 0 {
		when = append(when, allOf([]Query{term("resolution", indices.ResolutionMinute), anyOf(timeFilters(minutes)...)}, nil))
	}
	filter, mustNot := sel.Selector.Clauses()
	filter = append([]Query{term("kind", indices.KindService), term("type", string(sel.Type)), anyOf(when...)}, filter...)
	valueField := "value"
	if sel.Type == record.ProfileMemory {
		valueField = "mem_avg"
	}
	return seriesPlan{
		indices: s.rollupIndices(sel.Range), query: allOf(filter, mustNot), source: "rollups",
		aggs: Aggs{
			"t": {Filter: term("resolution", ResolutionTenMinutes), Aggs: Aggs{"v": sumOf(valueField)}},
			"m": {Filter: term("resolution", indices.ResolutionMinute), Aggs: Aggs{"v": sumOf(valueField)}},
		},
		value: func(b seriesBucket, length time.Duration) float64 {
			if sel.Type.Time() {
				return (b.T.V.Value + b.M.V.Value) / float64(length)
			}
			// Each window holds its average: weigh it by its length.
			return (b.T.V.Value*float64(tenMinutes) + b.M.V.Value*float64(time.Minute)) / float64(length)
		},
	}, true, nil
}

// tenMinutesComplete is the 10-minute windows of sel.Range (aligned to 10
// minutes) whose service documents can stand for their minutes: in a whole
// settled hour, when the hour's 10-minute documents sum to its hourly ones
// (the sum of value over the selection, not 0: an hour from before the
// rollup wrote 10-minute windows has none); elsewhere (the hours not yet
// settled, parts of hours), when the window's 10-minute documents sum to
// its minute documents (so a window still filling, whose 10-minute
// documents lag its minutes, is read from the minutes). One search,
// bucketed by 10 minutes.
func (s *Store) tenMinutesComplete(ctx context.Context, sel Selection) (map[int64]bool, error) {
	hours, whole := hourlySpan(sel.Range)
	var spans []TimeRange
	when := []Query{allOf([]Query{term("resolution", ResolutionTenMinutes), timeFilter(sel.Range)}, nil)}
	if whole {
		when = append(when, allOf([]Query{term("resolution", indices.ResolutionHour), timeFilter(hours)}, nil))
		spans = minuteSpans(sel.Range, hours)
	} else {
		spans = []TimeRange{sel.Range}
	}
	if len(spans) > 0 {
		when = append(when, allOf([]Query{term("resolution", indices.ResolutionMinute), anyOf(timeFilters(spans)...)}, nil))
	}
	filter, mustNot := sel.Selector.Clauses()
	filter = append([]Query{term("kind", indices.KindService), term("type", string(sel.Type)), anyOf(when...)}, filter...)
	sum := func(res string) Agg {
		return Agg{Filter: term("resolution", res), Aggs: Aggs{"v": sumOf("value")}}
	}
	type filtered struct {
		V sumValue `json:"v"`
	}
	var resp struct {
		Aggregations struct {
			Windows struct {
				Buckets []struct {
					Key    int64    `json:"key"`
					Ten    filtered `json:"t"`
					Hour   filtered `json:"h"`
					Minute filtered `json:"m"`
				} `json:"buckets"`
			} `json:"windows"`
		} `json:"aggregations"`
	}
	req := aggsRequest(allOf(filter, mustNot), Aggs{"windows": histogram(tenMinutes, Aggs{
		"t": sum(ResolutionTenMinutes), "h": sum(indices.ResolutionHour), "m": sum(indices.ResolutionMinute),
	})})
	if err := s.search(ctx, s.rollupIndices(sel.Range), req, &resp, "aggregations.windows.buckets.key", "aggregations.windows.buckets.*.v.value"); err != nil {
		return nil, fmt.Errorf("check 10-minute windows: %w", err)
	}
	type hourSums struct{ ten, hour float64 }
	byHour := map[int64]*hourSums{}
	out := map[int64]bool{}
	for _, b := range resp.Aggregations.Windows.Buckets {
		w := time.UnixMilli(b.Key).UTC()
		if whole && !w.Before(hours.From) && w.Before(hours.To) {
			h := w.Truncate(time.Hour).UnixMilli()
			if byHour[h] == nil {
				byHour[h] = &hourSums{}
			}
			byHour[h].ten += b.Ten.V.Value
			byHour[h].hour += b.Hour.V.Value
			continue
		}
		if b.Ten.V.Value > 0 && b.Ten.V.Value == b.Minute.V.Value {
			out[b.Key] = true
		}
	}
	for h, sums := range byHour {
		if sums.ten > 0 && sums.ten == sums.hour {
			for w := time.UnixMilli(h); w.Before(time.UnixMilli(h).Add(time.Hour)); w = w.Add(tenMinutes) {
				out[w.UnixMilli()] = true
			}
		}
	}
	return out, nil
}

// timeFilters selects @timestamp in any of ranges.
func timeFilters(ranges []TimeRange) []Query {
	out := make([]Query, len(ranges))
	for i, r := range ranges {
		out[i] = timeFilter(r)
	}
	return out
}
