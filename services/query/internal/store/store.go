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
// timeout it was given), ErrPartial (some shards failed), ErrNotFound (HTTP
// 404) and ErrRegexpTooComplex (a selector's regular expression OpenSearch
// refused); the API maps them to 504, 503, 404 and 400. Other errors hold OpenSearch's answer for the log.
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

	"github.com/stackstream/stackstream/pkg/cache"
	"github.com/stackstream/stackstream/pkg/opensearch"
	"github.com/stackstream/stackstream/schemas/indices"
)

var (
	// ErrTimeout: the request ran past its deadline, or OpenSearch stopped
	// at the timeout it was given (its partial numbers are not used).
	ErrTimeout = errors.New("query timed out")
	// ErrPartial: some shards failed, so OpenSearch's numbers cover part
	// of the data (a shard relocating or recovering, or an index deleted
	// mid-search, as the generation-0 migration of stackctl reindex does).
	ErrPartial = errors.New("some shards did not answer")
	// ErrNotFound: OpenSearch answered 404.
	ErrNotFound = errors.New("not found")
	// ErrRegexpTooComplex is OpenSearch refusing a selector's regular
	// expression: its automaton needs more than 10000 states (the length
	// is checked when parsing). The user's expression is the cause.
	ErrRegexpTooComplex = errors.New("regular expression too complex")
	// ErrForbidden: OpenSearch answered 403 (the user lacks the right).
	ErrForbidden = errors.New("forbidden")
	// ErrTooManyStacks: the minutes around a selection's whole hours hold
	// more distinct stacks than MaxEdgeStacks. They are merged whole or
	// not at all: a flame graph missing some of them would be wrong.
	ErrTooManyStacks = errors.New("too many distinct stacks")
)

// Options bound the work of the store's queries. Zero or negative fields
// take the defaults noted.
type Options struct {
	RawMaxRange time.Duration // selections over longer ranges read the rollups; default 6h
	MaxStacks   int           // distinct stacks kept per selection read per stack; default 50000
	// MaxEdgeStacks bounds the distinct stacks of the minutes around the
	// whole hours of a selection read from trees or heads (readEdges),
	// which are merged whole; past it the read fails with
	// ErrTooManyStacks. Default 1000000.
	MaxEdgeStacks int
	MaxSeries     int // lines per chart; default 100
	CacheStacks   int // stacks whose frame names are kept in memory; default 200000
	PageSize      int // stacks per composite aggregation page over the rollups; default 10000
	TreePage      int // tree documents per page of a scroll over the rollups' trees; default 200
	// HeadCacheBytes bounds the decoded fleet heads kept by version
	// (headcache.go); default 128 MiB, negative keeps none.
	HeadCacheBytes int64
	Now            func() time.Time
	// Backend observes the seconds of each OpenSearch request; Truncated
	// counts selections with more than MaxStacks stacks. Nil: not counted.
	Backend   prometheus.Observer
	Truncated prometheus.Counter
}

func (o Options) withDefaults() Options {
	o.RawMaxRange = positiveOr(o.RawMaxRange, 6*time.Hour)
	o.MaxStacks = positiveOr(o.MaxStacks, 50000)
	o.MaxEdgeStacks = positiveOr(o.MaxEdgeStacks, 1000000)
	o.MaxSeries = positiveOr(o.MaxSeries, 100)
	o.CacheStacks = positiveOr(o.CacheStacks, 200000)
	o.PageSize = positiveOr(o.PageSize, 10000)
	o.TreePage = positiveOr(o.TreePage, 200)
	if o.HeadCacheBytes == 0 {
		o.HeadCacheBytes = DefaultHeadCacheBytes
	}
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

func positiveOr[T int | int64 | time.Duration](v, def T) T {
	if v <= 0 {
		return def
	}
	return v
}

// Store runs the query service's searches. It is safe for concurrent use.
type Store struct {
	cl    *opensearchapi.Client
	names indices.Names
	opts  Options
	// stacks keeps the frames of stacks already read: a stack ID is a
	// hash of its frames, so an entry never goes stale.
	stacks *cache.Bounded[string, stackFrames]
	lines  *cache.Bounded[string, cachedLines] // by chart, for linesKept
	// closed keeps what charts read of closed windows, checked before use
	// (closedwindows.go).
	closed *cache.Bounded[string, closedEntry]
	labels labelCache
	heads  *headCache // decoded fleet heads by version
}

// New returns a store reading the indices of names through cl.
func New(cl *opensearchapi.Client, names indices.Names, opts Options) *Store {
	opts = opts.withDefaults()
	return &Store{
		cl: cl, names: names, opts: opts,
		stacks: cache.New[string, stackFrames](opts.CacheStacks, 0),
		lines:  cache.New[string, cachedLines](maxCachedLines, 0),
		closed: cache.New[string, closedEntry](maxClosedCharts, maxClosedBytes),
		heads:  newHeadCache(opts.HeadCacheBytes),
	}
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
		filterPath = append(filterPath, "timed_out", "_shards.failed")
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
	if ans.FailedShards > 0 {
		// Likewise: a sum over some shards is a wrong sum.
		return fmt.Errorf("opensearch search of %s: %d shards failed: %w", strings.Join(indexNames, ","), ans.FailedShards, ErrPartial)
	}
	return nil
}

// searchAnswer decodes a search answer into out and notes whether
// OpenSearch gave up at the timeout or some shards failed.
type searchAnswer struct {
	TimedOut     bool
	FailedShards int
	out          any
}

func (a *searchAnswer) UnmarshalJSON(b []byte) error {
	var flag struct {
		TimedOut bool `json:"timed_out"`
		Shards   struct {
			Failed int `json:"failed"`
		} `json:"_shards"`
	}
	if err := json.Unmarshal(b, &flag); err != nil {
		return err
	}
	a.TimedOut, a.FailedShards = flag.TimedOut, flag.Shards.Failed
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
	resp, err := s.send(ctx, method, path, raw)
	if err != nil || out == nil {
		return err
	}
	if err := json.Unmarshal(resp, out); err != nil {
		return fmt.Errorf("decode opensearch answer to %s: %w", path, err)
	}
	return nil
}

// send performs a request with a JSON body (nil for none), timed by the
// backend histogram, and returns the body of a 2xx answer; other answers
// are errors wrapping ErrTimeout, ErrNotFound or ErrRegexpTooComplex
// where one applies (an opensearch.Do).
func (s *Store) send(ctx context.Context, method, path string, raw []byte) ([]byte, error) {
	start := time.Now()
	status, resp, err := opensearch.Raw(ctx, s.cl, method, path, raw)
	s.opts.Backend.Observe(time.Since(start).Seconds())
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("opensearch %s %s: %w", method, path, ErrTimeout)
		}
		return nil, fmt.Errorf("opensearch %s %s: %w", method, path, err)
	}
	if status/100 != 2 {
		if status == http.StatusNotFound {
			return nil, fmt.Errorf("opensearch %s %s: %w", method, path, ErrNotFound)
		}
		if status == http.StatusForbidden {
			return nil, fmt.Errorf("opensearch %s %s: %w: %s", method, path, ErrForbidden, truncate(resp, 500))
		}
		if status == http.StatusBadRequest && tooComplex(resp) {
			return nil, fmt.Errorf("opensearch %s %s: %w: %s", method, path, ErrRegexpTooComplex, truncate(resp, 500))
		}
		return nil, fmt.Errorf("opensearch %s %s: HTTP %d: %s", method, path, status, truncate(resp, 500))
	}
	return resp, nil
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
