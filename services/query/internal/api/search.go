package api

import (
	"cmp"
	"context"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strings"

	"github.com/stackstream/stackstream/schemas/record"
	"github.com/stackstream/stackstream/services/query/internal/selector"
)

// SearchResponse is the answer of /api/v1/search.
type SearchResponse struct {
	Query   string         `json:"query"`
	Results []SearchResult `json:"results"`
}

// SearchResult is one match; Label is set for label values.
type SearchResult struct {
	Kind  string  `json:"kind"` // function, service, host or label
	Label string  `json:"label,omitempty"`
	Name  string  `json:"name"`
	Share float64 `json:"share"`
}

// handleSearch matches a keyword (case-insensitive substring) against
// functions, services, hosts and label values, ranked by their share of
// the CPU time in the range.
func (a *API) handleSearch(ctx context.Context, _ http.ResponseWriter, r *http.Request) (any, error) {
	q := r.URL.Query()
	kw := strings.TrimSpace(q.Get("q"))
	if kw == "" {
		return nil, badParam("q", "empty: give a keyword such as a function, service or host name")
	}
	if len(kw) > 256 {
		return nil, badParam("q", "longer than 256 bytes")
	}
	tr, err := parseRange(q, "from", "to", a.opts.Now(), a.opts.MaxRange)
	if err != nil {
		return nil, err
	}
	limit, err := parseInt(q, "limit", 20, 1, 1000)
	if err != nil {
		return nil, err
	}
	s := selection{typ: record.ProfileCPU, tr: tr}
	total, err := a.cpuTotal(ctx, s)
	if err != nil {
		return nil, err
	}
	if total == 0 {
		return SearchResponse{Query: kw, Results: []SearchResult{}}, nil
	}
	results, err := a.searchFunctions(ctx, s, kw, limit, total)
	if err != nil {
		return nil, err
	}
	others, err := a.searchValues(ctx, s, kw, limit, total)
	if err != nil {
		return nil, err
	}
	results = append(results, others...)
	slices.SortStableFunc(results, func(x, y SearchResult) int {
		if c := cmp.Compare(y.Share, x.Share); c != 0 {
			return c
		}
		return cmp.Compare(x.Name, y.Name)
	})
	if len(results) > limit {
		results = results[:limit]
	}
	return SearchResponse{Query: kw, Results: results}, nil
}

// searchFunctions ranks functions containing kw by their total (inclusive)
// share. Long ranges read the per-function rollups; short ones (and
// clusters without rollups) merge the range's stacks as a flame graph does
// (sharing its stack cache) and sum the stacks holding a matching function.
func (a *API) searchFunctions(ctx context.Context, s selection, kw string, limit int, total int64) ([]SearchResult, error) {
	if a.fromRollups(s) {
		res, err := a.searchFunctionRollups(ctx, s, kw, limit, total, false)
		if err == nil && len(res) == 0 && hasWholeHours(s.tr) {
			res, err = a.searchFunctionRollups(ctx, s, kw, limit, total, true)
		}
		if err != nil || len(res) > 0 {
			return res, err
		}
	}
	m, err := a.merge(ctx, selection{typ: s.typ, tr: s.tr})
	if err != nil {
		return nil, err
	}
	lower := strings.ToLower(kw)
	byFunc := map[string]int64{}
	matches := map[string]bool{}
	seen := map[string]bool{}
	for id, v := range m.values {
		clear(seen)
		for _, f := range m.frames[id] {
			if seen[f] {
				continue
			}
			seen[f] = true
			match, known := matches[f]
			if !known {
				// The placeholders for missing stacks are not functions.
				synthetic := f == noStack || f == unknownStack || f == otherNodes
				match = !synthetic && strings.Contains(strings.ToLower(f), lower)
				matches[f] = match
			}
			if match {
				byFunc[f] += v
			}
		}
	}
	res := make([]SearchResult, 0, len(byFunc))
	for f, v := range byFunc {
		if v > 0 {
			res = append(res, SearchResult{Kind: "function", Name: f, Share: float64(v) / float64(total)})
		}
	}
	return res, nil
}

func (a *API) searchFunctionRollups(ctx context.Context, s selection, kw string, limit int, total int64, minuteOnly bool) ([]SearchResult, error) {
	filter := []any{termQ("kind", "function"), termQ("type", string(s.typ)), rollupTime(s.tr, minuteOnly), wildcardQ("function", kw)}
	var out struct {
		Aggregations struct {
			Funcs struct {
				Buckets []struct {
					Key string `json:"key"`
					V   sumAgg `json:"v"`
				} `json:"buckets"`
			} `json:"funcs"`
		} `json:"aggregations"`
	}
	body := map[string]any{"size": 0, "track_total_hits": false, "query": boolQ(filter, nil), "aggs": map[string]any{
		"funcs": map[string]any{
			"terms": map[string]any{"field": "function", "size": limit, "order": map[string]any{"v": "desc"}},
			"aggs":  map[string]any{"v": map[string]any{"sum": map[string]any{"field": "total"}}},
		},
	}}
	if err := a.search(ctx, a.rollupIndices(s.tr), body, &out); err != nil {
		return nil, fmt.Errorf("search function rollups: %w", err)
	}
	if len(out.Aggregations.Funcs.Buckets) == 0 {
		return nil, nil
	}
	res := make([]SearchResult, 0, len(out.Aggregations.Funcs.Buckets))
	for _, b := range out.Aggregations.Funcs.Buckets {
		res = append(res, SearchResult{Kind: "function", Name: b.Key, Share: b.V.Value / float64(total)})
	}
	return res, nil
}

// cpuTotal is the CPU time of the whole range, the denominator of shares:
// from the per-service rollups when the range reads rollups, else from the
// samples.
func (a *API) cpuTotal(ctx context.Context, s selection) (int64, error) {
	var out struct {
		Aggregations struct {
			Total  sumAgg   `json:"total"`
			Hourly countAgg `json:"hourly"`
		} `json:"aggregations"`
	}
	aggs := map[string]any{"total": map[string]any{"sum": map[string]any{"field": "value"}}}
	if a.fromRollups(s) {
		for _, minuteOnly := range []bool{false, true} {
			aggs["hourly"] = hourlyCountAgg
			body := map[string]any{"size": 0, "track_total_hits": false, "query": a.rollupQuery(s, "service", minuteOnly), "aggs": aggs}
			if err := a.search(ctx, a.rollupIndices(s.tr), body, &out); err != nil {
				return 0, fmt.Errorf("total cpu from rollups: %w", err)
			}
			if out.Aggregations.Hourly.DocCount > 0 || !hasWholeHours(s.tr) {
				break
			}
		}
		if out.Aggregations.Total.Value > 0 {
			return int64(out.Aggregations.Total.Value), nil
		}
		delete(aggs, "hourly")
	}
	body := map[string]any{"size": 0, "track_total_hits": false, "query": a.sampleQuery(s), "aggs": aggs}
	if err := a.search(ctx, a.sampleIndices(s.tr), body, &out); err != nil {
		return 0, fmt.Errorf("total cpu from samples: %w", err)
	}
	return int64(out.Aggregations.Total.Value), nil
}

// searchValues matches services, hosts and label values in one request.
// Long ranges read services and hosts from the per-service rollups; label
// values only exist in the samples: as labels.<name> fields (the contract's,
// and any label in older documents) and as label_pairs "name=value".
func (a *API) searchValues(ctx context.Context, s selection, kw string, limit int, total int64) ([]SearchResult, error) {
	labels, err := a.mappingLabels(ctx)
	if err != nil {
		return nil, err
	}
	valueAgg := func(field string) map[string]any {
		return map[string]any{
			"filter": wildcardQ(field, kw),
			"aggs": map[string]any{"m": map[string]any{
				"terms": map[string]any{"field": field, "size": limit, "order": map[string]any{"v": "desc"}},
				"aggs":  map[string]any{"v": map[string]any{"sum": map[string]any{"field": "value"}}},
			}},
		}
	}
	type matches struct {
		M struct {
			Buckets []struct {
				Key string `json:"key"`
				V   sumAgg `json:"v"`
			} `json:"buckets"`
		} `json:"m"`
	}
	collect := func(kind, label string, m matches, res []SearchResult) []SearchResult {
		for _, b := range m.M.Buckets {
			res = append(res, SearchResult{Kind: kind, Label: label, Name: b.Key, Share: b.V.Value / float64(total)})
		}
		return res
	}
	var res []SearchResult
	sampleAggs := map[string]any{}
	for i, l := range labels {
		if l != "service" && l != "host" {
			sampleAggs[fmt.Sprintf("l%d", i)] = valueAgg(selector.Field(l))
		}
	}
	if a.fromRollups(s) {
		var out struct {
			Aggregations map[string]matches `json:"aggregations"`
		}
		body := map[string]any{"size": 0, "track_total_hits": false, "query": a.rollupQuery(s, "service", false),
			"aggs": map[string]any{"service": valueAgg("service"), "host": valueAgg("host")}}
		if err := a.search(ctx, a.rollupIndices(s.tr), body, &out); err != nil {
			return nil, fmt.Errorf("search services and hosts: %w", err)
		}
		res = collect("service", "", out.Aggregations["service"], res)
		res = collect("host", "", out.Aggregations["host"], res)
	}
	if len(res) == 0 {
		sampleAggs["service"], sampleAggs["host"] = valueAgg("service"), valueAgg("host")
	}
	// A document holds several pairs: the filter finds those with a
	// matching value, include keeps the matching pairs' buckets only.
	quoted, err := selector.LuceneRegexp("(?i)" + regexp.QuoteMeta(kw))
	if err != nil {
		return nil, fmt.Errorf("search label pairs: %w", err)
	}
	pairs := valueAgg(selector.PairsField)
	pairs["filter"] = map[string]any{"wildcard": map[string]any{selector.PairsField: map[string]any{"value": "*=" + wildcardValue(kw), "case_insensitive": true}}}
	pairs["aggs"].(map[string]any)["m"].(map[string]any)["terms"].(map[string]any)["include"] = "[a-zA-Z0-9_]+=.*" + quoted + ".*"
	sampleAggs["pairs"] = pairs
	var out struct {
		Aggregations map[string]matches `json:"aggregations"`
	}
	body := map[string]any{"size": 0, "track_total_hits": false, "query": a.sampleQuery(s), "aggs": sampleAggs}
	if err := a.search(ctx, a.sampleIndices(s.tr), body, &out); err != nil {
		return nil, fmt.Errorf("search label values: %w", err)
	}
	res = collect("service", "", out.Aggregations["service"], res)
	res = collect("host", "", out.Aggregations["host"], res)
	for i, l := range labels {
		res = collect("label", l, out.Aggregations[fmt.Sprintf("l%d", i)], res)
	}
	for _, b := range out.Aggregations["pairs"].M.Buckets {
		if name, value, ok := strings.Cut(b.Key, "="); ok {
			res = append(res, SearchResult{Kind: "label", Label: name, Name: value, Share: b.V.Value / float64(total)})
		}
	}
	return mergeResults(res), nil
}

// mergeResults adds up results naming the same value: a label outside the
// contract is found both in older documents' labels.<name> and in newer
// ones' label_pairs.
func mergeResults(res []SearchResult) []SearchResult {
	type key struct{ kind, label, name string }
	at := make(map[key]int, len(res))
	out := res[:0]
	for _, r := range res {
		k := key{r.Kind, r.Label, r.Name}
		if i, ok := at[k]; ok {
			out[i].Share += r.Share
			continue
		}
		at[k] = len(out)
		out = append(out, r)
	}
	return out
}
