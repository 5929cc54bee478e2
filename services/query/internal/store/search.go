package store

import (
	"cmp"
	"context"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/stackstream/stackstream/services/query/internal/selector"
)

// Match is a function, service, host or label value found by a keyword,
// with its value (its total for a function) over the range.
type Match struct {
	Kind  string // function, service, host or label
	Label string // for label values
	Name  string
	Value float64
}

// CPUTotal is the CPU time of the whole range of sel, the denominator of
// search shares: from the per-service rollups when the range reads
// rollups, else from the samples.
func (s *Store) CPUTotal(ctx context.Context, sel Selection) (int64, error) {
	var out struct {
		Aggregations struct {
			Total  sumValue `json:"total"`
			Hourly docCount `json:"hourly"`
		} `json:"aggregations"`
	}
	if s.FromRollups(sel) {
		for _, minuteOnly := range []bool{false, true} {
			req := aggsRequest(rollupQuery(sel, "service", minuteOnly), Aggs{"total": sumOf("value"), "hourly": hourlyCount})
			if err := s.search(ctx, s.rollupIndices(sel.Range), req, &out); err != nil {
				return 0, fmt.Errorf("total cpu from rollups: %w", err)
			}
			if out.Aggregations.Hourly.DocCount > 0 || !hasWholeHours(sel.Range) {
				break
			}
		}
		if out.Aggregations.Total.Value > 0 {
			return int64(out.Aggregations.Total.Value), nil
		}
	}
	if err := s.search(ctx, s.sampleIndices(sel.Range), aggsRequest(sampleQuery(sel), Aggs{"total": sumOf("value")}), &out); err != nil {
		return 0, fmt.Errorf("total cpu from samples: %w", err)
	}
	return int64(out.Aggregations.Total.Value), nil
}

// FunctionRollups finds the limit heaviest functions containing kw
// (ignoring case) in the rollups of sel, by total value: the whole settled
// hours from the hourly function documents, the minutes around them from
// the minute stack documents (minutefuncs.go); the whole range per stack
// when no hourly document matches. None when the rollups hold no match:
// the caller reads the stacks instead.
func (s *Store) FunctionRollups(ctx context.Context, sel Selection, kw string, limit int) ([]Match, error) {
	lower := strings.ToLower(kw)
	match := func(f string) bool { return strings.Contains(strings.ToLower(f), lower) }
	sums := map[string]float64{}
	minutes := []TimeRange{sel.Range}
	hours, ok := hourlySpan(sel.Range)
	var top []Match
	if ok {
		var err error
		if top, err = s.hourFunctions(ctx, sel, hours, limit, contains("function", kw)); err != nil {
			return nil, err
		}
	}
	if len(top) > 0 {
		minutes = minuteSpans(sel.Range, hours)
		for _, m := range top {
			sums[m.Name] = m.Value
		}
	}
	edge := map[string]int64{}
	for _, r := range minutes {
		fs, err := s.minuteFunctionSums(ctx, Selection{Type: sel.Type}, r, match)
		if err != nil {
			return nil, fmt.Errorf("search function rollups: %w", err)
		}
		for f, v := range fs {
			edge[f] += v
		}
	}
	// Every function outside the hours' top has at most the smallest
	// hourly total of it; those the edges add to can pass it, so their
	// hours are read too, and the answer's top is exact.
	var extra []string
	for f := range edge {
		if _, ok := sums[f]; !ok && len(top) > 0 {
			extra = append(extra, f)
		}
	}
	if len(extra) > 0 {
		more, err := s.hourFunctions(ctx, sel, hours, len(extra), termsOf("function", extra))
		if err != nil {
			return nil, err
		}
		for _, m := range more {
			sums[m.Name] = m.Value
		}
	}
	for f, v := range edge {
		sums[f] += float64(v)
	}
	if len(sums) == 0 {
		return nil, nil
	}
	res := make([]Match, 0, len(sums))
	for f, v := range sums {
		res = append(res, Match{Kind: "function", Name: f, Value: v})
	}
	slices.SortFunc(res, func(x, y Match) int {
		if c := cmp.Compare(y.Value, x.Value); c != 0 {
			return c
		}
		return strings.Compare(x.Name, y.Name)
	})
	return res[:min(limit, len(res))], nil
}

// hourFunctions sums the hourly function documents of the whole hours
// that which selects, the limit heaviest by total.
func (s *Store) hourFunctions(ctx context.Context, sel Selection, hours TimeRange, limit int, which Query) ([]Match, error) {
	filter := []Query{
		term("kind", "function"), term("type", string(sel.Type)),
		term("resolution", "1h"), timeFilter(hours), which,
	}
	var out struct {
		Aggregations struct {
			Funcs keyedSums `json:"funcs"`
		} `json:"aggregations"`
	}
	req := aggsRequest(allOf(filter, nil), Aggs{"funcs": heaviestTerms("function", limit, "total")})
	if err := s.search(ctx, s.rollupIndices(hours), req, &out); err != nil {
		return nil, fmt.Errorf("search function rollups: %w", err)
	}
	res := make([]Match, 0, len(out.Aggregations.Funcs.Buckets))
	for _, b := range out.Aggregations.Funcs.Buckets {
		res = append(res, Match{Kind: "function", Name: b.Key, Value: b.V.Value})
	}
	return res, nil
}

// Values finds services, hosts and label values containing kw (ignoring
// case) in sel, up to limit of each field, by value. Long ranges read
// services and hosts from the per-service rollups; label values only exist
// in the samples: as labels.<name> fields (the contract's, and any label
// in older documents) and as label_pairs "name=value". A value may come
// twice, from both label forms.
func (s *Store) Values(ctx context.Context, sel Selection, kw string, limit int) ([]Match, error) {
	labels, err := s.MappingLabels(ctx)
	if err != nil {
		return nil, err
	}
	// containing sums the heaviest values of field containing kw as "m".
	containing := func(field string) Agg {
		return Agg{Filter: contains(field, kw), Aggs: Aggs{"m": heaviestTerms(field, limit, "value")}}
	}
	type matches struct {
		M keyedSums `json:"m"`
	}
	collect := func(kind, label string, m matches, res []Match) []Match {
		for _, b := range m.M.Buckets {
			res = append(res, Match{Kind: kind, Label: label, Name: b.Key, Value: b.V.Value})
		}
		return res
	}
	var res []Match
	sampleAggs := Aggs{}
	for i, l := range labels {
		if l != "service" && l != "host" {
			sampleAggs[fmt.Sprintf("l%d", i)] = containing(selector.Field(l))
		}
	}
	if s.FromRollups(sel) {
		var out struct {
			Aggregations map[string]matches `json:"aggregations"`
		}
		req := aggsRequest(rollupQuery(sel, "service", false), Aggs{"service": containing("service"), "host": containing("host")})
		if err := s.search(ctx, s.rollupIndices(sel.Range), req, &out); err != nil {
			return nil, fmt.Errorf("search services and hosts: %w", err)
		}
		res = collect("service", "", out.Aggregations["service"], res)
		res = collect("host", "", out.Aggregations["host"], res)
	}
	if len(res) == 0 {
		sampleAggs["service"], sampleAggs["host"] = containing("service"), containing("host")
	}
	// A document holds several pairs: the filter finds those with a
	// matching value, include keeps the matching pairs' buckets only.
	quoted, err := selector.LuceneRegexp("(?i)" + regexp.QuoteMeta(kw))
	if err != nil {
		return nil, fmt.Errorf("search label pairs: %w", err)
	}
	pairs := heaviestTerms(selector.PairsField, limit, "value")
	pairs.Terms.Include = "[a-zA-Z0-9_]+=.*" + quoted + ".*"
	sampleAggs["pairs"] = Agg{Filter: wildcard(selector.PairsField, "*="+wildcardValue(kw)), Aggs: Aggs{"m": pairs}}
	var out struct {
		Aggregations map[string]matches `json:"aggregations"`
	}
	if err := s.search(ctx, s.sampleIndices(sel.Range), aggsRequest(sampleQuery(sel), sampleAggs), &out); err != nil {
		return nil, fmt.Errorf("search label values: %w", err)
	}
	res = collect("service", "", out.Aggregations["service"], res)
	res = collect("host", "", out.Aggregations["host"], res)
	for i, l := range labels {
		res = collect("label", l, out.Aggregations[fmt.Sprintf("l%d", i)], res)
	}
	for _, b := range out.Aggregations["pairs"].M.Buckets {
		if name, value, ok := strings.Cut(b.Key, "="); ok {
			res = append(res, Match{Kind: "label", Label: name, Name: value, Value: b.V.Value})
		}
	}
	return res, nil
}
