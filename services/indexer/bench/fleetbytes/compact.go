package main

import (
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// compact runs one pass of the rollup's compactor (services/rollup
// bench/daypass) over the run's rollups as of 01:00 the day after their
// last one, so every day of the run has settled (the live rollup compacts a
// day from 00:30 the next day): the day trees, day function tables and the
// fleet's day and hour heads are then counted with the rest. A run's
// simulated time ends when it starts, so the live rollup's own passes never
// see its last day settled.
func (b *bench) compact(ctx context.Context) error {
	var r struct {
		Aggregations struct {
			First struct{ Value *float64 } `json:"first"`
			Last  struct{ Value *float64 } `json:"last"`
		} `json:"aggregations"`
	}
	body := `{"size":0,"aggs":{"first":{"min":{"field":"@timestamp"}},"last":{"max":{"field":"@timestamp"}}}}`
	if err := b.postJSON(ctx, "/"+b.id+"-rollups-*/_search", body, &r); err != nil {
		return fmt.Errorf("the run's rollup days: %w", err)
	}
	if r.Aggregations.First.Value == nil || r.Aggregations.Last.Value == nil {
		return fmt.Errorf("the run wrote no rollups to compact (-daypass none skips the pass)")
	}
	first := time.UnixMilli(int64(*r.Aggregations.First.Value)).UTC().Truncate(24 * time.Hour)
	last := time.UnixMilli(int64(*r.Aggregations.Last.Value)).UTC().Truncate(24 * time.Hour)
	now := last.Add(25 * time.Hour)
	days := int(last.Sub(first)/(24*time.Hour)) + 1
	cmd := exec.CommandContext(ctx, b.o.daypass, "-opensearch", b.o.osURL, "-index-prefix", b.id+"-",
		"-now", now.Format(time.RFC3339), "-days", strconv.Itoa(days), "-timeout", b.o.osTimeout.String())
	t0 := time.Now()
	out, err := cmd.CombinedOutput()
	fmt.Printf("  compactor pass (%s -now %s -days %d, %v): %s\n", b.o.daypass, now.Format(time.RFC3339), days,
		time.Since(t0).Round(time.Second), strings.TrimSpace(string(out)))
	if err != nil {
		return fmt.Errorf("compactor pass: %w", err)
	}
	return nil
}
