package main

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/pprof/profile"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/stackstream/stackstream/pkg/config"
	"github.com/stackstream/stackstream/pkg/telemetry"
	"github.com/stackstream/stackstream/services/rollup/internal/aggregate"
)

func TestConfigRejectsBadValues(t *testing.T) {
	tests := []struct {
		name, key, value, want string
	}{
		{"negative lateness", "STACKSTREAM_ROLLUP_ALLOWED_LATENESS", "-1m", "STACKSTREAM_ROLLUP_ALLOWED_LATENESS=-1m0s is negative"},
		{"negative retention", "STACKSTREAM_ROLLUP_RETENTION", "-5s", "STACKSTREAM_ROLLUP_RETENTION=-5s is negative"},
		{"not a duration", "STACKSTREAM_ROLLUP_RETENTION", "ten", "STACKSTREAM_ROLLUP_RETENTION"},
		{"blank group", "STACKSTREAM_ROLLUP_GROUP", " ", "STACKSTREAM_ROLLUP_GROUP is empty"},
		{"zero poll", "STACKSTREAM_ROLLUP_MAX_POLL_RECORDS", "0", "STACKSTREAM_ROLLUP_MAX_POLL_RECORDS=0 must be positive"},
		{"tiny bulk", "STACKSTREAM_ROLLUP_BULK_MAX_BYTES", "100", "STACKSTREAM_ROLLUP_BULK_MAX_BYTES=100 is below 1 MiB"},
		{"zero skew", "STACKSTREAM_ROLLUP_MAX_CLOCK_SKEW", "0s", "STACKSTREAM_ROLLUP_MAX_CLOCK_SKEW=0s must be positive"},
		{"negative max age", "STACKSTREAM_ROLLUP_MAX_AGE", "-1h", "STACKSTREAM_ROLLUP_MAX_AGE=-1h0m0s is negative"},
		{"tiny state", "STACKSTREAM_ROLLUP_MAX_STATE_BYTES", "1000", "STACKSTREAM_ROLLUP_MAX_STATE_BYTES=1000 is below 16 MiB"},
		{"tiny stack cache", "STACKSTREAM_ROLLUP_STACK_CACHE_BYTES", "4096", "STACKSTREAM_ROLLUP_STACK_CACHE_BYTES=4096 is below 1 MiB"},
		{"stack cache not a number", "STACKSTREAM_ROLLUP_STACK_CACHE_BYTES", "64M", "STACKSTREAM_ROLLUP_STACK_CACHE_BYTES"},
		{"broker without port", "STACKSTREAM_KAFKA_BROKERS", "localhost", "STACKSTREAM_KAFKA_BROKERS"},
		{"negative minute retention", "STACKSTREAM_ROLLUP_MINUTE_RETENTION_DAYS", "-1", "STACKSTREAM_ROLLUP_MINUTE_RETENTION_DAYS=-1"},
		{"minutes outlive hours", "STACKSTREAM_ROLLUP_MINUTE_RETENTION_DAYS", "120", "STACKSTREAM_ROLLUP_MINUTE_RETENTION_DAYS=120 is longer than STACKSTREAM_ROLLUP_HOURLY_RETENTION_DAYS=90"},
		{"zero lifecycle interval", "STACKSTREAM_ROLLUP_LIFECYCLE_INTERVAL", "0s", "STACKSTREAM_ROLLUP_LIFECYCLE_INTERVAL=0s must be positive"},
		{"negative fleet heads interval", "STACKSTREAM_ROLLUP_FLEET_HEADS_INTERVAL", "-1m", "STACKSTREAM_ROLLUP_FLEET_HEADS_INTERVAL=-1m0s is negative"},
		{"negative minute tree retention", "STACKSTREAM_ROLLUP_MINUTE_TREE_RETENTION", "-1h", "STACKSTREAM_ROLLUP_MINUTE_TREE_RETENTION=-1h0m0s is negative"},
		// A minute, 2m of lateness, 10m retained for late profiles, a 1m
		// heads pass: 14m.
		{"minute trees gone before their heads", "STACKSTREAM_ROLLUP_MINUTE_TREE_RETENTION", "13m59s", "STACKSTREAM_ROLLUP_MINUTE_TREE_RETENTION=13m59s is shorter than the 14m0s"},
		// A heads pass every 2 hours: 1m + 2m + 10m + 2h, longer than the
		// default retention.
		{"minute trees gone before a slow heads pass", "STACKSTREAM_ROLLUP_FLEET_HEADS_INTERVAL", "2h", "STACKSTREAM_ROLLUP_MINUTE_TREE_RETENTION=2h0m0s is shorter than the 2h13m0s"},
		{"generation with the live group", "STACKSTREAM_OPENSEARCH_INDEX_GENERATION", "2", "STACKSTREAM_ROLLUP_GROUP=stackstream-rollup"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv(tt.key, tt.value)
			var cfg Config
			err := config.Load(&cfg, nil, io.Discard)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Load = %v, want an error containing %q", err, tt.want)
			}
		})
	}
}

// TestStackCacheWithinState: a stack cache bound above the state budget it
// is part of stops start-up naming both variables.
func TestStackCacheWithinState(t *testing.T) {
	t.Setenv("STACKSTREAM_ROLLUP_MAX_STATE_BYTES", "33554432")
	t.Setenv("STACKSTREAM_ROLLUP_STACK_CACHE_BYTES", "67108864")
	var cfg Config
	err := config.Load(&cfg, nil, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "STACKSTREAM_ROLLUP_STACK_CACHE_BYTES=67108864 is more than STACKSTREAM_ROLLUP_MAX_STATE_BYTES=33554432") {
		t.Fatalf("Load = %v", err)
	}
	t.Setenv("STACKSTREAM_ROLLUP_STACK_CACHE_BYTES", "16777216")
	if err := config.Load(&cfg, nil, io.Discard); err != nil || cfg.Rollup.StackCacheBytes != 16<<20 {
		t.Fatalf("Load = %v, stack cache %d", err, cfg.Rollup.StackCacheBytes)
	}
}

func TestStateBudget(t *testing.T) {
	for _, c := range []struct {
		set, limit int64
		limited    bool
		total      int64
		want       int64
	}{
		{set: 1 << 30, limit: 512 << 20, limited: true, total: 24 << 30, want: 1 << 30}, // the variable wins
		{limit: 1 << 30, limited: true, total: 24 << 30, want: 384 << 20},               // the cgroup's limit before the host's memory
		{limit: 4 << 30, limited: true, want: 1536 << 20},
		{limit: 150 << 20, limited: true, want: 64 << 20},
		{total: 24 << 30, want: 3 << 30}, // a host of 24 GiB without a limit
		{total: 1 << 30, want: aggregate.DefaultMaxStateBytes},
		{limit: 0, limited: false, want: aggregate.DefaultMaxStateBytes}, // memory unknown
	} {
		got, from := Settings{MaxStateBytes: c.set}.StateBudget(c.limit, c.limited, c.total)
		if got != c.want || from == "" {
			t.Errorf("StateBudget(set %d, limit %d %v, total %d) = %d (%s), want %d", c.set, c.limit, c.limited, c.total, got, from, c.want)
		}
	}
}

func TestConfigDefaults(t *testing.T) {
	var cfg Config
	if err := config.Load(&cfg, nil, io.Discard); err != nil {
		t.Fatal(err)
	}
	if cfg.ListenAddr != "127.0.0.1:9104" || cfg.Rollup.AllowedLateness.String() != "2m0s" || cfg.Rollup.Group != "stackstream-rollup" ||
		cfg.Rollup.MaxClockSkew.String() != "10m0s" || cfg.Rollup.MaxAge.String() != "168h0m0s" || cfg.Rollup.MaxStateBytes != 0 || cfg.Rollup.StackCacheBytes != aggregate.DefaultStackCacheBytes ||
		cfg.Rollup.MinuteDays != 14 || cfg.Rollup.HourlyDays != 90 || cfg.Rollup.LifecycleEvery.String() != "1h0m0s" || cfg.Rollup.FleetHeadsEvery.String() != "1m0s" || cfg.Rollup.DebugPprof || cfg.Rollup.WindowHeads ||
		!cfg.Rollup.MinuteTrees || cfg.Rollup.MinuteTreeRetention != 2*time.Hour {
		t.Fatalf("defaults: %+v", cfg)
	}
	// 0 keeps minute trees (no minimum to meet); the shortest retention
	// the compactor allows is accepted.
	for _, keep := range []string{"0s", "14m"} {
		t.Setenv("STACKSTREAM_ROLLUP_MINUTE_TREE_RETENTION", keep)
		if err := config.Load(&cfg, nil, io.Discard); err != nil {
			t.Fatalf("STACKSTREAM_ROLLUP_MINUTE_TREE_RETENTION=%s: %v", keep, err)
		}
	}
	if err := config.Load(&cfg, []string{"-h"}, io.Discard); !errors.Is(err, config.ErrHelp) {
		t.Fatalf("-h = %v, want ErrHelp", err)
	}
}

// TestPprof: with STACKSTREAM_ROLLUP_DEBUG_PPROF the listen address serves
// a heap profile that parses; without it /debug/pprof/ is not found.
func TestPprof(t *testing.T) {
	for _, on := range []bool{false, true} {
		mux := telemetry.Mux(prometheus.NewRegistry(), nil)
		if on {
			servePprof(mux)
		}
		srv := httptest.NewServer(mux)
		resp, err := http.Get(srv.URL + "/debug/pprof/heap")
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		srv.Close()
		if err != nil {
			t.Fatal(err)
		}
		if !on {
			if resp.StatusCode != http.StatusNotFound {
				t.Fatalf("pprof off: status %d, want 404", resp.StatusCode)
			}
			continue
		}
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("pprof on: status %d: %s", resp.StatusCode, body)
		}
		if _, err := profile.ParseData(body); err != nil {
			t.Fatalf("heap profile: %v", err)
		}
	}
}

// TestMinuteHeadsWritten: a minute's trees must outlast its end, the
// lateness, the late profiles' retention and one heads pass: the frequent
// one, or the lifecycle pass when the frequent one is off.
func TestMinuteHeadsWritten(t *testing.T) {
	s := Settings{AllowedLateness: 2 * time.Minute, Retention: 10 * time.Minute, FleetHeadsEvery: time.Minute, LifecycleEvery: time.Hour}
	if got := s.minuteHeadsWritten(); got != 14*time.Minute {
		t.Errorf("with the frequent pass: %s, want 14m", got)
	}
	s.FleetHeadsEvery = 0
	if got := s.minuteHeadsWritten(); got != 73*time.Minute {
		t.Errorf("with the lifecycle pass only: %s, want 1h13m", got)
	}
}
