package store

import (
	"context"
	"errors"
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
	idx, versions, err := s.fleetHourVersions(ctx, sel, hours)
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

// fleetHourVersions is the versions of the hour partition trees of sel's
// whole hours, and the indices they are in; nil versions when those hours
// are not all in complete partition trees (treesComplete).
func (s *Store) fleetHourVersions(ctx context.Context, sel Selection, hours TimeRange) ([]string, []hourTree, error) {
	return s.fleetHourVersionsAnd(ctx, sel, hours, nil)
}

// fleetHourVersionsAnd is fleetHourVersions running also, at once with
// its two searches, more when not nil (the heads' own search).
func (s *Store) fleetHourVersionsAnd(ctx context.Context, sel Selection, hours TimeRange, more func() error) ([]string, []hourTree, error) {
	idx := s.rollupIndices(hours)
	hourSel := sel
	hourSel.Range = hours
	var complete bool
	var versions []hourTree
	fs := []func() error{func() (err error) {
		complete, err = s.treesComplete(ctx, idx, hourSel, indices.KindPartitionTree)
		return err
	}, func() (err error) {
		versions, err = s.hourTreeVersions(ctx, idx, sel.Type, hours)
		return err
	}}
	if more != nil {
		fs = append(fs, more)
	}
	if err := concurrently(fs...); err != nil || !complete {
		return idx, nil, err
	}
	return idx, versions, nil
}

// headPage is how many hour heads (~360 KB each for 1,000 hosts) a scroll
// page holds: the heads of a page are merged while the next is read.
const headPage = 4

// MaxHeadHours is the longest span of whole hours read from hour heads
// (FleetHourHeads): a rolling day or two. Longer ranges read the day and
// hour trees, whose bytes grow slower than a head per hour.
const MaxHeadHours = 48

// errHeadGone is a head found fresh and then not read (deleted in
// between): what it stood for is not read, so the caller reads the trees.
var errHeadGone = errors.New("a head was deleted while read")

// FleetHourHeads reads sel's whole settled hours as the fleet's hour heads
// (indices.KindFleetHead, resolution 1h: one per type and hour, the head
// of the hour's partition trees merged), handing each head that is fresh
// (its sources are its hour's partition trees' versions now) to useHead and
// the partition trees of the other hours to useTree, and the minutes
// around the hours as Trees does, except that 10-minute windows and
// minutes with a fresh fleet head, and windows whose partition heads are
// complete, hand those heads to useHead (readEdges). ok is false, with nothing
// handed over, when sel names a field, its whole hours are not in complete
// partition trees (treesComplete) or span more than MaxHeadHours, or no
// hour has a fresh head.
func (s *Store) FleetHourHeads(ctx context.Context, sel Selection, useHead func(*Head) error, useTree func([]byte) error) (*TreeRead, bool, error) {
	if sel.Type == record.ProfileMemory || !sel.Selector.OnlyFields() {
		return nil, false, nil
	}
	hours, ok := hourlySpan(sel.Range)
	if !ok || hours.To.Sub(hours.From) > MaxHeadHours*time.Hour {
		return nil, false, nil
	}
	// The edges are planned (their windows' sums and fresh heads) while
	// the hours are checked and read: their searches do not wait on each
	// other. A plan not used (the hours cannot answer) is dropped.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	planned := make(chan plannedEdges, 1)
	go func() {
		p, err := s.planEdges(ctx, sel, hours, true)
		planned <- plannedEdges{p, err}
	}()
	// The hours' trees' versions and completeness and the heads' versions
	// (small searches, at once), then the fresh heads' trees a few per
	// page (those not decoded before), merged while the next page is
	// read.
	var hourHeads []fleetHead
	idx, versions, err := s.fleetHourVersionsAnd(ctx, sel, hours, func() (err error) {
		if hourHeads, err = s.fleetHeadsOf(ctx, s.rollupIndices(hours), sel.Type, indices.ResolutionHour, timeFilter(hours), MaxHeadHours+1); err != nil {
			err = fmt.Errorf("hour heads: %w", err)
		}
		return err
	})
	if err != nil || versions == nil {
		return nil, false, err
	}
	fresh := freshByVersions(hourHeads, versions)
	if len(fresh) == 0 {
		return nil, false, nil
	}
	read := &TreeRead{Source: "fleet_hour_heads"}
	var heads []headVersion
	var missing []Query
	for t := hours.From; t.Before(hours.To); t = t.Add(time.Hour) {
		if v, ok := fresh[t.UnixMilli()]; ok {
			heads = append(heads, v)
			continue
		}
		missing = append(missing, timeFilter(TimeRange{From: t, To: t.Add(time.Hour)}))
	}
	// A head rewritten between the two searches is read as rewritten: the
	// lifecycle pass made it from its hour's trees as they were then, as
	// a read of the trees a moment later would see them. Heads decoded
	// before (the version checked fresh) come from the cache (readHeads).
	hourSel := sel
	hourSel.Range = hours
	n, err := s.readHeads(ctx, idx, hourSel, heads, headPage, useHead)
	if err != nil {
		return nil, false, err
	}
	if n != len(heads) {
		return nil, false, nil // a head deleted in between: read the trees
	}
	read.Trees = n
	if len(missing) > 0 {
		when := allOf([]Query{term("resolution", indices.ResolutionHour), anyOf(missing...)}, nil)
		n, err := s.scrollTrees(ctx, idx, hourSel, indices.KindPartitionTree, when, s.opts.TreePage, useTree)
		if err != nil {
			return nil, false, err
		}
		read.Trees += n
	}
	p := <-planned
	if p.err == nil {
		p.err = s.readPlannedEdges(ctx, sel, p.edges, read, useTree, useHead)
	}
	if err := p.err; err != nil {
		if errors.Is(err, errHeadGone) {
			return nil, false, nil // read the trees
		}
		return nil, false, err
	}
	return read, true, nil
}
