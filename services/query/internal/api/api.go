// Package api serves the stackstream query API under /api/v1/: series,
// flame graphs, top functions, diffs, search, labels and their values, and
// pprof downloads (docs/QUERY.md lists the endpoints; schemas/api/*.json
// holds an example answer of each, which the tests decode into the
// response types of this package).
//
// A request flows through three steps, each in its own place:
//
//  1. handle (api.go) gives it a request ID and a deadline (Options.Timeout).
//  2. The endpoint's handler (series.go, flame.go, search.go, labels.go,
//     pprof.go) parses and checks every parameter (params.go): a bad one is
//     a paramError, answered 400 naming the parameter, before OpenSearch is
//     asked anything. It then calls the store (services/query/internal/store),
//     which builds the OpenSearch searches, decides between samples and
//     rollups, and decodes the answers.
//  3. The handler shapes the answer: call trees, pruning and diffs
//     (tree.go), shares, pprof profiles. writeError maps failures to their
//     status (store.ErrTimeout 504, store.ErrPartial 503, store.ErrNotFound 404,
//     store.ErrRegexpTooComplex 400, store.ErrTooManyStacks 422, anything else 500), with only the
//     request ID in the answer and the detail in the log.
//
// New returns the handler of /api/v1/ alone; services/query/internal/server
// puts it together with the UI, health, metrics and authentication. Tests
// that need data (this package's, the UI's browser tests, the benchmark)
// index the known fleet of services/query/internal/querytest under a
// unique prefix on the real OpenSearch.
package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/opensearch-project/opensearch-go/v4/opensearchapi"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/stackstream/stackstream/schemas/indices"
	"github.com/stackstream/stackstream/services/query/internal/store"
)

// Options bound the work of one request. Zero fields take the defaults
// below (those of RawMaxRange, MaxStacks, MaxSeries, CacheStacks and
// PageSize are store.Options').
type Options struct {
	Timeout     time.Duration // per request; default 30s
	MaxRange    time.Duration // longest from..to; default 31 days
	RawMaxRange time.Duration // flame graphs of longer ranges read the per-stack rollups; default 6h
	MaxStacks   int           // distinct stacks merged per selection read per stack; default 50000
	// MaxEdgeStacks bounds the distinct stacks of the minutes around the
	// whole hours that trees or heads answer; past it the request fails
	// (422) rather than leave stacks out. Default 1000000.
	MaxEdgeStacks int
	MaxNodes      int // default max_nodes of a flame graph; default 5000
	MaxSeries     int // series per chart; default 100
	CacheStacks   int // stacks whose frames are kept in memory; default 200000
	PageSize      int // stacks per composite aggregation page over the rollups; default 10000 (tests page with less)
	// HeadCacheBytes bounds the decoded fleet heads kept by version
	// (STACKSTREAM_QUERY_HEAD_CACHE_BYTES); 0 is the store's default
	// (128 MiB), negative keeps none.
	HeadCacheBytes int64
	Auth           bool   // reported by /api/v1/config
	Version        string // reported by /api/v1/config
	Now            func() time.Time
	Registerer     prometheus.Registerer // nil: metrics are not registered
}

// withDefaults fills the API's own bounds; the store fills the rest.
func (o Options) withDefaults() Options {
	o.Timeout = positiveOr(o.Timeout, 30*time.Second)
	o.MaxRange = positiveOr(o.MaxRange, 31*24*time.Hour)
	o.MaxNodes = positiveOr(o.MaxNodes, 5000)
	o.MaxSeries = positiveOr(o.MaxSeries, 100)
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Version == "" {
		o.Version = "dev"
	}
	return o
}

func positiveOr[T int | time.Duration](v, def T) T {
	if v <= 0 {
		return def
	}
	return v
}

// API answers the query endpoints.
type API struct {
	store   *store.Store
	opts    Options
	logger  *slog.Logger
	metrics metrics
}

type metrics struct {
	requests  *prometheus.HistogramVec
	backend   prometheus.Histogram
	errors    prometheus.Counter
	truncated prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) metrics {
	m := metrics{
		requests: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "stackstream_query_request_duration_seconds", Help: "API request latency by endpoint and status code.",
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 12),
		}, []string{"endpoint", "code"}),
		backend: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "stackstream_query_opensearch_request_duration_seconds", Help: "Latency of each OpenSearch request made by the API.",
			Buckets: prometheus.ExponentialBuckets(0.002, 2, 12),
		}),
		errors:    prometheus.NewCounter(prometheus.CounterOpts{Name: "stackstream_query_errors_total", Help: "API requests that failed on the server side."}),
		truncated: prometheus.NewCounter(prometheus.CounterOpts{Name: "stackstream_query_truncated_total", Help: "Selections with more stacks than STACKSTREAM_QUERY_MAX_STACKS."}),
	}
	if reg != nil {
		reg.MustRegister(m.requests, m.backend, m.errors, m.truncated)
	}
	return m
}

// New returns the API handler for paths under /api/v1/.
func New(cl *opensearchapi.Client, names indices.Names, opts Options, logger *slog.Logger) http.Handler {
	opts = opts.withDefaults()
	m := newMetrics(opts.Registerer)
	a := &API{
		store: store.New(cl, names, store.Options{
			RawMaxRange: opts.RawMaxRange, MaxStacks: opts.MaxStacks, MaxEdgeStacks: opts.MaxEdgeStacks, MaxSeries: opts.MaxSeries,
			CacheStacks: opts.CacheStacks, PageSize: opts.PageSize, HeadCacheBytes: opts.HeadCacheBytes, Now: opts.Now,
			Backend: m.backend, Truncated: m.truncated,
		}),
		opts: opts, logger: logger, metrics: m,
	}
	mux := http.NewServeMux()
	a.handle(mux, "series", a.handleSeries)
	a.handle(mux, "flamegraph", a.handleFlamegraph)
	a.handle(mux, "top", a.handleTop)
	a.handle(mux, "search", a.handleSearch)
	a.handle(mux, "diff", a.handleDiff)
	a.handle(mux, "sandwich", a.handleSandwich)
	a.handle(mux, "pprof", a.handlePprof)
	a.handle(mux, "labels", a.handleLabels)
	a.handle(mux, "labels/{name}/values", a.handleLabelValues)
	a.handle(mux, "config", a.handleConfig)
	mux.HandleFunc("/api/", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusNotFound, errorBody{Error: "no API endpoint " + r.Method + " " + r.URL.Path + ": see docs/QUERY.md"})
	})
	return mux
}

// handler computes an answer or an error; handle writes either.
type handler func(ctx context.Context, w http.ResponseWriter, r *http.Request) (any, error)

// maxFormBytes bounds a POST's form body: the parameters of a GET, for
// selectors longer than a URL holds (lists of thousands of hosts).
const maxFormBytes = 1 << 20

func (a *API) handle(mux *http.ServeMux, path string, h handler) {
	endpoint := path
	serve := func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		ctx, cancel := context.WithTimeout(r.Context(), a.opts.Timeout)
		defer cancel()
		sw := &statusWriter{ResponseWriter: w, code: http.StatusOK}
		id := newRequestID()
		w.Header().Set("X-Request-Id", id)
		out, err := h(ctx, sw, r)
		switch {
		case err != nil:
			a.writeError(sw, r, id, err)
		case out != nil:
			writeJSON(sw, http.StatusOK, out)
		}
		a.metrics.requests.WithLabelValues(endpoint, strconv.Itoa(sw.code)).Observe(time.Since(start).Seconds())
	}
	mux.HandleFunc("GET /api/v1/"+path, serve)
	// POST takes the same parameters as an application/x-www-form-urlencoded
	// body (with the URL's, if any): handlers read them from the query.
	mux.HandleFunc("POST /api/v1/"+path, func(w http.ResponseWriter, r *http.Request) {
		r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
		if err := r.ParseForm(); err != nil {
			var tooLarge *http.MaxBytesError
			if errors.As(err, &tooLarge) {
				writeJSON(w, http.StatusRequestEntityTooLarge, errorBody{Error: fmt.Sprintf("request body longer than %d bytes: select by a pattern or a label instead of listing values", maxFormBytes)})
				return
			}
			writeJSON(w, http.StatusBadRequest, errorBody{Error: "request body: " + err.Error() + " (send the parameters as application/x-www-form-urlencoded)"})
			return
		}
		r.URL.RawQuery = r.Form.Encode()
		serve(w, r)
	})
}

type statusWriter struct {
	http.ResponseWriter
	code int
}

func (s *statusWriter) WriteHeader(code int) {
	s.code = code
	s.ResponseWriter.WriteHeader(code)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.Encode(v)
}

// ConfigResponse is the answer of /api/v1/config.
type ConfigResponse struct {
	Auth    bool   `json:"auth"`
	Version string `json:"version"`
}

func (a *API) handleConfig(context.Context, http.ResponseWriter, *http.Request) (any, error) {
	return ConfigResponse{Auth: a.opts.Auth, Version: a.opts.Version}, nil
}
