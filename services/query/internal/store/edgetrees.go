package store

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/stackstream/stackstream/schemas/indices"
	"github.com/stackstream/stackstream/schemas/record"
)

// The rollup writes, beside its minute windows, 10-minute service
// documents and partition trees of 10-minute windows and, when configured,
// of minutes (written once a window closes, rewritten when a late profile
// changes it, kept with the minutes). The edges
// of a fleet-wide selection (the minutes around its whole settled hours)
// are read from those trees where their sums prove them complete, and per
// stack elsewhere.
const (
	tenMinutes = 10 * time.Minute
)

// edgeTreePage is how many window partition trees a scroll page holds: a
// fleet's minute or 10-minute partition tree is about as large as an
// hour's (1.9 MB for a sixth of 1,000 simulated hosts), so a page is one
// window's partitions, merged while the next is read.
const edgeTreePage = 6

// edgeHeadPage is how many window partition heads (at most
// indices.WindowHeadNodes nodes, tens of KB deflated) a scroll page holds.
const edgeHeadPage = 24

// ceilTo is t rounded up to a multiple of d.
func ceilTo(t time.Time, d time.Duration) time.Time {
	if f := t.Truncate(d); f.Before(t) {
		return f.Add(d)
	}
	return t
}

// windowSums are the sums of one window start's documents: the partition
// trees' and partition heads' totals and the service documents'
// stack_value, of each resolution, and the fleet minute heads' value.
type windowSums struct{ tree10, head10, service10, tree1, head1, service1, fleet1 int64 }

// edgePlan is which windows of one edge come from partition heads (when
// planned for heads) and which from partition trees: whole 10-minute
// windows (tens) and minutes, each a list of window-start ranges, and the
// minutes left to read per stack (rest).
type edgePlan struct {
	fleetHeads            []headVersion // the fleet window heads (freshWindowHeads) of whole 10-minute windows
	fleetMinutes          []headVersion // the fleet minute heads (freshMinuteHeads) of minutes
	headTens, headMinutes []TimeRange
	tens, minutes, rest   []TimeRange
}

// planEdgeTrees decides, for the edges of a fleet-wide selection read from
// the minute rollups (a window belongs to an edge when it starts in it),
// which windows partition trees answer. A 10-minute window inside an edge
// is accepted when its trees' total equals its service documents'
// stack_value (and is not 0: old data has neither); so is the 10-minute
// window holding an edge's end when those two also equal the stack_value
// of its minutes before the end (the minutes after it hold nothing, as when
// the edge ends now in a window still filling). Minutes not so covered are
// accepted by the same check on minute trees; the rest are read per stack.
// Two searches at most: the 10-minute windows and edge minutes, then the
// minutes of the 10-minute windows refused.
//
// With heads (the caller merges them under a proof), a 10-minute window
// whose trees pass is read from the fleet's head of the window when it is
// fresh (freshWindowHeads: one head instead of a tree per partition); a
// window is read from its partition heads (indices.KindPartitionHead) when
// they pass the check its trees would (their values are their trees'
// totals), else from its trees when those pass, else as above. A minute
// is read from the fleet's head of the minute when it is fresh
// (freshMinuteHeads), before its partition heads and trees: the loose
// minutes of a range not on 10-minute boundaries are then one head each.
func (s *Store) planEdgeTrees(ctx context.Context, idx []string, typ record.ProfileType, edges []TimeRange, heads bool) ([]edgePlan, error) {
	type span struct {
		lo, hi, c, p time.Time // minutes [lo, hi); whole tens [c, p); p a partial ten when p < hi
	}
	spans := make([]span, len(edges))
	var tenQ, minQ []Query
	tenCount := 0 // 10-minute windows in tenQ
	for i, e := range edges {
		lo, hi := ceilTo(e.From, time.Minute), ceilTo(e.To, time.Minute)
		c, p := ceilTo(lo, tenMinutes), hi.Truncate(tenMinutes)
		if p.Before(c) {
			c, p = hi, hi // no 10-minute boundary inside: minutes only
		}
		spans[i] = span{lo, hi, c, p}
		if !lo.Before(hi) {
			continue
		}
		tenEnd := p
		if p.Before(hi) {
			tenEnd = p.Add(tenMinutes) // the window holding the edge's end
		}
		if c.Before(tenEnd) {
			tenQ = append(tenQ, timeFilter(TimeRange{From: c, To: tenEnd}))
			tenCount += int(tenEnd.Sub(c) / tenMinutes)
		}
		if lo.Before(c) {
			minQ = append(minQ, timeFilter(TimeRange{From: lo, To: c}))
		}
		if p.Before(hi) {
			minQ = append(minQ, timeFilter(TimeRange{From: p, To: hi}))
		}
	}
	sums, err := s.windowSums(ctx, idx, typ, tenQ, minQ)
	if err != nil {
		return nil, err
	}
	// The window heads' and the minute heads' freshness, at once.
	var fresh, freshMinutes map[int64]headVersion
	err = concurrently(func() (err error) {
		if heads && len(tenQ) > 0 {
			fresh, err = s.freshWindowHeads(ctx, idx, typ, tenQ, tenCount)
		}
		return err
	}, func() (err error) {
		if heads && len(minQ) > 0 {
			freshMinutes, err = s.freshMinuteHeads(ctx, idx, typ, minQ, sums)
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	at := func(t time.Time) windowSums { return sums[t.UnixMilli()] }
	complete := func(docs, service int64) bool { return docs > 0 && docs == service }
	// fleetHead is the fresh fleet head of the 10-minute window w, when
	// its trees are complete: the head is then their merge's.
	fleetHead := func(w time.Time) (headVersion, bool) {
		ws := at(w)
		id, ok := fresh[w.UnixMilli()]
		return id, ok && complete(ws.tree10, ws.service10)
	}
	minuteOK := func(m time.Time) bool { w := at(m); return complete(w.tree1, w.service1) }
	headOK := func(m time.Time) bool { w := at(m); return heads && complete(w.head1, w.service1) }
	addMinute := func(pl *edgePlan, m time.Time) {
		if id, ok := freshMinutes[m.UnixMilli()]; ok {
			pl.fleetMinutes = append(pl.fleetMinutes, id)
			return
		}
		pl.addMinute(m, headOK(m), minuteOK(m))
	}
	plans := make([]edgePlan, len(edges))
	var refusedQ []Query
	refused := make([][]time.Time, len(edges))
	for i, sp := range spans {
		pl := &plans[i]
		for w := sp.c; w.Before(sp.p); w = w.Add(tenMinutes) {
			ws := at(w)
			if id, ok := fleetHead(w); ok {
				pl.fleetHeads = append(pl.fleetHeads, id)
				continue
			}
			if heads && complete(ws.head10, ws.service10) {
				pl.headTens = addWindow(pl.headTens, w, tenMinutes)
				continue
			}
			if complete(ws.tree10, ws.service10) {
				pl.tens = addWindow(pl.tens, w, tenMinutes)
				continue
			}
			refused[i] = append(refused[i], w)
			refusedQ = append(refusedQ, timeFilter(TimeRange{From: w, To: w.Add(tenMinutes)}))
		}
		// The partial window at the end stands for its minutes before hi.
		partial := false
		if sp.p.Before(sp.hi) {
			var before int64
			for m := sp.p; m.Before(sp.hi); m = m.Add(time.Minute) {
				before += at(m).service1
			}
			id, fleet := fleetHead(sp.p)
			switch ws := at(sp.p); {
			case ws.service10 != before:
			case fleet:
				pl.fleetHeads = append(pl.fleetHeads, id)
				partial = true
			case heads && complete(ws.head10, ws.service10):
				pl.headTens = addWindow(pl.headTens, sp.p, tenMinutes)
				partial = true
			case complete(ws.tree10, ws.service10):
				pl.tens = addWindow(pl.tens, sp.p, tenMinutes)
				partial = true
			}
		}
		for m := sp.lo; m.Before(sp.c); m = m.Add(time.Minute) {
			addMinute(pl, m)
		}
		if !partial {
			for m := sp.p; m.Before(sp.hi); m = m.Add(time.Minute) {
				addMinute(pl, m)
			}
		}
	}
	if len(refusedQ) == 0 {
		return plans, nil
	}
	// The minutes of refused 10-minute windows (data from before the
	// rollup wrote them, or a window whose tree is not yet visible).
	if sums, err = s.windowSums(ctx, idx, typ, nil, refusedQ); err != nil {
		return nil, err
	}
	if heads {
		if freshMinutes, err = s.freshMinuteHeads(ctx, idx, typ, refusedQ, sums); err != nil {
			return nil, err
		}
	}
	for i, ws := range refused {
		for _, w := range ws {
			for m := w; m.Before(w.Add(tenMinutes)); m = m.Add(time.Minute) {
				addMinute(&plans[i], m)
			}
		}
		// The refused windows' minutes came after the edge's last ones.
		plans[i].headMinutes, plans[i].minutes, plans[i].rest = merged(plans[i].headMinutes), merged(plans[i].minutes), merged(plans[i].rest)
	}
	return plans, nil
}

// addMinute puts minute m into the minutes from heads when head, else
// from trees when tree, else into those read per stack.
func (p *edgePlan) addMinute(m time.Time, head, tree bool) {
	switch {
	case head:
		p.headMinutes = addWindow(p.headMinutes, m, time.Minute)
	case tree:
		p.minutes = addWindow(p.minutes, m, time.Minute)
	default:
		p.rest = addWindow(p.rest, m, time.Minute)
	}
}

// merged is ranges in time order, touching ones joined.
func merged(ranges []TimeRange) []TimeRange {
	slices.SortFunc(ranges, func(a, b TimeRange) int { return a.From.Compare(b.From) })
	var out []TimeRange
	for _, r := range ranges {
		if n := len(out); n > 0 && !out[n-1].To.Before(r.From) {
			out[n-1].To = r.To
			continue
		}
		out = append(out, r)
	}
	return out
}

// addWindow adds the window [w, w+d) to ranges, extending the last one
// when they touch.
func addWindow(ranges []TimeRange, w time.Time, d time.Duration) []TimeRange {
	if n := len(ranges); n > 0 && ranges[n-1].To.Equal(w) {
		ranges[n-1].To = w.Add(d)
		return ranges
	}
	return append(ranges, TimeRange{From: w, To: w.Add(d)})
}

// windowSums sums, per window start, the partition trees' and heads'
// value and the service documents' stack_value of the 10-minute windows
// starting in tens and the minutes starting in minutes (fleet-wide: no
// selector), in one search.
func (s *Store) windowSums(ctx context.Context, idx []string, typ record.ProfileType, tens, minutes []Query) (map[int64]windowSums, error) {
	var when []Query
	if len(tens) > 0 {
		when = append(when, allOf([]Query{term("resolution", indices.ResolutionTenMinutes), anyOf(tens...)}, nil))
	}
	if len(minutes) > 0 {
		when = append(when, allOf([]Query{term("resolution", indices.ResolutionMinute), anyOf(minutes...)}, nil))
	}
	out := map[int64]windowSums{}
	if len(when) == 0 {
		return out, nil
	}
	sum := func(kind, res, field string) Agg {
		return Agg{Filter: allOf([]Query{term("kind", kind), term("resolution", res)}, nil), Aggs: Aggs{"v": sumOf(field)}}
	}
	type filtered struct {
		V sumValue `json:"v"`
	}
	var resp struct {
		Aggregations struct {
			Windows struct {
				Buckets []struct {
					Key       int64    `json:"key"`
					Tree10    filtered `json:"t10"`
					Head10    filtered `json:"h10"`
					Service10 filtered `json:"s10"`
					Tree1     filtered `json:"t1"`
					Head1     filtered `json:"h1"`
					Service1  filtered `json:"s1"`
					Fleet1    filtered `json:"f1"`
				} `json:"buckets"`
			} `json:"windows"`
		} `json:"aggregations"`
	}
	req := aggsRequest(allOf([]Query{termsOf("kind", []string{indices.KindPartitionTree, indices.KindPartitionHead, indices.KindService, indices.KindFleetHead}),
		term("type", string(typ)), anyOf(when...)}, nil), Aggs{"windows": {
		DateHistogram: &DateHistogram{Field: "@timestamp", FixedInterval: "1m", MinDocCount: 1},
		Aggs: Aggs{
			"t10": sum(indices.KindPartitionTree, indices.ResolutionTenMinutes, "value"),
			"h10": sum(indices.KindPartitionHead, indices.ResolutionTenMinutes, "value"),
			"s10": sum(indices.KindService, indices.ResolutionTenMinutes, "stack_value"),
			"t1":  sum(indices.KindPartitionTree, indices.ResolutionMinute, "value"),
			"h1":  sum(indices.KindPartitionHead, indices.ResolutionMinute, "value"),
			"s1":  sum(indices.KindService, indices.ResolutionMinute, "stack_value"),
			"f1":  sum(indices.KindFleetHead, indices.ResolutionMinute, "value"),
		},
	}})
	if err := s.search(ctx, idx, req, &resp, "aggregations.windows.buckets.key", "aggregations.windows.buckets.*.v.value"); err != nil {
		return nil, fmt.Errorf("check edge trees: %w", err)
	}
	for _, b := range resp.Aggregations.Windows.Buckets {
		out[b.Key] = windowSums{tree10: int64(b.Tree10.V.Value), head10: int64(b.Head10.V.Value), service10: int64(b.Service10.V.Value),
			tree1: int64(b.Tree1.V.Value), head1: int64(b.Head1.V.Value), service1: int64(b.Service1.V.Value), fleet1: int64(b.Fleet1.V.Value)}
	}
	return out, nil
}

// windowDocs selects the partition trees (or, with heads, the partition
// heads) of plans' accepted windows.
func windowDocs(plans []edgePlan, heads bool) (Query, int) {
	var tens, minutes []Query
	for _, p := range plans {
		t, m := p.tens, p.minutes
		if heads {
			t, m = p.headTens, p.headMinutes
		}
		for _, r := range t {
			tens = append(tens, timeFilter(r))
		}
		for _, r := range m {
			minutes = append(minutes, timeFilter(r))
		}
	}
	var when []Query
	if len(tens) > 0 {
		when = append(when, allOf([]Query{term("resolution", indices.ResolutionTenMinutes), anyOf(tens...)}, nil))
	}
	if len(minutes) > 0 {
		when = append(when, allOf([]Query{term("resolution", indices.ResolutionMinute), anyOf(minutes...)}, nil))
	}
	if len(when) == 0 {
		return nil, 0
	}
	return anyOf(when...), len(tens) + len(minutes)
}

// freshWindowHeads is, per start (Unix ms) of the windows (count
// 10-minute windows) in tens, the fleet's head of the window
// (indices.KindFleetHead, resolution 10m: the head of the window's
// partition trees merged, written by the rollup's compactor) when its
// sources are the versions of the window's partition trees as they are
// now. A window rewritten by a late profile since its head was written
// has none until the next pass. Two small searches, at once: the trees'
// versions (metadata and doc values, no _source) and the heads' sources.
func (s *Store) freshWindowHeads(ctx context.Context, idx []string, typ record.ProfileType, tens []Query, count int) (map[int64]headVersion, error) {
	var versions []hourTree
	var heads []fleetHead
	err := concurrently(func() (err error) {
		versions, err = s.treeVersions(ctx, idx, typ, indices.ResolutionTenMinutes, anyOf(tens...))
		return err
	}, func() (err error) {
		heads, err = s.fleetHeadsOf(ctx, idx, typ, indices.ResolutionTenMinutes, anyOf(tens...), count+1)
		if err != nil {
			err = fmt.Errorf("window heads: %w", err)
		}
		return err
	})
	if err != nil || len(versions) == 0 {
		return nil, err // none, or too many to check
	}
	return freshByVersions(heads, versions), nil
}

// freshMinuteHeads is, per start (Unix ms) of the minutes in minutes,
// the _id of the fleet's head of the minute (indices.KindFleetHead,
// resolution 1m, written by the rollup's compactor) when it stands for
// the minute as stored now: when the minute has partition trees, the
// head's sources are their versions and the trees are complete (their
// total is the minute's service documents' stack_value, as for a
// 10-minute window); when it has none (deleted after the minute tree
// retention), the head's value is that stack_value and not 0. sums are
// the minutes' windowSums: minutes with no head cost no search, those
// without trees none of the trees' versions.
func (s *Store) freshMinuteHeads(ctx context.Context, idx []string, typ record.ProfileType, minutes []Query, sums map[int64]windowSums) (map[int64]headVersion, error) {
	headed, treed := 0, false
	for _, w := range sums {
		if w.fleet1 > 0 {
			headed++
			treed = treed || w.tree1 > 0
		}
	}
	if headed == 0 {
		return nil, nil
	}
	when := anyOf(minutes...)
	var versions []hourTree
	var heads []fleetHead
	err := concurrently(func() (err error) {
		if treed {
			versions, err = s.treeVersions(ctx, idx, typ, indices.ResolutionMinute, when)
		}
		return err
	}, func() (err error) {
		if heads, err = s.fleetHeadsOf(ctx, idx, typ, indices.ResolutionMinute, when, headed+1); err != nil {
			err = fmt.Errorf("minute heads: %w", err)
		}
		return err
	})
	if err != nil || treed && versions == nil {
		return nil, err // too many to check: the minutes are read as before
	}
	byMinute := fingerprints(versions)
	fresh := map[int64]headVersion{}
	for _, h := range heads {
		t := h.Timestamp.UnixMilli()
		w := sums[t]
		if src, ok := byMinute[t]; ok {
			if h.Sources == src && w.tree1 > 0 && w.tree1 == w.service1 {
				fresh[t] = h.headVersion
			}
			continue
		}
		if h.Value > 0 && h.Value == w.service1 {
			fresh[t] = h.headVersion
		}
	}
	return fresh, nil
}

// freshByVersions is, by window start (Unix milliseconds), the fleet
// heads whose sources are their window's partition tree versions (as
// stored now).
func freshByVersions(heads []fleetHead, versions []hourTree) map[int64]headVersion {
	byWindow := fingerprints(versions)
	fresh := map[int64]headVersion{}
	for _, h := range heads {
		t := h.Timestamp.UnixMilli()
		if src, ok := byWindow[t]; ok && h.Sources == src {
			fresh[t] = h.headVersion
		}
	}
	return fresh
}

// concurrently runs fs at once and returns the first of their errors
// (in fs's order): searches that do not wait on each other's answers
// wait for the slowest of them, not for their sum.
func concurrently(fs ...func() error) error {
	errs := make([]error, len(fs))
	var wg sync.WaitGroup
	for i, f := range fs[1:] {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i+1] = f()
		}()
	}
	errs[0] = fs[0]()
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// fingerprints are, by window start (Unix milliseconds), the
// fingerprints (indices.TreeSources) of the partition tree versions of
// each window: what a fresh fleet head's sources are.
func fingerprints(versions []hourTree) map[int64]string {
	byWindow := map[int64][]indices.TreeSource{}
	for _, v := range versions {
		byWindow[v.Time.UnixMilli()] = append(byWindow[v.Time.UnixMilli()], v.TreeSource)
	}
	out := make(map[int64]string, len(byWindow))
	for t, src := range byWindow {
		out[t] = indices.TreeSources(src)
	}
	return out
}

// fleetHead is what a fleet head's freshness is judged by: its window,
// the fingerprint of the trees it was made from, and its total.
type fleetHead struct {
	headVersion
	Timestamp time.Time
}

// fleetHeadsOf reads, without their trees, at most size fleet heads of
// typ and resolution res matching when.
func (s *Store) fleetHeadsOf(ctx context.Context, idx []string, typ record.ProfileType, res string, when Query, size int) ([]fleetHead, error) {
	var resp struct {
		Hits struct {
			Hits []struct {
				Index       string `json:"_index"`
				ID          string `json:"_id"`
				SeqNo       int64  `json:"_seq_no"`
				PrimaryTerm int64  `json:"_primary_term"`
				Source      struct {
					Timestamp time.Time `json:"@timestamp"`
					Sources   string    `json:"sources"`
					Value     int64     `json:"value"`
				} `json:"_source"`
			} `json:"hits"`
		} `json:"hits"`
	}
	req := &Request{Size: size, TrackTotalHits: false, SeqNoPrimaryTerm: true, Source: &Source{Includes: []string{"@timestamp", "sources", "value"}},
		Query: allOf([]Query{term("kind", indices.KindFleetHead), term("type", string(typ)), term("resolution", res), when}, nil)}
	if err := s.search(ctx, idx, req, &resp, "hits.hits._index", "hits.hits._id", "hits.hits._seq_no", "hits.hits._primary_term", "hits.hits._source"); err != nil {
		return nil, err
	}
	out := make([]fleetHead, len(resp.Hits.Hits))
	for i, h := range resp.Hits.Hits {
		out[i] = fleetHead{headVersion: headVersion{Index: h.Index, ID: h.ID, SeqNo: h.SeqNo, PrimaryTerm: h.PrimaryTerm,
			Value: h.Source.Value, Sources: h.Source.Sources}, Timestamp: h.Source.Timestamp}
	}
	return out, nil
}
