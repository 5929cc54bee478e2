package main

import (
	"strings"
	"testing"
	"time"

	"github.com/stackstream/stackstream/pkg/opensearch"
	"github.com/stackstream/stackstream/pkg/service"
	"github.com/stackstream/stackstream/pkg/telemetry"
)

func TestValidate(t *testing.T) {
	good := Config{Timeout: 30 * time.Second, MaxRange: 744 * time.Hour, MaxStacks: 1, MaxEdgeStacks: 1, MaxNodes: 1, QueueWait: 2 * time.Second,
		Base:    service.Base{Log: telemetry.LogConfig{Level: "info", Format: "text"}},
		Storage: opensearch.Storage{OpenSearch: opensearch.Config{URLs: []string{"http://127.0.0.1:9200"}}}}
	if err := good.Validate(); err != nil {
		t.Fatalf("defaults rejected: %v", err)
	}
	for _, hosts := range []string{"*", "profiler.example, [::1],10.0.0.1", "fd00::1"} {
		c := good
		c.AllowedHosts = hosts
		if err := c.Validate(); err != nil {
			t.Errorf("STACKSTREAM_QUERY_ALLOWED_HOSTS=%q rejected: %v", hosts, err)
		}
	}
	tests := []struct {
		name   string
		change func(*Config)
		want   string
	}{
		{"timeout", func(c *Config) { c.Timeout = 0 }, "STACKSTREAM_QUERY_TIMEOUT"},
		{"max range", func(c *Config) { c.MaxRange = time.Minute }, "STACKSTREAM_QUERY_MAX_RANGE"},
		{"max range past 10 years", func(c *Config) { c.MaxRange = 100 * 365 * 24 * time.Hour }, "STACKSTREAM_QUERY_MAX_RANGE"},
		{"max stacks", func(c *Config) { c.MaxStacks = 0 }, "STACKSTREAM_QUERY_MAX_STACKS"},
		{"max edge stacks", func(c *Config) { c.MaxEdgeStacks = 0 }, "STACKSTREAM_QUERY_MAX_EDGE_STACKS"},
		{"head cache negative", func(c *Config) { c.HeadCacheBytes = -1 }, "STACKSTREAM_QUERY_HEAD_CACHE_BYTES"},
		{"head cache past 16 GiB", func(c *Config) { c.HeadCacheBytes = 17 << 30 }, "STACKSTREAM_QUERY_HEAD_CACHE_BYTES"},
		{"basic user without password", func(c *Config) { c.BasicUser = "ann" }, "STACKSTREAM_QUERY_BASIC_AUTH_PASSWORD"},
		{"allowed host with a port", func(c *Config) { c.AllowedHosts = "localhost:8080" }, "STACKSTREAM_QUERY_ALLOWED_HOSTS"},
		{"allowed host not a name", func(c *Config) { c.AllowedHosts = "ok.example, bad/host" }, "STACKSTREAM_QUERY_ALLOWED_HOSTS"},
		{"allowed hosts empty list", func(c *Config) { c.AllowedHosts = " , " }, "STACKSTREAM_QUERY_ALLOWED_HOSTS"},
		{"max concurrent negative", func(c *Config) { c.MaxConcurrent = -1 }, "STACKSTREAM_QUERY_MAX_CONCURRENT"},
		{"queue wait zero", func(c *Config) { c.QueueWait = 0 }, "STACKSTREAM_QUERY_QUEUE_WAIT"},
		{"queue wait over the timeout", func(c *Config) { c.QueueWait = time.Minute }, "STACKSTREAM_QUERY_QUEUE_WAIT"},
		{"opensearch url", func(c *Config) { c.OpenSearch.URLs = []string{"localhost:9200"} }, "STACKSTREAM_OPENSEARCH_URL"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := good
			tc.change(&c)
			err := c.Validate()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Validate() = %v, want an error naming %s", err, tc.want)
			}
		})
	}
}
