package store

import (
	"context"
	"fmt"
	"time"

	"github.com/stackstream/stackstream/schemas/indices"
	"github.com/stackstream/stackstream/schemas/record"
)

// FleetHead reads the head of the fleet day tree (indices.KindFleetHead)
// that answers sel's flame graph: sel is one whole settled UTC day of the
// whole fleet (a selector naming no field), every hour of it is in the
// hour partition trees (treesComplete), and the head was made from the
// day's hour partition trees as they are now (its sources are their
// versions' fingerprint). ok is false, with no error, otherwise.
func (s *Store) FleetHead(ctx context.Context, sel Selection) (head []byte, ok bool, err error) {
	if sel.Type == record.ProfileMemory || !sel.Selector.OnlyFields() {
		return nil, false, nil
	}
	day := sel.Range.From.UTC()
	hours, whole := hourlySpan(sel.Range)
	if !whole || !day.Equal(day.Truncate(24*time.Hour)) || !hours.From.Equal(sel.Range.From) ||
		!hours.To.Equal(sel.Range.To) || !hours.To.Equal(day.Add(24*time.Hour)) {
		return nil, false, nil
	}
	idx := s.rollupIndices(hours)
	hourSel := sel
	hourSel.Range = hours
	complete, err := s.treesComplete(ctx, idx, hourSel, indices.KindPartitionTree)
	if err != nil || !complete {
		return nil, false, err
	}
	versions, err := s.hourTreeVersions(ctx, idx, sel.Type, hours)
	if err != nil || versions == nil {
		return nil, false, err
	}
	src := make([]indices.TreeSource, len(versions))
	for i, v := range versions {
		src[i] = v.TreeSource
	}
	var resp struct {
		Hits struct {
			Hits []struct {
				Source struct {
					Sources string `json:"sources"`
					Tree    []byte `json:"tree"`
				} `json:"_source"`
			} `json:"hits"`
		} `json:"hits"`
	}
	req := &Request{Size: 2, TrackTotalHits: false, Source: &Source{Includes: []string{"sources", "tree"}},
		Query: allOf([]Query{term("kind", indices.KindFleetHead), term("type", string(sel.Type)), term("resolution", indices.ResolutionDay),
			timeFilter(TimeRange{From: day, To: day.Add(time.Millisecond)})}, nil)}
	if err := s.search(ctx, idx, req, &resp, "hits.hits._source"); err != nil {
		return nil, false, fmt.Errorf("fleet head: %w", err)
	}
	if h := resp.Hits.Hits; len(h) == 1 && h[0].Source.Sources == indices.TreeSources(src) {
		return h[0].Source.Tree, true, nil
	}
	return nil, false, nil
}
