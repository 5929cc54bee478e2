package daytrees

import (
	"context"
	"fmt"
	"time"

	"github.com/stackstream/stackstream/schemas/indices"
)

// HourSettle is how long after an hour ends its partition trees are taken
// as written: the query reads an hour from trees from then on
// (services/query/internal/store hourSettle); a later rewrite makes the
// hour's head stale until the next pass.
const HourSettle = 15 * time.Minute

// WindowSettle is how long after a 10-minute window ends its partition
// trees are taken as written: the rollup writes them once its watermark
// passes the window's end by the allowed lateness (2 minutes by default).
// A head written earlier, or before a late profile rewrites a tree, is
// stale (its sources differ from the trees') until the next pass: the
// query then reads the window's trees.
const WindowSettle = 2 * time.Minute

// MinuteSettle is WindowSettle for minutes: the rollup writes minute M's
// partition trees once its watermark passes M+1m by the allowed lateness.
const MinuteSettle = 2 * time.Minute

// RecentWindows is how far back ApplyWindows looks for 10-minute windows:
// the windows the edges of ranges ending now read (before their first
// whole settled hour, at most 75 minutes). Older windows get their heads
// from Apply.
const RecentWindows = 2 * time.Hour

// RecentMinutes is how far back ApplyWindows looks for minutes: an hour
// past the default minute tree retention
// (STACKSTREAM_ROLLUP_MINUTE_TREE_RETENTION, 2h), so the frequent pass
// can delete the trees of minutes it has just written the heads of
// (services/rollup/internal/lifecycle). Older minutes get their heads
// from Apply.
const RecentMinutes = 3 * time.Hour

// fleetHeads is one kind of the fleet's heads (indices.KindFleetHead): per
// type and window of resolution res, the head of the window's partition
// trees merged. searchSpan is how many windows' trees one search reads
// (a day of hours, an hour of 10-minute windows, 10 minutes of minutes:
// 24, 6 and 10 windows, at most maxHourDocs documents across types and
// partitions, so up to about a thousand (type, partition) pairs).
type fleetHeads struct {
	res        string
	settle     time.Duration
	searchSpan time.Duration
}

var (
	hourHeads   = fleetHeads{res: indices.ResolutionHour, settle: HourSettle, searchSpan: 24 * time.Hour}
	windowHeads = fleetHeads{res: indices.ResolutionTenMinutes, settle: WindowSettle, searchSpan: time.Hour}
	minuteHeads = fleetHeads{res: indices.ResolutionMinute, settle: MinuteSettle, searchSpan: 10 * time.Minute}
)

// ApplyWindows writes the missing or stale heads of the settled 10-minute
// windows of the last RecentWindows and of the settled minutes of the
// last RecentMinutes, and returns how many it wrote. It is cheap when
// they are current (two small searches per hour of windows and per 10
// minutes of minutes), so it runs far more often than Apply: the edges of
// a range ending now read the windows of the last hour and the minutes
// of the window still open, and a head is written within a pass of its
// trees. Minutes whose trees are gone (the minute tree retention) write
// nothing: their heads stay as written.
func (c *Compactor) ApplyWindows(ctx context.Context) (int, error) {
	now := c.Now().UTC()
	n, err := c.writeFleetHeads(ctx, windowHeads, now.Add(-RecentWindows), now)
	if err != nil {
		return n, err
	}
	m, err := c.writeFleetHeads(ctx, minuteHeads, now.Add(-RecentMinutes), now)
	return n + m, err
}

// writeFleetHeads writes, per type and settled window of kind h from
// first (rounded down to a search span) until now, the head of the
// fleet's window (the window's partition trees merged,
// indices.KindFleetHead with resolution h.res) when it is missing or its
// sources differ from the fingerprint of the window's partition trees. A
// fleet-wide range that is not one whole UTC day reads its hours' heads
// and its edges' 10-minute windows' heads (services/query/internal/api,
// proof.go) instead of every partition tree. One window is merged at a
// time: the heap is one fleet window's tree.
func (c *Compactor) writeFleetHeads(ctx context.Context, h fleetHeads, first, now time.Time) (int, error) {
	span := indices.WindowSize(h.res)
	last := now.Add(-h.settle).Truncate(span) // windows end by then
	spans, err := c.spansWithTrees(ctx, h, first.Truncate(h.searchSpan), last)
	if err != nil {
		return 0, fmt.Errorf("%s heads: %w", h.res, err)
	}
	written := 0
	// A rollups index is a month: a search span (a day, an hour, 10
	// minutes) never spans two.
	for _, from := range spans {
		to := from.Add(h.searchSpan)
		if last.Before(to) {
			to = last
		}
		n, err := c.fleetHeadsOf(ctx, h, from, to)
		written += n
		if err != nil {
			return written, fmt.Errorf("%s heads of %s: %w", h.res, from.Format(time.RFC3339), err)
		}
	}
	return written, nil
}

// spansWithTrees lists the search spans of kind h from from until to that
// hold partition trees, oldest first, in one search: most spans of the
// lifecycle pass's days of minutes hold none (the minute tree retention
// deleted them), and each would cost a search.
func (c *Compactor) spansWithTrees(ctx context.Context, h fleetHeads, from, to time.Time) ([]time.Time, error) {
	if !from.Before(to) {
		return nil, nil
	}
	var out struct {
		answer
		Aggregations struct {
			Spans struct {
				Buckets []struct {
					Key int64 `json:"key"`
				} `json:"buckets"`
			} `json:"spans"`
		} `json:"aggregations"`
	}
	if err := c.query(ctx, c.Names.RollupsPattern(), map[string]any{
		"size": 0, "query": treeQuery(h.res, from, to),
		"aggs": map[string]any{"spans": map[string]any{"date_histogram": map[string]any{
			"field": "@timestamp", "fixed_interval": fmt.Sprintf("%dms", h.searchSpan.Milliseconds()), "min_doc_count": 1,
		}}},
	}, "aggregations.spans.buckets.key", &out, &out.answer); err != nil {
		return nil, err
	}
	spans := make([]time.Time, len(out.Aggregations.Spans.Buckets))
	for i, b := range out.Aggregations.Spans.Buckets {
		spans[i] = time.UnixMilli(b.Key).UTC()
	}
	return spans, nil
}

type windowKey struct {
	typ   string
	start int64
}

// fleetHeadsOf writes the stale or missing heads of kind h of the windows
// from from until to.
func (c *Compactor) fleetHeadsOf(ctx context.Context, h fleetHeads, from, to time.Time) (int, error) {
	index := c.Names.Rollups(from)
	trees, err := c.search(ctx, index, map[string]any{
		"size": maxHourDocs, "seq_no_primary_term": true, "_source": []string{"type", "@timestamp"},
		"query": treeQuery(h.res, from, to),
	})
	if err != nil {
		return 0, err
	}
	if len(trees) >= maxHourDocs {
		return 0, fmt.Errorf("more than %d partition trees of %s windows from %s to %s", maxHourDocs, h.res, from.Format(time.RFC3339), to.Format(time.RFC3339))
	}
	groups := map[windowKey][]hit{}
	for _, t := range trees {
		k := windowKey{t.Source.Type, t.Source.Timestamp.Unix()}
		groups[k] = append(groups[k], t)
	}
	heads, err := c.search(ctx, index, map[string]any{
		"size": maxHourDocs, "_source": []string{"type", "@timestamp", "sources"},
		"query": kindQuery(indices.KindFleetHead, h.res, from, to),
	})
	if err != nil {
		return 0, err
	}
	current := map[windowKey]string{}
	for _, d := range heads {
		current[windowKey{d.Source.Type, d.Source.Timestamp.Unix()}] = d.Source.Sources
	}
	return writeMerged(ctx, c, index, groups, current, func(k windowKey, b *indices.TreeBuilder) indices.RollupDoc {
		return indices.RollupDoc{
			Timestamp: time.Unix(k.start, 0).UTC(), Resolution: h.res, Kind: indices.KindFleetHead, Type: k.typ,
			Value: b.Total(), Tree: b.EncodeHead(indices.HeadNodes),
		}
	})
}
