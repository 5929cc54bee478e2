package api

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/stackstream/stackstream/schemas/record"
	"github.com/stackstream/stackstream/services/query/internal/selector"
)

// labelCache keeps the label names read from the samples mapping and the
// label_names of the last day for a short while: the UI asks for them on
// every keystroke of the selector bar.
type labelCache struct {
	mu      sync.Mutex
	mapping []string
	named   []string
	at      time.Time
}

const (
	labelCacheTTL = 30 * time.Second
	// maxLabelNames bounds the label names read from label_names (the
	// distinct names of the range; the indexer caps labels per sample).
	maxLabelNames = 1000
	// labelNamesRange is the default range /labels reads label_names in
	// (shorter if STACKSTREAM_QUERY_MAX_RANGE is).
	labelNamesRange = 24 * time.Hour
)

// mappingLabels lists service, host and every labels.* field of the samples
// indices' mappings: the contract labels, and in indices written before
// label_pairs any label seen. Names outside record.ValidLabelKey (dotted
// keys of old documents) cannot be selected and are left out.
func (a *API) mappingLabels(ctx context.Context) ([]string, error) {
	a.labels.mu.Lock()
	defer a.labels.mu.Unlock()
	if a.labels.mapping != nil && a.opts.Now().Sub(a.labels.at) < labelCacheTTL {
		return a.labels.mapping, nil
	}
	var out map[string]struct {
		Mappings struct {
			Properties struct {
				Labels struct {
					Properties map[string]any `json:"properties"`
				} `json:"labels"`
			} `json:"properties"`
		} `json:"mappings"`
	}
	if err := a.do(ctx, http.MethodGet, "/"+a.names.SamplesPattern()+"/_mapping?allow_no_indices=true&ignore_unavailable=true", nil, &out); err != nil {
		return nil, fmt.Errorf("read samples mapping: %w", err)
	}
	set := map[string]bool{"service": true, "host": true}
	for _, idx := range out {
		for name := range idx.Mappings.Properties.Labels.Properties {
			if record.ValidLabelKey(name) {
				set[name] = true
			}
		}
	}
	names := make([]string, 0, len(set))
	for n := range set {
		names = append(names, n)
	}
	slices.Sort(names)
	a.labels.mapping, a.labels.named, a.labels.at = names, nil, a.opts.Now()
	return names, nil
}

// rangeLabels lists the labels the samples in tr have: the contract labels
// with a value in some document (the mapping names them all), and the
// label_names of documents written with label_pairs.
func (a *API) rangeLabels(ctx context.Context, tr timeRange) ([]string, error) {
	var out struct {
		Aggregations map[string]struct {
			DocCount int64 `json:"doc_count"`
			Buckets  []struct {
				Key string `json:"key"`
			} `json:"buckets"`
		} `json:"aggregations"`
	}
	aggs := map[string]any{"names": map[string]any{"terms": map[string]any{"field": selector.NamesField, "size": maxLabelNames}}}
	for _, name := range record.ContractLabels {
		aggs[name] = map[string]any{"filter": map[string]any{"exists": map[string]any{"field": selector.Field(name)}}}
	}
	body := map[string]any{"size": 0, "track_total_hits": false, "query": boolQ([]any{timeFilter(tr)}, nil), "aggs": aggs}
	if err := a.search(ctx, a.sampleIndices(tr), body, &out); err != nil {
		return nil, fmt.Errorf("label names: %w", err)
	}
	names := []string{} // not nil: an empty answer is cached too
	for _, name := range record.ContractLabels {
		if out.Aggregations[name].DocCount > 0 {
			names = append(names, name)
		}
	}
	for _, b := range out.Aggregations["names"].Buckets {
		if record.ValidLabelKey(b.Key) {
			names = append(names, b.Key)
		}
	}
	return names, nil
}

// LabelsResponse is the answer of /api/v1/labels.
type LabelsResponse struct {
	Labels []string `json:"labels"`
}

// handleLabels lists the label names a selector can use: service, host,
// the labels the samples of the range have (default the last 24 hours;
// cached when the request gives no range, as the UI's does), and the
// labels.<name> fields older indices mapped dynamically.
func (a *API) handleLabels(ctx context.Context, _ http.ResponseWriter, r *http.Request) (any, error) {
	q := r.URL.Query()
	explicit := q.Get("from") != "" || q.Get("to") != ""
	if q.Get("from") == "" {
		q.Set("from", strconv.FormatInt(a.opts.Now().Add(-min(labelNamesRange, a.opts.MaxRange)).UnixMilli(), 10))
	}
	tr, err := parseRange(q, "from", "to", a.opts.Now(), a.opts.MaxRange)
	if err != nil {
		return nil, err
	}
	mapping, err := a.mappingLabels(ctx)
	if err != nil {
		return nil, err
	}
	a.labels.mu.Lock()
	named := a.labels.named
	a.labels.mu.Unlock()
	if named == nil || explicit {
		if named, err = a.rangeLabels(ctx, tr); err != nil {
			return nil, err
		}
		if !explicit {
			a.labels.mu.Lock()
			a.labels.named = named
			a.labels.mu.Unlock()
		}
	}
	// Every contract label is in the mapping: list those with values.
	names := slices.DeleteFunc(slices.Clone(mapping), record.IsContractLabel)
	names = append(names, named...)
	slices.Sort(names)
	return LabelsResponse{Labels: slices.Compact(names)}, nil
}

// LabelValuesResponse is the answer of /api/v1/labels/{name}/values.
type LabelValuesResponse struct {
	Label  string   `json:"label"`
	Values []string `json:"values"`
}

// handleLabelValues lists the values of one label seen in the range
// (default the last hour), optionally under a selector (query). Labels
// outside the contract are read from label_pairs ("name=value", prefix
// stripped) and from labels.<name> of older documents.
func (a *API) handleLabelValues(ctx context.Context, _ http.ResponseWriter, r *http.Request) (any, error) {
	name := r.PathValue("name")
	if !record.ValidLabelKey(name) {
		return nil, badParam("name", "%q is not a label name: use letters, digits and _ (not first), at most %d bytes", truncate(name, 64), record.MaxLabelKeyBytes)
	}
	q := r.URL.Query()
	s, err := a.parseSelection(q, "query", "from", "to")
	if err != nil {
		return nil, err
	}
	typ, sel, tr := s.typ, s.sel, s.tr
	limit, err := parseInt(q, "limit", 1000, 1, 10000)
	if err != nil {
		return nil, err
	}
	type terms struct {
		Buckets []struct {
			Key string `json:"key"`
		} `json:"buckets"`
	}
	var out struct {
		Aggregations struct {
			Values terms `json:"values"`
			Pairs  terms `json:"pairs"`
		} `json:"aggregations"`
	}
	query := a.sampleQuery(selection{typ: typ, sel: sel, tr: tr})
	if q.Get("type") == "" {
		// Without an explicit type, list values of every type.
		filter, mustNot := sel.Clauses()
		query = boolQ(append([]any{timeFilter(tr)}, filter...), mustNot)
	}
	aggs := map[string]any{"values": map[string]any{"terms": map[string]any{"field": selector.Field(name), "size": limit}}}
	prefix := selector.Pair(name, "")
	if selector.InPairs(name) {
		aggs["pairs"] = map[string]any{"terms": map[string]any{
			"field": selector.PairsField, "size": limit, "include": selector.Literal(prefix) + ".*",
		}}
	}
	body := map[string]any{"size": 0, "track_total_hits": false, "query": query, "aggs": aggs}
	if err := a.search(ctx, a.sampleIndices(tr), body, &out, "aggregations.values.buckets.key", "aggregations.pairs.buckets.key"); err != nil {
		return nil, fmt.Errorf("label values: %w", err)
	}
	values := make([]string, 0, len(out.Aggregations.Values.Buckets)+len(out.Aggregations.Pairs.Buckets))
	for _, b := range out.Aggregations.Values.Buckets {
		values = append(values, b.Key)
	}
	for _, b := range out.Aggregations.Pairs.Buckets {
		if v, ok := strings.CutPrefix(b.Key, prefix); ok {
			values = append(values, v)
		}
	}
	slices.Sort(values)
	values = slices.Compact(values)
	return LabelValuesResponse{Label: name, Values: values[:min(len(values), limit)]}, nil
}
