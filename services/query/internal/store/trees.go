package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/stackstream/stackstream/pkg/opensearch"
	"github.com/stackstream/stackstream/schemas/indices"
	"github.com/stackstream/stackstream/schemas/record"
)

// TreeRead is how a selection was read as call trees: its whole settled
// hours from the rollup's pre-merged trees (handed to the caller one by
// one), the minutes around them per stack.
type TreeRead struct {
	Trees int // tree documents read
	// Edges are the minutes outside the trees' hours summed per stack,
	// every stack of them (at most MaxEdgeStacks in all): the caller
	// merges them with their names (StackNames).
	Edges []*StackValues
	// Source is "trees" (host trees), "service_trees" or
	// "partition_trees", followed by
	// "+samples" or "+rollups" when edges were read per stack from the
	// samples or the minute rollups.
	Source string
}

// treeScrollKeep is how long the scroll context waits for the next page.
const treeScrollKeep = "1m"

// Trees reads sel's whole settled hours from the tree documents of the
// rollups, handing each encoded tree to use, and the rest of the range per
// stack. ok is false, with nothing handed to use, when trees cannot answer
// exactly: the selector names fields other than service and host (trees
// are per service and host), the range holds no whole settled hour, or the
// trees of those hours do not add up to their stack documents (hours
// written before trees existed, or a tree not yet visible); the caller then
// reads the selection per stack.
func (s *Store) Trees(ctx context.Context, sel Selection, use func(tree []byte) error) (*TreeRead, bool, error) {
	if sel.Type == record.ProfileMemory || !sel.Selector.OnlyFields("service", "host") {
		return nil, false, nil
	}
	hours, ok := hourlySpan(sel.Range)
	if !ok {
		return nil, false, nil
	}
	idx := s.rollupIndices(hours)
	hourSel := sel
	hourSel.Range = hours
	// A selection naming no host reads the service trees (one per
	// partition, service and hour) when they are complete, one naming
	// neither service nor host the partition trees (one per partition and
	// hour), else the host trees (one per host, service and hour).
	kinds := []string{indices.KindTree}
	switch {
	case sel.Selector.OnlyFields():
		kinds = []string{indices.KindPartitionTree, indices.KindServiceTree, indices.KindTree}
	case sel.Selector.OnlyFields("service"):
		kinds = []string{indices.KindServiceTree, indices.KindTree}
	}
	kind := ""
	for _, k := range kinds {
		complete, err := s.treesComplete(ctx, idx, hourSel, k)
		if err != nil {
			return nil, false, err
		}
		if complete {
			kind = k
			break
		}
	}
	if kind == "" {
		return nil, false, nil
	}
	read := &TreeRead{Source: map[string]string{
		indices.KindTree: "trees", indices.KindServiceTree: "service_trees", indices.KindPartitionTree: "partition_trees",
	}[kind]}
	// Hours come from their hour trees, except the whole days whose day
	// trees (partition trees only) match their hours' versions.
	when := allOf([]Query{term("resolution", indices.ResolutionHour), timeFilter(hours)}, nil)
	if kind == indices.KindPartitionTree {
		days, err := s.freshDays(ctx, idx, sel.Type, hours)
		if err != nil {
			return nil, false, err
		}
		if len(days) > 0 {
			should := []Query{}
			var skip []Query
			for _, d := range days {
				day := TimeRange{From: d, To: d.Add(24 * time.Hour)}
				should = append(should, allOf([]Query{term("resolution", indices.ResolutionDay), timeFilter(TimeRange{From: d, To: d.Add(time.Millisecond)})}, nil))
				skip = append(skip, timeFilter(day))
			}
			should = append(should, allOf([]Query{term("resolution", indices.ResolutionHour), timeFilter(hours)}, skip))
			when = anyOf(should...)
			read.Source = "partition_trees(days)"
		}
	}
	var err error
	if read.Trees, err = s.scrollTrees(ctx, idx, hourSel, kind, when, s.opts.TreePage, use); err != nil {
		return nil, false, err
	}
	if err := s.readEdges(ctx, sel, hours, read, use, nil); err != nil {
		return nil, false, err
	}
	return read, true, nil
}

// readEdges reads the minutes of sel outside hours into read: as a
// selection of their own would be read, except that a long selection's
// edges come from the minute rollups (its samples may be past retention),
// and that every stack is kept: the trees' hours are exact, so the edges
// must be too. A fleet-wide selection read from the rollups reads the
// windows of its edges that partition trees of 10-minute windows and of
// minutes answer (planEdgeTrees) as trees, handed to useTree, and only
// the other minutes per stack into read.Edges. One search per edge sums
// every stack (the answer is tens of bytes per stack whether or not some
// are dropped after); past MaxEdgeStacks distinct stacks in both edges the
// read fails with ErrTooManyStacks rather than leave stacks out.
// read.Source gets "+window_trees" and/or "+samples" or "+rollups". With
// useHead (a caller that proves its answer from heads), whole 10-minute
// windows with a fresh fleet head hand that head to useHead
// ("+fleet_window_heads"), minutes with a fresh fleet minute head hand
// that head ("+fleet_minute_heads"), and windows whose partition heads
// are complete hand those ("+window_heads"). A fleet head gone between
// the check and the read fails the read with errHeadGone.

func (s *Store) readEdges(ctx context.Context, sel Selection, hours TimeRange, read *TreeRead, useTree func([]byte) error, useHead func(*Head) error) error {
	e, err := s.planEdges(ctx, sel, hours, useHead != nil)
	if err != nil {
		return err
	}
	return s.readPlannedEdges(ctx, sel, e, read, useTree, useHead)
}

// edges are the minutes of a selection outside its whole hours and,
// when they are read from the minute rollups fleet-wide, which of their
// windows trees or heads answer.
type edges struct {
	ranges []TimeRange
	// plans, when set, say per edge which minutes are read per stack
	// (edgePlan.rest); else the whole edges are.
	plans []edgePlan
	idx   []string // the rollup indices of plans
}

// plannedEdges is planEdges' answer, handed between goroutines.
type plannedEdges struct {
	edges *edges
	err   error
}

// planEdges finds sel's edges around hours and plans them
// (planEdgeTrees, with heads when heads): the searches readEdges makes
// before it reads a tree.
func (s *Store) planEdges(ctx context.Context, sel Selection, hours TimeRange, heads bool) (*edges, error) {
	e := &edges{}
	for _, edge := range []TimeRange{{From: sel.Range.From, To: hours.From}, {From: hours.To, To: sel.Range.To}} {
		if edge.From.Before(edge.To) {
			edge.Now = sel.Range.Now
			e.ranges = append(e.ranges, edge)
		}
	}
	if s.FromRollups(sel) && sel.Selector.OnlyFields() && len(e.ranges) > 0 {
		e.idx = s.rollupIndices(TimeRange{From: e.ranges[0].From, To: e.ranges[len(e.ranges)-1].To})
		var err error
		if e.plans, err = s.planEdgeTrees(ctx, e.idx, sel.Type, e.ranges, heads); err != nil {
			return nil, err
		}
	}
	return e, nil
}

// readPlannedEdges is readEdges once planEdges has planned e.
func (s *Store) readPlannedEdges(ctx context.Context, sel Selection, e *edges, read *TreeRead, useTree func([]byte) error, useHead func(*Head) error) error {
	rollups := s.FromRollups(sel)
	edges, plans := e.ranges, e.plans
	var parts []string
	if plans != nil {
		idx := e.idx
		var known []headVersion
		windows, minutes := 0, 0
		for _, p := range plans {
			known = append(known, p.fleetHeads...)
			known = append(known, p.fleetMinutes...)
			windows += len(p.fleetHeads)
			minutes += len(p.fleetMinutes)
		}
		if len(known) > 0 {
			heads, err := s.readHeads(ctx, idx, sel, known, edgeHeadPage, useHead)
			if err != nil {
				return err
			}
			if heads != len(known) {
				return errHeadGone // deleted in between: its window is not read
			}
			read.Trees += heads
			if windows > 0 {
				parts = append(parts, "fleet_window_heads")
			}
			if minutes > 0 {
				parts = append(parts, "fleet_minute_heads")
			}
		}
		if when, n := windowDocs(plans, true); n > 0 {
			heads, err := s.scrollHeads(ctx, idx, sel, indices.KindPartitionHead, when, edgeHeadPage, useHead)
			if err != nil {
				return err
			}
			read.Trees += heads
			parts = append(parts, "window_heads")
		}
		if when, n := windowDocs(plans, false); n > 0 {
			trees, err := s.scrollTrees(ctx, idx, sel, indices.KindPartitionTree, when, edgeTreePage, useTree)
			if err != nil {
				return err
			}
			read.Trees += trees
			parts = append(parts, "window_trees")
		}
	}
	n := 0
	perStack := ""
	for i, edge := range edges {
		var within []Query
		if plans != nil {
			if len(plans[i].rest) == 0 {
				continue // every window from trees
			}
			for _, r := range plans[i].rest {
				within = append(within, timeFilter(r))
			}
		}
		es := sel
		es.Range = edge
		var sv *StackValues
		var err error
		if rollups {
			q := stackRollupQuery(es, true)
			if len(within) > 0 {
				q = stackRollupQuery(es, true, anyOf(within...))
			}
			sv, _, err = s.sumByStack(ctx, s.rollupIndices(edge), q)
			if err == nil {
				sv.Source = "rollups"
			}
		} else {
			sv, err = s.sampleStackValues(ctx, es)
		}
		if err != nil {
			return fmt.Errorf("edge %s-%s: %w", edge.From.Format(time.RFC3339), edge.To.Format(time.RFC3339), err)
		}
		if n += len(sv.Values); n > s.opts.MaxEdgeStacks {
			return fmt.Errorf("the minutes of %s-%s outside its whole settled hours hold more than %d distinct stacks "+
				"(STACKSTREAM_QUERY_MAX_EDGE_STACKS): align the range to whole hours, narrow the selector, or raise the limit: %w",
				sel.Range.From.Format(time.RFC3339), sel.Range.To.Format(time.RFC3339), s.opts.MaxEdgeStacks, ErrTooManyStacks)
		}
		read.Edges = append(read.Edges, sv)
		perStack = sv.Source
	}
	if perStack != "" {
		parts = append(parts, perStack)
	}
	if len(parts) > 0 {
		read.Source = strings.SplitN(read.Source, "+", 2)[0] + "+" + strings.Join(parts, "+")
	}
	return nil
}

// treesComplete compares the total of the trees of kind with the
// stack_value of the service documents of the same hours (the value of
// their samples with a stack, one document per service, host and hour):
// equal (and not zero) when every (service, host, hour) of the selection
// is in exactly one tree. A host's tree missing (an hour written before
// trees, whose service documents have no stack_value either, or a tree not
// yet visible) or a service tree too many (left by a rollup that ran with
// other partitions) makes them differ. Service documents are few (the
// stack documents of a fleet's day are millions), so the check is cheap.
func (s *Store) treesComplete(ctx context.Context, idx []string, sel Selection, kind string) (bool, error) {
	filter, mustNot := sel.Selector.Clauses()
	filter = append([]Query{
		termsOf("kind", []string{kind, indices.KindService}), term("type", string(sel.Type)),
		term("resolution", indices.ResolutionHour), timeFilter(sel.Range),
	}, filter...)
	var resp struct {
		Aggregations struct {
			Trees struct {
				V sumValue `json:"v"`
			} `json:"trees"`
			Stacks struct {
				V sumValue `json:"v"`
			} `json:"stacks"`
		} `json:"aggregations"`
	}
	req := aggsRequest(allOf(filter, mustNot), Aggs{
		"trees":  {Filter: term("kind", kind), Aggs: Aggs{"v": sumOf("value")}},
		"stacks": {Filter: term("kind", indices.KindService), Aggs: Aggs{"v": sumOf("stack_value")}},
	})
	if err := s.search(ctx, idx, req, &resp, "aggregations.trees.v", "aggregations.stacks.v"); err != nil {
		return false, fmt.Errorf("check trees: %w", err)
	}
	t, st := resp.Aggregations.Trees.V.Value, resp.Aggregations.Stacks.V.Value
	return t > 0 && t == st, nil
}

// freshDays are the whole UTC days inside hours whose day partition trees
// can stand for their hours: for every partition with hour trees that day
// a day tree whose sources are the hour trees' current versions, and no
// day tree of another partition. One search of the hours' versions (24 per
// partition and day, no sources read) and one of the day trees' sources.
func (s *Store) freshDays(ctx context.Context, idx []string, typ record.ProfileType, hours TimeRange) ([]time.Time, error) {
	first := hours.From.UTC().Truncate(24 * time.Hour)
	if first.Before(hours.From) {
		first = first.Add(24 * time.Hour)
	}
	last := hours.To.UTC().Truncate(24 * time.Hour)
	if !first.Before(last) {
		return nil, nil
	}
	hourHits, err := s.hourTreeVersions(ctx, idx, typ, TimeRange{From: first, To: last})
	if err != nil || hourHits == nil {
		return nil, err
	}
	var resp struct {
		Hits struct {
			Hits []struct {
				Source struct {
					Timestamp time.Time `json:"@timestamp"`
					Partition int32     `json:"partition"`
					Sources   string    `json:"sources"`
				} `json:"_source"`
			} `json:"hits"`
		} `json:"hits"`
	}
	req := &Request{Size: maxTreeDocs, TrackTotalHits: false,
		Query:  allOf([]Query{term("kind", indices.KindPartitionTree), term("type", string(typ)), term("resolution", indices.ResolutionDay), timeFilter(TimeRange{From: first, To: last})}, nil),
		Source: &Source{Includes: []string{"@timestamp", "partition", "sources"}}}
	if err := s.search(ctx, idx, req, &resp, "hits.hits._source"); err != nil {
		return nil, fmt.Errorf("day trees: %w", err)
	}
	type key struct {
		day       int64
		partition int32
	}
	versions := map[key][]indices.TreeSource{}
	for _, h := range hourHits {
		k := key{h.Time.UTC().Truncate(24 * time.Hour).Unix(), h.Partition}
		versions[k] = append(versions[k], h.TreeSource)
	}
	stale, present := map[int64]bool{}, map[int64]bool{}
	matched := map[key]bool{}
	for _, d := range resp.Hits.Hits {
		k := key{d.Source.Timestamp.UTC().Unix(), d.Source.Partition}
		if v, ok := versions[k]; !ok || indices.TreeSources(v) != d.Source.Sources {
			stale[k.day] = true
			continue
		}
		matched[k] = true
		present[k.day] = true
	}
	for k := range versions {
		if !matched[k] {
			stale[k.day] = true
		}
	}
	var out []time.Time
	for d := first; d.Before(last); d = d.Add(24 * time.Hour) {
		if !stale[d.Unix()] && present[d.Unix()] {
			out = append(out, d)
		}
	}
	return out, nil
}

// treeHit is a hit of scrollTrees' search: its tree alone.
type treeHit struct {
	Source struct {
		Tree []byte `json:"tree"`
	} `json:"_source"`
}

// scrollTrees hands the tree of every tree document of sel to use, reading
// pageSize documents per request with a scroll (tree documents are large:
// a page is bounded by count, and the next page is fetched while use
// merges the last one).
func (s *Store) scrollTrees(ctx context.Context, idx []string, sel Selection, kind string, when Query, pageSize int, use func([]byte) error) (int, error) {
	read, err := s.treeScroll(ctx, idx, sel, kind, when, pageSize, false, "tree")
	if err != nil {
		return 0, err
	}
	n := 0
	var useErr error // use's error, returned as it is
	err = opensearch.ScrollEach(ctx, read, func(p *opensearch.ScrollPage[treeHit]) error {
		for _, h := range p.Hits.Hits {
			if useErr = use(h.Source.Tree); useErr != nil {
				return useErr
			}
			n++
		}
		return nil
	})
	return n, scrollErr("read trees", err, useErr)
}

// treeScroll is the scroll of sel's documents of kind within when,
// pageSize a request, with the source fields named and, when versions,
// each hit's index, _id, _seq_no and _primary_term.
func (s *Store) treeScroll(ctx context.Context, idx []string, sel Selection, kind string, when Query, pageSize int, versions bool, fields ...string) (opensearch.Scroll, error) {
	filter, mustNot := sel.Selector.Clauses()
	filter = append([]Query{term("kind", kind), term("type", string(sel.Type)), when}, filter...)
	// A scroll refuses track_total_hits=false.
	req := &Request{Size: pageSize, TrackTotalHits: true, SeqNoPrimaryTerm: versions, Query: allOf(filter, mustNot), Source: &Source{Includes: fields}}
	if dl, ok := ctx.Deadline(); ok {
		if ms := time.Until(dl).Milliseconds(); ms > 0 {
			req.Timeout = fmt.Sprintf("%dms", ms)
		}
	}
	body, err := json.Marshal(req)
	if err != nil {
		return opensearch.Scroll{}, fmt.Errorf("encode request: %w", err)
	}
	filterPath := "_scroll_id,timed_out,_shards.failed"
	if versions {
		filterPath += ",hits.hits._index,hits.hits._id,hits.hits._seq_no,hits.hits._primary_term"
	}
	for _, f := range fields {
		filterPath += ",hits.hits._source." + f
	}
	return opensearch.Scroll{
		Do:         s.send,
		Path:       "/" + strings.Join(idx, ",") + "/_search?ignore_unavailable=true&allow_no_indices=true",
		Body:       body,
		Keep:       treeScrollKeep,
		FilterPath: filterPath,
		Size:       pageSize,
	}, nil
}

// scrollErr is the error of a scroll that handed its hits to use: use's
// own as it is, a timeout as ErrTimeout, failed shards as ErrPartial.
func scrollErr(what string, err, useErr error) error {
	switch {
	case err == nil || err == useErr:
		return err
	case errors.Is(err, opensearch.ErrTimedOut), errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("%s: %w", what, ErrTimeout)
	case errors.Is(err, opensearch.ErrShardsFailed):
		return fmt.Errorf("%s: %w: %w", what, err, ErrPartial)
	}
	return fmt.Errorf("%s: %w", what, err)
}

// maxTreeDocs bounds the hour tree versions read at once: 24 per partition
// and day.
const maxTreeDocs = 10000

// hourTree is an hour partition tree document's version, hour, partition
// and digest (indices.TreeDigest: the sources of its function table; empty
// when written before function tables).
type hourTree struct {
	indices.TreeSource
	Time      time.Time
	Partition int32
	Digest    string
}

// hourTreeVersions reads the versions and digests of the hour partition
// trees of typ in hours from their metadata and doc values: their _source,
// which holds the tree, is not loaded. nil when there are more than
// maxTreeDocs.
func (s *Store) hourTreeVersions(ctx context.Context, idx []string, typ record.ProfileType, hours TimeRange) ([]hourTree, error) {
	return s.treeVersions(ctx, idx, typ, indices.ResolutionHour, timeFilter(hours))
}

// treeVersions is hourTreeVersions for the partition trees of resolution
// res in when.
func (s *Store) treeVersions(ctx context.Context, idx []string, typ record.ProfileType, res string, when Query) ([]hourTree, error) {
	var resp struct {
		Hits struct {
			Hits []struct {
				ID          string `json:"_id"`
				SeqNo       int64  `json:"_seq_no"`
				PrimaryTerm int64  `json:"_primary_term"`
				Fields      struct {
					Timestamp []string `json:"@timestamp"`
					Partition []int32  `json:"partition"`
					Digest    []string `json:"digest"`
				} `json:"fields"`
			} `json:"hits"`
		} `json:"hits"`
	}
	req := &Request{Size: maxTreeDocs, TrackTotalHits: false, SeqNoPrimaryTerm: true, Source: &Source{None: true},
		Query:          allOf([]Query{term("kind", indices.KindPartitionTree), term("type", string(typ)), term("resolution", res), when}, nil),
		DocvalueFields: []DocvalueField{{Field: "@timestamp", Format: "epoch_millis"}, {Field: "partition"}, {Field: "digest"}}}
	if err := s.search(ctx, idx, req, &resp, "hits.hits._id", "hits.hits._seq_no", "hits.hits._primary_term", "hits.hits.fields"); err != nil {
		return nil, fmt.Errorf("%s tree versions: %w", res, err)
	}
	if len(resp.Hits.Hits) >= maxTreeDocs {
		return nil, nil // too many to check
	}
	out := make([]hourTree, 0, len(resp.Hits.Hits))
	for _, h := range resp.Hits.Hits {
		var partition int32
		if len(h.Fields.Partition) == 1 {
			partition = h.Fields.Partition[0]
		}
		if len(h.Fields.Timestamp) != 1 {
			return nil, fmt.Errorf("%s tree %s: no @timestamp", res, h.ID)
		}
		ms, err := strconv.ParseInt(h.Fields.Timestamp[0], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("%s tree %s: @timestamp %q: %w", res, h.ID, h.Fields.Timestamp[0], err)
		}
		t := hourTree{TreeSource: indices.TreeSource{ID: h.ID, SeqNo: h.SeqNo, PrimaryTerm: h.PrimaryTerm},
			Time: time.UnixMilli(ms).UTC(), Partition: partition}
		if len(h.Fields.Digest) == 1 {
			t.Digest = h.Fields.Digest[0]
		}
		out = append(out, t)
	}
	return out, nil
}

// withFrames reads the frames of sv's stacks.
func (s *Store) withFrames(ctx context.Context, sv *StackValues) (*Stacks, error) {
	ids := make([]string, 0, len(sv.Values))
	for id := range sv.Values {
		ids = append(ids, id)
	}
	frames, kinds, err := s.frames(ctx, ids)
	if err != nil {
		return nil, err
	}
	return &Stacks{StackValues: *sv, Frames: frames, Kinds: kinds}, nil
}
