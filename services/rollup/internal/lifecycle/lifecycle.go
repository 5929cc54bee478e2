// Package lifecycle ages the rollups out: minute and 10-minute rollups are
// kept for MinuteDays, hourly ones for HourlyDays (longer: they are what long ranges
// read), minute partition trees only for MinuteTreeRetention (the fleet's
// minute heads, written from them first, stay with the minutes). Hourly
// retention deletes whole monthly indices; minute documents inside a
// kept month are deleted by query.
package lifecycle

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/opensearch-project/opensearch-go/v4/opensearchapi"

	"github.com/stackstream/stackstream/pkg/opensearch"
	"github.com/stackstream/stackstream/schemas/indices"
	"github.com/stackstream/stackstream/services/rollup/internal/daytrees"
)

// Lifecycle applies the rollups' retention every Interval.
type Lifecycle struct {
	Client     *opensearchapi.Client
	Names      indices.Names
	MinuteDays int // 0 keeps minute rollups as long as their month
	HourlyDays int // 0 keeps the monthly indices
	Interval   time.Duration
	Logger     *slog.Logger
	Now        func() time.Time
	// DayTrees, when set, writes the day trees of settled days on each
	// pass, after retention, and the heads of recent 10-minute windows
	// every FleetHeadsInterval.
	DayTrees *daytrees.Compactor
	// FleetHeadsInterval is how often the recent 10-minute windows' and
	// minutes' fleet heads are written (daytrees.Compactor.ApplyWindows):
	// a head is read by the edges of ranges ending now once written, so a
	// pass runs well within a window. 0 leaves them to the hourly pass.
	FleetHeadsInterval time.Duration
	// MinuteTreeRetention: minute partition trees (and per-partition
	// minute heads) of minutes that started longer ago are deleted, by
	// the hourly pass after its compactor pass and by each fleet heads
	// pass for the minutes it covered (daytrees.RecentMinutes): a minute's
	// fleet head is written before its trees go. 0 keeps them as long as
	// the minute documents (MinuteDays).
	MinuteTreeRetention time.Duration
	// Leads says whether this instance runs the passes now (nil: always).
	// Each pass covers the whole fleet, so with several rollup instances
	// only one runs them: the owner of the symbolized topic's partition 0
	// (cmd/stackstream-rollup). Until 2026-12-02 every instance did the
	// same work (the fleet heads pass alone took 13% of a lone instance's
	// CPU catching up on 200 simulated hosts).
	Leads func() bool
}

// leadCheck is how often an instance that does not lead looks again
// whether an hourly pass is due: an instance that starts leading runs it
// within leadCheck, not a whole Interval later.
const leadCheck = time.Minute

func (l *Lifecycle) leads() bool { return l.Leads == nil || l.Leads() }

// Result is what one pass deleted.
type Result struct {
	Indices       []string // monthly indices whose month ended more than HourlyDays ago
	MinuteRollups int64    // minute and 10-minute documents older than MinuteDays
	MinuteTrees   int64    // minute partition trees and heads older than MinuteTreeRetention
	DayTrees      int      // day trees written (missing or stale)
}

// Run applies retention now and then every Interval until ctx ends, while
// this instance leads. One failed pass is logged; the next one tries
// again.
func (l *Lifecycle) Run(ctx context.Context) error {
	if l.DayTrees != nil && l.FleetHeadsInterval > 0 {
		done := make(chan struct{})
		defer func() { <-done }()
		go func() {
			defer close(done)
			l.runWindowHeads(ctx)
		}()
	}
	t := time.NewTicker(min(l.Interval, leadCheck))
	defer t.Stop()
	var last time.Time // of this instance's last pass
	for {
		if l.leads() && (last.IsZero() || time.Since(last) >= l.Interval) {
			last = time.Now()
			r, err := l.Apply(ctx)
			switch {
			case err != nil && ctx.Err() == nil:
				l.Logger.Warn("rollup retention", "err", err)
			case len(r.Indices) > 0 || r.MinuteRollups > 0 || r.MinuteTrees > 0 || r.DayTrees > 0:
				l.Logger.Info("rollup retention", "deleted_indices", r.Indices, "deleted_minute_rollups", r.MinuteRollups,
					"deleted_minute_trees", r.MinuteTrees, "minute_days", l.MinuteDays, "hourly_days", l.HourlyDays,
					"minute_tree_retention", l.MinuteTreeRetention, "day_trees_written", r.DayTrees)
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// Apply deletes what is past retention. Running it from several rollup
// instances at once is harmless: each deletion is idempotent.
func (l *Lifecycle) Apply(ctx context.Context) (Result, error) {
	var r Result
	now := l.Now().UTC()
	if l.HourlyDays > 0 {
		deleted, err := opensearch.DeleteEnded(ctx, l.Client, l.Names.RollupsPattern(), l.Names.IndexEnd, now.AddDate(0, 0, -l.HourlyDays))
		r.Indices = deleted
		if err != nil {
			return r, err
		}
	}
	if l.MinuteDays > 0 {
		cutoff := now.AddDate(0, 0, -l.MinuteDays)
		n, err := opensearch.DeleteMatching(ctx, l.Client, l.Names.RollupsPattern(), map[string]any{
			"bool": map[string]any{"filter": []any{
				map[string]any{"terms": map[string]any{"resolution": []string{indices.ResolutionMinute, indices.ResolutionTenMinutes}}},
				map[string]any{"range": map[string]any{"@timestamp": map[string]any{"lt": cutoff.UnixMilli(), "format": "epoch_millis"}}},
			}},
		})
		r.MinuteRollups = n
		if err != nil {
			return r, err
		}
	}
	if l.DayTrees != nil {
		n, err := l.DayTrees.Apply(ctx)
		r.DayTrees = n
		if err != nil {
			return r, err
		}
	}
	// After the compactor's pass, which wrote the heads of every minute
	// of its days whose trees exist. A minute older than those days whose
	// trees were written late (a replay) goes without a head: the query
	// then reads it per stack.
	n, err := l.deleteMinuteTrees(ctx, time.Time{})
	r.MinuteTrees = n
	return r, err
}

// deleteMinuteTrees deletes the minute partition trees and per-partition
// minute heads of the minutes from from (the zero time: any) that started
// more than MinuteTreeRetention ago, not the fleet's minute heads
// (indices.KindFleetHead), which stay with the minute documents.
func (l *Lifecycle) deleteMinuteTrees(ctx context.Context, from time.Time) (int64, error) {
	if l.MinuteTreeRetention <= 0 {
		return 0, nil
	}
	cutoff := l.Now().UTC().Add(-l.MinuteTreeRetention)
	if !from.Before(cutoff) {
		return 0, nil
	}
	window := map[string]any{"lt": cutoff.UnixMilli(), "format": "epoch_millis"}
	if !from.IsZero() {
		window["gte"] = from.UnixMilli()
	}
	return opensearch.DeleteMatching(ctx, l.Client, l.Names.RollupsPattern(), map[string]any{
		"bool": map[string]any{"filter": []any{
			map[string]any{"terms": map[string]any{"kind": []string{indices.KindPartitionTree, indices.KindPartitionHead}}},
			map[string]any{"term": map[string]any{"resolution": indices.ResolutionMinute}},
			map[string]any{"range": map[string]any{"@timestamp": window}},
		}},
	})
}

// runWindowHeads writes the recent 10-minute windows' and minutes' heads
// every FleetHeadsInterval until ctx ends, then deletes the trees of the
// minutes it covered that are past MinuteTreeRetention; a failed pass is
// logged and the next one tries again. It runs beside the hourly pass
// (which also writes heads, of older windows and minutes): both write a
// head under one _id from the same trees, so running at once is harmless.
func (l *Lifecycle) runWindowHeads(ctx context.Context) {
	t := time.NewTicker(l.FleetHeadsInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if !l.leads() {
			continue
		}
		n, err := l.applyWindowHeads(ctx)
		switch {
		case err != nil && ctx.Err() == nil:
			l.Logger.Warn("window heads", "err", err)
		case n > 0:
			l.Logger.Debug("window heads", "written", n)
		}
	}
}

// applyWindowHeads is one fleet heads pass: the recent heads, then the
// trees of the minutes whose heads it has just written or found current
// (those of the last daytrees.RecentMinutes; older ones are the hourly
// pass's, so a minute whose trees were written late is not deleted
// before a pass covered it).
func (l *Lifecycle) applyWindowHeads(ctx context.Context) (int, error) {
	n, err := l.DayTrees.ApplyWindows(ctx)
	if err != nil {
		return n, err
	}
	if _, err := l.deleteMinuteTrees(ctx, l.Now().UTC().Add(-daytrees.RecentMinutes)); err != nil {
		return n, fmt.Errorf("delete minute trees: %w", err)
	}
	return n, nil
}
