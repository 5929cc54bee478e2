package store

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/stackstream/stackstream/schemas/indices"
)

// A chart of a day is mostly closed spans (settled hours, 10-minute windows
// that ended windowSettle ago) whose documents the rollup no longer
// changes. windowSeries remembers what it read of each (a unit), per
// selection, and reads a unit again only when a document of it changed:
//
//   - OpenSearch gives every indexed or overwritten document version a new
//     _seq_no, larger than every one before it on its shard. A unit read
//     when every version up to seq was visible (its index refreshed after
//     seq was checkpointed), holding none above seq, has a new version
//     exactly when a document of its span has a _seq_no above seq: a
//     range on _seq_no, which finds the few written since without summing
//     the rest (1-3 ms for the fleet day, against 50 ms to count them).
//   - A deletion leaves no version to find. The shard's primary counts its
//     delete operations: while that count, the primary's node and its term
//     are those seen when the unit was read (or last counted), nothing was
//     deleted; otherwise the units' documents are counted again.
//
// A unit whose index has several shards (several sequences) is read, not
// remembered.

// unitKey names a unit: a settled hour or a closed 10-minute window.
type unitKey struct {
	start int64 // unix ms
	hour  bool
}

func (k unitKey) span() TimeRange {
	from := time.UnixMilli(k.start).UTC()
	if k.hour {
		return TimeRange{From: from, To: from.Add(time.Hour)}
	}
	return TimeRange{From: from, To: from.Add(tenMinutes)}
}

// resolutions are the documents of a unit: coarse ones rank the groups
// (an hour's hourly documents, a window's 10-minute ones) and are checked
// against the fine ones (the hour's 10-minute documents, the window's
// minutes).
func (k unitKey) resolutions() (coarse, fine string) {
	if k.hour {
		return indices.ResolutionHour, indices.ResolutionTenMinutes
	}
	return indices.ResolutionTenMinutes, indices.ResolutionMinute
}

// closedUnits are the units of a chart: each hour of hours (when whole) and
// each 10-minute window of closed.
func closedUnits(hours TimeRange, whole bool, closed []TimeRange) []unitKey {
	var out []unitKey
	for h := hours.From; whole && h.Before(hours.To); h = h.Add(time.Hour) {
		out = append(out, unitKey{start: h.UnixMilli(), hour: true})
	}
	for _, r := range closed {
		for w := r.From; w.Before(r.To); w = w.Add(tenMinutes) {
			out = append(out, unitKey{start: w.UnixMilli()})
		}
	}
	return out
}

// closedUnit is what a chart reads of a unit's documents of its selection.
type closedUnit struct {
	sums map[string]spanSums // per resolution, per 10-minute window (an hourly document at its hour)
	docs int64               // documents of both resolutions
	// lines are the sums of the groups charted so far, per resolution
	// (10-minute documents, and an hour's hourly one) as sums are.
	lines map[string]map[string]spanSums
	// index is the physical index read and its state then (mark.uuid
	// empty: not remembered); seq bounds the _seq_no of every version
	// read, and of none not read.
	index string
	mark  indexMark
	seq   int64
}

// closedEntry is what is remembered of a selection: its units, the
// groups' sums over the units of the chart read last (rank) and the groups
// it charted (top: the units read next read their lines too).
type closedEntry struct {
	units map[unitKey]closedUnit
	rank  rankBlock
	top   []string
}

// rankBlock is each group's sum of the coarse documents of units.
type rankBlock struct {
	units  map[unitKey]bool
	groups map[string]float64
}

// The units remembered: per chart selection, those read last, at most
// maxClosedCharts selections and about maxClosedBytes (a day of 1,000
// hosts by host is about 2 MB).
const (
	maxClosedCharts = 1000
	maxClosedBytes  = 64 << 20
)

func closedCacheKey(sel Selection, groupBy string) string {
	return fmt.Sprintf("%s|%s|%s", sel.Type, sel.Selector, groupBy)
}

// closedWindows returns the units keys of sel grouped by groupBy and each
// group's sum over them: from memory when their documents have not changed,
// else read now (and remembered when their index allows it). remembered
// counts the units answered from memory. The groups' sums are remembered
// for the units of the last chart: a chart of the same units reads none, a
// chart of more reads the others' and adds them, any other (a unit gone out
// of the range or changed) reads them all again, one sum per group.
func (s *Store) closedWindows(ctx context.Context, sel Selection, groupBy string, keys []unitKey) (units map[unitKey]closedUnit, groups map[string]float64, remembered int, err error) {
	units = make(map[unitKey]closedUnit, len(keys))
	if len(keys) == 0 {
		return units, map[string]float64{}, 0, nil
	}
	aliases := map[string]bool{}
	for _, k := range keys {
		aliases[s.names.Rollups(k.span().From)] = true
	}
	states, err := s.indexStates(ctx, aliases)
	if err != nil {
		return nil, nil, 0, err
	}
	cacheKey := closedCacheKey(sel, groupBy)
	old, _ := s.closed.Get(cacheKey)
	held := map[unitKey]closedUnit{}
	var missing []unitKey
	for _, k := range keys {
		st := states[s.names.Rollups(k.span().From)]
		if u, ok := old.units[k]; ok && u.mark.sameIndex(st.mark) && u.index == st.physical {
			held[k] = u
		} else {
			missing = append(missing, k)
		}
	}
	wanted := make(map[unitKey]bool, len(keys))
	for _, k := range keys {
		wanted[k] = true
	}
	block := old.rank
	rebuild := block.units == nil
	for k := range block.units {
		rebuild = rebuild || !wanted[k]
	}
	// Before any read: what they see must hold every version up to the
	// checkpoints remembered with the units.
	remember, err := s.refreshed(ctx, missing, states)
	if err != nil {
		return nil, nil, 0, err
	}
	var (
		wg   sync.WaitGroup
		read map[unitKey]closedUnit
		errs [3]error
	)
	wg.Go(func() { held, errs[0] = s.unchangedUnits(ctx, sel, groupBy, held, states) })
	wg.Go(func() { read, errs[1] = s.readUnits(ctx, sel, groupBy, missing, states, remember, old.top) })
	if rebuild {
		wg.Go(func() { groups, errs[2] = s.unitGroups(ctx, sel, groupBy, keys, states) })
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, nil, 0, err
		}
	}
	var changed []unitKey
	for _, k := range keys {
		if _, ok := held[k]; !ok {
			if _, ok := read[k]; !ok {
				changed = append(changed, k)
			}
		}
	}
	if len(changed) > 0 {
		// Read at this point, their versions may be newer than the
		// checkpoint read before: indexStates again, for their seq.
		if states, err = s.indexStates(ctx, aliases); err != nil {
			return nil, nil, 0, err
		}
		if remember, err = s.refreshed(ctx, changed, states); err != nil {
			return nil, nil, 0, err
		}
		again, err := s.readUnits(ctx, sel, groupBy, changed, states, remember, old.top)
		if err != nil {
			return nil, nil, 0, err
		}
		maps.Copy(read, again)
	}
	maps.Copy(units, held)
	maps.Copy(units, read)
	if rebuild && len(changed) > 0 {
		groups = nil // read before some units were read again: again
	}
	if groups == nil {
		// The sums remembered hold when every unit of them is unchanged
		// since; the units' added are read.
		valid := !rebuild
		for k := range block.units {
			_, ok := held[k]
			valid = valid && ok
		}
		groups = map[string]float64{}
		more := keys
		if valid {
			groups = maps.Clone(block.groups)
			more = nil
			for _, k := range keys {
				if !block.units[k] {
					more = append(more, k)
				}
			}
		}
		if len(more) > 0 {
			add, err := s.unitGroups(ctx, sel, groupBy, more, states)
			if err != nil {
				return nil, nil, 0, err
			}
			for g, v := range add {
				groups[g] += v
			}
		}
	}

	// Remember this chart's units, and those of others of the same
	// selection that do not overlap them, from a day before on.
	keep := map[unitKey]closedUnit{}
	first := keys[0].start
	for _, k := range keys {
		first = min(first, k.start)
	}
	horizon := time.UnixMilli(first).Add(-24 * time.Hour)
	for k, u := range old.units {
		if !k.span().From.Before(horizon) && !overlaps(k, keys) {
			keep[k] = u
		}
	}
	for k, u := range units {
		if u.mark.uuid != "" {
			keep[k] = u
		}
	}
	entry := closedEntry{units: keep, rank: rankBlock{units: wanted, groups: groups}, top: old.top}
	s.closed.Put(cacheKey, entry, entry.bytes())
	return units, groups, len(held), nil
}

// bytes is about what e holds in memory.
func (e closedEntry) bytes() int {
	n := 64 + 64*len(e.rank.units) + 48*len(e.rank.groups) + 16*len(e.top)
	for g := range e.rank.groups {
		n += len(g)
	}
	for _, g := range e.top {
		n += len(g)
	}
	for _, u := range e.units {
		n += u.bytes()
	}
	return n
}

// unitGroups sums each group's coarse documents of the units keys (up to
// MaxGroups groups, as groupTotals).
func (s *Store) unitGroups(ctx context.Context, sel Selection, groupBy string, keys []unitKey, states map[string]indexState) (map[string]float64, error) {
	p := seriesPlan{
		indices: s.unitIndices(keys, states), query: unitsQuery(sel, groupBy, keys, coarseResolution), aggs: Aggs{"v": sumOf("value")},
		value: func(b seriesBucket, _ time.Duration) float64 { return b.V.Value },
	}
	totals, _, _, err := s.groupTotals(ctx, p, groupBy, 0)
	if err != nil {
		return nil, fmt.Errorf("rank closed windows: %w", err)
	}
	out := make(map[string]float64, len(totals))
	for _, g := range totals {
		out[g.key] = g.value
	}
	return out, nil
}

// unitIndices are the indices holding units keys: the physical ones where
// known, else the aliases.
func (s *Store) unitIndices(keys []unitKey, states map[string]indexState) []string {
	set := map[string]bool{}
	for _, k := range keys {
		alias := s.names.Rollups(k.span().From)
		if st := states[alias]; st.physical != "" {
			set[st.physical] = true
		} else {
			set[alias] = true
		}
	}
	out := make([]string, 0, len(set))
	for i := range set {
		out = append(out, i)
	}
	return out
}

// overlaps reports whether k's span meets any of keys'.
func overlaps(k unitKey, keys []unitKey) bool {
	r := k.span()
	for _, o := range keys {
		if other := o.span(); other.From.Before(r.To) && r.From.Before(other.To) {
			return true
		}
	}
	return false
}

// bytes is about what u holds in memory.
func (u closedUnit) bytes() int {
	n := 64
	for _, sums := range u.sums {
		n += 48 * len(sums)
	}
	for g, byRes := range u.lines {
		n += len(g) + 48
		for _, sums := range byRes {
			n += 48 * len(sums)
		}
	}
	return n
}

// indexState is what a chart needs of a monthly rollups index.
type indexState struct {
	physical string
	mark     indexMark
	// checkpoint is the primary's global checkpoint: every operation up
	// to it was applied on every in-sync copy and is never rolled back.
	checkpoint int64
	shards     int
}

// indexMark identifies an index and its primary's count of delete
// operations (counted since the primary started: its node and term say
// which start).
type indexMark struct {
	uuid, node    string
	term, deletes int64
}

// sameIndex: the same index and primary, deletions aside.
func (m indexMark) sameIndex(o indexMark) bool {
	return m.uuid != "" && m.uuid == o.uuid && m.node == o.node && m.term == o.term
}

// indexStates reads the physical index, its mark, shard count and
// checkpoint behind each alias (missing: no such index).
func (s *Store) indexStates(ctx context.Context, aliases map[string]bool) (map[string]indexState, error) {
	names := make([]string, 0, len(aliases))
	for a := range aliases {
		names = append(names, a)
	}
	var ans struct {
		Indices map[string]struct {
			UUID   string `json:"uuid"`
			Shards map[string][]struct {
				Routing struct {
					Primary bool   `json:"primary"`
					Node    string `json:"node"`
				} `json:"routing"`
				Indexing struct {
					DeleteTotal int64 `json:"delete_total"`
				} `json:"indexing"`
				SeqNo struct {
					GlobalCheckpoint int64 `json:"global_checkpoint"`
				} `json:"seq_no"`
				RetentionLeases struct {
					PrimaryTerm int64 `json:"primary_term"`
				} `json:"retention_leases"`
			} `json:"shards"`
		} `json:"indices"`
	}
	path := "/" + strings.Join(names, ",") + "/_stats/indexing?level=shards&ignore_unavailable=true&allow_no_indices=true" +
		"&filter_path=indices.*.uuid,indices.*.shards.*.routing.primary,indices.*.shards.*.routing.node," +
		"indices.*.shards.*.indexing.delete_total,indices.*.shards.*.seq_no.global_checkpoint,indices.*.shards.*.retention_leases.primary_term"
	if err := s.do(ctx, http.MethodGet, path, nil, &ans); errors.Is(err, ErrForbidden) {
		return map[string]indexState{}, nil // no right to index stats: nothing remembered
	} else if err != nil {
		return nil, fmt.Errorf("rollups index states: %w", err)
	}
	out := map[string]indexState{}
	seen := map[string]int{}
	for physical, ix := range ans.Indices {
		_, alias, ok := s.names.Generation(physical)
		if !ok {
			continue
		}
		seen[alias]++
		st := indexState{physical: physical, shards: len(ix.Shards), checkpoint: -1}
		for _, copies := range ix.Shards {
			for _, c := range copies {
				if c.Routing.Primary {
					st.checkpoint = c.SeqNo.GlobalCheckpoint
					st.mark = indexMark{uuid: ix.UUID, node: c.Routing.Node, term: c.RetentionLeases.PrimaryTerm, deletes: c.Indexing.DeleteTotal}
				}
			}
		}
		out[alias] = st
	}
	for alias, n := range seen {
		if n > 1 { // an alias over two indices (mid-swap): read, not remembered
			out[alias] = indexState{physical: alias}
		}
	}
	return out, nil
}

// rememberable: a unit of this index can be checked by _seq_no (one
// sequence: one shard) from its checkpoint on.
func (st indexState) rememberable() bool {
	return st.mark.uuid != "" && st.mark.node != "" && st.shards == 1 && st.checkpoint >= 0
}

// unitsQuery selects the documents of units of the resolutions only
// gives, one clause per run of adjacent units of a kind (a disjunction of
// one clause per unit costs OpenSearch 20-30 times more).
func unitsQuery(sel Selection, groupBy string, keys []unitKey, only func(unitKey) []string) Query {
	keys = slices.Clone(keys)
	slices.SortFunc(keys, func(x, y unitKey) int { return cmp.Compare(x.start, y.start) })
	var reads []Query
	for i := 0; i < len(keys); {
		r := keys[i].span()
		j := i + 1
		for ; j < len(keys) && keys[j].hour == keys[i].hour && keys[j].span().From.Equal(r.To); j++ {
			r.To = keys[j].span().To
		}
		reads = append(reads, allOf([]Query{termsOf("resolution", only(keys[i])), timeFilter(r)}, nil))
		i = j
	}
	return windowQuery(sel, groupBy, anyOf(reads...))
}

func bothResolutions(k unitKey) []string {
	coarse, fine := k.resolutions()
	return []string{coarse, fine}
}

func coarseResolution(k unitKey) []string {
	coarse, _ := k.resolutions()
	return []string{coarse}
}

// unchangedUnits are the units held whose documents did not change since
// they were read (see the top of this file), with their marks brought to
// states when their documents were counted. A unit with a newer version is
// left out; when deletions call for a count and it differs, the others are
// counted again without the units found newer, and all are left out if it
// still differs.
func (s *Store) unchangedUnits(ctx context.Context, sel Selection, groupBy string, held map[unitKey]closedUnit, states map[string]indexState) (map[unitKey]closedUnit, error) {
	held = maps.Clone(held)
	for len(held) > 0 {
		keys := make([]unitKey, 0, len(held))
		var docs int64
		count := false
		since := map[string]int64{} // physical index -> lowest seq held
		for k, u := range held {
			keys = append(keys, k)
			docs += u.docs
			count = count || u.mark.deletes != states[s.names.Rollups(k.span().From)].mark.deletes
			if seq, ok := since[u.index]; !ok || u.seq < seq {
				since[u.index] = u.seq
			}
		}
		var newer []Query
		var idx []string
		for index, seq := range since {
			idx = append(idx, index)
			newer = append(newer, allOf([]Query{term("_index", index), map[string]any{"range": map[string]any{"_seq_no": map[string]any{"gt": seq}}}}, nil))
		}
		type buckets struct {
			Buckets []struct {
				Key int64    `json:"key"`
				Seq sumValue `json:"seq"`
			} `json:"buckets"`
		}
		var ans struct {
			Hits         hitsTotal `json:"hits"`
			Aggregations struct {
				Time  buckets `json:"time"`
				Newer struct {
					Time buckets `json:"time"`
				} `json:"newer"`
			} `json:"aggregations"`
		}
		perWindow := Aggs{"time": histogram(tenMinutes, Aggs{"seq": {Max: &Metric{Field: "_seq_no"}}})}
		// Without deletions, the newer versions alone: the _seq_no range
		// leads, so few documents are read; with them, every document is
		// counted.
		req := aggsRequest(allOf([]Query{unitsQuery(sel, groupBy, keys, bothResolutions), anyOf(newer...)}, nil), perWindow)
		found := &ans.Aggregations.Time
		if count {
			req = &Request{TrackTotalHits: true, Query: unitsQuery(sel, groupBy, keys, bothResolutions), Aggs: Aggs{"newer": {Filter: anyOf(newer...), Aggs: perWindow}}}
			found = &ans.Aggregations.Newer.Time
		}
		if err := s.search(ctx, idx, req, &ans, "hits.total", "aggregations.time.buckets", "aggregations.newer.time.buckets"); err != nil {
			return nil, fmt.Errorf("check closed windows: %w", err)
		}
		changed := false
		for _, b := range found.Buckets {
			t := time.UnixMilli(b.Key)
			for k, u := range held {
				if r := k.span(); !t.Before(r.From) && t.Before(r.To) && int64(b.Seq.Value) > u.seq {
					delete(held, k)
					changed = true
				}
			}
		}
		switch {
		case changed && count:
			continue // count the others again
		case count && ans.Hits.Total.Value != docs:
			return nil, nil
		case count:
			for k, u := range held {
				u.mark.deletes = states[s.names.Rollups(k.span().From)].mark.deletes
				held[k] = u
			}
		}
		return held, nil
	}
	return held, nil
}

// readUnits reads the units keys: the sums per 10-minute window of both
// resolutions and the lines of the groups top (those the selection's last
// chart drew, most likely drawn again: unitLines then reads nothing). A
// unit is remembered (mark set) when remember (refreshed after states were
// read: every version up to the checkpoint is visible), its index is
// rememberable and it holds no version above the checkpoint.
func (s *Store) readUnits(ctx context.Context, sel Selection, groupBy string, keys []unitKey, states map[string]indexState, remember bool, top []string) (map[unitKey]closedUnit, error) {
	out := make(map[unitKey]closedUnit, len(keys))
	if len(keys) == 0 {
		return out, nil
	}
	for _, k := range keys {
		st := states[s.names.Rollups(k.span().From)]
		u := closedUnit{sums: map[string]spanSums{}}
		if remember && st.rememberable() {
			u.index, u.mark, u.seq = st.physical, st.mark, st.checkpoint
		}
		out[k] = u
	}
	sums, lines, err := s.sumsPerWindow(ctx, s.unitIndices(keys, states), unitsQuery(sel, groupBy, keys, bothResolutions), groupBy, top)
	if err != nil {
		return nil, fmt.Errorf("read closed windows: %w", err)
	}
	if len(top) > 0 {
		for k, u := range out {
			u.lines = make(map[string]map[string]spanSums, len(top))
			for _, g := range top {
				u.lines[g] = map[string]spanSums{} // read: none is none
			}
			out[k] = u
		}
		addLines(out, lines)
	}
	maxSeq := map[unitKey]int64{}
	for res, buckets := range sums {
		for _, b := range buckets {
			k, ok := unitOf(b.window, res, out)
			if !ok {
				continue
			}
			u := out[k]
			if u.sums[res] == nil {
				u.sums[res] = spanSums{}
			}
			u.sums[res][b.window] = sumCount{b.sum, b.count}
			u.docs += b.count
			maxSeq[k] = max(maxSeq[k], b.seq)
			out[k] = u
		}
	}
	for k, u := range out {
		if maxSeq[k] > u.seq { // a version the checkpoint does not cover yet
			u.mark = indexMark{}
			out[k] = u
		}
	}
	return out, nil
}

// refreshed refreshes the indices of the units keys that can be
// remembered, so that every version up to the checkpoints of states is
// visible to the reads after it; false when the user may not refresh.
func (s *Store) refreshed(ctx context.Context, keys []unitKey, states map[string]indexState) (bool, error) {
	set := map[string]bool{}
	for _, k := range keys {
		if st := states[s.names.Rollups(k.span().From)]; st.rememberable() {
			set[st.physical] = true
		}
	}
	if len(set) == 0 {
		return true, nil
	}
	err := s.do(ctx, http.MethodPost, "/"+strings.Join(slices.Collect(maps.Keys(set)), ",")+"/_refresh?ignore_unavailable=true", nil, nil)
	if errors.Is(err, ErrForbidden) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("refresh rollups: %w", err)
	}
	return true, nil
}

// unitOf finds the unit of units holding a document of resolution res
// starting at ms.
func unitOf(ms int64, res string, units map[unitKey]closedUnit) (unitKey, bool) {
	t := time.UnixMilli(ms)
	if k := (unitKey{start: t.Truncate(time.Hour).UnixMilli(), hour: true}); res != indices.ResolutionMinute {
		if _, ok := units[k]; ok {
			return k, true
		}
	}
	k := unitKey{start: t.Truncate(tenMinutes).UnixMilli()}
	_, ok := units[k]
	return k, ok
}

// windowGroup is a group's sum and count of the documents of one
// 10-minute window.
type windowGroup struct {
	window int64
	key    string
	sum    float64
	count  int64
}

// unitGroupsPage is the (window, group) pairs per page: a day of 1,000 hosts
// in one (each page passes over every document again).
const unitGroupsPage = 50000

// groupsPerWindow pages through every (10-minute window, group) of query's
// documents with its value sum and document count.
func (s *Store) groupsPerWindow(ctx context.Context, idx []string, query Query, groupBy string) ([]windowGroup, error) {
	var out []windowGroup
	var after map[string]any
	for {
		aggs := Aggs{"groups": {
			Composite: &Composite{Size: unitGroupsPage, After: after, Sources: []map[string]Agg{
				{"t": {DateHistogram: &DateHistogram{Field: "@timestamp", FixedInterval: fmt.Sprintf("%ds", int64(tenMinutes/time.Second))}}},
				{"g": {Terms: &Terms{Field: groupBy}}},
			}},
			Aggs: Aggs{"v": sumOf("value")},
		}}
		var ans struct {
			Aggregations struct {
				Groups struct {
					AfterKey map[string]any `json:"after_key"`
					Buckets  []struct {
						Key struct {
							T int64  `json:"t"`
							G string `json:"g"`
						} `json:"key"`
						DocCount int64    `json:"doc_count"`
						V        sumValue `json:"v"`
					} `json:"buckets"`
				} `json:"groups"`
			} `json:"aggregations"`
		}
		if err := s.search(ctx, idx, aggsRequest(query, aggs), &ans, "aggregations.groups.after_key", "aggregations.groups.buckets"); err != nil {
			return nil, fmt.Errorf("groups per window: %w", err)
		}
		for _, b := range ans.Aggregations.Groups.Buckets {
			out = append(out, windowGroup{window: b.Key.T, key: b.Key.G, sum: b.V.Value, count: b.DocCount})
		}
		after = ans.Aggregations.Groups.AfterKey
		if len(ans.Aggregations.Groups.Buckets) < unitGroupsPage || after == nil {
			return out, nil
		}
	}
}

// windowBucket is a resolution's sum of value, document count and largest
// _seq_no in a 10-minute window.
type windowBucket struct {
	window     int64
	sum        float64
	count, seq int64
}

// sumsPerWindow sums value, counts the documents and finds the largest
// _seq_no per resolution and 10-minute window of query's documents, and
// sums the lines of the groups top (of groupBy) per 10-minute window of
// the hourly and 10-minute documents (per resolution, per group).
func (s *Store) sumsPerWindow(ctx context.Context, idx []string, query Query, groupBy string, top []string) (map[string][]windowBucket, map[string]map[string]spanSums, error) {
	var ans struct {
		Aggregations struct {
			Res struct {
				Buckets []struct {
					Key   string        `json:"key"`
					Time  windowBuckets `json:"time"`
					Lines struct {
						Groups keyedWindows `json:"groups"`
					} `json:"lines"`
				} `json:"buckets"`
			} `json:"res"`
		} `json:"aggregations"`
	}
	perRes := Aggs{"time": histogram(tenMinutes, Aggs{"v": sumOf("value"), "seq": {Max: &Metric{Field: "_seq_no"}}})}
	if len(top) > 0 {
		perRes["lines"] = Agg{
			Filter: allOf([]Query{termsOf(groupBy, top), termsOf("resolution", []string{indices.ResolutionHour, indices.ResolutionTenMinutes})}, nil),
			Aggs: Aggs{"groups": {
				Terms: &Terms{Field: groupBy, Size: len(top)},
				Aggs:  Aggs{"time": histogram(tenMinutes, Aggs{"v": sumOf("value")})},
			}},
		}
	}
	aggs := Aggs{"res": {Terms: &Terms{Field: "resolution", Size: 3}, Aggs: perRes}}
	if err := s.search(ctx, idx, aggsRequest(query, aggs), &ans, "aggregations.res.buckets"); err != nil {
		return nil, nil, fmt.Errorf("sums per window: %w", err)
	}
	out := map[string][]windowBucket{}
	lines := map[string]map[string]spanSums{}
	for _, r := range ans.Aggregations.Res.Buckets {
		for _, b := range r.Time.Buckets {
			out[r.Key] = append(out[r.Key], windowBucket{b.Key, b.V.Value, b.DocCount, int64(b.Seq.Value)})
		}
		if len(r.Lines.Groups.Buckets) > 0 {
			lines[r.Key] = r.Lines.Groups.byKey()
		}
	}
	return out, lines, nil
}

// addLines adds to units' lines (made for every group read; others are
// left out) the sums of lines, per resolution, per group, per 10-minute
// window, each to the unit holding its window.
func addLines(units map[unitKey]closedUnit, lines map[string]map[string]spanSums) {
	for res, groups := range lines {
		for g, sums := range groups {
			for ms, sc := range sums {
				k, ok := unitOf(ms, res, units)
				if !ok || units[k].lines[g] == nil {
					continue
				}
				if units[k].lines[g][res] == nil {
					units[k].lines[g][res] = spanSums{}
				}
				units[k].lines[g][res][ms] = sc
			}
		}
	}
}

// unitLines adds to units the sums of the groups keys (lines), reading
// those not held yet in one search, and remembers them with the units and
// keys as the selection's top.
func (s *Store) unitLines(ctx context.Context, sel Selection, groupBy string, keys []string, units map[unitKey]closedUnit) error {
	var missing []unitKey
	for k, u := range units {
		for _, g := range keys {
			if _, ok := u.lines[g]; !ok {
				missing = append(missing, k)
				break
			}
		}
	}
	cacheKey := closedCacheKey(sel, groupBy)
	if len(missing) == 0 || len(keys) == 0 {
		if old, ok := s.closed.Get(cacheKey); ok && !slices.Equal(old.top, keys) {
			next := closedEntry{units: old.units, rank: old.rank, top: slices.Clone(keys)}
			s.closed.Put(cacheKey, next, next.bytes())
		}
		return nil
	}
	idxSet := map[string]bool{}
	for _, k := range missing {
		if u := units[k]; u.index != "" {
			idxSet[u.index] = true
		} else {
			idxSet[s.names.Rollups(k.span().From)] = true
		}
	}
	idx := slices.Collect(maps.Keys(idxSet))
	var ans struct {
		Aggregations struct {
			Res struct {
				Buckets []struct {
					Key    string       `json:"key"`
					Groups keyedWindows `json:"groups"`
				} `json:"buckets"`
			} `json:"res"`
		} `json:"aggregations"`
	}
	aggs := Aggs{"res": {
		Terms: &Terms{Field: "resolution", Size: 2},
		Aggs: Aggs{"groups": {
			Terms: &Terms{Field: groupBy, Size: len(keys)},
			Aggs:  Aggs{"time": histogram(tenMinutes, Aggs{"v": sumOf("value")})},
		}},
	}}
	// A window's 10-minute documents; an hour's and its hourly one.
	query := allOf([]Query{unitsQuery(sel, groupBy, missing, bothResolutions), termsOf(groupBy, keys),
		termsOf("resolution", []string{indices.ResolutionHour, indices.ResolutionTenMinutes})}, nil)
	if err := s.search(ctx, idx, aggsRequest(query, aggs), &ans, "aggregations.res.buckets.key",
		"aggregations.res.buckets.groups.buckets.key", "aggregations.res.buckets.groups.buckets.time.buckets"); err != nil {
		return fmt.Errorf("lines of closed windows: %w", err)
	}
	read := make(map[unitKey]closedUnit, len(missing))
	for _, k := range missing {
		u := units[k]
		u.lines = maps.Clone(u.lines)
		if u.lines == nil {
			u.lines = map[string]map[string]spanSums{}
		}
		for _, g := range keys {
			u.lines[g] = map[string]spanSums{} // read: none is none
		}
		read[k] = u
	}
	lines := map[string]map[string]spanSums{}
	for _, r := range ans.Aggregations.Res.Buckets {
		lines[r.Key] = r.Groups.byKey()
	}
	addLines(read, lines)
	maps.Copy(units, read)
	// Remember them with units still held as read (not read again since).
	if old, ok := s.closed.Get(cacheKey); ok {
		next := closedEntry{units: maps.Clone(old.units), rank: old.rank, top: slices.Clone(keys)}
		for k, u := range read {
			if o, ok := next.units[k]; ok && o.seq == u.seq && o.mark == u.mark && u.mark.uuid != "" {
				o.lines = u.lines
				next.units[k] = o
			}
		}
		s.closed.Put(cacheKey, next, next.bytes())
	}
	return nil
}
