// Package server assembles stackstream-query's HTTP handler: the API under
// /api/v1/, the web UI at /, /healthz, /readyz and /metrics, and the
// optional authentication in front of the API and the UI.
package server

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/opensearch-project/opensearch-go/v4/opensearchapi"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/stackstream/stackstream/pkg/opensearch"
	"github.com/stackstream/stackstream/pkg/telemetry"
	"github.com/stackstream/stackstream/schemas/indices"
	"github.com/stackstream/stackstream/services/query/internal/api"
)

// Options configure the server.
type Options struct {
	API api.Options
	// UI serves everything outside /api/ (the embedded web UI); nil serves a
	// short text page pointing at the API.
	UI http.Handler
	// AuthToken, when set, is accepted as "Authorization: Bearer <token>".
	AuthToken string
	// BasicUser and BasicPassword, when set, are accepted as HTTP basic auth.
	BasicUser, BasicPassword string
	// AllowedHosts are the Host header names (any port) served; "*" serves
	// any. nil: DefaultAllowedHosts("") (the loopback names).
	AllowedHosts []string
	// MaxConcurrent API requests run at once (0: DefaultMaxConcurrent());
	// others wait up to QueueWait (0: DefaultQueueWait) for a slot, then
	// get 503 with Retry-After. Health, metrics, config and UI files are
	// not limited.
	MaxConcurrent int
	QueueWait     time.Duration
	// MaxURLBytes bounds an API request's path and query (0: DefaultMaxURLBytes).
	MaxURLBytes int
}

// AuthEnabled reports whether the API and UI require credentials.
func (o Options) AuthEnabled() bool { return o.AuthToken != "" || o.BasicUser != "" }

// New returns the whole server handler. reg may be nil for tests.
func New(cl *opensearchapi.Client, names indices.Names, opts Options, reg *prometheus.Registry, logger *slog.Logger) http.Handler {
	opts.API.Auth = opts.AuthEnabled()
	if reg != nil {
		opts.API.Registerer = reg
	} else {
		reg = prometheus.NewRegistry()
	}
	ready := func(ctx context.Context) error {
		status, _, err := opensearch.Raw(ctx, cl, http.MethodGet, "/", nil)
		if err != nil {
			// /readyz is open to anyone who reaches the port: the node's
			// address and the transport's error go to the log only.
			logger.Warn("opensearch does not answer", "err", err)
			return errors.New("opensearch does not answer (see the log)")
		}
		if status != http.StatusOK {
			return fmt.Errorf("opensearch answered HTTP %d", status)
		}
		return nil
	}
	if opts.AllowedHosts == nil {
		opts.AllowedHosts = DefaultAllowedHosts("")
	}
	if opts.MaxConcurrent <= 0 {
		opts.MaxConcurrent = DefaultMaxConcurrent()
	}
	if opts.QueueWait <= 0 {
		opts.QueueWait = DefaultQueueWait
	}
	if opts.MaxURLBytes <= 0 {
		opts.MaxURLBytes = DefaultMaxURLBytes
	}
	rej := newRejections(reg)
	mux := telemetry.Mux(reg, ready)
	apiHandler := api.New(cl, names, opts.API, logger)
	// The UI reads /api/v1/config to learn whether to ask for credentials.
	mux.Handle("GET /api/v1/config", apiHandler)
	// Credentials are checked before a slot is taken, so requests without
	// them cannot crowd out those with.
	limit := newLimiter(opts.MaxConcurrent, opts.QueueWait, rej)
	mux.Handle("/api/", limitURL(opts.MaxURLBytes, rej, requireAuth(opts, limit.wrap(apiHandler))))
	ui := opts.UI
	if ui == nil {
		ui = http.HandlerFunc(placeholder)
	}
	// With basic auth the browser asks for the credentials and sends them with
	// every request, page loads included. A bearer token cannot ride along on
	// a page load, so with a token alone the UI's files (which hold no data)
	// are served openly and the UI asks for the token before calling the API.
	if opts.BasicUser != "" {
		ui = requireAuth(opts, ui)
	}
	mux.Handle("/", ui)
	return checkHost(opts.AllowedHosts, rej, mux)
}

func placeholder(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/" {
		http.NotFound(w, r)
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	io.WriteString(w, "stackstream-query: the web UI is not built into this binary.\n"+
		"API: /api/v1/series, /flamegraph, /top, /search, /diff, /pprof, /labels (see docs/QUERY.md).\n")
}

// requireAuth accepts the bearer token or the basic credentials, comparing
// in constant time (of hashes, so lengths leak nothing either).
func requireAuth(opts Options, next http.Handler) http.Handler {
	if !opts.AuthEnabled() {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if opts.AuthToken != "" {
			if tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok && equal(tok, opts.AuthToken) {
				next.ServeHTTP(w, r)
				return
			}
			// The token also works as a basic auth password (any user), so
			// tools that only know URLs can authenticate:
			// go tool pprof 'http://x:TOKEN@host:8080/api/v1/pprof?...'
			if _, p, ok := r.BasicAuth(); ok && equal(p, opts.AuthToken) {
				next.ServeHTTP(w, r)
				return
			}
		}
		if opts.BasicUser != "" {
			if u, p, ok := r.BasicAuth(); ok && equal(u, opts.BasicUser) && equal(p, opts.BasicPassword) {
				next.ServeHTTP(w, r)
				return
			}
			w.Header().Set("WWW-Authenticate", `Basic realm="stackstream", charset="UTF-8"`)
		} else {
			w.Header().Set("WWW-Authenticate", `Bearer realm="stackstream"`)
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnauthorized)
		io.WriteString(w, `{"error":"authentication required: send the STACKSTREAM_QUERY_AUTH_TOKEN as a Bearer token or the basic auth credentials"}`+"\n")
	})
}

func equal(a, b string) bool {
	ha, hb := sha256.Sum256([]byte(a)), sha256.Sum256([]byte(b))
	return subtle.ConstantTimeCompare(ha[:], hb[:]) == 1
}
