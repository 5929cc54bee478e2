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
	var done int64
	last := time.Now()
	read := opensearch.Scroll{Do: opensearch.RawDo(cl), Path: "/" + url.PathEscape(oldIndex) + "/_search", Body: body, Keep: "5m", Size: stackCopyPage}
	err = opensearch.ScrollEach(ctx, read, func(page *opensearch.ScrollPage[stackRollupHit]) error {
		items := make([]bulk.Item, 0, len(page.Hits.Hits))
		for _, h := range page.Hits.Hits {
			doc, err := indices.WithStackDocValues(h.Source, h.Fields)
			if err != nil {
				return fmt.Errorf("document %s: %w", h.ID, err)
			}
			items = append(items, bulk.Item{Index: newIndex, ID: h.ID, Doc: doc})
		}
		rejected, err := w.Write(ctx, items)
		if err != nil {
			return fmt.Errorf("write %s: %w", newIndex, err)
		}
		if len(rejected) > 0 {
			r := rejected[0]
			return fmt.Errorf("write %s: %d documents refused, first %s: HTTP %d: %s", newIndex, len(rejected), r.Item.ID, r.Status, r.Reason)
		}
		done += int64(len(items))
		if interval <= 0 || time.Since(last) >= interval {
			fmt.Fprintf(out, "copying %s: %d of %d\n", what, done, page.Hits.Total.Value)
			last = time.Now()
		}
		return nil
	})
	if err != nil {
		return done, fmt.Errorf("copy %s from %s: %w", what, oldIndex, err)
	}
	if status, resp, err := opensearch.Raw(ctx, cl, http.MethodPost, "/"+url.PathEscape(newIndex)+"/_refresh", nil); err != nil || status != http.StatusOK {
		return done, fmt.Errorf("copy %s: refresh %s: HTTP %d: %.200s %v", what, newIndex, status, resp, err)
	}
	fmt.Fprintf(out, "copied %s: %d\n", what, done)
	return done, nil
}
