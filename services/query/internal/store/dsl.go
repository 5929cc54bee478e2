package store

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"
)

// This file is the part of OpenSearch's query DSL the store uses: a
// request body, its aggregations as structs (their keys are fixed), and
// builders for the query clauses (their keys are field names).

// Query is one clause of the query DSL: one of the builders below, or a
// clause of selector.Selector.Clauses.
type Query = any

// Request is the body of one _search.
type Request struct {
	Size int `json:"size"`
	// TrackTotalHits is false when no hit count is read, 1 when only
	// whether anything matched is.
	TrackTotalHits any     `json:"track_total_hits"`
	Timeout        string  `json:"timeout,omitempty"` // set by Store.search from the deadline
	Query          Query   `json:"query"`
	Source         *Source `json:"_source,omitempty"`
	// SeqNoPrimaryTerm asks for each hit's _seq_no and _primary_term.
	SeqNoPrimaryTerm bool `json:"seq_no_primary_term,omitempty"`
	// DocvalueFields reads fields from their doc values (in each hit's
	// fields), without loading _source: tree documents' _source is large.
	DocvalueFields []DocvalueField `json:"docvalue_fields,omitempty"`
	Aggs           Aggs            `json:"aggs,omitempty"`
}

// aggsRequest reads aggregations only: no hits, no hit count.
func aggsRequest(query Query, aggs Aggs) *Request {
	return &Request{TrackTotalHits: false, Query: query, Aggs: aggs}
}

// matchedRequest reads aggregations and whether any document matched
// (hits.total is then 0 or 1).
func matchedRequest(query Query, aggs Aggs) *Request {
	return &Request{TrackTotalHits: 1, Query: query, Aggs: aggs}
}

// Source selects the _source fields a search returns; None returns no
// _source at all, so OpenSearch does not load it.
type Source struct {
	Includes []string `json:"includes"`
	None     bool     `json:"-"`
}

// MarshalJSON is false for None.
func (s Source) MarshalJSON() ([]byte, error) {
	if s.None {
		return []byte("false"), nil
	}
	return json.Marshal(struct {
		Includes []string `json:"includes"`
	}{s.Includes})
}

// DocvalueField is a field read from doc values, in Format when set.
type DocvalueField struct {
	Field  string `json:"field"`
	Format string `json:"format,omitempty"`
}

// Aggs names the aggregations of a request or of a bucket.
type Aggs map[string]Agg

// Agg is one aggregation: exactly one of its kinds is set, with Aggs
// under it for the bucket kinds (Filter, Terms, DateHistogram, Composite).
type Agg struct {
	Sum            *Metric        `json:"sum,omitempty"`
	Cardinality    *Metric        `json:"cardinality,omitempty"`
	Min            *Metric        `json:"min,omitempty"`
	Max            *Metric        `json:"max,omitempty"`
	ScriptedMetric map[string]any `json:"scripted_metric,omitempty"`
	Filter         Query          `json:"filter,omitempty"`
	Terms          *Terms         `json:"terms,omitempty"`
	DateHistogram  *DateHistogram `json:"date_histogram,omitempty"`
	Composite      *Composite     `json:"composite,omitempty"`
	Aggs           Aggs           `json:"aggs,omitempty"`
}

// Metric is a single-value metric of a field or of a script.
type Metric struct {
	Field  string `json:"field,omitempty"`
	Script any    `json:"script,omitempty"`
}

// Terms buckets by the values of a field; as a composite source it takes
// MissingBucket, so documents without the field get a null key.
type Terms struct {
	Field         string            `json:"field"`
	Size          int               `json:"size,omitempty"`
	Order         map[string]string `json:"order,omitempty"`
	Include       string            `json:"include,omitempty"`
	MissingBucket bool              `json:"missing_bucket,omitempty"`
}

// DateHistogram buckets @timestamp by a fixed step.
type DateHistogram struct {
	Field         string `json:"field"`
	FixedInterval string `json:"fixed_interval"`
	MinDocCount   int    `json:"min_doc_count,omitempty"` // 0 is the default; composite sources take none
}

// Composite pages through the combinations of its sources' values.
type Composite struct {
	Size    int              `json:"size"`
	Sources []map[string]Agg `json:"sources"`
	After   map[string]any   `json:"after,omitempty"`
}

func sumOf(field string) Agg { return Agg{Sum: &Metric{Field: field}} }

func cardinalityOf(field string) Agg { return Agg{Cardinality: &Metric{Field: field}} }

// heaviestTerms buckets by field, the size buckets of the largest sum of
// valueField first, each with that sum as "v".
func heaviestTerms(field string, size int, valueField string) Agg {
	return Agg{
		Terms: &Terms{Field: field, Size: size, Order: map[string]string{"v": "desc"}},
		Aggs:  Aggs{"v": sumOf(valueField)},
	}
}

// histogram buckets by @timestamp every step, leaving out empty buckets.
func histogram(step time.Duration, aggs Aggs) Agg {
	return Agg{
		DateHistogram: &DateHistogram{Field: "@timestamp", FixedInterval: fmt.Sprintf("%ds", int64(step/time.Second)), MinDocCount: 1},
		Aggs:          aggs,
	}
}

// termSources are composite sources, one per field and named by it, each
// with a bucket for documents without the field.
func termSources(fields ...string) []map[string]Agg {
	out := make([]map[string]Agg, len(fields))
	for i, f := range fields {
		out[i] = map[string]Agg{f: {Terms: &Terms{Field: f, MissingBucket: true}}}
	}
	return out
}

// hourlyCount counts hourly documents, to detect a cluster whose rollup
// writer produces minute windows only.
var hourlyCount = Agg{Filter: term("resolution", "1h")}

// boolQuery is a bool query of filter (all match) and must_not clauses.
type boolQuery struct {
	Bool boolClauses `json:"bool"`
}

type boolClauses struct {
	Filter             []Query `json:"filter,omitempty"`
	MustNot            []Query `json:"must_not,omitempty"`
	Should             []Query `json:"should,omitempty"`
	MinimumShouldMatch int     `json:"minimum_should_match,omitempty"`
}

func allOf(filter, mustNot []Query) Query {
	return boolQuery{Bool: boolClauses{Filter: filter, MustNot: mustNot}}
}

func anyOf(should ...Query) Query {
	return boolQuery{Bool: boolClauses{Should: should, MinimumShouldMatch: 1}}
}

func term(field string, value any) Query {
	return map[string]any{"term": map[string]any{field: value}}
}

func termsOf(field string, values []string) Query {
	return map[string]any{"terms": map[string]any{field: values}}
}

func exists(field string) Query {
	return map[string]any{"exists": map[string]any{"field": field}}
}

func idsOf(ids []string) Query {
	return map[string]any{"ids": map[string]any{"values": ids}}
}

// timeFilter selects @timestamp in [tr.From, tr.To).
func timeFilter(tr TimeRange) Query {
	return map[string]any{"range": map[string]any{"@timestamp": map[string]any{
		"gte": tr.From.UnixMilli(), "lt": tr.To.UnixMilli(), "format": "epoch_millis",
	}}}
}

// wildcardValue turns a keyword into a "contains" wildcard pattern, escaping
// the wildcard syntax so the keyword is matched literally.
func wildcardValue(q string) string {
	r := strings.NewReplacer(`\`, `\\`, `*`, `\*`, `?`, `\?`)
	return "*" + r.Replace(q) + "*"
}

// wildcard matches field against pattern, ignoring case.
func wildcard(field, pattern string) Query {
	return map[string]any{"wildcard": map[string]any{field: map[string]any{"value": pattern, "case_insensitive": true}}}
}

// contains matches field values holding q, ignoring case.
func contains(field, q string) Query { return wildcard(field, wildcardValue(q)) }

// Decoded shapes of OpenSearch answers.
type (
	sumValue struct {
		Value float64 `json:"value"`
	}
	docCount struct {
		DocCount int64 `json:"doc_count"`
	}
	hitsTotal struct {
		Total struct {
			Value int64 `json:"value"`
		} `json:"total"`
	}
	// keyedSums are the buckets of heaviestTerms.
	keyedSums struct {
		Buckets []struct {
			Key string   `json:"key"`
			V   sumValue `json:"v"`
		} `json:"buckets"`
	}
)
