package main

import (
	"fmt"
	"os"
	"regexp"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/stackstream/stackstream/pkg/config"
	"github.com/stackstream/stackstream/pkg/kafka"
	"github.com/stackstream/stackstream/pkg/service"
	"github.com/stackstream/stackstream/services/symbolizer/internal/source"
	"github.com/stackstream/stackstream/services/symbolizer/internal/symtab"
)

// Config of stackstream-symbolizer, from STACKSTREAM_* variables: the blocks
// every service shares, then its own.
type Config struct {
	service.Base
	kafka.Connection
	ListenAddr string     `envconfig:"LISTEN_ADDR" default:"127.0.0.1:9102" desc:"address of /metrics, /healthz, /readyz"`
	Symbolizer Symbolizer `envconfig:"SYMBOLIZER"`
}

// Symbolizer holds the settings of this service alone (STACKSTREAM_SYMBOLIZER_*).
type Symbolizer struct {
	Group              string        `envconfig:"GROUP" default:"stackstream-symbolizer" desc:"Kafka consumer group on profiles.raw"`
	TransactionalID    string        `envconfig:"TRANSACTIONAL_ID" desc:"Kafka transactional ID, unique per running instance and stable across its restarts (default stackstream-symbolizer-<hostname>)"`
	DebugDirs          []string      `envconfig:"DEBUG_DIRS" default:"/usr/lib/debug" desc:"directories with the .build-id/xx/rest.debug layout, comma separated; empty to disable"`
	DebuginfodURLs     string        `envconfig:"DEBUGINFOD_URLS" desc:"debuginfod servers, space separated (default: the DEBUGINFOD_URLS variable)"`
	DebuginfodTimeout  time.Duration `envconfig:"DEBUGINFOD_TIMEOUT" default:"60s" desc:"longest one debuginfod download may take"`
	DebuginfodMaxBytes int64         `envconfig:"DEBUGINFOD_MAX_BYTES" default:"536870912" desc:"largest file downloaded from debuginfod (to a temporary file); larger ones are an error and the binary's frames stay addresses"`
	MaxSectionBytes    int64         `envconfig:"MAX_SECTION_BYTES" default:"67108864" desc:"largest ELF section read, as inflated (compressed DWARF states its own size); a part of the table (symbols, DWARF, pclntab) with a larger section is left out"`
	MaxELFBytes        int64         `envconfig:"MAX_ELF_BYTES" default:"134217728" desc:"sections read from one ELF file together, as inflated; parts past it are left out"`
	MaxTables          int           `envconfig:"MAX_TABLES" default:"512" desc:"symbol tables (one per binary) kept in memory"`
	MaxTableBytes      int           `envconfig:"MAX_TABLE_BYTES" default:"134217728" desc:"estimated memory of the symbol tables kept; least recently used go first"`
	TopicCacheBytes    int           `envconfig:"TOPIC_CACHE_BYTES" default:"134217728" desc:"bytes of compressed debuginfo topic values (and markers) kept in memory; least recently used go first"`
	MissTTL            time.Duration `envconfig:"MISS_TTL" default:"5m" desc:"how long a build ID that no source has is not asked for again"`
	MaxMisses          int           `envconfig:"MAX_MISSES" default:"65536" desc:"build IDs remembered as missing; the oldest are forgotten first"`
	LookupConcurrency  int           `envconfig:"LOOKUP_CONCURRENCY" default:"4" desc:"debug info fetches (all sources) running at once"`
	LookupBudget       time.Duration `envconfig:"LOOKUP_BUDGET" default:"5s" desc:"longest one record waits for the debug info of its binaries; frames of binaries not found in time keep their addresses (the fetch goes on and serves later records)"`
	BatchLookupBudget  time.Duration `envconfig:"BATCH_LOOKUP_BUDGET" default:"15s" desc:"longest the records of one poll wait for debug info together; the rest of the poll is symbolized from what is cached"`
	LookupTimeout      time.Duration `envconfig:"LOOKUP_TIMEOUT" default:"2m" desc:"longest one fetch of a build ID through every source may take"`
	DebuginfoWait      time.Duration `envconfig:"DEBUGINFO_WAIT" default:"2s" desc:"on a miss, longest wait for the debuginfo follower to read the topic up to its end as of the miss, before asking the topic again; 0 to not wait"`
	SessionTimeout     time.Duration `envconfig:"SESSION_TIMEOUT" default:"45s" desc:"how long a crashed instance keeps its partitions (within the broker's group.min/max.session.timeout.ms)"`
	MaxPollRecords     int           `envconfig:"MAX_POLL_RECORDS" default:"200" desc:"records per transaction at most"`
	MaxOutputBytes     int           `envconfig:"MAX_OUTPUT_BYTES" default:"999000" desc:"largest symbolized record value: a profile larger uncompressed (stored gzip) is gzip-compressed, one still larger goes to the DLQ (keep under the topic's max.message.bytes)"`
	MemoryLimit        int64         `envconfig:"MEMORY_LIMIT" default:"536870912" desc:"soft limit of the Go heap in bytes (GOMEMLIMIT wins when set); 0 for none"`
	BatchCompression   string        `envconfig:"BATCH_COMPRESSION" default:"snappy" desc:"codec of the record batches written to profiles.symbolized: snappy (cheapest to write, as cheap as lz4 to read), lz4, zstd (about a quarter smaller on the broker) or none"`
	DebugPprof         bool          `envconfig:"DEBUG_PPROF" default:"false" desc:"serve Go's /debug/pprof/ (heap, CPU, goroutines) on the listen address, for finding where CPU and memory go; off by default"`
}

// BatchCodec is the franz-go codec named by BatchCompression.
func (s Symbolizer) BatchCodec() (kgo.CompressionCodec, error) {
	switch s.BatchCompression {
	case "lz4":
		return kgo.Lz4Compression(), nil
	case "zstd":
		return kgo.ZstdCompression(), nil
	case "snappy":
		return kgo.SnappyCompression(), nil
	case "none":
		return kgo.NoCompression(), nil
	}
	return kgo.CompressionCodec{}, fmt.Errorf("STACKSTREAM_SYMBOLIZER_BATCH_COMPRESSION=%q: use snappy, lz4, zstd or none", s.BatchCompression)
}

var transactionalIDPattern = regexp.MustCompile(`^[A-Za-z0-9._-]{1,249}$`)

// Validate checks values that parse but cannot work.
func (c Config) Validate() error {
	if err := config.ValidateAll(c.Base, c.Connection); err != nil {
		return err
	}
	s := c.Symbolizer
	switch {
	case s.Group == "":
		return fmt.Errorf("STACKSTREAM_SYMBOLIZER_GROUP is empty: name the consumer group")
	case s.TransactionalID != "" && !transactionalIDPattern.MatchString(s.TransactionalID):
		return fmt.Errorf("STACKSTREAM_SYMBOLIZER_TRANSACTIONAL_ID=%q: use letters, digits, '.', '_' and '-'", s.TransactionalID)
	case s.DebuginfodTimeout <= 0:
		return fmt.Errorf("STACKSTREAM_SYMBOLIZER_DEBUGINFOD_TIMEOUT=%s must be positive", s.DebuginfodTimeout)
	case s.MaxTables < 1:
		return fmt.Errorf("STACKSTREAM_SYMBOLIZER_MAX_TABLES=%d must be at least 1", s.MaxTables)
	case s.MaxTableBytes < 1<<20:
		return fmt.Errorf("STACKSTREAM_SYMBOLIZER_MAX_TABLE_BYTES=%d is too small: use at least 1048576", s.MaxTableBytes)
	case s.DebuginfodMaxBytes < 1<<20:
		return fmt.Errorf("STACKSTREAM_SYMBOLIZER_DEBUGINFOD_MAX_BYTES=%d is too small: use at least 1048576", s.DebuginfodMaxBytes)
	case s.MaxSectionBytes < 1<<20:
		return fmt.Errorf("STACKSTREAM_SYMBOLIZER_MAX_SECTION_BYTES=%d is too small: use at least 1048576", s.MaxSectionBytes)
	case s.MaxELFBytes < s.MaxSectionBytes:
		return fmt.Errorf("STACKSTREAM_SYMBOLIZER_MAX_ELF_BYTES=%d is smaller than STACKSTREAM_SYMBOLIZER_MAX_SECTION_BYTES=%d: use at least that", s.MaxELFBytes, s.MaxSectionBytes)
	case s.TopicCacheBytes < 1<<20:
		return fmt.Errorf("STACKSTREAM_SYMBOLIZER_TOPIC_CACHE_BYTES=%d is too small: use at least 1048576", s.TopicCacheBytes)
	case s.SessionTimeout < time.Second:
		return fmt.Errorf("STACKSTREAM_SYMBOLIZER_SESSION_TIMEOUT=%s is too short: use at least 6s (the broker's default minimum)", s.SessionTimeout)
	case s.MissTTL < 0:
		return fmt.Errorf("STACKSTREAM_SYMBOLIZER_MISS_TTL=%s must not be negative", s.MissTTL)
	case s.MaxMisses < 1:
		return fmt.Errorf("STACKSTREAM_SYMBOLIZER_MAX_MISSES=%d must be at least 1", s.MaxMisses)
	case s.LookupConcurrency < 1 || s.LookupConcurrency > 256:
		return fmt.Errorf("STACKSTREAM_SYMBOLIZER_LOOKUP_CONCURRENCY=%d: use 1 to 256", s.LookupConcurrency)
	case s.LookupBudget <= 0:
		return fmt.Errorf("STACKSTREAM_SYMBOLIZER_LOOKUP_BUDGET=%s must be positive", s.LookupBudget)
	case s.BatchLookupBudget < s.LookupBudget:
		return fmt.Errorf("STACKSTREAM_SYMBOLIZER_BATCH_LOOKUP_BUDGET=%s is shorter than STACKSTREAM_SYMBOLIZER_LOOKUP_BUDGET=%s: use at least that", s.BatchLookupBudget, s.LookupBudget)
	case s.LookupTimeout <= 0:
		return fmt.Errorf("STACKSTREAM_SYMBOLIZER_LOOKUP_TIMEOUT=%s must be positive", s.LookupTimeout)
	case s.DebuginfoWait < 0 || s.DebuginfoWait > time.Minute:
		return fmt.Errorf("STACKSTREAM_SYMBOLIZER_DEBUGINFO_WAIT=%s: use 0 to 1m", s.DebuginfoWait)
	case s.MaxPollRecords < 1:
		return fmt.Errorf("STACKSTREAM_SYMBOLIZER_MAX_POLL_RECORDS=%d must be at least 1", s.MaxPollRecords)
	case s.MemoryLimit < 0:
		return fmt.Errorf("STACKSTREAM_SYMBOLIZER_MEMORY_LIMIT=%d: use 0 (none) or a number of bytes", s.MemoryLimit)
	case s.MaxOutputBytes < 1<<10:
		return fmt.Errorf("STACKSTREAM_SYMBOLIZER_MAX_OUTPUT_BYTES=%d is too small: use at least 1024", s.MaxOutputBytes)
	}
	if _, err := s.BatchCodec(); err != nil {
		return err
	}
	if _, err := source.ParseURLs(c.DebuginfodURLList()); err != nil {
		return fmt.Errorf("STACKSTREAM_SYMBOLIZER_DEBUGINFOD_URLS / DEBUGINFOD_URLS: %w", err)
	}
	return nil
}

// ELFLimits are the limits of reading one ELF file.
func (s Symbolizer) ELFLimits() symtab.Limits {
	return symtab.Limits{MaxSectionBytes: s.MaxSectionBytes, MaxFileBytes: s.MaxELFBytes}
}

// DebuginfodURLList is the configured server list, falling back to the
// DEBUGINFOD_URLS convention of elfutils and gdb.
func (c Config) DebuginfodURLList() string {
	if c.Symbolizer.DebuginfodURLs != "" {
		return c.Symbolizer.DebuginfodURLs
	}
	return os.Getenv("DEBUGINFOD_URLS")
}

// TxnID is the configured transactional ID or one derived from the host
// name, which is stable across restarts of the instance on that host (a
// restart then fences the crashed instance's open transaction).
func (c Config) TxnID() (string, error) {
	if c.Symbolizer.TransactionalID != "" {
		return c.Symbolizer.TransactionalID, nil
	}
	host, err := os.Hostname()
	if err != nil {
		return "", fmt.Errorf("read host name for the transactional ID (set STACKSTREAM_SYMBOLIZER_TRANSACTIONAL_ID): %w", err)
	}
	host = strings.Map(func(r rune) rune {
		if r == '.' || r == '_' || r == '-' || ('a' <= r && r <= 'z') || ('A' <= r && r <= 'Z') || ('0' <= r && r <= '9') {
			return r
		}
		return '-'
	}, host)
	return "stackstream-symbolizer-" + host, nil
}

// Dirs is DebugDirs without empty entries.
func (c Config) Dirs() []string {
	var out []string
	for _, d := range c.Symbolizer.DebugDirs {
		if d = strings.TrimSpace(d); d != "" {
			out = append(out, d)
		}
	}
	return out
}
