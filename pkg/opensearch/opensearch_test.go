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

	"github.com/stackstream/stackstream/pkg/testenv"
	"github.com/stackstream/stackstream/schemas/indices"
)

func TestTemplatesAndMappings(t *testing.T) {
	url := testenv.OpenSearchURL(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cl, err := NewClient(ctx, Config{URLs: []string{url}, Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	prefix := testenv.Name(t, "t-") + "-"
	names := indices.Names{Prefix: prefix}
	t.Cleanup(func() { RemovePrefix(context.Background(), cl, prefix) })

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
		{names.Samples(ts), "x1", indices.SampleDoc{Timestamp: ts, Type: "cpu", Host: "web-1", Service: "checkout", StackID: "s1", Value: 1e9, Count: 19, Labels: map[string]string{"comm": "checkout"}}},
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
	if status != 200 || !strings.Contains(string(resp), `"comm":{"type":"keyword"`) || !strings.Contains(string(resp), `"value":{"type":"long"}`) {
		t.Errorf("samples mapping: %s", resp)
	}
	// A field outside the mapping is refused (dynamic: strict).
	status, _, _ = Raw(ctx, cl, http.MethodPut, "/"+names.Samples(ts)+"/_doc/bad", []byte(`{"unknown_field":1}`))
	if status != http.StatusBadRequest {
		t.Errorf("strict mapping accepted an unknown field: HTTP %d", status)
	}
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
