package main

import (
	"fmt"
	"time"

	"github.com/stackstream/stackstream/pkg/config"
	"github.com/stackstream/stackstream/pkg/kafka"
	"github.com/stackstream/stackstream/pkg/opensearch"
	"github.com/stackstream/stackstream/pkg/service"
)

// Config of stackstream-indexer, from STACKSTREAM_* variables: the blocks
// every service shares, then its own.
type Config struct {
	service.Base
	kafka.Connection
	opensearch.Storage
	ListenAddr string  `envconfig:"LISTEN_ADDR" default:"127.0.0.1:9103" desc:"address of /metrics, /healthz, /readyz"`
	Indexer    Indexer `envconfig:"INDEXER"`
}

// Indexer holds the settings of this service alone (STACKSTREAM_INDEXER_*).
type Indexer struct {
	Group             string        `envconfig:"GROUP" default:"stackstream-indexer" desc:"Kafka consumer group"`
	BatchBytes        int           `envconfig:"BATCH_BYTES" default:"8388608" desc:"documents per batch (bytes) before a write and commit"`
	FlushInterval     time.Duration `envconfig:"FLUSH_INTERVAL" default:"1s" desc:"longest a record waits in a batch"`
	BulkMaxBytes      int           `envconfig:"BULK_MAX_BYTES" default:"8388608" desc:"body size of one bulk request"`
	MaxInFlight       int           `envconfig:"MAX_IN_FLIGHT" default:"4" desc:"batches written to OpenSearch at once (their commits stay in order)"`
	InFlightBytes     int           `envconfig:"IN_FLIGHT_BYTES" default:"33554432" desc:"documents of the batches being written, together (bytes); at least BATCH_BYTES"`
	ShutdownTimeout   time.Duration `envconfig:"SHUTDOWN_TIMEOUT" default:"30s" desc:"how long the last batch may take to be stored on shutdown"`
	RetentionDays     int           `envconfig:"RETENTION_DAYS" default:"7" desc:"delete daily samples indices older than this many days; 0 keeps them"`
	StacksDays        int           `envconfig:"STACKS_RETENTION_DAYS" default:"91" desc:"delete stacks no profile used for this many days; keep it above every retention of the indices that refer to stacks (samples, and the rollups' STACKSTREAM_ROLLUP_HOURLY_RETENTION_DAYS, 90); 0 keeps them, as does RETENTION_DAYS=0"`
	RetentionInterval time.Duration `envconfig:"RETENTION_INTERVAL" default:"1h" desc:"how often retention runs"`
	MergeAfter        time.Duration `envconfig:"MERGE_AFTER" default:"1h" desc:"force-merge a daily samples index to one segment this long after its day ended; 0 never"`
	Workers           int           `envconfig:"WORKERS" default:"0" desc:"profiles decoded in parallel; 0 is one per CPU"`
	MaxClockSkew      time.Duration `envconfig:"MAX_CLOCK_SKEW" default:"10m" desc:"profiles stamped later than now plus this go to the DLQ (time_out_of_range), as do those older than the retention"`
	StackCacheSize    int           `envconfig:"STACK_CACHE_SIZE" default:"1048576" desc:"stack IDs remembered as stored today, so that their documents are not sent again; 24-43 bytes each, in two generations of half as many (the older dropped when the newer is full); 0 remembers none"`
	DebugPprof        bool          `envconfig:"DEBUG_PPROF" default:"false" desc:"serve Go's /debug/pprof/ (heap, CPU, goroutines) on the listen address, for finding where CPU and memory go; off by default"`
}

// Validate checks values that parse but cannot work.
func (c Config) Validate() error {
	if err := config.ValidateAll(c.Base, c.Connection, c.Storage); err != nil {
		return err
	}
	i := c.Indexer
	if err := c.Index.CheckGroup("STACKSTREAM_INDEXER_GROUP", i.Group); err != nil {
		return err
	}
	switch {
	case i.Group == "":
		return fmt.Errorf("STACKSTREAM_INDEXER_GROUP is empty: name the consumer group")
	case i.BatchBytes < 1<<10:
		return fmt.Errorf("STACKSTREAM_INDEXER_BATCH_BYTES=%d is too small: use at least 1024 (default 8388608)", i.BatchBytes)
	case i.BulkMaxBytes < 1<<10:
		return fmt.Errorf("STACKSTREAM_INDEXER_BULK_MAX_BYTES=%d is too small: use at least 1024 (default 8388608)", i.BulkMaxBytes)
	case i.BulkMaxBytes > 100<<20:
		return fmt.Errorf("STACKSTREAM_INDEXER_BULK_MAX_BYTES=%d exceeds OpenSearch's default http.max_content_length of 100 MiB", i.BulkMaxBytes)
	case i.MaxInFlight < 1 || i.MaxInFlight > 64:
		return fmt.Errorf("STACKSTREAM_INDEXER_MAX_IN_FLIGHT=%d: use 1 to 64 (default 4)", i.MaxInFlight)
	case i.InFlightBytes < i.BatchBytes:
		return fmt.Errorf("STACKSTREAM_INDEXER_IN_FLIGHT_BYTES=%d is below STACKSTREAM_INDEXER_BATCH_BYTES=%d: use at least one batch (default 33554432)", i.InFlightBytes, i.BatchBytes)
	case i.FlushInterval <= 0:
		return fmt.Errorf("STACKSTREAM_INDEXER_FLUSH_INTERVAL=%s must be positive", i.FlushInterval)
	case i.ShutdownTimeout <= 0:
		return fmt.Errorf("STACKSTREAM_INDEXER_SHUTDOWN_TIMEOUT=%s must be positive", i.ShutdownTimeout)
	case i.RetentionDays < 0:
		return fmt.Errorf("STACKSTREAM_INDEXER_RETENTION_DAYS=%d must be 0 (keep) or positive", i.RetentionDays)
	case i.StacksDays < 0 || (i.StacksDays > 0 && i.RetentionDays > 0 && i.StacksDays <= i.RetentionDays):
		return fmt.Errorf("STACKSTREAM_INDEXER_STACKS_RETENTION_DAYS=%d: use 0 (keep), or more days than STACKSTREAM_INDEXER_RETENTION_DAYS=%d (samples refer to stacks)", i.StacksDays, i.RetentionDays)
	case i.MergeAfter < 0:
		return fmt.Errorf("STACKSTREAM_INDEXER_MERGE_AFTER=%s must be 0 (never) or positive", i.MergeAfter)
	case i.Workers < 0:
		return fmt.Errorf("STACKSTREAM_INDEXER_WORKERS=%d must be 0 (one per CPU) or positive", i.Workers)
	case i.MaxClockSkew <= 0:
		return fmt.Errorf("STACKSTREAM_INDEXER_MAX_CLOCK_SKEW=%s must be positive (default 10m)", i.MaxClockSkew)
	case i.StackCacheSize < 0:
		return fmt.Errorf("STACKSTREAM_INDEXER_STACK_CACHE_SIZE=%d must be 0 (remember none) or positive (default 1048576)", i.StackCacheSize)
	case i.RetentionInterval <= 0:
		return fmt.Errorf("STACKSTREAM_INDEXER_RETENTION_INTERVAL=%s must be positive", i.RetentionInterval)
	}
	return nil
}
