package store

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/stackstream/stackstream/schemas/indices"
	"github.com/stackstream/stackstream/schemas/record"
)

// A fleet-wide top table sums every node of the range's trees by function;
// the rollup writes each partition tree's sums beside it as a function
// table (schemas/indices/functable.go): per partition and hour, and per
// partition and day beside the day trees. FunctionTables reads those that
// stand for their trees as they are now, the trees of the others, and the
// edges, so the caller sums a few small documents instead of the trees.

// FunctionTables reads the whole settled hours of a fleet-wide selection
// (a selector naming nothing) as function tables, handing each encoded
// table to useTable, each partition tree whose table is missing or stale
// to useTree, and the minutes around the hours as Trees does (window trees
// to useTree, the rest per stack into the result's Edges). A table is used
// only beside the tree it was made from: a day table when its sources are
// the fingerprint of its partition's hour trees as they are now (as a day
// tree), for every partition with hour trees that day; an hour table when
// its sources are its hour tree's digest. ok is false, with nothing handed
// on, when the selector names a field, the range holds no whole settled
// hour, the partition trees are incomplete, or no table stands for its
// tree (Trees then decides).
// Source is "function_tables", "(days)" when day tables were read,
// "+partition_trees" when trees stood in for tables, then the edges'
// parts as in Trees.
func (s *Store) FunctionTables(ctx context.Context, sel Selection, useTable, useTree func([]byte) error) (*TreeRead, bool, error) {
	if sel.Type == record.ProfileMemory || !sel.Selector.OnlyFields() {
		return nil, false, nil
	}
	hours, ok := hourlySpan(sel.Range)
	if !ok {
		return nil, false, nil
	}
	idx := s.rollupIndices(hours)
	hourSel := sel
	hourSel.Range = hours
	complete, err := s.treesComplete(ctx, idx, hourSel, indices.KindPartitionTree)
	if err != nil || !complete {
		return nil, false, err
	}
	trees, err := s.hourTreeVersions(ctx, idx, sel.Type, hours)
	if err != nil || trees == nil {
		return nil, false, err
	}
	tables, err := s.functionTableDocs(ctx, idx, sel.Type, hours)
	if err != nil {
		return nil, false, err
	}
	type dayKey struct {
		day       int64
		partition int32
	}
	dayVersions := map[dayKey][]indices.TreeSource{}
	for _, t := range trees {
		k := dayKey{t.Time.Truncate(24 * time.Hour).Unix(), t.Partition}
		dayVersions[k] = append(dayVersions[k], t.TreeSource)
	}
	// Whole days inside hours whose every partition's day table matches.
	dayTables := map[int64][][]byte{}
	staleDay := map[int64]bool{}
	hourTables := map[dayKey][]byte{} // by hour and partition
	hourSources := map[dayKey]string{}
	for _, t := range tables {
		if t.Resolution == indices.ResolutionHour {
			k := dayKey{t.Time.Unix(), t.Partition}
			hourTables[k], hourSources[k] = t.Table, t.Sources
			continue
		}
		k := dayKey{t.Time.Unix(), t.Partition}
		if v, ok := dayVersions[k]; !ok || indices.TreeSources(v) != t.Sources {
			staleDay[k.day] = true
			continue
		}
		dayTables[k.day] = append(dayTables[k.day], t.Table)
	}
	partitions := map[int64]int{}
	for k := range dayVersions {
		partitions[k.day]++
	}
	for day, ts := range dayTables {
		if len(ts) != partitions[day] {
			staleDay[day] = true
		}
	}
	source := "function_tables"
	read := &TreeRead{}
	for day, ts := range dayTables {
		d := time.Unix(day, 0).UTC()
		if staleDay[day] || d.Before(hours.From) || d.Add(24*time.Hour).After(hours.To) {
			delete(dayTables, day)
			continue
		}
		for _, t := range ts {
			if err := useTable(t); err != nil {
				return nil, false, err
			}
			read.Trees++
		}
		source = "function_tables(days)"
	}
	var treeIDs []string
	var useHours []dayKey
	for _, t := range trees {
		if dayTables[t.Time.Truncate(24*time.Hour).Unix()] != nil {
			continue
		}
		k := dayKey{t.Time.Unix(), t.Partition}
		if t.Digest == "" || hourSources[k] != t.Digest {
			treeIDs = append(treeIDs, t.ID)
			continue
		}
		useHours = append(useHours, k)
	}
	if len(dayTables) == 0 && len(useHours) == 0 {
		// No table stands for its tree: the trees answer (Trees reads the
		// day trees of fresh days, where this would read every hour's).
		return nil, false, nil
	}
	for _, k := range useHours {
		if err := useTable(hourTables[k]); err != nil {
			return nil, false, err
		}
		read.Trees++
	}
	if len(treeIDs) > 0 {
		n, err := s.scrollTrees(ctx, idx, hourSel, indices.KindPartitionTree, idsOf(treeIDs), s.opts.TreePage, useTree)
		if err != nil {
			return nil, false, err
		}
		if n != len(treeIDs) {
			return nil, false, fmt.Errorf("read %d of %d partition trees standing for stale function tables", n, len(treeIDs))
		}
		read.Trees += n
		source += "+partition_trees"
	}
	read.Source = "-"
	if err := s.readEdges(ctx, sel, hours, read, useTree, nil); err != nil {
		return nil, false, err
	}
	read.Source = source + strings.TrimPrefix(read.Source, "-")
	return read, true, nil
}

// functionTableDoc is a function table document.
type functionTableDoc struct {
	Time       time.Time
	Resolution string
	Partition  int32
	Sources    string
	Table      []byte
}

// functionTableDocs reads the hour and day function tables of typ in hours
// (day tables of the days starting in it).
func (s *Store) functionTableDocs(ctx context.Context, idx []string, typ record.ProfileType, hours TimeRange) ([]functionTableDoc, error) {
	var resp struct {
		Hits struct {
			Hits []struct {
				Source struct {
					Timestamp  time.Time `json:"@timestamp"`
					Resolution string    `json:"resolution"`
					Partition  int32     `json:"partition"`
					Sources    string    `json:"sources"`
					Tree       []byte    `json:"tree"`
				} `json:"_source"`
			} `json:"hits"`
		} `json:"hits"`
	}
	req := &Request{Size: maxTreeDocs, TrackTotalHits: false,
		Query: allOf([]Query{term("kind", indices.KindFunctionTable), term("type", string(typ)),
			termsOf("resolution", []string{indices.ResolutionHour, indices.ResolutionDay}), timeFilter(hours)}, nil),
		Source: &Source{Includes: []string{"@timestamp", "resolution", "partition", "sources", "tree"}}}
	if err := s.search(ctx, idx, req, &resp, "hits.hits._source"); err != nil {
		return nil, fmt.Errorf("function tables: %w", err)
	}
	out := make([]functionTableDoc, 0, len(resp.Hits.Hits))
	for _, h := range resp.Hits.Hits {
		out = append(out, functionTableDoc{Time: h.Source.Timestamp.UTC(), Resolution: h.Source.Resolution,
			Partition: h.Source.Partition, Sources: h.Source.Sources, Table: h.Source.Tree})
	}
	return out, nil
}
