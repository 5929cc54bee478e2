package api_test

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	osgo "github.com/opensearch-project/opensearch-go/v4"
	"github.com/opensearch-project/opensearch-go/v4/opensearchapi"

	"github.com/stackstream/stackstream/schemas/indices"
	"github.com/stackstream/stackstream/services/query/internal/api"
)

// backend serves the API over h standing in for OpenSearch: validation must
// answer before any request reaches it, and its failures must map to
// the right status.
func backend(t *testing.T, h http.HandlerFunc, opts api.Options) string {
	t.Helper()
	os := httptest.NewServer(h)
	t.Cleanup(os.Close)
	cl, err := opensearchapi.NewClient(opensearchapi.Config{Client: osgo.Config{Addresses: []string{os.URL}}})
	if err != nil {
		t.Fatal(err)
	}
	return serve(t, cl, indices.Default, opts)
}

func TestValidation(t *testing.T) {
	base := backend(t, func(w http.ResponseWriter, r *http.Request) {
		t.Errorf("a bad request reached OpenSearch: %s %s", r.Method, r.URL)
		w.WriteHeader(http.StatusInternalServerError)
	}, api.Options{MaxRange: 48 * time.Hour})
	tests := []struct {
		name, path string
		params     url.Values
		param      string
		contains   string
	}{
		{"bad selector", "/api/v1/flamegraph", url.Values{"query": {`{service=checkout}`}}, "query", "quoted value"},
		{"bad regexp", "/api/v1/top", url.Values{"query": {`{host=~"("}`}}, "query", "regular expression"},
		{"unknown type", "/api/v1/series", url.Values{"type": {"gpu"}}, "type", `unknown profile type "gpu"`},
		{"unparseable from", "/api/v1/flamegraph", url.Values{"from": {"yesterday"}}, "from", `cannot parse "yesterday": use RFC 3339 or now-1h`},
		{"unparseable to", "/api/v1/flamegraph", url.Values{"to": {"2026-13-01"}}, "to", "cannot parse"},
		{"reversed range", "/api/v1/series", url.Values{"from": {"now"}, "to": {"now-1h"}}, "from", "is not before"},
		{"over-long range", "/api/v1/flamegraph", url.Values{"from": {"now-7d"}}, "from", "longer than the maximum 48h0m0s"},
		{"bad limit", "/api/v1/top", url.Values{"limit": {"0"}}, "limit", "not an integer from 1 to 10000"},
		{"bad max_nodes", "/api/v1/flamegraph", url.Values{"max_nodes": {"many"}}, "max_nodes", "not an integer"},
		{"bad step", "/api/v1/series", url.Values{"step": {"soon"}}, "step", "cannot parse"},
		{"step longer than the range limit", "/api/v1/series", url.Values{"step": {"9.2e9"}}, "step", "longer than the longest range 48h0m0s"},
		{"step duration longer than the range limit", "/api/v1/series", url.Values{"step": {"2562047h"}}, "step", "longer than the longest range"},
		{"step not a number", "/api/v1/series", url.Values{"step": {"NaN"}}, "step", "cannot parse"},
		{"step infinite", "/api/v1/series", url.Values{"step": {"+Inf"}}, "step", "cannot parse"},
		{"step negative", "/api/v1/series", url.Values{"step": {"-5m"}}, "step", "must be positive"},
		{"relative time overflowing", "/api/v1/flamegraph", url.Values{"from": {"now-999999w"}, "to": {"now-999998w"}}, "from", "more than 100 years"},
		{"year 0", "/api/v1/flamegraph", url.Values{"from": {"0000-01-01T00:00:00Z"}, "to": {"0000-01-01T01:00:00Z"}}, "from", "outside the years 1970 to 2261"},
		{"year 9999", "/api/v1/top", url.Values{"from": {"9999-12-31T00:00:00Z"}, "to": {"9999-12-31T01:00:00Z"}}, "from", "outside the years"},
		{"unix ms past 2262", "/api/v1/top", url.Values{"from": {"99999999999999"}, "to": {"99999999999999"}}, "from", "outside the years"},
		{"too many matchers", "/api/v1/top", url.Values{"query": {"{" + strings.Repeat(`a="x",`, 33) + "}"}}, "query", "more than 32 matchers"},
		{"label name not valid", "/api/v1/top", url.Values{"query": {`{k8s.pod="x"}`}}, "query", `label name "k8s.pod"`},
		{"label name too long", "/api/v1/labels/" + strings.Repeat("a", 65) + "/values", nil, "name", "not a label name"},
		{"bad group_by", "/api/v1/series", url.Values{"group_by": {"pod"}}, "group_by", "use service or host"},
		{"empty search", "/api/v1/search", url.Values{"q": {" "}}, "q", "empty"},
		{"bad diff side", "/api/v1/diff", url.Values{"compare": {`{`}}, "compare", "expected"},
		{"bad diff range", "/api/v1/diff", url.Values{"base_from": {"x"}}, "base_from", "cannot parse"},
		{"bad label name", "/api/v1/labels/a%20b/values", nil, "name", "not a label name"},
		{"pprof bad type", "/api/v1/pprof", url.Values{"type": {"x"}}, "type", "unknown profile type"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var e errorBody
			code := get(t, base, tc.path, tc.params, &e)
			if code != http.StatusBadRequest || e.Parameter != tc.param || !strings.Contains(e.Error, tc.contains) {
				t.Fatalf("HTTP %d %+v, want 400 naming %q and containing %q", code, e, tc.param, tc.contains)
			}
		})
	}
}

func TestBackendFailures(t *testing.T) {
	t.Run("timeout", func(t *testing.T) {
		base := backend(t, func(w http.ResponseWriter, r *http.Request) {
			select {
			case <-r.Context().Done():
			case <-time.After(3 * time.Second):
			}
		}, api.Options{Timeout: 200 * time.Millisecond})
		var e errorBody
		start := time.Now()
		if code := get(t, base, "/api/v1/flamegraph", nil, &e); code != http.StatusGatewayTimeout || !strings.Contains(e.Error, "STACKSTREAM_QUERY_TIMEOUT") {
			t.Fatalf("HTTP %d %+v, want 504 naming STACKSTREAM_QUERY_TIMEOUT", code, e)
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Fatalf("answered after %s: the timeout did not cut the request", d)
		}
	})
	t.Run("partial results at the opensearch timeout", func(t *testing.T) {
		base := backend(t, func(w http.ResponseWriter, r *http.Request) {
			io.WriteString(w, `{"timed_out":true,"aggregations":{"total":{"value":1}}}`)
		}, api.Options{})
		var e errorBody
		if code := get(t, base, "/api/v1/top", nil, &e); code != http.StatusGatewayTimeout {
			t.Fatalf("HTTP %d %+v, want 504 rather than partial numbers", code, e)
		}
	})
	t.Run("partial results when shards failed", func(t *testing.T) {
		base := backend(t, func(w http.ResponseWriter, r *http.Request) {
			io.WriteString(w, `{"timed_out":false,"_shards":{"total":2,"successful":1,"failed":1},"aggregations":{"total":{"value":1}}}`)
		}, api.Options{})
		resp, err := http.Get(base + "/api/v1/top")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var e errorBody
		if err := json.NewDecoder(resp.Body).Decode(&e); err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" || !strings.Contains(e.Error, "try again") {
			t.Fatalf("HTTP %d %+v (Retry-After %q), want 503 with Retry-After rather than part of the numbers", resp.StatusCode, e, resp.Header.Get("Retry-After"))
		}
	})
	t.Run("opensearch error", func(t *testing.T) {
		os := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusInternalServerError)
			io.WriteString(w, `{"error":"boom in [secret-index]"}`)
		}))
		t.Cleanup(os.Close)
		cl, err := opensearchapi.NewClient(opensearchapi.Config{Client: osgo.Config{Addresses: []string{os.URL}}})
		if err != nil {
			t.Fatal(err)
		}
		var logs syncBuffer
		srv := httptest.NewServer(api.New(cl, indices.Default, api.Options{Now: func() time.Time { return now }}, slog.New(slog.NewTextHandler(&logs, nil))))
		t.Cleanup(srv.Close)
		resp, err := http.Get(srv.URL + "/api/v1/top")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		var e struct {
			Error     string `json:"error"`
			RequestID string `json:"request_id"`
		}
		if err := json.Unmarshal(raw, &e); err != nil {
			t.Fatalf("decode %q: %v", raw, err)
		}
		id := resp.Header.Get("X-Request-Id")
		if resp.StatusCode != http.StatusInternalServerError || id == "" || e.RequestID != id || !strings.Contains(e.Error, id) {
			t.Fatalf("HTTP %d %s (X-Request-Id %q), want 500 naming the request ID", resp.StatusCode, raw, id)
		}
		for _, internal := range []string{"boom", "secret-index", "_search", "stackstream-", "opensearch", "HTTP 500"} {
			if strings.Contains(string(raw), internal) {
				t.Errorf("answer %s shows backend detail %q", raw, internal)
			}
		}
		if log := logs.String(); !strings.Contains(log, "request_id="+id) || !strings.Contains(log, "boom in [secret-index]") {
			t.Errorf("log lacks the request ID %s or OpenSearch's answer:\n%s", id, log)
		}
	})
	t.Run("unknown endpoint", func(t *testing.T) {
		base := backend(t, func(w http.ResponseWriter, r *http.Request) {}, api.Options{})
		var e errorBody
		if code := get(t, base, "/api/v1/nope", nil, &e); code != http.StatusNotFound || !strings.Contains(e.Error, "/api/v1/nope") {
			t.Fatalf("HTTP %d %+v, want 404", code, e)
		}
	})
}

// TestExamples decodes every example of schemas/api into its response type
// with unknown fields refused, so the examples and the code agree.
func TestExamples(t *testing.T) {
	types := map[string]any{
		"error.json":        &errorBody{},
		"series.json":       &api.SeriesResponse{},
		"flamegraph.json":   &api.FlamegraphResponse{},
		"top.json":          &api.TopResponse{},
		"search.json":       &api.SearchResponse{},
		"diff.json":         &api.DiffResponse{},
		"labels.json":       &api.LabelsResponse{},
		"label_values.json": &api.LabelValuesResponse{},
		"config.json":       &api.ConfigResponse{},
	}
	files, err := filepath.Glob("../../../../schemas/api/*.json")
	if err != nil || len(files) != len(types) {
		t.Fatalf("schemas/api has %d examples (%v), want %d", len(files), err, len(types))
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			raw, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			out, ok := types[filepath.Base(f)]
			if !ok {
				t.Fatalf("no response type for %s", f)
			}
			dec := json.NewDecoder(strings.NewReader(string(raw)))
			dec.DisallowUnknownFields()
			if err := dec.Decode(out); err != nil {
				t.Fatalf("decode %s: %v", f, err)
			}
			if reflect.ValueOf(out).Elem().IsZero() {
				t.Fatalf("%s decoded to a zero value", f)
			}
		})
	}
}

// syncBuffer collects a logger's output written from the server's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
