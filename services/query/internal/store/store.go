// Package store reads the OpenSearch indices of stackstream for the query
// API: the samples (daily), the rollups (monthly) and the stacks index.
//
// Each method answers one question the API asks (a chart's lines, the
// values of a selection per stack, the frames of stacks, label names and
// values, search matches) and chooses where to read it: the per-service,
// per-stack or per-function rollups for long ranges, hourly windows where
// whole settled hours allow and minute windows around them, the raw
// samples otherwise or when rollups are missing. Request bodies are built
// from the types of dsl.go; answers are decoded into structs that name
// only what is read, and filter_path trims the rest on OpenSearch's side.
//
// Errors wrap ErrTimeout (the deadline passed, or OpenSearch gave up at the
// timeout it was given), ErrNotFound (HTTP 404) and ErrRegexpTooComplex (a
// selector's regular expression OpenSearch refused); the API maps them to
// 504, 404 and 400. Other errors hold OpenSearch's answer for the log.
package store

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

	"github.com/opensearch-project/opensearch-go/v4/opensearchapi"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/stackstream/stackstream/pkg/opensearch"
	"github.com/stackstream/stackstream/schemas/indices"
	"github.com/stackstream/stackstream/schemas/record"
	"github.com/stackstream/stackstream/services/query/internal/selector"
)

var (
	// ErrTimeout: the request ran past its deadline, or OpenSearch stopped
	// at the timeout it was given (its partial numbers are not used).
	ErrTimeout = errors.New("query timed out")
	// ErrNotFound: OpenSearch answered 404.
	ErrNotFound = errors.New("not found")
	// ErrRegexpTooComplex is OpenSearch refusing a selector's regular
	// expression: its automaton needs more than 10000 states (the length
	// is checked when parsing). The user's expression is the cause.
	ErrRegexpTooComplex = errors.New("regular expression too complex")
)

// Options bound the work of the store's queries. Zero or negative fields
// take the defaults noted.
type Options struct {
	RawMaxRange time.Duration // selections over longer ranges read the rollups; default 6h
	MaxStacks   int           // distinct stacks kept per selection; default 50000
	MaxSeries   int           // lines per chart; default 100
	CacheStacks int           // stacks whose frame names are kept in memory; default 200000
	PageSize    int           // stacks per composite aggregation page over the rollups; default 10000
	Now         func() time.Time
	// Backend observes the seconds of each OpenSearch request; Truncated
	// counts selections with more than MaxStacks stacks. Nil: not counted.
	Backend   prometheus.Observer
	Truncated prometheus.Counter
}

func (o Options) withDefaults() Options {
	o.RawMaxRange = positiveOr(o.RawMaxRange, 6*time.Hour)
	o.MaxStacks = positiveOr(o.MaxStacks, 50000)
	o.MaxSeries = positiveOr(o.MaxSeries, 100)
	o.CacheStacks = positiveOr(o.CacheStacks, 200000)
	o.PageSize = positiveOr(o.PageSize, 10000)
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Backend == nil {
		o.Backend = prometheus.ObserverFunc(func(float64) {})
	}
	if o.Truncated == nil {
		o.Truncated = prometheus.NewCounter(prometheus.CounterOpts{Name: "unregistered"})
	}
	return o
}

func positiveOr[T int | time.Duration](v, def T) T {
	if v <= 0 {
		return def
	}
	return v
}

// Store runs the query service's searches. It is safe for concurrent use.
type Store struct {
	cl     *opensearchapi.Client
	names  indices.Names
	opts   Options
	stacks *stackCache
	lines  linesCache
	labels labelCache
}

// New returns a store reading the indices of names through cl.
func New(cl *opensearchapi.Client, names indices.Names, opts Options) *Store {
	opts = opts.withDefaults()
	return &Store{
		cl: cl, names: names, opts: opts,
		stacks: &stackCache{m: map[string]stackFrames{}, max: opts.CacheStacks},
		lines:  linesCache{m: map[string]linesEntry{}},
	}
}

// TimeRange is [From, To); Now is when the request was parsed (zero in
// tests that do not care), so recent hours are read from minute windows.
type TimeRange struct{ From, To, Now time.Time }

func (r TimeRange) Duration() time.Duration { return r.To.Sub(r.From) }

// Selection is what most queries read: a profile type, a selector and a
// time range.
type Selection struct {
	Type     record.ProfileType
	Selector selector.Selector
	Range    TimeRange
}

// FromRollups reports whether a selection reads the per-stack and
// per-function rollups instead of the raw samples: for ranges longer than
// RawMaxRange, when the selector only names fields the rollups have.
func (s *Store) FromRollups(sel Selection) bool {
	return sel.Range.Duration() > s.opts.RawMaxRange && sel.Selector.OnlyFields("service", "host")
}

// sampleQuery selects the samples of sel, and extra.
func sampleQuery(sel Selection, extra ...Query) Query {
	filter, mustNot := sel.Selector.Clauses()
	filter = append(append([]Query{timeFilter(sel.Range), term("type", string(sel.Type))}, filter...), extra...)
	return allOf(filter, mustNot)
}

// rollupQuery selects the rollup windows of one kind (service, stack or
// function) of sel, and extra.
func rollupQuery(sel Selection, kind string, minuteOnly bool, extra ...Query) Query {
	filter, mustNot := sel.Selector.Clauses()
	filter = append(append([]Query{term("kind", kind), term("type", string(sel.Type)), rollupTime(sel.Range, minuteOnly)}, filter...), extra...)
	return allOf(filter, mustNot)
}

// hourSettle is how long after an hour ends its hourly rollup documents are
// surely written: the rollup service writes an hour once its watermark has
// passed the hour's end by the allowed lateness (default 2m). Until then the
// hour is read from its minute windows, which are exact too.
const hourSettle = 15 * time.Minute

// hourlySpan is the part of tr read from hourly rollups: the whole hours
// inside it that ended at least hourSettle before tr.Now.
func hourlySpan(tr TimeRange) (TimeRange, bool) {
	hFrom := tr.From.Truncate(time.Hour)
	if hFrom.Before(tr.From) {
		hFrom = hFrom.Add(time.Hour)
	}
	end := tr.To
	if settled := tr.Now.Add(-hourSettle); !tr.Now.IsZero() && settled.Before(end) {
		end = settled
	}
	hTo := end.Truncate(time.Hour)
	return TimeRange{From: hFrom, To: hTo}, hFrom.Before(hTo)
}

// hasWholeHours reports whether rollupTime would read hourly documents.
func hasWholeHours(tr TimeRange) bool {
	_, ok := hourlySpan(tr)
	return ok
}

// rollupTime selects rollup windows starting in tr: hourly documents for the
// whole hours of hourlySpan and minute documents for the rest, so a day
// reads ~24 documents per key instead of 1440 and the sums stay exact.
// minuteOnly is the fallback when no hourly rollups exist.
func rollupTime(tr TimeRange, minuteOnly bool) Query {
	minute := func(r TimeRange) Query {
		return allOf([]Query{term("resolution", "1m"), timeFilter(r)}, nil)
	}
	hours, ok := hourlySpan(tr)
	if minuteOnly || !ok {
		return minute(tr)
	}
	should := []Query{allOf([]Query{term("resolution", "1h"), timeFilter(hours)}, nil)}
	if tr.From.Before(hours.From) {
		should = append(should, minute(TimeRange{From: tr.From, To: hours.From}))
	}
	if hours.To.Before(tr.To) {
		should = append(should, minute(TimeRange{From: hours.To, To: tr.To}))
	}
	return anyOf(should...)
}

// sampleIndices are the daily samples indices that can hold events of tr.
func (s *Store) sampleIndices(tr TimeRange) []string {
	var out []string
	day := tr.From.UTC().Truncate(24 * time.Hour)
	for ; day.Before(tr.To); day = day.Add(24 * time.Hour) {
		out = append(out, s.names.Samples(day))
	}
	return out
}

// rollupIndices are the monthly rollups indices that can hold windows of tr.
func (s *Store) rollupIndices(tr TimeRange) []string {
	var out []string
	f := tr.From.UTC()
	month := time.Date(f.Year(), f.Month(), 1, 0, 0, 0, 0, time.UTC)
	for ; month.Before(tr.To); month = month.AddDate(0, 1, 0) {
		out = append(out, s.names.Rollups(month))
	}
	return out
}

// search runs one _search over the named indices. Index names come from the
// prefix and dates only, never from the request. Missing indices (a day
// without data) are not an error.
// filterPath, when given, trims the answer to those paths: large
// aggregations answer several times faster when OpenSearch does not send
// what is not read (doc counts, key_as_string).
func (s *Store) search(ctx context.Context, indexNames []string, req *Request, out any, filterPath ...string) error {
	if req.Timeout == "" {
		if dl, ok := ctx.Deadline(); ok {
			// Ask OpenSearch to stop too, not only to be abandoned by us.
			if ms := time.Until(dl).Milliseconds(); ms > 0 {
				req.Timeout = fmt.Sprintf("%dms", ms)
			}
		}
	}
	path := "/" + strings.Join(indexNames, ",") + "/_search?ignore_unavailable=true&allow_no_indices=true&request_cache=true"
	if len(filterPath) > 0 {
		filterPath = append(filterPath, "timed_out")
		path += "&filter_path=" + url.QueryEscape(strings.Join(filterPath, ","))
	}
	ans := &searchAnswer{out: out}
	if err := s.do(ctx, http.MethodPost, path, req, ans); err != nil {
		return err
	}
	if ans.TimedOut {
		// OpenSearch stopped at the timeout and answered with partial
		// results: wrong numbers are worse than none.
		return fmt.Errorf("opensearch search of %s: %w", strings.Join(indexNames, ","), ErrTimeout)
	}
	return nil
}

// searchAnswer decodes a search answer into out and notes whether
// OpenSearch gave up at the timeout.
type searchAnswer struct {
	TimedOut bool
	out      any
}

func (a *searchAnswer) UnmarshalJSON(b []byte) error {
	var flag struct {
		TimedOut bool `json:"timed_out"`
	}
	if err := json.Unmarshal(b, &flag); err != nil {
		return err
	}
	a.TimedOut = flag.TimedOut
	if a.out == nil {
		return nil
	}
	return json.Unmarshal(b, a.out)
}

// do sends a JSON request and decodes a 2xx answer into out.
func (s *Store) do(ctx context.Context, method, path string, body any, out any) error {
	var raw []byte
	if body != nil {
		var err error
		if raw, err = json.Marshal(body); err != nil {
			return fmt.Errorf("encode request: %w", err)
		}
	}
	start := time.Now()
	status, resp, err := opensearch.Raw(ctx, s.cl, method, path, raw)
	s.opts.Backend.Observe(time.Since(start).Seconds())
	if err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("opensearch %s %s: %w", method, path, ErrTimeout)
		}
		return fmt.Errorf("opensearch %s %s: %w", method, path, err)
	}
	if status/100 != 2 {
		if status == http.StatusNotFound {
			return fmt.Errorf("opensearch %s %s: %w", method, path, ErrNotFound)
		}
		if status == http.StatusBadRequest && tooComplex(resp) {
			return fmt.Errorf("opensearch %s %s: %w: %s", method, path, ErrRegexpTooComplex, truncate(resp, 500))
		}
		return fmt.Errorf("opensearch %s %s: HTTP %d: %s", method, path, status, truncate(resp, 500))
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(resp, out); err != nil {
		return fmt.Errorf("decode opensearch answer to %s: %w", path, err)
	}
	return nil
}

func tooComplex(resp []byte) bool {
	return bytes.Contains(resp, []byte("Determinizing")) || bytes.Contains(resp, []byte("too_complex_to_determinize")) ||
		bytes.Contains(resp, []byte("index.max_regex_length"))
}

func truncate(b []byte, n int) string {
	if len(b) > n {
		return string(b[:n]) + "..."
	}
	return string(b)
}
