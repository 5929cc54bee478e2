// stackstream-indexer consumes symbolized profiles and indexes their stacks
// and raw samples into OpenSearch; see docs/INDEXER.md.
package main

import (
	"context"
	"fmt"
	"net/http"
	"net/http/pprof"
	"os"
	"time"

	"github.com/stackstream/stackstream/pkg/bulk"
	"github.com/stackstream/stackstream/pkg/config"
	"github.com/stackstream/stackstream/pkg/kafka"
	"github.com/stackstream/stackstream/pkg/opensearch"
	"github.com/stackstream/stackstream/pkg/opensearch/route"
	"github.com/stackstream/stackstream/pkg/service"
	"github.com/stackstream/stackstream/pkg/telemetry"
	"github.com/stackstream/stackstream/services/indexer/internal/indexer"
)

func main() {
	config.Exit("stackstream-indexer", runMain())
}

func runMain() error {
	var cfg Config
	log, reg, err := service.Start("indexer", &cfg, os.Args[1:])
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	topics, names := cfg.Kafka.Topics(), cfg.Index.Names()

	osc, err := opensearch.NewClient(ctx, cfg.OpenSearch)
	if err != nil {
		return err
	}
	kcl, err := kafka.NewClient(ctx, cfg.Kafka, append(indexer.ConsumerOpts(cfg.Indexer.Group, topics.ProfilesSymbolized), kafka.LogTo(log))...)
	if err != nil {
		return err
	}
	// Closed last: the indexer's final commit goes through it.
	defer kcl.Close()
	if err := kafka.CheckTopics(ctx, kcl, topics.ProfilesSymbolized, topics.DLQ); err != nil {
		return err
	}
	applied, err := opensearch.ApplyTemplates(ctx, osc, cfg.Index.Prefix, cfg.Index.Settings())
	if err != nil {
		return fmt.Errorf("apply index templates: %w", err)
	}
	for _, t := range applied {
		log.Info("index template", "template", t.Name, "action", t.Action)
	}

	metrics := indexer.NewMetrics(reg)
	// The router writes through the aliases of the serving generation, or
	// with STACKSTREAM_OPENSEARCH_INDEX_GENERATION into that generation
	// (a reindex's temporary consumer).
	writer := route.New(osc, names, bulk.New(osc, bulk.Options{MaxBytes: cfg.Indexer.BulkMaxBytes, Metrics: metrics.Bulk}), cfg.Index.Generation)
	ix := indexer.New(kcl, writer, indexer.Options{
		Names:           names,
		DLQTopic:        topics.DLQ,
		BatchBytes:      cfg.Indexer.BatchBytes,
		FlushInterval:   cfg.Indexer.FlushInterval,
		MaxInFlight:     cfg.Indexer.MaxInFlight,
		InFlightBytes:   cfg.Indexer.InFlightBytes,
		ShutdownTimeout: cfg.Indexer.ShutdownTimeout,
		Workers:         cfg.Indexer.Workers,
		StackCacheSize:  stackCacheSize(cfg.Indexer.StackCacheSize),
		// Older profiles would land in an index retention deletes.
		MaxAge:       time.Duration(cfg.Indexer.RetentionDays) * 24 * time.Hour,
		MaxClockSkew: cfg.Indexer.MaxClockSkew,
		Logger:       log,
		Metrics:      metrics,
	})
	retention := &indexer.Retention{
		Client: osc, Names: names, Days: cfg.Indexer.RetentionDays, StacksDays: cfg.Indexer.StacksDays, MergeAfter: cfg.Indexer.MergeAfter,
		Interval: cfg.Indexer.RetentionInterval, Logger: log, Now: time.Now,
	}
	mux := telemetry.Mux(reg, func(ctx context.Context) error {
		return opensearch.Check(ctx, osc, cfg.OpenSearch)
	})
	if cfg.Indexer.DebugPprof {
		servePprof(mux)
	}
	srv, err := telemetry.Listen(cfg.ListenAddr, mux)
	if err != nil {
		return err
	}

	// On a signal the indexer writes and commits the batch in hand before
	// its Run returns.
	g := service.NewGroup(log)
	g.AddContext(ctx, ix.Run)
	if cfg.Index.Generation == 0 {
		g.AddContext(ctx, retention.Run)
	} else {
		// Retention works on the serving names: it is the live indexer's job.
		log.Info("filling an index generation: retention is left to the live indexer", "generation", cfg.Index.Generation)
	}
	g.Add(srv.Run, srv.Stop)
	log.Info("indexing", "topic", topics.ProfilesSymbolized, "group", cfg.Indexer.Group,
		"samples", names.SamplesPattern(), "stacks", names.Stacks(), "listen", srv.Addr())
	return g.Run()
}

// servePprof adds Go's /debug/pprof/ handlers (STACKSTREAM_INDEXER_DEBUG_PPROF).
func servePprof(mux *http.ServeMux) {
	mux.HandleFunc("GET /debug/pprof/", pprof.Index)
	mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
}

// stackCacheSize is indexer.Options.StackCacheSize for
// STACKSTREAM_INDEXER_STACK_CACHE_SIZE, where 0 remembers none.
func stackCacheSize(n int) int {
	if n == 0 {
		return -1
	}
	return n
}
