// Command stackstream-rollup computes per-minute and per-hour rollups of the
// symbolized profiles into stackstream-rollups-YYYY.MM. See docs/ROLLUP.md.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/oklog/run"

	"github.com/stackstream/stackstream/pkg/bulk"
	"github.com/stackstream/stackstream/pkg/config"
	"github.com/stackstream/stackstream/pkg/kafka"
	"github.com/stackstream/stackstream/pkg/opensearch"
	"github.com/stackstream/stackstream/pkg/telemetry"
	"github.com/stackstream/stackstream/services/rollup/internal/aggregate"
	"github.com/stackstream/stackstream/services/rollup/internal/pipeline"
)

// Config is every setting, from STACKSTREAM_* variables.
type Config struct {
	Kafka      kafka.Config           `envconfig:"KAFKA"`
	OpenSearch opensearch.Config      `envconfig:"OPENSEARCH"`
	Index      opensearch.IndexConfig `envconfig:"OPENSEARCH_INDEX"`
	Log        telemetry.LogConfig    `envconfig:"LOG"`
	ListenAddr string                 `envconfig:"LISTEN_ADDR" default:"127.0.0.1:9104" desc:"address of /metrics, /healthz, /readyz"`
	Rollup     Settings               `envconfig:"ROLLUP"`
}

// Settings are the rollup's own, from STACKSTREAM_ROLLUP_*.
type Settings struct {
	Group           string        `envconfig:"GROUP" default:"stackstream-rollup" desc:"consumer group on profiles.symbolized"`
	AllowedLateness time.Duration `envconfig:"ALLOWED_LATENESS" default:"2m" desc:"a window is written once the partition's newest event time passes its end by this much"`
	Retention       time.Duration `envconfig:"RETENTION" default:"10m" desc:"a written window stays in memory this long for late profiles; later ones go to the DLQ"`
	MaxClockSkew    time.Duration `envconfig:"MAX_CLOCK_SKEW" default:"10m" desc:"profiles stamped further ahead of this host's clock go to the DLQ"`
	MaxAge          time.Duration `envconfig:"MAX_AGE" default:"168h" desc:"profiles older than this (wall clock) go to the DLQ; keep it at STACKSTREAM_INDEXER_RETENTION_DAYS; 0 accepts any past time"`
	MaxStateBytes   int64         `envconfig:"MAX_STATE_BYTES" default:"268435456" desc:"window state held in memory; a profile that would pass it goes to the DLQ (state_full)"`
	MaxPollRecords  int           `envconfig:"MAX_POLL_RECORDS" default:"1000" desc:"records folded in between two writes"`
	FlushTimeout    time.Duration `envconfig:"FLUSH_TIMEOUT" default:"30s" desc:"bound of the final write on shutdown or partition revoke"`
	IdleFlush       time.Duration `envconfig:"IDLE_FLUSH" default:"1m" desc:"write the open windows of a partition without records for this long; 0 disables"`
	BulkMaxBytes    int           `envconfig:"BULK_MAX_BYTES" default:"8388608" desc:"bytes per bulk request"`
}

// Validate checks values that parse but cannot work.
func (c Config) Validate() error {
	if err := c.Kafka.Validate(); err != nil {
		return err
	}
	if err := c.OpenSearch.Validate(); err != nil {
		return err
	}
	s := c.Rollup
	switch {
	case strings.TrimSpace(s.Group) == "":
		return errors.New("STACKSTREAM_ROLLUP_GROUP is empty: name the consumer group")
	case s.AllowedLateness < 0:
		return fmt.Errorf("STACKSTREAM_ROLLUP_ALLOWED_LATENESS=%s is negative: use 0 or more, e.g. 2m", s.AllowedLateness)
	case s.Retention < 0:
		return fmt.Errorf("STACKSTREAM_ROLLUP_RETENTION=%s is negative: use 0 or more, e.g. 10m", s.Retention)
	case s.MaxClockSkew <= 0:
		return fmt.Errorf("STACKSTREAM_ROLLUP_MAX_CLOCK_SKEW=%s must be positive, e.g. 10m", s.MaxClockSkew)
	case s.MaxAge < 0:
		return fmt.Errorf("STACKSTREAM_ROLLUP_MAX_AGE=%s is negative: use 0 (any past time) or more, e.g. 168h", s.MaxAge)
	case s.MaxStateBytes < 16<<20:
		return fmt.Errorf("STACKSTREAM_ROLLUP_MAX_STATE_BYTES=%d is below 16 MiB: use e.g. 268435456", s.MaxStateBytes)
	case s.MaxPollRecords <= 0:
		return fmt.Errorf("STACKSTREAM_ROLLUP_MAX_POLL_RECORDS=%d must be positive, e.g. 1000", s.MaxPollRecords)
	case s.IdleFlush < 0:
		return fmt.Errorf("STACKSTREAM_ROLLUP_IDLE_FLUSH=%s is negative: use 0 (off) or more, e.g. 1m", s.IdleFlush)
	case s.FlushTimeout <= 0:
		return fmt.Errorf("STACKSTREAM_ROLLUP_FLUSH_TIMEOUT=%s must be positive, e.g. 30s", s.FlushTimeout)
	case s.BulkMaxBytes < 1<<20:
		return fmt.Errorf("STACKSTREAM_ROLLUP_BULK_MAX_BYTES=%d is below 1 MiB: use e.g. 8388608", s.BulkMaxBytes)
	}
	return nil
}

func main() {
	config.Exit("stackstream-rollup", runMain())
}

func runMain() error {
	var cfg Config
	if err := config.Load(&cfg, os.Args[1:], os.Stdout); err != nil {
		return err
	}
	log, err := telemetry.NewLogger(cfg.Log, os.Stderr, "rollup")
	if err != nil {
		return err
	}
	reg := telemetry.NewRegistry()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	osc, err := opensearch.NewClient(ctx, cfg.OpenSearch)
	if err != nil {
		return err
	}
	if _, err := opensearch.ApplyTemplates(ctx, osc, cfg.Index.Prefix, cfg.Index.Settings()); err != nil {
		return fmt.Errorf("apply index templates: %w", err)
	}
	writer := bulk.New(osc, bulk.Options{MaxBytes: cfg.Rollup.BulkMaxBytes, Metrics: bulk.NewMetrics(reg, "stackstream_rollup")})
	rollup := pipeline.New(pipeline.Config{
		Topics: cfg.Kafka.Topics(),
		Group:  cfg.Rollup.Group,
		Window: aggregate.Config{
			AllowedLateness: cfg.Rollup.AllowedLateness, Retention: cfg.Rollup.Retention,
			MaxClockSkew: cfg.Rollup.MaxClockSkew, MaxAge: cfg.Rollup.MaxAge,
			Budget: &aggregate.Budget{MaxBytes: cfg.Rollup.MaxStateBytes},
			Names:  cfg.Index.Names(), Now: time.Now,
		},
		MaxPollRecords: cfg.Rollup.MaxPollRecords,
		FlushTimeout:   cfg.Rollup.FlushTimeout,
		IdleFlush:      cfg.Rollup.IdleFlush,
		Now:            time.Now,
	}, writer, log, reg)
	cl, err := kafka.NewClient(ctx, cfg.Kafka, append(rollup.ClientOpts(), kafka.LogTo(log))...)
	if err != nil {
		return err
	}
	// Closed last: leaving the group runs the revoke callback, which commits
	// what the final flush stored.
	defer cl.Close()
	srv, err := telemetry.Listen(cfg.ListenAddr, telemetry.Mux(reg, func(ctx context.Context) error {
		return opensearch.Check(ctx, osc, cfg.OpenSearch)
	}))
	if err != nil {
		return err
	}

	var g run.Group
	g.Add(run.SignalHandler(ctx, os.Interrupt, syscall.SIGTERM))
	// The consumer stops first on a signal: Run writes every window in
	// memory and commits before returning.
	runCtx, stop := context.WithCancel(ctx)
	g.Add(func() error { return rollup.Run(runCtx, cl) }, func(error) { stop() })
	g.Add(srv.Run, srv.Stop)
	log.Info("started", "group", cfg.Rollup.Group, "topic", cfg.Kafka.Topics().ProfilesSymbolized, "listen", srv.Addr())
	err = g.Run()
	var sig *run.SignalError
	if errors.As(err, &sig) {
		log.Info("stopped", "signal", sig.Signal)
		return nil
	}
	return err
}
