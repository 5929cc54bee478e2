package main

import (
	"strings"
	"testing"
	"time"

	"github.com/stackstream/stackstream/pkg/opensearch"
)

func TestValidate(t *testing.T) {
	good := Config{Timeout: 30 * time.Second, MaxRange: 744 * time.Hour, MaxStacks: 1, MaxNodes: 1,
		OpenSearch: opensearch.Config{URLs: []string{"http://127.0.0.1:9200"}}}
	if err := good.Validate(); err != nil {
		t.Fatalf("defaults rejected: %v", err)
	}
	tests := []struct {
		name   string
		change func(*Config)
		want   string
	}{
		{"timeout", func(c *Config) { c.Timeout = 0 }, "STACKSTREAM_QUERY_TIMEOUT"},
		{"max range", func(c *Config) { c.MaxRange = time.Minute }, "STACKSTREAM_QUERY_MAX_RANGE"},
		{"max stacks", func(c *Config) { c.MaxStacks = 0 }, "STACKSTREAM_QUERY_MAX_STACKS"},
		{"basic user without password", func(c *Config) { c.BasicUser = "ann" }, "STACKSTREAM_QUERY_BASIC_AUTH_PASSWORD"},
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
