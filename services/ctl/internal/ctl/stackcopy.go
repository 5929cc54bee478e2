package ctl

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"

	"github.com/opensearch-project/opensearch-go/v4/opensearchapi"

	"github.com/stackstream/stackstream/pkg/bulk"
	"github.com/stackstream/stackstream/pkg/opensearch"
	"github.com/stackstream/stackstream/schemas/indices"
)

// stackCopyPage is the stack rollups read per page: an hour's stacks
// document of a busy host holds thousands of stacks (tens of KB as doc
// values), so a page stays a few MB.
const stackCopyPage = 200

// stackKinds selects the stack rollups of both shapes.
var stackKinds = map[string]any{"terms": map[string]any{"kind": []string{indices.KindStack, indices.KindStacks}}}

// stackRollupHit is a search hit of a search asking for
// indices.StackFields as docvalue_fields: the document whole is
// indices.WithStackDocValues(Source, Fields).
type stackRollupHit struct {
	ID     string                 `json:"_id"`
	Source json.RawMessage        `json:"_source"`
	Fields indices.StackDocValues `json:"fields"`
}

// copyStackRollups copies the stack rollups of oldIndex that query selects
// into newIndex, over documents of the same _id as copyDocs' _reindex
// does, and returns how many it wrote. _reindex copies _source only, and
// since rollups schema 4 the rollups' _source leaves out the stacks
// (indices.StackFields): each document is read with its stacks from doc
// values (a scroll asking for docvalue_fields) and written whole
// (indices.WithStackDocValues), what an index created before holds in
// _source too.
func copyStackRollups(ctx context.Context, cl *opensearchapi.Client, oldIndex, newIndex string, query map[string]any, what string, interval time.Duration, out io.Writer) (int64, error) {
	body, err := json.Marshal(map[string]any{"size": stackCopyPage, "query": query, "sort": []string{"_doc"},
		"track_total_hits": true, "docvalue_fields": indices.StackFields})
	if err != nil {
		return 0, err
	}
	w := bulk.New(cl, bulk.Options{})
	path := "/" + url.PathEscape(oldIndex) + "/_search?scroll=5m"
	var done int64
	var scrollID string
	defer func() {
		if scrollID != "" {
			b, _ := json.Marshal(map[string]any{"scroll_id": scrollID})
			opensearch.Raw(context.WithoutCancel(ctx), cl, http.MethodDelete, "/_search/scroll", b)
		}
	}()
	last := time.Now()
	for {
		status, resp, err := opensearch.Raw(ctx, cl, http.MethodPost, path, body)
		if err != nil {
			return done, fmt.Errorf("copy %s: read %s: %w", what, oldIndex, err)
		}
		if status != http.StatusOK {
			return done, fmt.Errorf("copy %s: read %s: HTTP %d: %.300s", what, oldIndex, status, resp)
		}
		var page struct {
			ScrollID string `json:"_scroll_id"`
			Shards   struct {
				Failed int `json:"failed"`
			} `json:"_shards"`
			Hits struct {
				Total struct {
					Value int64 `json:"value"`
				} `json:"total"`
				Hits []stackRollupHit `json:"hits"`
			} `json:"hits"`
		}
		if err := json.Unmarshal(resp, &page); err != nil {
			return done, fmt.Errorf("copy %s: read %s: %w", what, oldIndex, err)
		}
		if page.ScrollID != "" {
			scrollID = page.ScrollID
		}
		if page.Shards.Failed > 0 {
			return done, fmt.Errorf("copy %s: read %s: %d shards failed", what, oldIndex, page.Shards.Failed)
		}
		if len(page.Hits.Hits) == 0 {
			break
		}
		items := make([]bulk.Item, 0, len(page.Hits.Hits))
		for _, h := range page.Hits.Hits {
			doc, err := indices.WithStackDocValues(h.Source, h.Fields)
			if err != nil {
				return done, fmt.Errorf("copy %s: document %s of %s: %w", what, h.ID, oldIndex, err)
			}
			items = append(items, bulk.Item{Index: newIndex, ID: h.ID, Doc: doc})
		}
		rejected, err := w.Write(ctx, items)
		if err != nil {
			return done, fmt.Errorf("copy %s: %w", what, err)
		}
		if len(rejected) > 0 {
			r := rejected[0]
			return done, fmt.Errorf("copy %s: %d documents refused, first %s: HTTP %d: %s", what, len(rejected), r.Item.ID, r.Status, r.Reason)
		}
		done += int64(len(items))
		if interval <= 0 || time.Since(last) >= interval {
			fmt.Fprintf(out, "copying %s: %d of %d\n", what, done, page.Hits.Total.Value)
			last = time.Now()
		}
		path = "/_search/scroll"
		if body, err = json.Marshal(map[string]any{"scroll": "5m", "scroll_id": scrollID}); err != nil {
			return done, err
		}
	}
	if status, resp, err := opensearch.Raw(ctx, cl, http.MethodPost, "/"+url.PathEscape(newIndex)+"/_refresh", nil); err != nil || status != http.StatusOK {
		return done, fmt.Errorf("copy %s: refresh %s: HTTP %d: %.200s %v", what, newIndex, status, resp, err)
	}
	fmt.Fprintf(out, "copied %s: %d\n", what, done)
	return done, nil
}
