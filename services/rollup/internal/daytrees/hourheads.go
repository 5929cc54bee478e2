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

// writeHourHeads writes, per type and settled hour of the last c.Days
// days, the head of the fleet's hour (the hour's partition trees merged,
// indices.KindFleetHead with resolution 1h) when it is missing or its
// sources differ from the fingerprint of the hour's partition trees. A
// fleet-wide range that is not one whole UTC day reads its hours' heads
// (services/query/internal/api, proof.go) instead of every partition
// tree. One hour is merged at a time: the heap is one fleet hour's tree.
func (c *Compactor) writeHourHeads(ctx context.Context, now time.Time) (int, error) {
	last := now.Add(-HourSettle).Truncate(time.Hour) // hours end by then
	first := now.Truncate(24*time.Hour).AddDate(0, 0, -c.Days)
	written := 0
	// One search per day: a rollups index is a month, a day never spans two.
	for day := first; day.Before(last); day = day.Add(24 * time.Hour) {
		to := day.Add(24 * time.Hour)
		if last.Before(to) {
			to = last
		}
		n, err := c.hourHeadsOfDay(ctx, day, to)
		written += n
		if err != nil {
			return written, fmt.Errorf("hour heads of %s: %w", day.Format(time.DateOnly), err)
		}
	}
	return written, nil
}

type hourKey struct {
	typ  string
	hour int64
}

// hourHeadsOfDay writes the stale or missing hour heads of the hours
// from day until to.
func (c *Compactor) hourHeadsOfDay(ctx context.Context, day, to time.Time) (int, error) {
	index := c.Names.Rollups(day)
	hours, err := c.search(ctx, index, map[string]any{
		"size": maxHourDocs, "seq_no_primary_term": true, "_source": []string{"type", "@timestamp"},
		"query": treeQuery(indices.ResolutionHour, day, to),
	})
	if err != nil {
		return 0, err
	}
	groups := map[hourKey][]hit{}
	for _, h := range hours {
		k := hourKey{h.Source.Type, h.Source.Timestamp.Unix()}
		groups[k] = append(groups[k], h)
	}
	heads, err := c.search(ctx, index, map[string]any{
		"size": maxHourDocs, "_source": []string{"type", "@timestamp", "sources"},
		"query": map[string]any{"bool": map[string]any{"filter": []any{
			map[string]any{"term": map[string]any{"kind": indices.KindFleetHead}},
			map[string]any{"term": map[string]any{"resolution": indices.ResolutionHour}},
			map[string]any{"range": map[string]any{"@timestamp": map[string]any{"gte": day.UnixMilli(), "lt": to.UnixMilli(), "format": "epoch_millis"}}},
		}}},
	})
	if err != nil {
		return 0, err
	}
	current := map[hourKey]string{}
	for _, h := range heads {
		current[hourKey{h.Source.Type, h.Source.Timestamp.Unix()}] = h.Source.Sources
	}
	return writeMerged(ctx, c, index, groups, current, func(k hourKey, b *indices.TreeBuilder) indices.RollupDoc {
		return indices.RollupDoc{
			Timestamp: time.Unix(k.hour, 0).UTC(), Resolution: indices.ResolutionHour, Kind: indices.KindFleetHead, Type: k.typ,
			Value: b.Total(), Tree: b.EncodeHead(indices.HeadNodes),
		}
	})
}
