package ctl

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/opensearch-project/opensearch-go/v4/opensearchapi"

	"github.com/stackstream/stackstream/schemas/indices"
)

// DocCounts are the documents of a generation (or of the serving names).
// Rollups are those the rollup consumer writes as it folds the records;
// Lifecycle those the live rollup's lifecycle writes or deletes later on
// the serving names (lifecycleDocs). A generation being filled has no
// lifecycle of its own, so at the swap two generations of the same records
// hold the same Stacks, Samples and Rollups, and their Lifecycle differs
// until the live rollup's passes have run on the new one.
type DocCounts struct {
	Stacks, Samples, Rollups, Lifecycle int64
}

// docCountsLegend names DocCounts' fields as String prints them.
const docCountsLegend = "stacks, samples, rollups; lifecycle's fleet heads, day and minute trees"

func (c DocCounts) String() string {
	return fmt.Sprintf("[%d %d %d; %d]", c.Stacks, c.Samples, c.Rollups, c.Lifecycle)
}

// lifecycleDocs matches the rollup documents the lifecycle maintains
// (services/rollup/internal/lifecycle, daytrees): the fleet heads of every
// resolution and the day documents it writes, and the minute partition
// trees and heads it deletes past STACKSTREAM_ROLLUP_MINUTE_TREE_RETENTION.
var lifecycleDocs = map[string]any{"bool": map[string]any{
	"minimum_should_match": 1,
	"should": []any{
		map[string]any{"term": map[string]any{"kind": indices.KindFleetHead}},
		map[string]any{"term": map[string]any{"resolution": indices.ResolutionDay}},
		map[string]any{"bool": map[string]any{"filter": []any{
			map[string]any{"terms": map[string]any{"kind": []string{indices.KindPartitionTree, indices.KindPartitionHead}}},
			map[string]any{"term": map[string]any{"resolution": indices.ResolutionMinute}},
		}}},
	},
}}

// generationCounts counts generation gen's physical indices, or with gen 0
// what the serving names find.
func generationCounts(ctx context.Context, cl *opensearchapi.Client, names indices.Names, gen int) (DocCounts, error) {
	patterns := names.AliasPatterns()
	if gen > 0 {
		patterns = names.GenerationPatterns(gen)
	}
	var c DocCounts
	for _, q := range []struct {
		n      *int64
		target string
		query  any
	}{
		{&c.Stacks, patterns[0], nil},
		{&c.Samples, patterns[1], nil},
		{&c.Rollups, patterns[2], map[string]any{"bool": map[string]any{"must_not": lifecycleDocs}}},
		{&c.Lifecycle, patterns[2], lifecycleDocs},
	} {
		n, err := Count(ctx, cl, q.target, q.query)
		if err != nil {
			return c, err
		}
		*q.n = n
	}
	return c, nil
}

// Count is the number of documents of target (an index, alias or pattern)
// that query (nil: all) matches; a missing target counts 0. Shards that
// fail or go missing make it an error, not a smaller number.
func Count(ctx context.Context, cl *opensearchapi.Client, target string, query any) (int64, error) {
	var body []byte
	if query != nil {
		var err error
		if body, err = json.Marshal(map[string]any{"query": query}); err != nil {
			return 0, fmt.Errorf("count %s: %w", target, err)
		}
	}
	var c struct {
		Count  int64 `json:"count"`
		Shards struct {
			Total, Successful, Skipped, Failed int
		} `json:"_shards"`
	}
	path := "/" + target + "/_count?ignore_unavailable=true&allow_no_indices=true"
	if err := requestJSON(ctx, cl, http.MethodPost, path, body, &c); err != nil {
		return 0, err
	}
	if c.Shards.Failed > 0 || c.Shards.Successful+c.Shards.Skipped < c.Shards.Total {
		return c.Count, fmt.Errorf("count %s: %d of %d shards answered", target, c.Shards.Successful, c.Shards.Total)
	}
	return c.Count, nil
}
