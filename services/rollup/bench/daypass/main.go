// Command daypass runs one pass of the rollup's compactor
// (internal/daytrees: day trees, day function tables, the fleet's day and
// hour heads) over a run's rollups as of a clock of its choice, so a bench
// whose simulated time ends now (services/indexer/bench/fleetbytes) can
// count the documents a day gets once it has settled, the next day, without
// waiting for it. It writes what the live rollup's lifecycle pass
// (STACKSTREAM_ROLLUP_LIFECYCLE_INTERVAL) would write at that time; it
// deletes nothing (retention is not run).
//
// Run from services/rollup: go run ./bench/daypass -h.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/stackstream/stackstream/pkg/opensearch"
	"github.com/stackstream/stackstream/schemas/indices"
	"github.com/stackstream/stackstream/services/rollup/internal/daytrees"
)

// maxDays bounds -days: the live rollup compacts 2.
const maxDays = 31

func main() {
	url := flag.String("opensearch", "http://127.0.0.1:9200", "OpenSearch")
	prefix := flag.String("index-prefix", "", "STACKSTREAM_OPENSEARCH_INDEX_PREFIX of the run (required)")
	at := flag.String("now", "", "the pass's clock, RFC 3339 (required): a day is compacted from 00:30 the next day (daytrees.Settle)")
	days := flag.Int("days", 2, fmt.Sprintf("settled days before -now to compact (1..%d; the live rollup: 2)", maxDays))
	timeout := flag.Duration("timeout", 10*time.Minute, "per-request timeout")
	flag.Parse()
	now, err := parseArgs(*prefix, *at, *days)
	if err != nil {
		fmt.Fprintln(os.Stderr, "daypass:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	osc, err := opensearch.NewClient(ctx, opensearch.Config{URLs: []string{*url}, Timeout: *timeout})
	if err != nil {
		fmt.Fprintln(os.Stderr, "daypass:", err)
		os.Exit(1)
	}
	c := &daytrees.Compactor{Client: osc, Names: indices.Names{Prefix: *prefix}, Days: *days, Now: func() time.Time { return now }}
	t0 := time.Now()
	n, err := c.Apply(ctx)
	fmt.Printf("daypass: as of %s, %d documents written in %v\n", now.Format(time.RFC3339), n, time.Since(t0).Round(time.Millisecond))
	if err != nil {
		fmt.Fprintln(os.Stderr, "daypass:", err)
		os.Exit(1)
	}
}

func parseArgs(prefix, at string, days int) (time.Time, error) {
	switch {
	case prefix == "" || strings.ContainsAny(prefix, "*,/ "):
		return time.Time{}, fmt.Errorf("-index-prefix %q: want the run's index prefix (no *, comma, slash or space)", prefix)
	case days < 1 || days > maxDays:
		return time.Time{}, fmt.Errorf("-days %d: want 1..%d", days, maxDays)
	}
	now, err := time.Parse(time.RFC3339, at)
	if err != nil {
		return time.Time{}, fmt.Errorf("-now %q: want RFC 3339, e.g. 2026-12-03T01:00:00Z", at)
	}
	return now.UTC(), nil
}
