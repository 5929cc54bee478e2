// Command stackstream-query serves the query API and the web UI over the
// OpenSearch indices written by the indexer and the rollup service.
package main

import (
	"context"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/stackstream/stackstream/pkg/config"
	"github.com/stackstream/stackstream/pkg/opensearch"
	"github.com/stackstream/stackstream/pkg/service"
	"github.com/stackstream/stackstream/pkg/telemetry"
	"github.com/stackstream/stackstream/pkg/version"
	"github.com/stackstream/stackstream/services/query/internal/api"
	"github.com/stackstream/stackstream/services/query/internal/server"
)

func main() {
	config.Exit("stackstream-query", runMain())
}

func runMain() error {
	var cfg Config
	logger, reg, err := service.Start("query", &cfg, os.Args[1:])
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cl, err := opensearch.NewClient(ctx, cfg.OpenSearch)
	if err != nil {
		return err
	}
	allowed := server.DefaultAllowedHosts(cfg.ListenAddr)
	if cfg.AllowedHosts != "" {
		allowed, _ = server.ParseAllowedHosts(cfg.AllowedHosts) // checked by Validate
	}
	if slices.Contains(allowed, "*") {
		logger.Warn("any Host header is served (STACKSTREAM_QUERY_ALLOWED_HOSTS=*): on a loopback or private address, pages of other sites can read the API through DNS rebinding")
	}
	maxConcurrent := cfg.MaxConcurrent
	if maxConcurrent == 0 {
		maxConcurrent = server.DefaultMaxConcurrent()
	}
	headCache := cfg.HeadCacheBytes
	if headCache == 0 {
		headCache = -1 // none kept (0 is the API's default)
	}
	handler := server.New(cl, cfg.Index.Names(), server.Options{
		API: api.Options{
			Timeout: cfg.Timeout, MaxRange: cfg.MaxRange, RawMaxRange: cfg.RawMaxRange,
			MaxStacks: cfg.MaxStacks, MaxEdgeStacks: cfg.MaxEdgeStacks, MaxNodes: cfg.MaxNodes, Version: version.Version, Now: time.Now,
			HeadCacheBytes: headCache,
		},
		UI:        uiHandler(),
		AuthToken: cfg.AuthToken, BasicUser: cfg.BasicUser, BasicPassword: cfg.BasicPassword,
		AllowedHosts: allowed, MaxConcurrent: maxConcurrent, QueueWait: cfg.QueueWait,
	}, reg, logger)
	srv, err := telemetry.ListenServer(cfg.ListenAddr, server.HTTPServer(handler, cfg.Timeout, cfg.QueueWait))
	if err != nil {
		return err
	}
	logger.Info("serving", "addr", srv.Addr(), "auth", cfg.AuthToken != "" || cfg.BasicUser != "", "index_prefix", cfg.Index.Prefix,
		"allowed_hosts", strings.Join(allowed, ","), "max_concurrent", maxConcurrent)

	// The server is the only component: a signal stops it, draining requests.
	g := service.NewGroup(logger)
	g.Add(srv.Run, srv.Stop)
	return g.Run()
}
