package opensearch

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/opensearch-project/opensearch-go/v4/opensearchapi"

	"github.com/stackstream/stackstream/pkg/testenv"
	"github.com/stackstream/stackstream/schemas/indices"
)

// testNode is a client of the real node and a prefix of the test's own,
// whose indices and templates are removed at the end.
func testNode(ctx context.Context, t *testing.T) (*opensearchapi.Client, string) {
	t.Helper()
	cl, err := NewClient(ctx, Config{URLs: []string{testenv.OpenSearchURL(t)}, Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	prefix := testenv.Name(t, "t-") + "-"
	t.Cleanup(func() { RemovePrefix(context.Background(), cl, prefix) })
	return cl, prefix
}

func TestTemplatesAndMappings(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cl, prefix := testNode(ctx, t)
	names := indices.Names{Prefix: prefix}

	for run, want := range []string{"created", "unchanged"} {
		res, err := ApplyTemplates(ctx, cl, prefix, indices.DefaultSettings)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range res {
			if r.Action != want {
				t.Fatalf("run %d: template %s %s, want %s", run+1, r.Name, r.Action, want)
			}
		}
	}

	ts := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	docs := []struct {
		index, id string
		doc       any
	}{
		{names.Stacks(), "s1", indices.StackDoc{Timestamp: ts, Frames: []indices.Frame{{Function: "main.work"}}, Functions: []string{"main.work"}, Leaf: "main.work", Depth: 1}},
		{names.Samples(ts), "x1", sampleDoc(t, indices.SampleDoc{Timestamp: ts, Type: "cpu", Host: "web-1", Service: "checkout", Value: 1e9, Count: 19, Labels: map[string]string{"comm": "checkout"}}, []string{"s1"}, 1e9)},
		{names.Rollups(ts), "r1", indices.RollupDoc{Timestamp: ts, Resolution: "1m", Kind: "service", Type: "cpu", Service: "checkout", Host: "web-1", Value: 6e10, Cores: 1}},
	}
	for _, d := range docs {
		body, _ := json.Marshal(d.doc)
		status, resp, err := Raw(ctx, cl, http.MethodPut, fmt.Sprintf("/%s/_doc/%s?refresh=true", d.index, d.id), body)
		if err != nil || status >= 300 {
			t.Fatalf("index into %s: %d %s %v", d.index, status, resp, err)
		}
	}

	// Each document is found through a query on a mapped field of the right type.
	queries := []struct {
		index, query string
	}{
		{names.Stacks(), `{"query":{"term":{"functions":"main.work"}}}`},
		{names.Samples(ts), `{"query":{"bool":{"filter":[{"term":{"service":"checkout"}},{"term":{"labels.comm":"checkout"}},{"range":{"value":{"gte":1000000000}}},{"range":{"@timestamp":{"gte":"2026-11-30T09:00:00Z"}}}]}}}`},
		{names.Rollups(ts), `{"query":{"bool":{"filter":[{"term":{"kind":"service"}},{"range":{"cores":{"gt":0.5}}}]}}}`},
	}
	for _, q := range queries {
		status, resp, err := Raw(ctx, cl, http.MethodPost, "/"+q.index+"/_search", []byte(q.query))
		if err != nil || status != 200 {
			t.Fatalf("search %s: %d %s %v", q.index, status, resp, err)
		}
		var r struct {
			Hits struct {
				Total struct{ Value int } `json:"total"`
			} `json:"hits"`
		}
		json.Unmarshal(resp, &r)
		if r.Hits.Total.Value != 1 {
			t.Errorf("search %s: %d hits, want 1: %s", q.index, r.Hits.Total.Value, resp)
		}
	}

	// The mapping types are the template's, not dynamic guesses.
	status, resp, _ := Raw(ctx, cl, http.MethodGet, "/"+names.Samples(ts)+"/_mapping", nil)
	if status != 200 || !strings.Contains(string(resp), `"comm":{"type":"keyword"`) || !strings.Contains(string(resp), `"value":{"type":"long"`) {
		t.Errorf("samples mapping: %s", resp)
	}
	// A field outside the mapping is refused (dynamic: strict).
	status, _, _ = Raw(ctx, cl, http.MethodPut, "/"+names.Samples(ts)+"/_doc/bad", []byte(`{"unknown_field":1}`))
	if status != http.StatusBadRequest {
		t.Errorf("strict mapping accepted an unknown field: HTTP %d", status)
	}
}

// sampleDoc is d with the stacks ids and their values.
func sampleDoc(t *testing.T, d indices.SampleDoc, ids []string, values ...int64) indices.SampleDoc {
	t.Helper()
	if err := d.SetStacks(ids, values); err != nil {
		t.Fatal(err)
	}
	return d
}

// TestStackScripts runs the Painless scripts that read packed stack values
// on the real node, over new documents and over a document written before
// stack_values existed, in an index created before the template had it.
func TestStackScripts(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cl, prefix := testNode(ctx, t)
	names := indices.Names{Prefix: prefix}

	// An index from before stack_values: the old mapping, an old document.
	oldDay := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	oldMapping := `{"mappings":{"dynamic":"strict","_source":{"enabled":false},"properties":{"@timestamp":{"type":"date"},"type":{"type":"keyword"},"host":{"type":"keyword"},"service":{"type":"keyword"},"stack_id":{"type":"keyword"},"value":{"type":"long"},"count":{"type":"long","index":false},"labels":{"type":"object","dynamic":true}}}}`
	if status, resp, err := Raw(ctx, cl, http.MethodPut, "/"+names.Samples(oldDay), []byte(oldMapping)); err != nil || status != 200 {
		t.Fatalf("create old index: %d %s %v", status, resp, err)
	}
	if _, err := ApplyTemplates(ctx, cl, prefix, indices.DefaultSettings); err != nil {
		t.Fatal(err)
	}
	status, resp, _ := Raw(ctx, cl, http.MethodGet, "/"+names.Samples(oldDay)+"/_mapping", nil)
	if status != 200 || !strings.Contains(string(resp), `"stack_values":{"type":"binary","doc_values":true}`) {
		t.Fatalf("the existing index did not take the new field: %s", resp)
	}

	day := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	base := indices.SampleDoc{Timestamp: day, Type: "cpu", Host: "web-1", Service: "checkout"}
	const p = 52_631_578
	docs := []struct {
		index string
		doc   any
	}{
		{names.Samples(oldDay), map[string]any{"@timestamp": oldDay, "type": "cpu", "host": "web-1", "service": "checkout", "stack_id": "a", "value": 5}},
		{names.Samples(day), sampleDoc(t, withValue(base, 4*p), []string{"a", "b"}, p, 3*p)},
		// Large values: the scale is 1, values take several bytes.
		{names.Samples(day), sampleDoc(t, withValue(base, 1<<40+7+99), []string{"b", "c"}, 1<<40+7, 99)},
		// Memory: no stacks, the whole value under "".
		{names.Samples(day), withValue(indices.SampleDoc{Timestamp: day, Type: "cpu", Host: "web-2", Service: "checkout"}, 1000)},
		// A value partly outside the stacks (samples without a stack).
		{names.Samples(day), sampleDoc(t, withValue(base, 2*p+11), []string{"c"}, 2*p)},
	}
	for i, d := range docs {
		body, _ := json.Marshal(d.doc)
		status, resp, err := Raw(ctx, cl, http.MethodPut, fmt.Sprintf("/%s/_doc/d%d?refresh=true", d.index, i), body)
		if err != nil || status >= 300 {
			t.Fatalf("index doc %d: %d %s %v", i, status, resp, err)
		}
	}
	want := map[string]int64{"a": 5 + p, "b": 3*p + 1<<40 + 7, "c": 99 + 2*p, "": 1000 + 11}
	body, _ := json.Marshal(map[string]any{"size": 0, "aggs": map[string]any{
		"s": map[string]any{"scripted_metric": indices.StackSumsScript()},
		"f": map[string]any{"sum": map[string]any{"script": indices.StacksValueScript([]string{"b", "c"})}},
	}})
	status, resp, err := Raw(ctx, cl, http.MethodPost, "/"+names.SamplesPattern()+"/_search", body)
	if err != nil || status != 200 {
		t.Fatalf("search: %d %s %v", status, resp, err)
	}
	var r struct {
		Aggregations struct {
			S struct {
				Value map[string]int64 `json:"value"`
			} `json:"s"`
			F struct {
				Value float64 `json:"value"`
			} `json:"f"`
		} `json:"aggregations"`
	}
	if err := json.Unmarshal(resp, &r); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(r.Aggregations.S.Value) != fmt.Sprint(want) {
		t.Errorf("sums by stack = %v, want %v", r.Aggregations.S.Value, want)
	}
	if got, w := int64(r.Aggregations.F.Value), want["b"]+want["c"]; got != w {
		t.Errorf("sum of stacks b and c = %d, want %d", got, w)
	}
}

func withValue(d indices.SampleDoc, v int64) indices.SampleDoc {
	d.Value = v
	return d
}

func TestWrongPassword(t *testing.T) {
	// A fast stand-in; TestBasicAuthThroughProxy checks the same against the
	// real node behind a real nginx.
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if u, p, ok := r.BasicAuth(); !ok || u != "admin" || p != "right" {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		w.Write([]byte(`{"version":{"number":"2.19.0"}}`))
	}))
	defer srv.Close()
	cfg := Config{URLs: []string{srv.URL}, Username: "admin", Password: "wrong", Timeout: 5 * time.Second}
	_, err := NewClient(context.Background(), cfg)
	if err == nil || !strings.Contains(err.Error(), "STACKSTREAM_OPENSEARCH_PASSWORD") || strings.Contains(err.Error(), "wrong") {
		t.Fatalf("NewClient error = %v, want one naming the variable and not the password", err)
	}
	cfg.Password = "right"
	if _, err := NewClient(context.Background(), cfg); err != nil {
		t.Fatalf("right password: %v", err)
	}
}

func TestUnreachable(t *testing.T) {
	_, err := NewClient(context.Background(), Config{URLs: []string{"http://127.0.0.1:1"}, Timeout: 2 * time.Second})
	if err == nil || !strings.Contains(err.Error(), "STACKSTREAM_OPENSEARCH_URL=http://127.0.0.1:1") {
		t.Fatalf("NewClient error = %v", err)
	}
}

// TestTemplatesKeepExistingFields: a rollups index created with the
// schema 1 mapping (every number and stack_id indexed, no partition) takes
// the fields it lacks when the templates are applied, keeps the ones it has
// as they were (OpenSearch refuses to turn a field's index off: putting the
// whole template mapping failed), and still takes documents.
func TestTemplatesKeepExistingFields(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cl, prefix := testNode(ctx, t)
	names := indices.Names{Prefix: prefix}
	ts := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	index := names.Rollups(ts)
	old := `{"mappings":{"dynamic":"strict","properties":{"@timestamp":{"type":"date"},"resolution":{"type":"keyword"},"kind":{"type":"keyword"},"type":{"type":"keyword"},"service":{"type":"keyword"},"host":{"type":"keyword"},"stack_id":{"type":"keyword"},"value":{"type":"long"}}}}`
	if status, resp, err := Raw(ctx, cl, http.MethodPut, "/"+index, []byte(old)); err != nil || status != 200 {
		t.Fatalf("create old index: %d %s %v", status, resp, err)
	}
	if _, err := ApplyTemplates(ctx, cl, prefix, indices.DefaultSettings); err != nil {
		t.Fatal(err)
	}
	status, resp, err := Raw(ctx, cl, http.MethodGet, "/"+index+"/_mapping", nil)
	if err != nil || status != 200 {
		t.Fatalf("mapping: %d %s %v", status, resp, err)
	}
	for _, want := range []string{`"value":{"type":"long"}`, `"stack_id":{"type":"keyword"}`, `"partition":{"type":"integer","index":false}`, `"stack_value":{"type":"long","index":false}`} {
		if !strings.Contains(string(resp), want) {
			t.Errorf("mapping of %s lacks %s: %s", index, want, resp)
		}
	}
	doc, _ := json.Marshal(indices.RollupDoc{Timestamp: ts, Resolution: "1m", Kind: "service", Type: "cpu", Service: "checkout", Host: "web-1", Value: 6e10, StackValue: 5e10, Partition: 3})
	if status, resp, err := Raw(ctx, cl, http.MethodPut, "/"+index+"/_doc/r1?refresh=true", doc); err != nil || status >= 300 {
		t.Fatalf("index a document with the new fields: %d %s %v", status, resp, err)
	}
	// The index keeps the _source it was created with (OpenSearch refuses
	// to change its excludes): a stacks document keeps its stacks there;
	// the next month's index takes the template's, without them.
	stacks := indices.RollupDoc{Timestamp: ts, Resolution: "1m", Kind: indices.KindStacks, Type: "cpu", Service: "checkout", Host: "web-1", Value: 5}
	if err := stacks.SetStacks([]string{"a", "b"}, []int64{2, 3}); err != nil {
		t.Fatal(err)
	}
	doc, _ = json.Marshal(stacks)
	for at, whole := range map[time.Time]bool{ts: true, ts.AddDate(0, 1, 0): false} {
		idx := names.Rollups(at)
		if status, resp, err := Raw(ctx, cl, http.MethodPut, "/"+idx+"/_doc/s1", doc); err != nil || status >= 300 {
			t.Fatalf("index a stacks document into %s: %d %s %v", idx, status, resp, err)
		}
		var got struct {
			Source indices.RollupDoc `json:"_source"`
		}
		status, resp, err := Raw(ctx, cl, http.MethodGet, "/"+idx+"/_doc/s1", nil)
		if err != nil || status != 200 || json.Unmarshal(resp, &got) != nil {
			t.Fatalf("get the stacks document of %s: %d %s %v", idx, status, resp, err)
		}
		if has := len(got.Source.StackIDs) == 2 && len(got.Source.StackValues) > 0; has != whole {
			t.Errorf("%s: stacks in _source %v, want %v: %s", idx, has, whole, resp)
		}
	}
}

// TestStoreBytes: an index holding documents has bytes on disk; a pattern
// naming no index is an error, not 0.
func TestStoreBytes(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cl, prefix := testNode(ctx, t)
	index := prefix + "store"
	if status, body, err := Raw(ctx, cl, http.MethodPut, "/"+index+"/_doc/1?refresh=true", []byte(`{"a":"`+strings.Repeat("x", 4096)+`"}`)); err != nil || status/100 != 2 {
		t.Fatalf("put: %d %v %s", status, err, body)
	}
	n, err := StoreBytes(ctx, cl, index)
	if err != nil || n <= 0 {
		t.Fatalf("StoreBytes(%s) = %d, %v", index, n, err)
	}
	if n, err := StoreBytes(ctx, cl, prefix+"missing"); err == nil {
		t.Fatalf("StoreBytes of a missing index = %d, want an error", n)
	}
}
