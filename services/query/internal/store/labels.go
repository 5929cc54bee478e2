package store

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/stackstream/stackstream/schemas/record"
	"github.com/stackstream/stackstream/services/query/internal/selector"
)

// labelCache keeps the label names read from the samples mapping and the
// label_names of the default range for a short while: the UI asks for them
// on every keystroke of the selector bar.
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
)

// MappingLabels lists service, host and every labels.* field of the samples
// indices' mappings, sorted: the contract labels, and in indices written
// before label_pairs any label seen. Names outside record.ValidLabelKey
// (dotted keys of old documents) cannot be selected and are left out.
func (s *Store) MappingLabels(ctx context.Context) ([]string, error) {
	s.labels.mu.Lock()
	defer s.labels.mu.Unlock()
	if s.labels.mapping != nil && s.opts.Now().Sub(s.labels.at) < labelCacheTTL {
		return s.labels.mapping, nil
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
	if err := s.do(ctx, http.MethodGet, "/"+s.names.SamplesPattern()+"/_mapping?allow_no_indices=true&ignore_unavailable=true", nil, &out); err != nil {
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
	// A new mapping may come with new names: read those again too.
	s.labels.mapping, s.labels.named, s.labels.at = names, nil, s.opts.Now()
	return names, nil
}

// RangeLabels lists the labels the samples in tr have: the contract labels
// with a value in some document (the mapping names them all), and the
// label_names of documents written with label_pairs. With cached, an
// answer of the last MappingLabels period is reused (and kept), whatever
// its range: for the default range, asked on every keystroke.
func (s *Store) RangeLabels(ctx context.Context, tr TimeRange, cached bool) ([]string, error) {
	if cached {
		s.labels.mu.Lock()
		named := s.labels.named
		s.labels.mu.Unlock()
		if named != nil {
			return named, nil
		}
	}
	var out struct {
		Aggregations map[string]struct {
			DocCount int64 `json:"doc_count"`
			Buckets  []struct {
				Key string `json:"key"`
			} `json:"buckets"`
		} `json:"aggregations"`
	}
	aggs := Aggs{"names": {Terms: &Terms{Field: selector.NamesField, Size: maxLabelNames}}}
	for _, name := range record.ContractLabels {
		aggs[name] = Agg{Filter: exists(selector.Field(name))}
	}
	if err := s.search(ctx, s.sampleIndices(tr), aggsRequest(allOf([]Query{timeFilter(tr)}, nil), aggs), &out); err != nil {
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
	if cached {
		s.labels.mu.Lock()
		s.labels.named = names
		s.labels.mu.Unlock()
	}
	return names, nil
}

// LabelValues lists up to limit values of label name in sel, of every
// profile type when anyType, unsorted and possibly repeated: labels outside
// the contract are read from label_pairs ("name=value", prefix stripped)
// and from labels.<name> of older documents.
func (s *Store) LabelValues(ctx context.Context, name string, sel Selection, anyType bool, limit int) ([]string, error) {
	var out struct {
		Aggregations struct {
			Values keyedSums `json:"values"`
			Pairs  keyedSums `json:"pairs"`
		} `json:"aggregations"`
	}
	query := sampleQuery(sel)
	if anyType {
		filter, mustNot := sel.Selector.Clauses()
		query = allOf(append([]Query{timeFilter(sel.Range)}, filter...), mustNot)
	}
	aggs := Aggs{"values": {Terms: &Terms{Field: selector.Field(name), Size: limit}}}
	prefix := selector.Pair(name, "")
	if selector.InPairs(name) {
		aggs["pairs"] = Agg{Terms: &Terms{Field: selector.PairsField, Size: limit, Include: selector.Literal(prefix) + ".*"}}
	}
	if err := s.search(ctx, s.sampleIndices(sel.Range), aggsRequest(query, aggs), &out, "aggregations.values.buckets.key", "aggregations.pairs.buckets.key"); err != nil {
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
	return values, nil
}
