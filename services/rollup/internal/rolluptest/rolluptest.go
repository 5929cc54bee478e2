// Package rolluptest holds what the rollup's OpenSearch tests share: an
// index prefix of their own with the templates applied, and documents
// written in bulk.
package rolluptest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/opensearch-project/opensearch-go/v4/opensearchapi"

	"github.com/stackstream/stackstream/pkg/opensearch"
	"github.com/stackstream/stackstream/pkg/testenv"
	"github.com/stackstream/stackstream/schemas/indices"
)

// Rollups connects to the test OpenSearch (testenv.OpenSearchURL) and
// applies the index templates under a prefix of t's own starting with
// prefix, whose indices are removed when t ends.
func Rollups(t testing.TB, prefix string) (*opensearchapi.Client, indices.Names) {
	t.Helper()
	ctx := context.Background()
	cl, err := opensearch.NewClient(ctx, opensearch.Config{URLs: []string{testenv.OpenSearchURL(t)}, Timeout: 120 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	names := indices.Names{Prefix: testenv.Name(t, prefix) + "-"}
	t.Cleanup(func() { opensearch.RemovePrefix(context.Background(), cl, names.Prefix) })
	if _, err := opensearch.ApplyTemplates(ctx, cl, names.Prefix, indices.DefaultSettings); err != nil {
		t.Fatal(err)
	}
	return cl, names
}

// Put writes docs into their monthly rollups indices under their _ids,
// searchable on return.
func Put(t testing.TB, cl *opensearchapi.Client, names indices.Names, docs ...indices.RollupDoc) {
	t.Helper()
	var body bytes.Buffer
	for _, d := range docs {
		raw, err := json.Marshal(&d)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&body, `{"index":{"_index":%q,"_id":%q}}`+"\n%s\n", names.Rollups(d.Timestamp), indices.RollupID(&d), raw)
	}
	status, resp, err := opensearch.Raw(context.Background(), cl, http.MethodPost, "/_bulk?refresh=true", body.Bytes())
	if err != nil || status != http.StatusOK || bytes.Contains(resp, []byte(`"errors":true`)) {
		t.Fatalf("bulk: %d %v %.500s", status, err, resp)
	}
}

// Stored is every rollup document stored under names (at most 1,000),
// after a refresh, in no particular order.
func Stored(t testing.TB, cl *opensearchapi.Client, names indices.Names) []indices.RollupDoc {
	t.Helper()
	ctx := context.Background()
	if _, _, err := opensearch.Raw(ctx, cl, http.MethodPost, "/"+names.RollupsPattern()+"/_refresh", nil); err != nil {
		t.Fatal(err)
	}
	status, body, err := opensearch.Raw(ctx, cl, http.MethodGet, "/"+names.RollupsPattern()+"/_search?size=1000", nil)
	if err != nil || status != http.StatusOK {
		t.Fatalf("search: %v %d %.300s", err, status, body)
	}
	var resp struct {
		Hits struct {
			Hits []struct {
				Source indices.RollupDoc `json:"_source"`
			} `json:"hits"`
		} `json:"hits"`
	}
	if err := json.Unmarshal(body, &resp); err != nil {
		t.Fatal(err)
	}
	out := make([]indices.RollupDoc, len(resp.Hits.Hits))
	for i, h := range resp.Hits.Hits {
		out[i] = h.Source
	}
	return out
}
