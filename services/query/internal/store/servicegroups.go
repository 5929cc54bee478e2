package store

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/stackstream/stackstream/schemas/indices"
	"github.com/stackstream/stackstream/services/query/internal/selector"
)

// maxGroupHours bounds the hours a chart reads from service groups
// documents (a week): each is a few dozen bytes per (service, host) group.
const maxGroupHours = 7 * 24

// groupsSeries answers Series from the settled hours' service groups
// documents (indices.KindServiceGroups, written by the rollup's compactor:
// every (service, host) group's 10-minute and hour sums of a settled hour),
// or returns nil lines when they cannot answer: a type other than cpu and
// offcpu, a range without a whole settled hour, a step that is neither
// tenMinuteSteps nor whole hours (or longer than an hour when the range
// has minutes outside its settled hours), a selector other than =, != and
// lists of literals on service and host, or a settled hour whose document
// is missing or stale. A document is used only when its sources equal the
// fingerprint of the hour's service documents as they are (the count and
// value sum of its 10-minute and of its hourly documents, read in the same
// search); the lines, "other", the ranking and the total are then computed
// as topSeries computes them from those documents (the hourly windows
// rank, the 10-minute or hourly windows plot, a settled hour whose
// selected 10-minute values do not add up to its hourly ones is refused),
// and the minutes outside the settled hours rank and plot as before
// (spanMinutes, plotKeys), so the answer is the same, from one document per
// settled hour instead of every 10-minute one.
func (s *Store) groupsSeries(ctx context.Context, sel Selection, step time.Duration, groupBy string, top int) (*Lines, error) {
	hours, whole := hourlySpan(sel.Range)
	ten := tenMinuteSteps(step)
	if !sel.Type.Time() || !whole || (!ten && step%time.Hour != 0) || hours.Duration() > maxGroupHours*time.Hour {
		return nil, nil
	}
	match, ok := groupMatcher(sel.Selector)
	if !ok {
		return nil, nil
	}
	docs, runs, err := s.serviceGroups(ctx, sel, hours)
	if err != nil || len(docs) == 0 || (len(runs) > 0 && step > time.Hour) {
		// Buckets of several hours would mix both ways of reading.
		return nil, err
	}
	key := func(g *indices.ServiceGroup) (string, bool) {
		if groupBy == "host" {
			return g.Host, g.Host != ""
		}
		return g.Service, true
	}
	// Each group's value per bucket: a bucket exists when a document of
	// the plotted resolution starts in it (the histogram's min_doc_count 1).
	type group struct {
		rank    int64 // hourly values
		ranked  bool  // has an hourly document
		buckets map[int64]int64
	}
	groups := map[string]*group{}
	matched := false
	add := func(g *group, ms, v int64) {
		if g.buckets == nil {
			g.buckets = map[int64]int64{}
		}
		g.buckets[ms] += v
	}
	stepMs := step.Milliseconds()
	for _, d := range docs {
		hourMs := d.hour.UnixMilli()
		var tenSum, hourSum int64
		present := false
		for i := range d.groups {
			g := &d.groups[i]
			if !match(g) {
				continue
			}
			matched = matched || g.Present&indices.PresentHour != 0
			k, has := key(g)
			if !has {
				continue
			}
			gr := groups[k]
			if gr == nil {
				gr = &group{}
				groups[k] = gr
			}
			if g.Present&indices.PresentHour != 0 {
				gr.ranked = true
				gr.rank += g.Hour
			}
			if !ten {
				if g.Present&indices.PresentHour != 0 {
					add(gr, hourMs-hourMs%stepMs, g.Hour)
				}
				continue
			}
			present = present || g.Present != 0
			for w, v := range g.Ten {
				// The hourly document starts with the first window: its
				// bucket exists even without a 10-minute document.
				if g.Present&(1<<w) != 0 || (w == 0 && g.Present&indices.PresentHour != 0) {
					ms := hourMs + int64(w)*tenMinutes.Milliseconds()
					add(gr, ms-ms%stepMs, v)
				}
				tenSum += v
			}
			hourSum += g.Hour
		}
		if present && (tenSum == 0 || tenSum != hourSum) {
			return nil, nil // as tenMinutePlan: the minutes answer
		}
	}
	if !matched {
		return nil, nil // no hourly windows: Series reads the minutes, or the samples
	}
	// The rest of the range ranks as before (raw sums: length 1).
	minutes := map[string]float64{}
	for _, r := range runs {
		rs := sel
		rs.Range = r
		totals, _, _, err := s.groupTotals(ctx, s.rollupPlan(rs, false), groupBy, 1)
		if err != nil {
			return nil, err
		}
		for _, m := range totals {
			minutes[m.key] += m.value
		}
	}
	ranked := make([]groupTotal, 0, len(groups))
	for k, g := range groups {
		if m, ok := minutes[k]; g.ranked || ok {
			ranked = append(ranked, groupTotal{key: k, value: (float64(g.rank) + m) / float64(sel.Range.Duration())})
		}
	}
	for k, m := range minutes {
		if groups[k] == nil {
			ranked = append(ranked, groupTotal{key: k, value: m / float64(sel.Range.Duration())})
		}
	}
	if len(ranked) > MaxGroups {
		return nil, nil
	}
	keys := rankKeys(ranked, top)
	lines := &Lines{Lines: make([]Line, 0, len(keys)), Total: len(ranked), Source: "service_groups"}
	if len(runs) > 0 {
		lines.Source += "+rollups"
	}
	if len(keys) == 0 {
		return lines, nil
	}
	points := func(buckets map[int64]int64) [][2]float64 {
		pts := make([][2]float64, 0, len(buckets))
		for ms, v := range buckets {
			pts = append(pts, [2]float64{float64(ms), float64(v) / float64(step)})
		}
		slices.SortFunc(pts, func(x, y [2]float64) int { return cmp.Compare(x[0], y[0]) })
		return pts
	}
	folded := len(ranked) > len(keys)
	// The steps of the rest as topSeries plots them.
	spanPoints, spanRest := map[string][][2]float64{}, [][2]float64(nil)
	for _, r := range runs {
		rs := sel
		rs.Range = r
		plan := s.rollupPlan(rs, false)
		if ten {
			plan = s.tenMinutePlan(rs)
		}
		byKey, rest, ok, err := s.plotKeys(ctx, plan, keys, folded, step, groupBy)
		if err != nil || !ok {
			return nil, err
		}
		for k, pts := range byKey {
			spanPoints[k] = append(spanPoints[k], pts...)
		}
		spanRest = append(spanRest, rest...)
	}
	merged := func(pts, more [][2]float64) [][2]float64 {
		if len(more) == 0 {
			return pts
		}
		pts = append(pts, more...)
		slices.SortFunc(pts, func(x, y [2]float64) int { return cmp.Compare(x[0], y[0]) })
		return pts
	}
	for _, k := range keys {
		var pts [][2]float64
		if g := groups[k]; g != nil && len(g.buckets) > 0 {
			pts = points(g.buckets)
		}
		lines.Lines = append(lines.Lines, Line{Key: k, Points: merged(pts, spanPoints[k])})
	}
	if folded {
		// Every group outside the top, those without hourly documents too.
		rest, shown := map[int64]int64{}, map[string]bool{}
		for _, k := range keys {
			shown[k] = true
		}
		for k, g := range groups {
			if !shown[k] {
				for ms, v := range g.buckets {
					rest[ms] += v
				}
			}
		}
		lines.Other = &Line{Points: merged(points(rest), spanRest)}
	}
	return lines, nil
}

// hourGroups is one hour's service groups document, decoded.
type hourGroups struct {
	hour   time.Time
	groups []indices.ServiceGroup
}

// serviceGroups reads the service groups documents of sel.Type's settled
// hours and, in the same search, the fingerprint of each hour's service
// documents (indices.ServiceGroupsCheck); it returns the documents whose
// sources equal it, and runs: the parts of sel.Range they do not answer
// (before and after hours, and hours with service documents but no such
// document), in time order.
func (s *Store) serviceGroups(ctx context.Context, sel Selection, hours TimeRange) ([]hourGroups, []TimeRange, error) {
	service := allOf([]Query{term("kind", indices.KindService),
		termsOf("resolution", []string{indices.ResolutionTenMinutes, indices.ResolutionHour})}, nil)
	grouped := allOf([]Query{term("kind", indices.KindServiceGroups), term("resolution", indices.ResolutionHour)}, nil)
	check := Aggs{}
	for name, res := range map[string]string{"ten": indices.ResolutionTenMinutes, "hour": indices.ResolutionHour} {
		check[name] = Agg{Filter: allOf([]Query{term("kind", indices.KindService), term("resolution", res)}, nil),
			Aggs: Aggs{"seq_nos": sumOf("_seq_no")}}
	}
	req := &Request{
		Size: int(hours.Duration() / time.Hour), TrackTotalHits: false,
		Query:      allOf([]Query{term("type", string(sel.Type)), timeFilter(hours), anyOf(service, grouped)}, nil),
		PostFilter: grouped,
		Source:     &Source{Includes: []string{"@timestamp", "sources", "groups"}},
		Aggs:       Aggs{"hours": histogram(time.Hour, check)},
	}
	var out struct {
		Hits struct {
			Hits []struct {
				Source struct {
					Timestamp time.Time `json:"@timestamp"`
					Sources   string    `json:"sources"`
					Groups    []byte    `json:"groups"`
				} `json:"_source"`
			} `json:"hits"`
		} `json:"hits"`
		Aggregations struct {
			Hours struct {
				Buckets []struct {
					Key int64 `json:"key"`
					indices.ServiceGroupsCheck
				} `json:"buckets"`
			} `json:"hours"`
		} `json:"aggregations"`
	}
	if err := s.search(ctx, s.rollupIndices(hours), req, &out, "hits.hits._source", "aggregations.hours.buckets"); err != nil {
		return nil, nil, fmt.Errorf("service groups: %w", err)
	}
	byHour := map[int64]int{}
	for i, h := range out.Hits.Hits {
		byHour[h.Source.Timestamp.UnixMilli()] = i
	}
	var docs []hourGroups
	var runs []TimeRange
	rest := func(from, to time.Time) {
		if n := len(runs); n > 0 && runs[n-1].To.Equal(from) {
			runs[n-1].To = to
		} else if from.Before(to) {
			runs = append(runs, TimeRange{From: from, To: to, Now: sel.Range.Now})
		}
	}
	rest(sel.Range.From, hours.From)
	for _, b := range out.Aggregations.Hours.Buckets {
		i, found := byHour[b.Key]
		hour := time.UnixMilli(b.Key).UTC()
		if !found || out.Hits.Hits[i].Source.Sources != b.Sources() {
			rest(hour, hour.Add(time.Hour)) // none yet, or the hour changed since
			continue
		}
		groups, err := indices.DecodeServiceGroups(out.Hits.Hits[i].Source.Groups)
		if err != nil {
			return nil, nil, fmt.Errorf("service groups of %s: %w", hour.Format(time.RFC3339), err)
		}
		docs = append(docs, hourGroups{hour: hour, groups: groups})
	}
	rest(hours.To, sel.Range.To)
	return docs, runs, nil
}

// groupMatcher is sel as a test of a (service, host) group, when every
// matcher names service or host with =, != or a list of literals (=~
// "a|b", !~) and a value: as in OpenSearch, a missing host (the rollup
// writes none for "") equals "".
func groupMatcher(sel selector.Selector) (func(*indices.ServiceGroup) bool, bool) {
	type test struct {
		host   bool
		values map[string]bool
		in     bool
	}
	tests := make([]test, 0, len(sel))
	for _, m := range sel {
		if (m.Name != "service" && m.Name != "host") || m.Value == "" {
			return nil, false
		}
		t := test{host: m.Name == "host", values: map[string]bool{m.Value: true}}
		switch m.Op {
		case selector.Equal:
			t.in = true
		case selector.NotEqual:
		case selector.Regexp, selector.NotRegexp:
			list, ok := selector.Values(m)
			if !ok {
				return nil, false
			}
			t.values, t.in = map[string]bool{}, m.Op == selector.Regexp
			for _, v := range list {
				t.values[v] = true
			}
		default:
			return nil, false
		}
		tests = append(tests, t)
	}
	return func(g *indices.ServiceGroup) bool {
		for _, t := range tests {
			v := g.Service
			if t.host {
				v = g.Host
			}
			if t.values[v] != t.in {
				return false
			}
		}
		return true
	}, true
}
