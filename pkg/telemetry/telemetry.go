// Package telemetry gives every service the same logger, metrics registry and
// /metrics, /healthz, /readyz endpoints.
package telemetry

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/stackstream/stackstream/pkg/version"
)

// LogConfig is read from STACKSTREAM_LOG_* when embedded as `Log telemetry.LogConfig `envconfig:"LOG"“.
type LogConfig struct {
	Level  string `envconfig:"LEVEL" default:"info" desc:"debug, info, warn or error"`
	Format string `envconfig:"FORMAT" default:"text" desc:"text or json"`
}

// NewLogger builds the service logger tagged with component.
func NewLogger(c LogConfig, w io.Writer, component string) (*slog.Logger, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(c.Level)); err != nil {
		return nil, fmt.Errorf("STACKSTREAM_LOG_LEVEL=%q: use debug, info, warn or error", c.Level)
	}
	opts := &slog.HandlerOptions{Level: level}
	var h slog.Handler
	switch strings.ToLower(c.Format) {
	case "text", "":
		h = slog.NewTextHandler(w, opts)
	case "json":
		h = slog.NewJSONHandler(w, opts)
	default:
		return nil, fmt.Errorf("STACKSTREAM_LOG_FORMAT=%q: use text or json", c.Format)
	}
	return slog.New(h).With("component", component), nil
}

// NewRegistry returns a registry with the Go runtime and process collectors
// and the binary's release (stackstream_build_info).
func NewRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), version.Collector())
	return reg
}

// ReadyFunc reports nil when the service can do its work.
type ReadyFunc func(ctx context.Context) error

// Mux serves /metrics, /healthz (the process runs) and /readyz (ready returns nil).
func Mux(reg *prometheus.Registry, ready ReadyFunc) *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		io.WriteString(w, "ok\n")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		if ready != nil {
			ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
			defer cancel()
			if err := ready(ctx); err != nil {
				http.Error(w, "not ready: "+err.Error(), http.StatusServiceUnavailable)
				return
			}
		}
		io.WriteString(w, "ready\n")
	})
	return mux
}

// Server runs an HTTP server until Stop; it fits a run group.
type Server struct {
	srv *http.Server
	ln  net.Listener
}

// Listen binds addr now, so a taken port fails start-up with the address.
func Listen(addr string, h http.Handler) (*Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", addr, err)
	}
	return &Server{srv: &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}, ln: ln}, nil
}

// ListenServer is Listen with the caller's http.Server (its time-outs and
// header limits), for a service that faces clients; srv.Handler serves.
func ListenServer(addr string, srv *http.Server) (*Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", addr, err)
	}
	return &Server{srv: srv, ln: ln}, nil
}

// Addr is the bound address (useful with port 0).
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Run serves until Stop.
func (s *Server) Run() error {
	if err := s.srv.Serve(s.ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// Stop drains connections for up to 5 s.
func (s *Server) Stop(error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s.srv.Shutdown(ctx)
}
