package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/stackstream/stackstream/pkg/opensearch"
)

// errNotFound answers 404.
var errNotFound = errors.New("not found")

// errRegexpTooComplex is OpenSearch refusing a selector's regular
// expression: its automaton needs more than 10000 states (the length is
// checked when parsing). The user's expression is the cause: a 400.
var errRegexpTooComplex = errors.New("regular expression too complex")

func tooComplex(resp []byte) bool {
	return bytes.Contains(resp, []byte("Determinizing")) || bytes.Contains(resp, []byte("too_complex_to_determinize")) ||
		bytes.Contains(resp, []byte("index.max_regex_length"))
}

// search runs one _search over the named indices. Index names come from the
// prefix and dates only, never from the request. Missing indices (a day
// without data) are not an error.
// filterPath, when given, trims the answer to those paths: large
// aggregations answer several times faster when OpenSearch does not send
// what is not read (doc counts, key_as_string).
func (a *API) search(ctx context.Context, indexNames []string, body map[string]any, out any, filterPath ...string) error {
	if _, ok := body["timeout"]; !ok {
		if dl, ok := ctx.Deadline(); ok {
			// Ask OpenSearch to stop too, not only to be abandoned by us.
			if ms := time.Until(dl).Milliseconds(); ms > 0 {
				body["timeout"] = fmt.Sprintf("%dms", ms)
			}
		}
	}
	path := "/" + strings.Join(indexNames, ",") + "/_search?ignore_unavailable=true&allow_no_indices=true&request_cache=true"
	if len(filterPath) > 0 {
		filterPath = append(filterPath, "timed_out")
		path += "&filter_path=" + url.QueryEscape(strings.Join(filterPath, ","))
	}
	ans := &searchAnswer{out: out}
	if err := a.do(ctx, http.MethodPost, path, body, ans); err != nil {
		return err
	}
	if ans.TimedOut {
		// OpenSearch stopped at the timeout and answered with partial
		// results: wrong numbers are worse than none.
		return fmt.Errorf("opensearch search of %s: %w", strings.Join(indexNames, ","), errTimeout)
	}
	return nil
}

// searchAnswer decodes a search answer into out and notes whether
// OpenSearch gave up at the timeout.
type searchAnswer struct {
	TimedOut bool
	out      any
}

func (s *searchAnswer) UnmarshalJSON(b []byte) error {
	var flag struct {
		TimedOut bool `json:"timed_out"`
	}
	if err := json.Unmarshal(b, &flag); err != nil {
		return err
	}
	s.TimedOut = flag.TimedOut
	if s.out == nil {
		return nil
	}
	return json.Unmarshal(b, s.out)
}

// do sends a JSON request and decodes a 2xx answer into out.
func (a *API) do(ctx context.Context, method, path string, body any, out any) error {
	var raw []byte
	if body != nil {
		var err error
		if raw, err = json.Marshal(body); err != nil {
			return fmt.Errorf("encode request: %w", err)
		}
	}
	start := time.Now()
	status, resp, err := opensearch.Raw(ctx, a.cl, method, path, raw)
	a.metrics.backend.Observe(time.Since(start).Seconds())
	if err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("opensearch %s %s: %w", method, path, errTimeout)
		}
		return fmt.Errorf("opensearch %s %s: %w", method, path, err)
	}
	if status/100 != 2 {
		if status == http.StatusNotFound {
			return fmt.Errorf("opensearch %s %s: %w", method, path, errNotFound)
		}
		if status == http.StatusBadRequest && tooComplex(resp) {
			return fmt.Errorf("opensearch %s %s: %w: %s", method, path, errRegexpTooComplex, truncate(string(resp), 500))
		}
		return fmt.Errorf("opensearch %s %s: HTTP %d: %s", method, path, status, truncate(string(resp), 500))
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(resp, out); err != nil {
		return fmt.Errorf("decode opensearch answer to %s: %w", path, err)
	}
	return nil
}

// sampleIndices are the daily samples indices that can hold events of tr.
func (a *API) sampleIndices(tr timeRange) []string {
	var out []string
	day := tr.From.UTC().Truncate(24 * time.Hour)
	for ; day.Before(tr.To); day = day.Add(24 * time.Hour) {
		out = append(out, a.names.Samples(day))
	}
	return out
}

// rollupIndices are the monthly rollups indices that can hold windows of tr.
func (a *API) rollupIndices(tr timeRange) []string {
	var out []string
	f := tr.From.UTC()
	month := time.Date(f.Year(), f.Month(), 1, 0, 0, 0, 0, time.UTC)
	for ; month.Before(tr.To); month = month.AddDate(0, 1, 0) {
		out = append(out, a.names.Rollups(month))
	}
	return out
}

// timeFilter selects @timestamp in [from, to).
func timeFilter(tr timeRange) map[string]any {
	return map[string]any{"range": map[string]any{"@timestamp": map[string]any{
		"gte": tr.From.UnixMilli(), "lt": tr.To.UnixMilli(), "format": "epoch_millis",
	}}}
}

func termQ(field string, value any) map[string]any {
	return map[string]any{"term": map[string]any{field: value}}
}

func boolQ(filter, mustNot []any) map[string]any {
	b := map[string]any{"filter": filter}
	if len(mustNot) > 0 {
		b["must_not"] = mustNot
	}
	return map[string]any{"bool": b}
}

// hourSettle is how long after an hour ends its hourly rollup documents are
// surely written: the rollup service writes an hour once its watermark has
// passed the hour's end by the allowed lateness (default 2m). Until then the
// hour is read from its minute windows, which are exact too.
const hourSettle = 15 * time.Minute

// hourlySpan is the part of tr read from hourly rollups: the whole hours
// inside it that ended at least hourSettle before tr.Now.
func hourlySpan(tr timeRange) (timeRange, bool) {
	hFrom := tr.From.Truncate(time.Hour)
	if hFrom.Before(tr.From) {
		hFrom = hFrom.Add(time.Hour)
	}
	end := tr.To
	if settled := tr.Now.Add(-hourSettle); !tr.Now.IsZero() && settled.Before(end) {
		end = settled
	}
	hTo := end.Truncate(time.Hour)
	return timeRange{From: hFrom, To: hTo}, hFrom.Before(hTo)
}

// rollupTime selects rollup windows starting in tr: hourly documents for the
// whole hours of hourlySpan and minute documents for the rest, so a day
// reads ~24 documents per key instead of 1440 and the sums stay exact.
// minuteOnly is the fallback when no hourly rollups exist.
func rollupTime(tr timeRange, minuteOnly bool) map[string]any {
	minute := func(r timeRange) map[string]any {
		return boolQ([]any{termQ("resolution", "1m"), timeFilter(r)}, nil)
	}
	hours, ok := hourlySpan(tr)
	if minuteOnly || !ok {
		return minute(tr)
	}
	should := []any{boolQ([]any{termQ("resolution", "1h"), timeFilter(hours)}, nil)}
	if tr.From.Before(hours.From) {
		should = append(should, minute(timeRange{From: tr.From, To: hours.From}))
	}
	if hours.To.Before(tr.To) {
		should = append(should, minute(timeRange{From: hours.To, To: tr.To}))
	}
	return map[string]any{"bool": map[string]any{"should": should, "minimum_should_match": 1}}
}

// hourlyCountAgg counts hourly documents, to detect a cluster whose rollup
// writer produces minute windows only.
var hourlyCountAgg = map[string]any{"filter": termQ("resolution", "1h")}

// wildcardValue turns a keyword into a "contains" wildcard pattern, escaping
// the wildcard syntax so the keyword is matched literally.
func wildcardValue(q string) string {
	r := strings.NewReplacer(`\`, `\\`, `*`, `\*`, `?`, `\?`)
	return "*" + r.Replace(q) + "*"
}

func wildcardQ(field, q string) map[string]any {
	return map[string]any{"wildcard": map[string]any{field: map[string]any{"value": wildcardValue(q), "case_insensitive": true}}}
}

// Decoded shapes of OpenSearch answers.
type (
	sumAgg struct {
		Value float64 `json:"value"`
	}
	countAgg struct {
		DocCount int64 `json:"doc_count"`
	}
	hitsTotal struct {
		Total struct {
			Value int64 `json:"value"`
		} `json:"total"`
	}
)

// hasWholeHours reports whether rollupTime would read hourly documents.
func hasWholeHours(tr timeRange) bool {
	_, ok := hourlySpan(tr)
	return ok
}
