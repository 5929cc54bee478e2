package api

import (
	"context"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"sync"
	"time"

	"github.com/stackstream/stackstream/services/query/internal/selector"
)

// labelCache keeps the label names read from the samples mapping for a
// short while: the UI asks for them on every keystroke of the selector bar.
type labelCache struct {
	mu    sync.Mutex
	names []string
	at    time.Time
}

const labelCacheTTL = 30 * time.Second

// labelNames lists service, host and every labels.* field of the samples
// indices' mappings.
func (a *API) labelNames(ctx context.Context) ([]string, error) {
	a.labels.mu.Lock()
	defer a.labels.mu.Unlock()
	if a.labels.names != nil && a.opts.Now().Sub(a.labels.at) < labelCacheTTL {
		return a.labels.names, nil
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
			set[name] = true
		}
	}
	names := make([]string, 0, len(set))
	for n := range set {
		names = append(names, n)
	}
	slices.Sort(names)
	a.labels.names, a.labels.at = names, a.opts.Now()
	return names, nil
}

// LabelsResponse is the answer of /api/v1/labels.
type LabelsResponse struct {
	Labels []string `json:"labels"`
}

func (a *API) handleLabels(ctx context.Context, _ http.ResponseWriter, _ *http.Request) (any, error) {
	names, err := a.labelNames(ctx)
	if err != nil {
		return nil, err
	}
	return LabelsResponse{Labels: names}, nil
}

// LabelValuesResponse is the answer of /api/v1/labels/{name}/values.
type LabelValuesResponse struct {
	Label  string   `json:"label"`
	Values []string `json:"values"`
}

var labelName = regexp.MustCompile(`^[a-zA-Z_][a-zA-Z0-9_.\-]{0,127}$`)

// handleLabelValues lists the values of one label seen in the range
// (default the last hour), optionally under a selector (query).
func (a *API) handleLabelValues(ctx context.Context, _ http.ResponseWriter, r *http.Request) (any, error) {
	name := r.PathValue("name")
	if !labelName.MatchString(name) {
		return nil, badParam("name", "%q is not a label name: use letters, digits and _", truncate(name, 64))
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
	var out struct {
		Aggregations struct {
			Values struct {
				Buckets []struct {
					Key string `json:"key"`
				} `json:"buckets"`
			} `json:"values"`
		} `json:"aggregations"`
	}
	query := a.sampleQuery(selection{typ: typ, sel: sel, tr: tr})
	if q.Get("type") == "" {
		// Without an explicit type, list values of every type.
		filter, mustNot := sel.Clauses()
		query = boolQ(append([]any{timeFilter(tr)}, filter...), mustNot)
	}
	body := map[string]any{"size": 0, "track_total_hits": false, "query": query, "aggs": map[string]any{
		"values": map[string]any{"terms": map[string]any{"field": selector.Field(name), "size": limit}},
	}}
	if err := a.search(ctx, a.sampleIndices(tr), body, &out); err != nil {
		return nil, fmt.Errorf("label values: %w", err)
	}
	values := make([]string, 0, len(out.Aggregations.Values.Buckets))
	for _, b := range out.Aggregations.Values.Buckets {
		values = append(values, b.Key)
	}
	slices.Sort(values)
	return LabelValuesResponse{Label: name, Values: values}, nil
}
