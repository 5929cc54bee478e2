package main

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/stackstream/stackstream/pkg/config"
	"github.com/stackstream/stackstream/pkg/kafka"
	"github.com/stackstream/stackstream/pkg/opensearch"
	"github.com/stackstream/stackstream/pkg/service"
	"github.com/stackstream/stackstream/services/rollup/internal/aggregate"
)

// Config of stackstream-rollup, from STACKSTREAM_* variables: the blocks
// every service shares, then its own.
type Config struct {
	service.Base
	kafka.Connection
	opensearch.Storage
	ListenAddr string   `envconfig:"LISTEN_ADDR" default:"127.0.0.1:9104" desc:"address of /metrics, /healthz, /readyz"`
	Rollup     Settings `envconfig:"ROLLUP"`
}

// Settings are the rollup's own, from STACKSTREAM_ROLLUP_*.
type Settings struct {
	Group               string        `envconfig:"GROUP" default:"stackstream-rollup" desc:"consumer group on profiles.symbolized"`
	AllowedLateness     time.Duration `envconfig:"ALLOWED_LATENESS" default:"2m" desc:"a window is written once the partition's newest event time passes its end by this much"`
	Retention           time.Duration `envconfig:"RETENTION" default:"10m" desc:"a written window stays in memory this long for late profiles; later ones go to the DLQ"`
	MaxClockSkew        time.Duration `envconfig:"MAX_CLOCK_SKEW" default:"10m" desc:"profiles stamped further ahead of this host's clock go to the DLQ"`
	MaxAge              time.Duration `envconfig:"MAX_AGE" default:"168h" desc:"profiles older than this (wall clock) go to the DLQ; keep it at STACKSTREAM_INDEXER_RETENTION_DAYS; 0 accepts any past time"`
	MaxStateBytes       int64         `envconfig:"MAX_STATE_BYTES" default:"0" desc:"window state held in memory; a profile that would pass it goes to the DLQ (state_full); 0 takes 3/8 of the memory limit of the rollup's cgroup (container or systemd MemoryMax=), or without one 1/8 of the host's memory, at least 268435456"`
	StackCacheBytes     int64         `envconfig:"STACK_CACHE_BYTES" default:"67108864" desc:"bound of the stack cache (the IDs and frames of stacks seen, so that a stack is named and hashed once), within MAX_STATE_BYTES and giving way to the window state; the stacks unused the longest go first"`
	MaxPollRecords      int           `envconfig:"MAX_POLL_RECORDS" default:"1000" desc:"records folded in between two writes"`
	FlushTimeout        time.Duration `envconfig:"FLUSH_TIMEOUT" default:"30s" desc:"bound of the final write on shutdown or partition revoke"`
	IdleFlush           time.Duration `envconfig:"IDLE_FLUSH" default:"1m" desc:"write the open windows of a partition without records for this long; 0 disables"`
	SnapshotEvery       time.Duration `envconfig:"SNAPSHOT_INTERVAL" default:"5m" desc:"store each partition's window state this often (and on shutdown and revoke) in the topic <prefix>rollup-state.<group>, so that a restarted or rebalanced instance reads on from it instead of reading up to 1h15m of records again; 0 disables"`
	BulkMaxBytes        int           `envconfig:"BULK_MAX_BYTES" default:"8388608" desc:"bytes per bulk request"`
	MinuteDays          int           `envconfig:"MINUTE_RETENTION_DAYS" default:"14" desc:"delete minute rollups older than this many days (hourly ones stay); 0 keeps them"`
	HourlyDays          int           `envconfig:"HOURLY_RETENTION_DAYS" default:"90" desc:"delete monthly rollups indices whose month ended more than this many days ago; 0 keeps them"`
	LifecycleEvery      time.Duration `envconfig:"LIFECYCLE_INTERVAL" default:"1h" desc:"how often rollup retention runs (by the one instance that owns the symbolized topic's partition 0, as the fleet heads pass)"`
	FleetHeadsEvery     time.Duration `envconfig:"FLEET_HEADS_INTERVAL" default:"1m" desc:"how often the fleet heads of the 10-minute windows of the last 2 hours and of the minutes of the last 3 hours are written (the edges of fleet-wide ranges read them), and minute trees past STACKSTREAM_ROLLUP_MINUTE_TREE_RETENTION deleted; 0 leaves both to the lifecycle pass"`
	MinuteTrees         bool          `envconfig:"MINUTE_TREES" default:"true" desc:"also write a partition tree per minute (10-minute ones are always written), from which the fleet's minute heads are written: the query then reads the minutes at the ends of long fleet-wide ranges from heads or trees, not per stack; about a byte per raw sample on disk while kept (STACKSTREAM_ROLLUP_MINUTE_TREE_RETENTION)"`
	MinuteTreeRetention time.Duration `envconfig:"MINUTE_TREE_RETENTION" default:"2h" desc:"delete minute partition trees (and per-partition minute heads) of minutes older than this, once the fleet's minute heads are written (those stay with the minute rollups); at least a minute + ALLOWED_LATENESS + RETENTION + FLEET_HEADS_INTERVAL (LIFECYCLE_INTERVAL when that is 0); 0 keeps them as long as the minute rollups"`
	WindowHeads         bool          `envconfig:"WINDOW_HEADS" default:"false" desc:"also write a head (its 20,000 heaviest nodes) beside each minute and 10-minute partition tree of more than 80,000 nodes: the query then proves fleet-wide ranges' edges from heads at max_nodes up to about 3,000 instead of merging whole trees; costs about 0.11 bytes per raw sample on disk at 40 hosts (less for larger fleets) and the CPU of building and deflating each head"`
	DebugPprof          bool          `envconfig:"DEBUG_PPROF" default:"false" desc:"serve Go's /debug/pprof/ (heap, CPU, goroutines) on the listen address, for finding where memory goes; off by default"`
}

// Validate checks values that parse but cannot work.
func (c Config) Validate() error {
	if err := config.ValidateAll(c.Base, c.Connection, c.Storage); err != nil {
		return err
	}
	if err := c.Index.CheckGroup("STACKSTREAM_ROLLUP_GROUP", c.Rollup.Group); err != nil {
		return err
	}
	s := c.Rollup
	switch {
	case strings.TrimSpace(s.Group) == "":
		return errors.New("STACKSTREAM_ROLLUP_GROUP is empty: name the consumer group")
	case s.AllowedLateness < 0:
		return fmt.Errorf("STACKSTREAM_ROLLUP_ALLOWED_LATENESS=%s is negative: use 0 or more, e.g. 2m", s.AllowedLateness)
	case s.Retention < 0:
		return fmt.Errorf("STACKSTREAM_ROLLUP_RETENTION=%s is negative: use 0 or more, e.g. 10m", s.Retention)
	case s.MaxClockSkew <= 0:
		return fmt.Errorf("STACKSTREAM_ROLLUP_MAX_CLOCK_SKEW=%s must be positive, e.g. 10m", s.MaxClockSkew)
	case s.MaxAge < 0:
		return fmt.Errorf("STACKSTREAM_ROLLUP_MAX_AGE=%s is negative: use 0 (any past time) or more, e.g. 168h", s.MaxAge)
	case s.MaxStateBytes != 0 && s.MaxStateBytes < 16<<20:
		return fmt.Errorf("STACKSTREAM_ROLLUP_MAX_STATE_BYTES=%d is below 16 MiB: use 0 (from the memory limit) or e.g. 268435456", s.MaxStateBytes)
	case s.StackCacheBytes < 1<<20:
		return fmt.Errorf("STACKSTREAM_ROLLUP_STACK_CACHE_BYTES=%d is below 1 MiB: use e.g. 67108864", s.StackCacheBytes)
	case s.MaxStateBytes != 0 && s.StackCacheBytes > s.MaxStateBytes:
		return fmt.Errorf("STACKSTREAM_ROLLUP_STACK_CACHE_BYTES=%d is more than STACKSTREAM_ROLLUP_MAX_STATE_BYTES=%d, which it is part of: use less", s.StackCacheBytes, s.MaxStateBytes)
	case s.MinuteDays < 0 || s.HourlyDays < 0:
		return fmt.Errorf("STACKSTREAM_ROLLUP_MINUTE_RETENTION_DAYS=%d, STACKSTREAM_ROLLUP_HOURLY_RETENTION_DAYS=%d: use 0 (keep) or a number of days", s.MinuteDays, s.HourlyDays)
	case s.HourlyDays > 0 && (s.MinuteDays == 0 || s.MinuteDays > s.HourlyDays):
		return fmt.Errorf("STACKSTREAM_ROLLUP_MINUTE_RETENTION_DAYS=%d is longer than STACKSTREAM_ROLLUP_HOURLY_RETENTION_DAYS=%d: minute rollups go first (the hours are built from them)", s.MinuteDays, s.HourlyDays)
	case s.LifecycleEvery <= 0:
		return fmt.Errorf("STACKSTREAM_ROLLUP_LIFECYCLE_INTERVAL=%s must be positive, e.g. 1h", s.LifecycleEvery)
	case s.FleetHeadsEvery < 0:
		return fmt.Errorf("STACKSTREAM_ROLLUP_FLEET_HEADS_INTERVAL=%s is negative: use 0 (with the lifecycle pass) or more, e.g. 1m", s.FleetHeadsEvery)
	case s.MinuteTreeRetention < 0:
		return fmt.Errorf("STACKSTREAM_ROLLUP_MINUTE_TREE_RETENTION=%s is negative: use 0 (keep them with the minute rollups) or more, e.g. 2h", s.MinuteTreeRetention)
	case s.MinuteTreeRetention > 0 && s.MinuteTreeRetention < s.minuteHeadsWritten():
		return fmt.Errorf("STACKSTREAM_ROLLUP_MINUTE_TREE_RETENTION=%s is shorter than the %s a minute's trees must last for its fleet head to be written from them "+
			"(a minute + STACKSTREAM_ROLLUP_ALLOWED_LATENESS + STACKSTREAM_ROLLUP_RETENTION + STACKSTREAM_ROLLUP_FLEET_HEADS_INTERVAL, or STACKSTREAM_ROLLUP_LIFECYCLE_INTERVAL when that is 0): use at least that, e.g. 2h, or 0 to keep them",
			s.MinuteTreeRetention, s.minuteHeadsWritten())
	case s.MaxPollRecords <= 0:
		return fmt.Errorf("STACKSTREAM_ROLLUP_MAX_POLL_RECORDS=%d must be positive, e.g. 1000", s.MaxPollRecords)
	case s.IdleFlush < 0:
		return fmt.Errorf("STACKSTREAM_ROLLUP_IDLE_FLUSH=%s is negative: use 0 (off) or more, e.g. 1m", s.IdleFlush)
	case s.SnapshotEvery < 0:
		return fmt.Errorf("STACKSTREAM_ROLLUP_SNAPSHOT_INTERVAL=%s is negative: use 0 (off) or more, e.g. 5m", s.SnapshotEvery)
	case s.FlushTimeout <= 0:
		return fmt.Errorf("STACKSTREAM_ROLLUP_FLUSH_TIMEOUT=%s must be positive, e.g. 30s", s.FlushTimeout)
	case s.BulkMaxBytes < 1<<20:
		return fmt.Errorf("STACKSTREAM_ROLLUP_BULK_MAX_BYTES=%d is below 1 MiB: use e.g. 8388608", s.BulkMaxBytes)
	}
	return nil
}

// minuteHeadsWritten is how long after a minute starts the compactor has
// written its fleet head from its last trees: the minute ends, the
// rollup writes its trees once the watermark passes the end by the
// allowed lateness, rewrites them for late profiles while the window is
// retained, and the pass that writes heads runs within its interval.
func (s Settings) minuteHeadsWritten() time.Duration {
	every := s.FleetHeadsEvery
	if every == 0 {
		every = s.LifecycleEvery
	}
	return time.Minute + s.AllowedLateness + s.Retention + every
}

// StateBudget is the window state's bound: MaxStateBytes when set, else 3/8
// of the cgroup's memory limit, at least 64 MiB: the rollup's RSS runs at
// about 1.55 times its charged state, the hour's write included
// (docs/ROLLUP.md "Sizing the budget"), and one profile's decode may take
// up to 360 MiB more, so 1 GiB holds 384 MiB of state. Without a limit, an
// eighth of the host's memory (total, 0 when unknown), at least
// aggregate.DefaultMaxStateBytes: the host is shared (Kafka and OpenSearch
// may run beside it), as a JVM takes a quarter of it for its heap by
// default; 24 GiB give 3 GiB, what 500 loadgen hosts on one instance took
// at the end of an hour. from says which.
func (s Settings) StateBudget(limit int64, limited bool, total int64) (budget int64, from string) {
	switch {
	case s.MaxStateBytes > 0:
		return s.MaxStateBytes, "STACKSTREAM_ROLLUP_MAX_STATE_BYTES"
	case limited:
		return max(limit/8*3, 64<<20), "3/8 of the cgroup memory limit"
	case total/8 > aggregate.DefaultMaxStateBytes:
		return total / 8, "1/8 of the host's memory, no cgroup memory limit"
	}
	return aggregate.DefaultMaxStateBytes, "default, no cgroup memory limit"
}
