// Package service is the skeleton every stackstream service is wired on: the
// settings all of them share (Base, embedded in each service's Config next
// to kafka.Connection and opensearch.Storage where it uses them) and one run
// group whose first actor stops the service on SIGINT or SIGTERM.
//
// A main.go reads as a wiring diagram: Start (the Config loaded and validated
// once, the logger, the registry), build the components, add one actor each
// to a Group, Run.
package service

import (
	"context"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"

	"github.com/oklog/run"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/stackstream/stackstream/pkg/config"
	"github.com/stackstream/stackstream/pkg/telemetry"
)

// Base is read from STACKSTREAM_LOG_* when embedded in a Config.
type Base struct {
	Log telemetry.LogConfig `envconfig:"LOG"`
}

// Validate checks the log level and format, so a bad one stops start-up with
// the other settings' errors rather than later.
func (b Base) Validate() error {
	_, err := telemetry.NewLogger(b.Log, io.Discard, "")
	return err
}

func (b Base) base() Base { return b }

// Config is a service's settings: a struct embedding Base, with its own
// Validate.
type Config interface {
	config.Validator
	base() Base
}

// Start begins every main: cfg (a pointer) loaded from the environment and
// validated once (config.Load; -h prints the variables and returns
// config.ErrHelp), the logger on stderr tagged component=name, and a metrics
// registry with the runtime collectors.
func Start(name string, cfg Config, args []string) (*slog.Logger, *prometheus.Registry, error) {
	if err := config.Load(cfg, args, os.Stdout); err != nil {
		return nil, nil, err
	}
	log, err := telemetry.NewLogger(cfg.base().Log, os.Stderr, name)
	if err != nil {
		return nil, nil, err
	}
	limitHeap(log)
	return log, telemetry.NewRegistry(), nil
}

// limitHeap sets Go's soft memory limit to 90% of the cgroup's memory limit
// when GOMEMLIMIT does not set one, so the garbage collector works harder
// near the limit instead of the kernel killing the service.
func limitHeap(log *slog.Logger) {
	if os.Getenv("GOMEMLIMIT") != "" {
		return
	}
	if limit, ok := MemoryLimit(); ok {
		debug.SetMemoryLimit(limit / 10 * 9)
		log.Info("Go memory limit from the cgroup", "cgroup_limit_bytes", limit, "go_limit_bytes", limit/10*9)
	}
}

// Group runs actors until the first returns; then every other is
// interrupted. Its first actor waits for SIGINT or SIGTERM.
type Group struct {
	g      run.Group
	log    *slog.Logger
	signal os.Signal // the signal that stopped the group, nil before
}

// NewGroup returns a group with its signal actor.
func NewGroup(log *slog.Logger) *Group {
	g := &Group{log: log}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	quit := make(chan struct{})
	g.g.Add(func() error {
		select {
		case s := <-sig:
			g.signal = s
			log.Info("stopping on signal", "signal", s.String())
		case <-quit:
		}
		return nil
	}, func(error) {
		signal.Stop(sig)
		close(quit)
	})
	return g
}

// Add adds an actor: execute runs until interrupt is called.
func (g *Group) Add(execute func() error, interrupt func(error)) { g.g.Add(execute, interrupt) }

// AddContext adds an actor that runs until its context is cancelled, which
// interrupting it does.
func (g *Group) AddContext(ctx context.Context, execute func(context.Context) error) {
	ctx, cancel := context.WithCancel(ctx)
	g.g.Add(func() error { return execute(ctx) }, func(error) { cancel() })
}

// Run runs every actor and returns the error of the first to return (nil
// when a signal stopped the group), after each has returned.
func (g *Group) Run() error {
	err := g.g.Run()
	if err != nil {
		g.log.Error("stopped", "err", err)
		return err
	}
	if g.signal != nil {
		g.log.Info("stopped", "signal", g.signal.String())
	} else {
		g.log.Info("stopped")
	}
	return nil
}
