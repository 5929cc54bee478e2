// Package api serves the stackstream query API under /api/v1/ (see
// docs/QUERY.md and the example answers in schemas/api/).
//
// For the UI engineer: build the API handler with
//
//	api.New(cl *opensearchapi.Client, names indices.Names, opts api.Options, logger *slog.Logger) http.Handler
//
// where a zero Options gets the defaults of the binary (Now defaults to
// time.Now). The handler answers /api/v1/... only; the whole server (API, UI
// at "/", /healthz, /readyz, /metrics and optional auth) is
//
//	server.New(cl, names, server.Options{API: api.Options{...}, ...}, reg, logger) http.Handler
//
// in services/query/internal/server; pass the UI as server.Options.UI (nil
// serves a short text page at "/"). For browser tests with data, use
// services/query/internal/querytest: Setup(t) gives a client and index names
// with the real templates under a unique prefix (cleaned up after the test),
// Index(t, cl, names, Fixture(names, time.Now())) loads a small known
// fleet (services checkout and db, hosts web-1, web-2, db-1, functions
// main.work, db.query, ...; numbers in querytest's Fixture* constants).
// Answer shapes: schemas/api/*.json, decoded by this package's tests.
// Beyond api.md: /api/v1/series?function=<name> answers one line with that
// function's total per step (cores for CPU), for a search result's trend in
// one request instead of one /top per bucket.
package api

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/opensearch-project/opensearch-go/v4/opensearchapi"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/stackstream/stackstream/schemas/indices"
)

// Options bound the work of one request. Zero fields take the defaults below.
type Options struct {
	Timeout     time.Duration // per request; default 30s
	MaxRange    time.Duration // longest from..to; default 31 days
	RawMaxRange time.Duration // flame graphs of longer ranges read the per-stack rollups; default 6h
	MaxStacks   int           // distinct stacks merged per selection; default 50000
	MaxNodes    int           // default max_nodes of a flame graph; default 5000
	MaxSeries   int           // series per chart; default 100
	CacheStacks int           // stacks whose frames are kept in memory; default 200000
	PageSize    int           // stacks per composite aggregation page over the rollups; default 10000 (tests page with less)
	Auth        bool          // reported by /api/v1/config
	Version     string        // reported by /api/v1/config
	Now         func() time.Time
	Registerer  prometheus.Registerer // nil: metrics are not registered
}

func (o Options) withDefaults() Options {
	def := func(v *time.Duration, d time.Duration) {
		if *v <= 0 {
			*v = d
		}
	}
	defInt := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&o.Timeout, 30*time.Second)
	def(&o.MaxRange, 31*24*time.Hour)
	def(&o.RawMaxRange, 6*time.Hour)
	defInt(&o.MaxStacks, 50000)
	defInt(&o.MaxNodes, 5000)
	defInt(&o.MaxSeries, 100)
	defInt(&o.CacheStacks, 200000)
	defInt(&o.PageSize, 10000)
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Version == "" {
		o.Version = "dev"
	}
	return o
}

// API answers the query endpoints.
type API struct {
	cl      *opensearchapi.Client
	names   indices.Names
	opts    Options
	logger  *slog.Logger
	cache   *stackCache
	metrics metrics
	labels  labelCache
	lines   linesCache
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
	a := &API{
		cl: cl, names: names, opts: opts, logger: logger,
		cache:   &stackCache{m: map[string]stackFrames{}, max: opts.CacheStacks},
		lines:   linesCache{m: map[string]linesEntry{}},
		metrics: newMetrics(opts.Registerer),
	}
	mux := http.NewServeMux()
	a.handle(mux, "series", a.handleSeries)
	a.handle(mux, "flamegraph", a.handleFlamegraph)
	a.handle(mux, "top", a.handleTop)
	a.handle(mux, "search", a.handleSearch)
	a.handle(mux, "diff", a.handleDiff)
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

func (a *API) handle(mux *http.ServeMux, path string, h handler) {
	endpoint := path
	mux.HandleFunc("GET /api/v1/"+path, func(w http.ResponseWriter, r *http.Request) {
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
