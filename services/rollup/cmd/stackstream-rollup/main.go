// Command stackstream-rollup computes per-minute and per-hour rollups of the
// symbolized profiles into stackstream-rollups-YYYY.MM. See docs/ROLLUP.md.
package main

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"net/http/pprof"
	"os"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/stackstream/stackstream/pkg/bulk"
	"github.com/stackstream/stackstream/pkg/config"
	"github.com/stackstream/stackstream/pkg/kafka"
	"github.com/stackstream/stackstream/pkg/opensearch"
	"github.com/stackstream/stackstream/pkg/opensearch/route"
	"github.com/stackstream/stackstream/pkg/service"
	"github.com/stackstream/stackstream/pkg/telemetry"
	"github.com/stackstream/stackstream/schemas/record"
	"github.com/stackstream/stackstream/services/rollup/internal/aggregate"
	"github.com/stackstream/stackstream/services/rollup/internal/daytrees"
	"github.com/stackstream/stackstream/services/rollup/internal/lifecycle"
	"github.com/stackstream/stackstream/services/rollup/internal/pipeline"
)

func main() {
	config.Exit("stackstream-rollup", runMain())
}

func runMain() error {
	var cfg Config
	log, reg, err := service.Start("rollup", &cfg, os.Args[1:])
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	topics := cfg.Kafka.Topics()
	limit, limited := service.MemoryLimit()
	total, _ := service.MemoryTotal()
	budget, from := cfg.Rollup.StateBudget(limit, limited, total)
	log.Info("window state budget", "bytes", budget, "from", from)

	osc, err := opensearch.NewClient(ctx, cfg.OpenSearch)
	if err != nil {
		return err
	}
	if _, err := opensearch.ApplyTemplates(ctx, osc, cfg.Index.Prefix, cfg.Index.Settings()); err != nil {
		return fmt.Errorf("apply index templates: %w", err)
	}
	// The router writes through the aliases of the serving generation, or
	// with STACKSTREAM_OPENSEARCH_INDEX_GENERATION into that generation
	// (a reindex's temporary consumer).
	writer := route.New(osc, cfg.Index.Names(),
		bulk.New(osc, bulk.Options{MaxBytes: cfg.Rollup.BulkMaxBytes, Metrics: bulk.NewMetrics(reg, "stackstream_rollup")}), cfg.Index.Generation)
	var snapshots *pipeline.Snapshots
	if cfg.Rollup.SnapshotEvery > 0 {
		snapshots = &pipeline.Snapshots{
			Topic: record.RollupStateTopic(cfg.Kafka.TopicPrefix, cfg.Rollup.Group), Every: cfg.Rollup.SnapshotEvery,
			NewClient: func(opts ...kgo.Opt) (*kgo.Client, error) { return kafka.NewClient(ctx, cfg.Kafka, opts...) },
		}
		defer snapshots.Close()
	}
	rollup := pipeline.New(pipeline.Config{
		Topics: topics,
		Group:  cfg.Rollup.Group,
		Window: aggregate.Config{
			AllowedLateness: cfg.Rollup.AllowedLateness, Retention: cfg.Rollup.Retention,
			MaxClockSkew: cfg.Rollup.MaxClockSkew, MaxAge: cfg.Rollup.MaxAge,
			Budget: &aggregate.Budget{MaxBytes: budget, CacheMaxBytes: cfg.Rollup.StackCacheBytes},
			Names:  cfg.Index.Names(), Now: time.Now,
			NoMinuteTrees: !cfg.Rollup.MinuteTrees,
			HeadMinNodes:  headMinNodes(cfg.Rollup.WindowHeads),
		},
		MaxPollRecords: cfg.Rollup.MaxPollRecords,
		FlushTimeout:   cfg.Rollup.FlushTimeout,
		IdleFlush:      cfg.Rollup.IdleFlush,
		Snapshots:      snapshots,
		Now:            time.Now,
	}, writer, log, reg)
	cl, err := kafka.NewClient(ctx, cfg.Kafka, append(rollup.ClientOpts(), kafka.LogTo(log))...)
	if err != nil {
		return err
	}
	// Closed last: leaving the group runs the revoke callback, which commits
	// what the final flush stored.
	defer cl.Close()
	if err := kafka.CheckTopics(ctx, cl, topics.ProfilesSymbolized, topics.DLQ); err != nil {
		return err
	}
	if snapshots != nil {
		if err := snapshots.EnsureTopic(ctx, kadm.NewClient(cl), topics.ProfilesSymbolized); err != nil {
			return err
		}
	}
	mux := telemetry.Mux(reg, func(ctx context.Context) error {
		return opensearch.Check(ctx, osc, cfg.OpenSearch)
	})
	if cfg.Rollup.DebugPprof {
		servePprof(mux)
	}
	srv, err := telemetry.Listen(cfg.ListenAddr, mux)
	if err != nil {
		return err
	}

	// On a signal the consumer writes every window in memory and commits
	// before its Run returns.
	g := service.NewGroup(log)
	g.AddContext(ctx, func(ctx context.Context) error { return rollup.Run(ctx, cl) })
	g.Add(srv.Run, srv.Stop)
	lc := &lifecycle.Lifecycle{Client: osc, Names: cfg.Index.Names(), MinuteDays: cfg.Rollup.MinuteDays, HourlyDays: cfg.Rollup.HourlyDays,
		Interval: cfg.Rollup.LifecycleEvery, FleetHeadsInterval: cfg.Rollup.FleetHeadsEvery, MinuteTreeRetention: cfg.Rollup.MinuteTreeRetention,
		Logger: log, Now: time.Now, Leads: rollup.OwnsFirstPartition,
		DayTrees: &daytrees.Compactor{Client: osc, Names: cfg.Index.Names(), Days: 2, Now: time.Now}}
	if cfg.Index.Generation == 0 {
		g.AddContext(ctx, lc.Run)
	} else {
		// The lifecycle works on the serving names: it is the live rollup's job.
		log.Info("filling an index generation: the lifecycle is left to the live rollup", "generation", cfg.Index.Generation)
	}
	log.Info("started", "group", cfg.Rollup.Group, "topic", topics.ProfilesSymbolized, "listen", srv.Addr())
	return g.Run()
}

// servePprof adds Go's /debug/pprof/ handlers (STACKSTREAM_ROLLUP_DEBUG_PPROF):
// /debug/pprof/heap shows what the window state and the stack caches hold.
func servePprof(mux *http.ServeMux) {
	mux.HandleFunc("GET /debug/pprof/", pprof.Index)
	mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
}

// headMinNodes is Config.HeadMinNodes: aggregate.DefaultHeadMinNodes with
// STACKSTREAM_ROLLUP_WINDOW_HEADS, else no tree is large enough for a head.
func headMinNodes(on bool) int {
	if on {
		return aggregate.DefaultHeadMinNodes
	}
	return math.MaxInt
}
