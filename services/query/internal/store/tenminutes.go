package store

import (
	"time"

	"github.com/stackstream/stackstream/schemas/indices"
	"github.com/stackstream/stackstream/schemas/record"
)

// tenMinuteSteps reports whether a chart of step reads 10-minute windows
// (tenMinutePlan): a whole number of 10 minutes dividing an hour (10, 20
// or 30 minutes), so its buckets never straddle an hour.
func tenMinuteSteps(step time.Duration) bool {
	return step%tenMinutes == 0 && time.Hour%step == 0 && step < time.Hour
}

// tenMinutePlan reads a chart of sel with a step of tenMinuteSteps
// (sel.Range aligned to it) from the rollup's 10-minute service documents
// where they are complete and from its minute documents elsewhere: a day
// of 10-minute windows is a tenth of its minutes. The lines' search also
// reads what proves the 10-minute documents complete, summed per step over
// the lines and "other" (so over the whole selection) by prepare: in a
// whole settled hour, its hourly documents, whose sum its 10-minute ones
// must equal (not 0: an hour from before the rollup wrote 10-minute
// windows has none); elsewhere (hours not settled, parts of hours), its
// minutes, which a step uses when its 10-minute sum differs from theirs
// (a window still filling, whose 10-minute document lags its minutes).
// A 10-minute document is never above its minutes (it is their sum, or an
// older one), so equal sums over the selection mean each is complete.
// prepare refuses the answer when a settled hour is not complete; the
// caller then reads the minutes.
func (s *Store) tenMinutePlan(sel Selection) seriesPlan {
	hours, whole := hourlySpan(sel.Range)
	when := []Query{allOf([]Query{term("resolution", indices.ResolutionTenMinutes), timeFilter(sel.Range)}, nil)}
	spans := []TimeRange{sel.Range}
	if whole {
		when = append(when, allOf([]Query{term("resolution", indices.ResolutionHour), timeFilter(hours)}, nil))
		spans = minuteSpans(sel.Range, hours)
	}
	if len(spans) > 0 {
		when = append(when, allOf([]Query{term("resolution", indices.ResolutionMinute), anyOf(timeFilters(spans)...)}, nil))
	}
	filter, mustNot := sel.Selector.Clauses()
	filter = append([]Query{term("kind", indices.KindService), term("type", string(sel.Type)), anyOf(when...)}, filter...)
	valueField := "value"
	if sel.Type == record.ProfileMemory {
		valueField = "mem_avg"
	}
	// useMinutes are the steps (unix ms) read from their minutes.
	useMinutes := map[int64]bool{}
	settled := func(ms int64) bool {
		t := time.UnixMilli(ms)
		return whole && !t.Before(hours.From) && t.Before(hours.To)
	}
	return seriesPlan{
		indices: s.rollupIndices(sel.Range), query: allOf(filter, mustNot), source: "rollups",
		aggs: Aggs{
			"t": {Filter: term("resolution", indices.ResolutionTenMinutes), Aggs: Aggs{"v": sumOf(valueField), "c": sumOf("value")}},
			"h": {Filter: term("resolution", indices.ResolutionHour), Aggs: Aggs{"c": sumOf("value")}},
			"m": {Filter: term("resolution", indices.ResolutionMinute), Aggs: Aggs{"v": sumOf(valueField), "c": sumOf("value")}},
		},
		prepare: func(answer [][]seriesBucket) bool {
			type sums struct{ ten, hour, minute float64 }
			steps, byHour := map[int64]*sums{}, map[int64]*sums{}
			add := func(m map[int64]*sums, k int64, b seriesBucket) {
				if m[k] == nil {
					m[k] = &sums{}
				}
				m[k].ten += b.T.C.Value
				m[k].hour += b.H.C.Value
				m[k].minute += b.M.C.Value
			}
			for _, buckets := range answer {
				for _, b := range buckets {
					ms := bucketMillis(b)
					if settled(ms) {
						add(byHour, time.UnixMilli(ms).Truncate(time.Hour).UnixMilli(), b)
						continue
					}
					add(steps, ms, b)
				}
			}
			for _, h := range byHour {
				if h.ten == 0 || h.ten != h.hour {
					return false
				}
			}
			for ms, st := range steps {
				useMinutes[ms] = st.ten == 0 || st.ten != st.minute
			}
			return true
		},
		value: func(b seriesBucket, length time.Duration) float64 {
			ten, minute := b.T.V.Value, 0.0
			if useMinutes[bucketMillis(b)] {
				ten, minute = 0, b.M.V.Value
			}
			if sel.Type.Time() {
				return (ten + minute) / float64(length)
			}
			// Each window holds its average: weigh it by its length.
			return (ten*float64(tenMinutes) + minute*float64(time.Minute)) / float64(length)
		},
	}
}

// bucketMillis is a histogram bucket's start.
func bucketMillis(b seriesBucket) int64 {
	ms, _ := b.Key.(float64)
	return int64(ms)
}

// timeFilters selects @timestamp in any of ranges.
func timeFilters(ranges []TimeRange) []Query {
	out := make([]Query, len(ranges))
	for i, r := range ranges {
		out[i] = timeFilter(r)
	}
	return out
}
