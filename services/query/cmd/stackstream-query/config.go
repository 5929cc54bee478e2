package main

import (
	"errors"
	"fmt"
	"time"

	"github.com/stackstream/stackstream/pkg/config"
	"github.com/stackstream/stackstream/pkg/opensearch"
	"github.com/stackstream/stackstream/pkg/service"
	"github.com/stackstream/stackstream/services/query/internal/server"
)

// Config of stackstream-query, from STACKSTREAM_* variables: the blocks
// every service shares, then its own.
type Config struct {
	service.Base
	opensearch.Storage
	ListenAddr     string        `envconfig:"QUERY_LISTEN_ADDR" default:"127.0.0.1:8080" desc:"address of the API, UI and /metrics"`
	Timeout        time.Duration `envconfig:"QUERY_TIMEOUT" default:"30s" desc:"longest time one API request may take"`
	MaxRange       time.Duration `envconfig:"QUERY_MAX_RANGE" default:"744h" desc:"longest from..to range (31 days)"`
	RawMaxRange    time.Duration `envconfig:"QUERY_RAW_MAX_RANGE" default:"6h" desc:"longer flame graphs read the per-stack rollups instead of raw samples"`
	MaxStacks      int           `envconfig:"QUERY_MAX_STACKS" default:"50000" desc:"distinct stacks read per stack (label selectors, hours without trees); beyond it the heaviest are kept"`
	MaxEdgeStacks  int           `envconfig:"QUERY_MAX_EDGE_STACKS" default:"1000000" desc:"distinct stacks of the minutes around the whole hours read from trees, merged whole; beyond it the request fails (422) instead of leaving stacks out"`
	HeadCacheBytes int64         `envconfig:"QUERY_HEAD_CACHE_BYTES" default:"134217728" desc:"bytes of decoded fleet heads kept in memory by document version, so a flame graph asked again (now-24h) reads and decodes only the heads written since; 0 keeps none"`
	MaxNodes       int           `envconfig:"QUERY_MAX_NODES" default:"5000" desc:"default max_nodes of a flame graph"`
	AuthToken      string        `envconfig:"QUERY_AUTH_TOKEN" desc:"require this Bearer token on the API and UI; never logged"`
	BasicUser      string        `envconfig:"QUERY_BASIC_AUTH_USER" desc:"require HTTP basic auth with this user on the API and UI"`
	BasicPassword  string        `envconfig:"QUERY_BASIC_AUTH_PASSWORD" desc:"password of STACKSTREAM_QUERY_BASIC_AUTH_USER; never logged"`
	AllowedHosts   string        `envconfig:"QUERY_ALLOWED_HOSTS" desc:"Host header names served (any port), comma separated; * serves any (unsafe on loopback: DNS rebinding); default the listen host, localhost, 127.0.0.1, [::1] (and the machine's addresses when listening on all)"`
	MaxConcurrent  int           `envconfig:"QUERY_MAX_CONCURRENT" default:"0" desc:"API requests running at once; 0 is twice GOMAXPROCS, at least 4"`
	QueueWait      time.Duration `envconfig:"QUERY_QUEUE_WAIT" default:"2s" desc:"how long an API request waits for a free slot before a 503 with Retry-After"`
}

// maxHeadCacheBytes bounds STACKSTREAM_QUERY_HEAD_CACHE_BYTES: a value
// past it is a typo, not a cache.
const maxHeadCacheBytes = 16 << 30

// Validate checks values that parse but cannot work. The index settings
// (shards, replicas) are the writers' concern: the query only reads.
func (c Config) Validate() error {
	if err := config.ValidateAll(c.Base, c.OpenSearch); err != nil {
		return err
	}
	if c.Timeout <= 0 {
		return fmt.Errorf("STACKSTREAM_QUERY_TIMEOUT=%s must be positive", c.Timeout)
	}
	if c.MaxRange < time.Hour || c.MaxRange > 10*365*24*time.Hour {
		return fmt.Errorf("STACKSTREAM_QUERY_MAX_RANGE=%s must be from 1h to 87600h (10 years)", c.MaxRange)
	}
	if c.MaxStacks < 1 || c.MaxNodes < 1 {
		return fmt.Errorf("STACKSTREAM_QUERY_MAX_STACKS=%d and STACKSTREAM_QUERY_MAX_NODES=%d must be positive", c.MaxStacks, c.MaxNodes)
	}
	if c.MaxEdgeStacks < 1 {
		return fmt.Errorf("STACKSTREAM_QUERY_MAX_EDGE_STACKS=%d must be positive", c.MaxEdgeStacks)
	}
	if c.HeadCacheBytes < 0 || c.HeadCacheBytes > maxHeadCacheBytes {
		return fmt.Errorf("STACKSTREAM_QUERY_HEAD_CACHE_BYTES=%d must be from 0 (none kept) to %d (16 GiB)", c.HeadCacheBytes, int64(maxHeadCacheBytes))
	}
	if c.AllowedHosts != "" {
		if _, err := server.ParseAllowedHosts(c.AllowedHosts); err != nil {
			return err
		}
	}
	if c.MaxConcurrent < 0 || c.MaxConcurrent > 10000 {
		return fmt.Errorf("STACKSTREAM_QUERY_MAX_CONCURRENT=%d must be from 0 (twice GOMAXPROCS) to 10000", c.MaxConcurrent)
	}
	if c.QueueWait <= 0 || c.QueueWait > c.Timeout {
		return fmt.Errorf("STACKSTREAM_QUERY_QUEUE_WAIT=%s must be positive and at most STACKSTREAM_QUERY_TIMEOUT (%s)", c.QueueWait, c.Timeout)
	}
	if (c.BasicUser == "") != (c.BasicPassword == "") {
		return errors.New("set both STACKSTREAM_QUERY_BASIC_AUTH_USER and STACKSTREAM_QUERY_BASIC_AUTH_PASSWORD, or neither")
	}
	return nil
}
