package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stackstream/stackstream/pkg/kafka"
	"github.com/stackstream/stackstream/pkg/service"
	"github.com/stackstream/stackstream/pkg/telemetry"
	"github.com/stackstream/stackstream/services/symbolizer/internal/source"
)

func valid() Config {
	return Config{
		Base:       service.Base{Log: telemetry.LogConfig{Level: "info", Format: "text"}},
		Connection: kafka.Connection{Kafka: kafka.Config{Brokers: []string{"127.0.0.1:9092"}, TopicPrefix: "stackstream."}},
		ListenAddr: "127.0.0.1:9102",
		Symbolizer: Symbolizer{
			Group: "stackstream-symbolizer", DebugDirs: []string{"/usr/lib/debug"}, DebuginfodTimeout: time.Minute,
			MaxTables: 512, TopicCacheBytes: 512 << 20, SessionTimeout: 45 * time.Second, MissTTL: 5 * time.Minute,
			MaxPollRecords: 200, MaxOutputBytes: 999000, BatchCompression: "snappy",
			MaxMisses: 1 << 16, LookupConcurrency: 4, LookupBudget: 5 * time.Second, BatchLookupBudget: 15 * time.Second, LookupTimeout: 2 * time.Minute, DebuginfoWait: 2 * time.Second,
			MaxTableBytes: 256 << 20, DebuginfodMaxBytes: 512 << 20, MaxSectionBytes: 64 << 20, MaxELFBytes: 128 << 20,
		},
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name   string
		change func(*Config)
		want   string // substring of the error; "" for valid
	}{
		{"defaults", func(*Config) {}, ""},
		{"no group", func(c *Config) { c.Symbolizer.Group = "" }, "STACKSTREAM_SYMBOLIZER_GROUP"},
		{"bad transactional id", func(c *Config) { c.Symbolizer.TransactionalID = "a b" }, "STACKSTREAM_SYMBOLIZER_TRANSACTIONAL_ID"},
		{"short session", func(c *Config) { c.Symbolizer.SessionTimeout = time.Millisecond }, "SESSION_TIMEOUT"},
		{"tiny output", func(c *Config) { c.Symbolizer.MaxOutputBytes = 10 }, "MAX_OUTPUT_BYTES"},
		{"negative memory limit", func(c *Config) { c.Symbolizer.MemoryLimit = -1 }, "MEMORY_LIMIT"},
		{"no tables", func(c *Config) { c.Symbolizer.MaxTables = 0 }, "MAX_TABLES"},
		{"zstd batches", func(c *Config) { c.Symbolizer.BatchCompression = "zstd" }, ""},
		{"unknown codec", func(c *Config) { c.Symbolizer.BatchCompression = "brotli" }, "STACKSTREAM_SYMBOLIZER_BATCH_COMPRESSION"},
		{"bad debuginfod url", func(c *Config) { c.Symbolizer.DebuginfodURLs = "ftp://x" }, "debuginfod URL"},
		{"two debuginfod urls", func(c *Config) { c.Symbolizer.DebuginfodURLs = "http://a:8002 https://b/x/" }, ""},
		{"no brokers", func(c *Config) { c.Kafka.Brokers = nil }, "STACKSTREAM_KAFKA_BROKERS"},
		{"tiny table bytes", func(c *Config) { c.Symbolizer.MaxTableBytes = 10 }, "STACKSTREAM_SYMBOLIZER_MAX_TABLE_BYTES"},
		{"tiny downloads", func(c *Config) { c.Symbolizer.DebuginfodMaxBytes = 10 }, "STACKSTREAM_SYMBOLIZER_DEBUGINFOD_MAX_BYTES"},
		{"tiny sections", func(c *Config) { c.Symbolizer.MaxSectionBytes = 10 }, "STACKSTREAM_SYMBOLIZER_MAX_SECTION_BYTES"},
		{"no lookups", func(c *Config) { c.Symbolizer.LookupConcurrency = 0 }, "STACKSTREAM_SYMBOLIZER_LOOKUP_CONCURRENCY"},
		{"no budget", func(c *Config) { c.Symbolizer.LookupBudget = 0 }, "STACKSTREAM_SYMBOLIZER_LOOKUP_BUDGET"},
		{"batch budget below record budget", func(c *Config) { c.Symbolizer.BatchLookupBudget = time.Second }, "STACKSTREAM_SYMBOLIZER_BATCH_LOOKUP_BUDGET"},
		{"no misses", func(c *Config) { c.Symbolizer.MaxMisses = 0 }, "STACKSTREAM_SYMBOLIZER_MAX_MISSES"},
		{"long wait", func(c *Config) { c.Symbolizer.DebuginfoWait = time.Hour }, "STACKSTREAM_SYMBOLIZER_DEBUGINFO_WAIT"},
		{"file below section", func(c *Config) { c.Symbolizer.MaxELFBytes = 2 << 20 }, "STACKSTREAM_SYMBOLIZER_MAX_ELF_BYTES"},
		{"debuginfod url with credentials", func(c *Config) { c.Symbolizer.DebuginfodURLs = "ftp://user:hunter2@x" }, "ftp://***@x"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := valid()
			tc.change(&c)
			err := c.Validate()
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("got %v, want an error naming %s", err, tc.want)
			}
		})
	}
}

func TestDebuginfodURLsFallBackToConvention(t *testing.T) {
	t.Setenv("DEBUGINFOD_URLS", "http://debuginfod.example:8002")
	c := valid()
	if got := c.DebuginfodURLList(); got != "http://debuginfod.example:8002" {
		t.Fatalf("got %q", got)
	}
	c.Symbolizer.DebuginfodURLs = "http://mine:1"
	if got := c.DebuginfodURLList(); got != "http://mine:1" {
		t.Fatalf("explicit setting lost to DEBUGINFOD_URLS: %q", got)
	}
}

func TestTxnIDFromHostname(t *testing.T) {
	c := valid()
	id, err := c.TxnID()
	if err != nil || !strings.HasPrefix(id, "stackstream-symbolizer-") || !transactionalIDPattern.MatchString(id) {
		t.Fatalf("got %q, %v", id, err)
	}
	c.Symbolizer.TransactionalID = "sym-1"
	if id, _ := c.TxnID(); id != "sym-1" {
		t.Fatalf("got %q", id)
	}
}

// TestChainOptions: every chain setting reaches the chain (MAX_MISSES,
// LOOKUP_TIMEOUT and DEBUGINFO_WAIT once did not), and DEBUGINFO_WAIT=0 turns
// the wait off.
func TestChainOptions(t *testing.T) {
	s := valid().Symbolizer
	s.MaxMisses, s.LookupTimeout, s.DebuginfoWait = 123, 45*time.Second, 3*time.Second
	var follower *source.Follower
	o := chainOptions(s, &follower, nil, source.Metrics{})
	if o.MaxTables != s.MaxTables || o.MaxTableBytes != s.MaxTableBytes || o.MissTTL != s.MissTTL || o.MaxMisses != 123 || o.LookupTimeout != 45*time.Second {
		t.Errorf("options %+v from settings %+v", o, s)
	}
	if o.WaitDebuginfo == nil {
		t.Fatal("DEBUGINFO_WAIT=3s: no wait")
	}
	// Without a follower yet, a miss is not waited for.
	if o.WaitDebuginfo(context.Background(), time.Now()) {
		t.Error("waited with no follower")
	}
	s.DebuginfoWait = 0
	if chainOptions(s, &follower, nil, source.Metrics{}).WaitDebuginfo != nil {
		t.Error("DEBUGINFO_WAIT=0 still waits")
	}
}
