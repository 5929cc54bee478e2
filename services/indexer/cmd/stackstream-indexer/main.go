// stackstream-indexer consumes symbolized profiles and indexes their stacks
// and raw samples into OpenSearch; see docs/INDEXER.md.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/oklog/run"

	"github.com/stackstream/stackstream/pkg/bulk"
	"github.com/stackstream/stackstream/pkg/config"
	"github.com/stackstream/stackstream/pkg/kafka"
	"github.com/stackstream/stackstream/pkg/opensearch"
	"github.com/stackstream/stackstream/pkg/telemetry"
	icfg "github.com/stackstream/stackstream/services/indexer/internal/config"
	"github.com/stackstream/stackstream/services/indexer/internal/indexer"
)

func main() {
	config.Exit("stackstream-indexer", runMain())
}

func runMain() error {
	var cfg icfg.Config
	if err := config.Load(&cfg, os.Args[1:], os.Stdout); err != nil {
		return err
	}
	log, err := telemetry.NewLogger(cfg.Log, os.Stderr, "indexer")
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	osc, err := opensearch.NewClient(ctx, cfg.OpenSearch)
	if err != nil {
		return err
	}
	names := cfg.Index.Names()

	topics := cfg.Kafka.Topics()
	kcl, err := kafka.NewClient(ctx, cfg.Kafka, append(indexer.ConsumerOpts(cfg.Indexer.Group, topics.ProfilesSymbolized), kafka.LogTo(log))...)
	if err != nil {
		return err
	}
	// Closed last: the indexer's final commit goes through it.
	defer kcl.Close()
	if err := indexer.CheckTopics(ctx, kcl, topics.ProfilesSymbolized, topics.DLQ); err != nil {
		return err
	}
	applied, err := opensearch.ApplyTemplates(ctx, osc, cfg.Index.Prefix, cfg.Index.Settings())
	if err != nil {
		return fmt.Errorf("apply index templates: %w", err)
	}
	for _, t := range applied {
		log.Info("index template", "template", t.Name, "action", t.Action)
	}

	reg := telemetry.NewRegistry()
	metrics := indexer.NewMetrics(reg)
	writer := bulk.New(osc, bulk.Options{MaxBytes: cfg.Indexer.BulkMaxBytes, Metrics: metrics.Bulk})
	ix := indexer.New(kcl, writer, indexer.Options{
		Names:           names,
		DLQTopic:        topics.DLQ,
		BatchBytes:      cfg.Indexer.BatchBytes,
		FlushInterval:   cfg.Indexer.FlushInterval,
		ShutdownTimeout: cfg.Indexer.ShutdownTimeout,
		Workers:         cfg.Indexer.Workers,
		// Older profiles would land in an index retention deletes.
		MaxAge:       time.Duration(cfg.Indexer.RetentionDays) * 24 * time.Hour,
		MaxClockSkew: cfg.Indexer.MaxClockSkew,
		Logger:       log,
		Metrics:      metrics,
	})
	retention := &indexer.Retention{
		Client: osc, Names: names, Days: cfg.Indexer.RetentionDays, MergeAfter: cfg.Indexer.MergeAfter,
		Interval: cfg.Indexer.RetentionInterval, Logger: log, Now: time.Now,
	}
	srv, err := telemetry.Listen(cfg.ListenAddr, telemetry.Mux(reg, func(ctx context.Context) error {
		return opensearch.Check(ctx, osc, cfg.OpenSearch)
	}))
	if err != nil {
		return err
	}

	var g run.Group
	{
		// The signal actor ends the group; the indexer then writes and
		// commits the batch in hand before Run returns.
		sigCtx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
		g.Add(func() error {
			<-sigCtx.Done()
			if ctx.Err() == nil {
				log.Info("stopping on signal")
			}
			return nil
		}, func(error) { stop() })
	}
	{
		ixCtx, stop := context.WithCancel(ctx)
		g.Add(func() error { return ix.Run(ixCtx) }, func(error) { stop() })
	}
	{
		retCtx, stop := context.WithCancel(ctx)
		g.Add(func() error { return retention.Run(retCtx) }, func(error) { stop() })
	}
	g.Add(srv.Run, srv.Stop)

	log.Info("indexing", "topic", topics.ProfilesSymbolized, "group", cfg.Indexer.Group,
		"samples", names.SamplesPattern(), "stacks", names.Stacks(), "listen", srv.Addr())
	err = g.Run()
	if err != nil {
		log.Error("indexer stopped", "err", err)
		return err
	}
	log.Info("stopped")
	return nil
}
