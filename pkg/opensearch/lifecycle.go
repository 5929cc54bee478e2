package opensearch

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/opensearch-project/opensearch-go/v4/opensearchapi"
)

// DeleteEnded deletes the indices matching pattern whose period ended before
// cutoff (end gives an index's end; names it cannot read are kept) and
// returns their names. Indices are deleted whole: cheaper than deleting
// documents, and the space is free at once.
func DeleteEnded(ctx context.Context, cl *opensearchapi.Client, pattern string, end func(index string) (time.Time, bool), cutoff time.Time) ([]string, error) {
	status, body, err := Raw(ctx, cl, http.MethodGet, "/_cat/indices/"+pattern+"?format=json&h=index&expand_wildcards=open,closed", nil)
	if err != nil {
		return nil, fmt.Errorf("list indices %s: %w", pattern, err)
	}
	if status != http.StatusOK {
		return nil, fmt.Errorf("list indices %s: HTTP %d: %.200s", pattern, status, body)
	}
	var rows []struct {
		Index string `json:"index"`
	}
	if err := json.Unmarshal(body, &rows); err != nil {
		return nil, fmt.Errorf("list indices %s: parse answer: %w", pattern, err)
	}
	var deleted []string
	for _, row := range rows {
		e, ok := end(row.Index)
		if !ok || !e.Before(cutoff) {
			continue
		}
		status, body, err := Raw(ctx, cl, http.MethodDelete, "/"+row.Index, nil)
		if err != nil {
			return deleted, fmt.Errorf("delete index %s: %w", row.Index, err)
		}
		if status != http.StatusOK && status != http.StatusNotFound {
			return deleted, fmt.Errorf("delete index %s: HTTP %d: %.200s", row.Index, status, body)
		}
		deleted = append(deleted, row.Index)
	}
	return deleted, nil
}

// DeleteMatching deletes the documents of the indices matching pattern that
// query (an OpenSearch query object) matches, and returns how many. Version
// conflicts (a document rewritten meanwhile) are skipped, not fatal: the next
// run deletes what is still old.
func DeleteMatching(ctx context.Context, cl *opensearchapi.Client, pattern string, query map[string]any) (int64, error) {
	body, err := json.Marshal(map[string]any{"query": query})
	if err != nil {
		return 0, err
	}
	// One slice: slices=auto would also need the search_shards permission
	// (deploy/local/secure.sh's roles), for no gain at these sizes.
	q := url.Values{"conflicts": {"proceed"}, "ignore_unavailable": {"true"}, "allow_no_indices": {"true"}}
	status, resp, err := Raw(ctx, cl, http.MethodPost, "/"+pattern+"/_delete_by_query?"+q.Encode(), body)
	if err != nil {
		return 0, fmt.Errorf("delete by query in %s: %w", pattern, err)
	}
	if status != http.StatusOK {
		return 0, fmt.Errorf("delete by query in %s: HTTP %d: %.200s", pattern, status, resp)
	}
	var out struct {
		Deleted  int64             `json:"deleted"`
		Failures []json.RawMessage `json:"failures"`
	}
	if err := json.Unmarshal(resp, &out); err != nil {
		return 0, fmt.Errorf("delete by query in %s: parse answer: %w", pattern, err)
	}
	if len(out.Failures) > 0 {
		return out.Deleted, fmt.Errorf("delete by query in %s: %d failures, first: %.300s", pattern, len(out.Failures), out.Failures[0])
	}
	return out.Deleted, nil
}
