// Package daytrees merges a settled day's hour partition trees into one
// day tree per (type, partition) (schemas/indices/daytrees.go), so a
// fleet's day is read as one tree per partition instead of 24, with its
// function table (schemas/indices/functable.go) for top tables, and the
// day trees of a type into the head of the fleet's day
// (schemas/indices/treehead.go), so a fleet day's flame graph reads one
// small document; and each settled hour's partition trees into the head of
// the fleet's hour, and each settled 10-minute window's and minute's
// partition trees into the head of the fleet's window or minute
// (fleetheads.go), so a fleet-wide range that is not one whole day reads
// a small document per hour, per 10-minute window and per minute of its
// edges.
//
// Any rollup instance may run it, several at once: a day tree is a pure
// function of the hour trees it merged, written under a deterministic _id,
// and it records their versions (indices.TreeSources), so a pass rewrites
// it only when an hour tree changed since, and the query uses it only when
// its sources match the hours as they are.
package daytrees

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/opensearch-project/opensearch-go/v4/opensearchapi"

	"github.com/stackstream/stackstream/pkg/opensearch"
	"github.com/stackstream/stackstream/schemas/indices"
)

// Settle is how long after a day ends its hours are taken as written: the
// last hour is written once the rollup's watermark passes its end by the
// allowed lateness (2 minutes by default); a later rewrite only makes the
// day tree stale until the next pass.
const Settle = 30 * time.Minute

// maxHourDocs bounds the hour trees of one day read at once: 24 per type
// and partition.
const maxHourDocs = 10000

// Compactor writes day trees for the last Days settled days, and the
// fleet's hour, 10-minute window and minute heads for their hours,
// windows and minutes and today's settled ones.
type Compactor struct {
	Client *opensearchapi.Client
	Names  indices.Names
	Days   int
	Now    func() time.Time
}

type groupKey struct {
	typ       string
	partition int32
}

// Apply writes the day trees, day heads, hour heads, window heads and
// minute heads that are missing or stale and returns how many it wrote.
func (c *Compactor) Apply(ctx context.Context) (int, error) {
	written := 0
	now := c.Now().UTC()
	for d := 1; d <= c.Days; d++ {
		day := now.Truncate(24*time.Hour).AddDate(0, 0, -d)
		if now.Before(day.Add(24*time.Hour + Settle)) {
			continue
		}
		n, err := c.compactDay(ctx, day)
		written += n
		if err != nil {
			return written, fmt.Errorf("day trees of %s: %w", day.Format(time.DateOnly), err)
		}
	}
	// Hour, 10-minute window and minute heads of the same days (and
	// today's settled ones): every range a fleet-wide flame graph reads
	// from heads. Minutes whose trees the minute tree retention deleted
	// write nothing: a search of 10 minutes finds no tree.
	first := now.Truncate(24*time.Hour).AddDate(0, 0, -c.Days)
	for _, h := range []fleetHeads{hourHeads, windowHeads, minuteHeads} {
		n, err := c.writeFleetHeads(ctx, h, first, now)
		written += n
		if err != nil {
			return written, err
		}
	}
	return written, nil
}

// ErrPartial is a search answer OpenSearch gave up on (timed out) or
// that lacks some shards: a day tree made from it would miss hours.
var ErrPartial = errors.New("partial search answer")

type hit struct {
	ID          string `json:"_id"`
	SeqNo       int64  `json:"_seq_no"`
	PrimaryTerm int64  `json:"_primary_term"`
	Source      struct {
		Timestamp time.Time `json:"@timestamp"`
		Type      string    `json:"type"`
		Partition int32     `json:"partition"`
		Sources   string    `json:"sources"`
		Tree      []byte    `json:"tree"`
	} `json:"_source"`
}

func (c *Compactor) search(ctx context.Context, index string, body map[string]any) ([]hit, error) {
	var out struct {
		answer
		Hits struct {
			Hits []hit `json:"hits"`
		} `json:"hits"`
	}
	if err := c.query(ctx, index, body, "hits.hits._id,hits.hits._seq_no,hits.hits._primary_term,hits.hits._source", &out, &out.answer); err != nil {
		return nil, err
	}
	return out.Hits.Hits, nil
}

// answer is what every search answer says of its completeness.
type answer struct {
	TimedOut bool `json:"timed_out"`
	Shards   struct {
		Failed int `json:"failed"`
	} `json:"_shards"`
}

// query runs the search body on index (a name or pattern) and decodes
// the answer, only filterPath of it, into out, whose answer is a; an
// answer OpenSearch gave up on or that lacks shards is ErrPartial.
func (c *Compactor) query(ctx context.Context, index string, body map[string]any, filterPath string, out any, a *answer) error {
	raw, err := json.Marshal(body)
	if err != nil {
		return err
	}
	path := "/" + index + "/_search?ignore_unavailable=true&allow_no_indices=true&filter_path=" +
		url.QueryEscape("timed_out,_shards.failed,"+filterPath)
	status, resp, err := opensearch.Raw(ctx, c.Client, http.MethodPost, path, raw)
	if err != nil {
		return err
	}
	if status != http.StatusOK {
		return fmt.Errorf("search %s: HTTP %d: %.300s", index, status, resp)
	}
	if err := json.Unmarshal(resp, out); err != nil {
		return fmt.Errorf("decode search answer: %w", err)
	}
	if a.TimedOut {
		return fmt.Errorf("search %s: timed out: %w", index, ErrPartial)
	}
	if a.Shards.Failed > 0 {
		return fmt.Errorf("search %s: %d shards failed: %w", index, a.Shards.Failed, ErrPartial)
	}
	return nil
}

func treeQuery(res string, from, to time.Time) map[string]any {
	return kindQuery(indices.KindPartitionTree, res, from, to)
}

// kindQuery finds the documents of kind and resolution res from from until to.
func kindQuery(kind, res string, from, to time.Time) map[string]any {
	return map[string]any{"bool": map[string]any{"filter": []any{
		map[string]any{"term": map[string]any{"kind": kind}},
		map[string]any{"term": map[string]any{"resolution": res}},
		map[string]any{"range": map[string]any{"@timestamp": map[string]any{"gte": from.UnixMilli(), "lt": to.UnixMilli(), "format": "epoch_millis"}}},
	}}}
}

func (c *Compactor) compactDay(ctx context.Context, day time.Time) (int, error) {
	index := c.Names.Rollups(day)
	hours, err := c.search(ctx, index, map[string]any{
		"size": maxHourDocs, "seq_no_primary_term": true, "_source": []string{"type", "partition"},
		"query": treeQuery(indices.ResolutionHour, day, day.Add(24*time.Hour)),
	})
	if err != nil {
		return 0, err
	}
	groups := map[groupKey][]hit{}
	for _, h := range hours {
		k := groupKey{h.Source.Type, h.Source.Partition}
		groups[k] = append(groups[k], h)
	}
	days, err := c.search(ctx, index, map[string]any{
		"size": maxHourDocs, "_source": []string{"type", "partition", "sources"},
		"query": treeQuery(indices.ResolutionDay, day, day.Add(time.Millisecond)),
	})
	if err != nil {
		return 0, err
	}
	tables, err := c.search(ctx, index, map[string]any{
		"size": maxHourDocs, "_source": []string{"type", "partition", "sources"},
		"query": kindQuery(indices.KindFunctionTable, indices.ResolutionDay, day, day.Add(time.Millisecond)),
	})
	if err != nil {
		return 0, err
	}
	// A day's tree and function table are written together: both when
	// either is missing or stale.
	tableSources := map[groupKey]string{}
	for _, d := range tables {
		tableSources[groupKey{d.Source.Type, d.Source.Partition}] = d.Source.Sources
	}
	current := map[groupKey]string{}
	for _, d := range days {
		if k := (groupKey{d.Source.Type, d.Source.Partition}); tableSources[k] == d.Source.Sources {
			current[k] = d.Source.Sources
		}
	}
	written, err := writeMergedDocs(ctx, c, index, groups, current, func(k groupKey, b *indices.TreeBuilder) ([]indices.RollupDoc, error) {
		tree := b.Encode()
		// The day's function table (indices.KindFunctionTable), from its
		// tree: a fleet day's top table reads one per partition.
		fns, err := indices.TreeFunctions(tree, indices.TreeLimits{})
		if err != nil {
			return nil, fmt.Errorf("function table of the day tree of partition %d: %w", k.partition, err)
		}
		return []indices.RollupDoc{{
			Timestamp: day, Resolution: indices.ResolutionDay, Kind: indices.KindPartitionTree, Type: k.typ,
			Partition: k.partition, Value: b.Total(), Tree: tree,
		}, {
			Timestamp: day, Resolution: indices.ResolutionDay, Kind: indices.KindFunctionTable, Type: k.typ,
			Partition: k.partition, Value: fns.Total, Tree: fns.Encode(indices.TableFunctions),
		}}, nil
	})
	if err != nil {
		return written, err
	}
	n, err := c.writeHeads(ctx, index, day, groups)
	return written + n, err
}

// writeMerged writes, for each group of hour trees whose fingerprint is not
// the sources current holds for it, the document doc makes of their merge
// (with those sources); it returns how many it wrote.
func writeMerged[K comparable](ctx context.Context, c *Compactor, index string, groups map[K][]hit, current map[K]string, doc func(K, *indices.TreeBuilder) indices.RollupDoc) (int, error) {
	return writeMergedDocs(ctx, c, index, groups, current, func(k K, b *indices.TreeBuilder) ([]indices.RollupDoc, error) {
		return []indices.RollupDoc{doc(k, b)}, nil
	})
}

// writeMergedDocs is writeMerged for several documents made of one merge
// (each given the sources), and counts each written.
func writeMergedDocs[K comparable](ctx context.Context, c *Compactor, index string, groups map[K][]hit, current map[K]string, docs func(K, *indices.TreeBuilder) ([]indices.RollupDoc, error)) (int, error) {
	written := 0
	for k, hs := range groups {
		sources := fingerprint(hs)
		if current[k] == sources {
			continue
		}
		b, err := c.mergeUnchanged(ctx, index, hs, sources)
		if err != nil {
			return written, err
		}
		if b == nil {
			continue
		}
		ds, err := docs(k, b)
		if err != nil {
			return written, err
		}
		for _, d := range ds {
			d.Sources = sources
			if err := c.put(ctx, index, d); err != nil {
				return written, err
			}
			written++
		}
	}
	return written, nil
}

// fingerprint is the versions of the hour trees hs, as a merge of them
// records in its sources.
func fingerprint(hs []hit) string {
	src := make([]indices.TreeSource, len(hs))
	for i, h := range hs {
		src[i] = indices.TreeSource{ID: h.ID, SeqNo: h.SeqNo, PrimaryTerm: h.PrimaryTerm}
	}
	return indices.TreeSources(src)
}

// mergeUnchanged reads the trees of the hour tree documents hs and merges
// them, or returns nil when their versions are no longer sources: the
// versions merged must be the versions fingerprinted, and an hour
// rewritten in between is merged at the next pass.
func (c *Compactor) mergeUnchanged(ctx context.Context, index string, hs []hit, sources string) (*indices.TreeBuilder, error) {
	ids := make([]string, len(hs))
	for i, h := range hs {
		ids[i] = h.ID
	}
	trees, err := c.search(ctx, index, map[string]any{
		"size": len(ids), "seq_no_primary_term": true, "_source": []string{"tree"},
		"query": map[string]any{"ids": map[string]any{"values": ids}},
	})
	if err != nil {
		return nil, err
	}
	var b indices.TreeBuilder
	for _, h := range trees {
		if err := b.AddTree(h.Source.Tree, indices.TreeLimits{}); err != nil {
			return nil, fmt.Errorf("hour tree %s: %w", h.ID, err)
		}
	}
	if fingerprint(trees) != sources {
		return nil, nil
	}
	return &b, nil
}

func (c *Compactor) put(ctx context.Context, index string, doc indices.RollupDoc) error {
	raw, err := json.Marshal(&doc)
	if err != nil {
		return err
	}
	status, resp, err := opensearch.Raw(ctx, c.Client, http.MethodPut, "/"+index+"/_doc/"+indices.RollupID(&doc), raw)
	if err != nil {
		return err
	}
	if status/100 != 2 {
		return fmt.Errorf("write %s %s: HTTP %d: %.300s", doc.Resolution, doc.Kind, status, resp)
	}
	return nil
}

// writeHeads writes, per type, the head of the day's fleet tree (every
// partition's day tree merged) when it is missing or its sources differ
// from the fingerprint of all the day's hour trees of the type. The day
// trees are read by _id (realtime: those written by this pass are not yet
// searchable); a head is written only when every partition's day tree
// merged exactly the hours as they are, else at a later pass.
func (c *Compactor) writeHeads(ctx context.Context, index string, day time.Time, groups map[groupKey][]hit) (int, error) {
	byType := map[string][]groupKey{}
	for k := range groups {
		byType[k.typ] = append(byType[k.typ], k)
	}
	written := 0
	for typ, keys := range byType {
		var all []indices.TreeSource
		partSources := map[int32]string{}
		ids := make([]string, 0, len(keys))
		for _, k := range keys {
			src := make([]indices.TreeSource, len(groups[k]))
			for i, h := range groups[k] {
				src[i] = indices.TreeSource{ID: h.ID, SeqNo: h.SeqNo, PrimaryTerm: h.PrimaryTerm}
			}
			all = append(all, src...)
			partSources[k.partition] = indices.TreeSources(src)
			d := indices.RollupDoc{Timestamp: day, Resolution: indices.ResolutionDay, Kind: indices.KindPartitionTree, Type: typ, Partition: k.partition}
			ids = append(ids, indices.RollupID(&d))
		}
		sources := indices.TreeSources(all)
		head := indices.RollupDoc{Timestamp: day, Resolution: indices.ResolutionDay, Kind: indices.KindFleetHead, Type: typ, Sources: sources}
		docs, err := c.get(ctx, index, append(ids, indices.RollupID(&head)))
		if err != nil {
			return written, err
		}
		if h := docs[len(docs)-1]; h.Found && h.Source.Sources == sources {
			continue
		}
		var b indices.TreeBuilder
		fresh := true
		for _, d := range docs[:len(docs)-1] {
			if !d.Found || d.Source.Sources != partSources[d.Source.Partition] {
				fresh = false
				break
			}
			if err := b.AddTree(d.Source.Tree, indices.TreeLimits{}); err != nil {
				return written, fmt.Errorf("day tree %s: %w", d.ID, err)
			}
		}
		if !fresh {
			continue
		}
		head.Value, head.Tree = b.Total(), b.EncodeHead(indices.HeadNodes)
		if err := c.put(ctx, index, head); err != nil {
			return written, err
		}
		written++
	}
	return written, nil
}

type gotDoc struct {
	ID     string `json:"_id"`
	Found  bool   `json:"found"`
	Source struct {
		Partition int32  `json:"partition"`
		Sources   string `json:"sources"`
		Tree      []byte `json:"tree"`
	} `json:"_source"`
}

// get reads documents by _id, in the order of ids.
func (c *Compactor) get(ctx context.Context, index string, ids []string) ([]gotDoc, error) {
	raw, err := json.Marshal(map[string]any{"ids": ids})
	if err != nil {
		return nil, err
	}
	status, resp, err := opensearch.Raw(ctx, c.Client, http.MethodPost, "/"+index+"/_mget?_source_includes=partition,sources,tree", raw)
	if err != nil {
		return nil, err
	}
	if status != http.StatusOK {
		return nil, fmt.Errorf("get day trees: HTTP %d: %.300s", status, resp)
	}
	var out struct {
		Docs []gotDoc `json:"docs"`
	}
	if err := json.Unmarshal(resp, &out); err != nil {
		return nil, fmt.Errorf("decode day trees: %w", err)
	}
	if len(out.Docs) != len(ids) {
		return nil, fmt.Errorf("get day trees: %d documents for %d ids", len(out.Docs), len(ids))
	}
	return out.Docs, nil
}
