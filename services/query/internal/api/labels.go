package api

import (
	"context"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/stackstream/stackstream/schemas/record"
)

// labelNamesRange is the default range /labels reads label_names in
// (shorter if STACKSTREAM_QUERY_MAX_RANGE is).
const labelNamesRange = 24 * time.Hour

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
	mapping, err := a.store.MappingLabels(ctx)
	if err != nil {
		return nil, err
	}
	named, err := a.store.RangeLabels(ctx, tr, !explicit)
	if err != nil {
		return nil, err
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
	limit, err := parseInt(q, "limit", 1000, 1, 10000)
	if err != nil {
		return nil, err
	}
	// Without an explicit type, list values of every type.
	values, err := a.store.LabelValues(ctx, name, s, q.Get("type") == "", limit)
	if err != nil {
		return nil, err
	}
	slices.Sort(values)
	values = slices.Compact(values)
	return LabelValuesResponse{Label: name, Values: values[:min(len(values), limit)]}, nil
}
