// stackstream-symbolizer reads raw profiles, resolves their addresses to
// functions and source lines, and writes them to profiles.symbolized exactly
// once; see docs/SYMBOLIZER.md.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/pprof"
	"os"
	"runtime/debug"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/stackstream/stackstream/pkg/config"
	"github.com/stackstream/stackstream/pkg/kafka"
	"github.com/stackstream/stackstream/pkg/service"
	"github.com/stackstream/stackstream/pkg/telemetry"
	"github.com/stackstream/stackstream/services/symbolizer/internal/pipeline"
	"github.com/stackstream/stackstream/services/symbolizer/internal/source"
	"github.com/stackstream/stackstream/services/symbolizer/internal/symbolize"
)

func main() {
	config.Exit("stackstream-symbolizer", runMain())
}

func runMain() error {
	var cfg Config
	log, reg, err := service.Start("symbolizer", &cfg, os.Args[1:])
	if err != nil {
		return err
	}
	// Under a hostile mix on its topics the live heap reached 332 MB and, with
	// GOGC's doubling, RSS 750 MB (docs/SYMBOLIZER.md, Memory bounds); a soft
	// limit makes the collector run sooner instead, as in the agent. A
	// lower one from the cgroup's limit (service.Start) stays.
	if os.Getenv("GOMEMLIMIT") == "" && cfg.Symbolizer.MemoryLimit > 0 && cfg.Symbolizer.MemoryLimit < debug.SetMemoryLimit(-1) {
		debug.SetMemoryLimit(cfg.Symbolizer.MemoryLimit)
	}
	txnID, err := cfg.TxnID()
	if err != nil {
		return err
	}
	urls, err := source.ParseURLs(cfg.DebuginfodURLList())
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	metrics := pipeline.NewMetrics(reg)
	topics := cfg.Kafka.Topics()

	// The topic store tells the chain when a build ID gets new debug info,
	// so a cached miss does not outlive the arrival of its symbols.
	var (
		chain    *source.Chain
		follower *source.Follower
	)
	store := source.NewTopic(cfg.Symbolizer.TopicCacheBytes, func(id string) { chain.Forget(id) })
	sources := []source.Source{store}
	if dirs := cfg.Dirs(); len(dirs) > 0 {
		sources = append(sources, source.Dirs{Dirs: dirs, Limits: cfg.Symbolizer.ELFLimits()})
	}
	if len(urls) > 0 {
		d := source.NewDebuginfod(urls, cfg.Symbolizer.DebuginfodTimeout)
		d.MaxDownloadBytes, d.Limits = cfg.Symbolizer.DebuginfodMaxBytes, cfg.Symbolizer.ELFLimits()
		sources = append(sources, d)
	}
	chain = source.NewChain(chainOptions(cfg.Symbolizer, &follower, log, metrics.ChainMetrics()), sources...)
	pipeline.CacheGauges(reg, pipeline.Caches{
		Chain: chain, Topic: store,
		MaxTables: cfg.Symbolizer.MaxTables, MaxTableBytes: cfg.Symbolizer.MaxTableBytes,
		TopicBytes: cfg.Symbolizer.TopicCacheBytes, MaxMisses: cfg.Symbolizer.MaxMisses,
	})

	admCl, err := kafka.NewClient(ctx, cfg.Kafka)
	if err != nil {
		return err
	}
	defer admCl.Close()
	if err := kafka.CheckTopics(ctx, admCl, topics.All()...); err != nil {
		return err
	}
	infoCl, err := kafka.NewClient(ctx, cfg.Kafka, pipeline.DebuginfoOpts(topics.Debuginfo)...)
	if err != nil {
		return err
	}
	defer infoCl.Close()
	// Fetches still running when the instance stops are cancelled.
	defer chain.Close()
	follower = &source.Follower{
		Client: infoCl, Admin: kadm.NewClient(admCl), Topic: topics.Debuginfo, Store: store, Log: log,
		OnBad:    metrics.Debuginfo.WithLabelValues("bad").Inc,
		OnReject: metrics.Debuginfo.WithLabelValues("rejected").Inc,
		OnApply:  metrics.Debuginfo.WithLabelValues("applied").Inc,
	}

	opts, err := cfg.Kafka.Opts()
	if err != nil {
		return err
	}
	codec, err := cfg.Symbolizer.BatchCodec() // checked by Validate
	if err != nil {
		return err
	}
	sess, err := kgo.NewGroupTransactSession(append(opts, append(pipeline.SessionOpts(cfg.Symbolizer.Group, topics.ProfilesRaw, txnID, cfg.Symbolizer.SessionTimeout, codec), kafka.LogTo(log))...)...)
	if err != nil {
		return fmt.Errorf("kafka transact session: %w", err)
	}
	if err := kafka.Ping(ctx, sess.Client(), cfg.Kafka); err != nil {
		sess.Close()
		return err
	}
	// Closed after the runner returned: leaving the group lets the other
	// instances take the partitions over at once.
	defer sess.Close()

	runner := &pipeline.Runner{
		Session: sess,
		Processor: &pipeline.Processor{
			Symbolizer: &symbolize.Symbolizer{Tables: chain, Concurrency: cfg.Symbolizer.LookupConcurrency, Budget: cfg.Symbolizer.LookupBudget},
			Topics:     topics, MaxOutputBytes: cfg.Symbolizer.MaxOutputBytes,
			Log: log, OnPanic: metrics.Panics.Inc,
		},
		Metrics:           metrics,
		Log:               log,
		MaxPollRecords:    cfg.Symbolizer.MaxPollRecords,
		BatchLookupBudget: cfg.Symbolizer.BatchLookupBudget,
	}
	mux := telemetry.Mux(reg, func(ctx context.Context) error {
		select {
		case <-follower.CaughtUp():
		default:
			return errors.New("still reading the debuginfo topic")
		}
		return kafka.Ping(ctx, admCl, cfg.Kafka)
	})
	if cfg.Symbolizer.DebugPprof {
		servePprof(mux)
	}
	srv, err := telemetry.Listen(cfg.ListenAddr, mux)
	if err != nil {
		return err
	}

	g := service.NewGroup(log)
	g.AddContext(ctx, follower.Run)
	// Profiles wait until the debuginfo topic has been read, so a restart
	// does not symbolize with less than the topic holds. The runner finishes
	// the transaction in hand before it returns.
	g.AddContext(ctx, func(ctx context.Context) error {
		select {
		case <-follower.CaughtUp():
		case <-ctx.Done():
			return nil
		}
		log.Info("symbolizing", "from", topics.ProfilesRaw, "to", topics.ProfilesSymbolized,
			"group", cfg.Symbolizer.Group, "transactional_id", txnID, "sources", len(sources))
		return runner.Run(ctx)
	})
	g.Add(srv.Run, srv.Stop)
	log.Info("starting", "listen", srv.Addr(), "debuginfo_topic", topics.Debuginfo, "debug_dirs", cfg.Dirs(), "debuginfod", source.RedactURLs(urls))
	return g.Run()
}

// chainOptions are the symbol source chain's settings; follower is set
// once the debuginfo follower exists.
func chainOptions(s Symbolizer, follower **source.Follower, log *slog.Logger, m source.Metrics) source.Options {
	return source.Options{
		MaxTables:     s.MaxTables,
		MaxTableBytes: s.MaxTableBytes,
		MissTTL:       s.MissTTL,
		MaxMisses:     s.MaxMisses,
		LookupTimeout: s.LookupTimeout,
		WaitDebuginfo: waitDebuginfo(follower, s.DebuginfoWait),
		Now:           time.Now,
		Log:           log,
		Metrics:       m,
	}
}

// waitDebuginfo is the chain's wait on a miss: up to d for the follower
// (set once it exists) to read the debuginfo topic to its end as of the
// miss. d of 0 turns it off.
func waitDebuginfo(f **source.Follower, d time.Duration) func(context.Context, time.Time) bool {
	if d <= 0 {
		return nil
	}
	return func(ctx context.Context, since time.Time) bool {
		if *f == nil {
			return false
		}
		ctx, cancel := context.WithTimeout(ctx, d)
		defer cancel()
		return (*f).WaitEnd(ctx, since) == nil
	}
}

// servePprof adds Go's /debug/pprof/ handlers (STACKSTREAM_SYMBOLIZER_DEBUG_PPROF).
func servePprof(mux *http.ServeMux) {
	mux.HandleFunc("GET /debug/pprof/", pprof.Index)
	mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
}
