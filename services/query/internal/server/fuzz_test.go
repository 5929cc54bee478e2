package server_test

import (
	"bytes"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"runtime"
	"strings"
	"sync"
	"testing"

	osgo "github.com/opensearch-project/opensearch-go/v4"
	"github.com/opensearch-project/opensearch-go/v4/opensearchapi"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/stackstream/stackstream/schemas/indices"
	"github.com/stackstream/stackstream/services/query/internal/server"
)

// Bounds the fuzz target checks for one request.
const (
	// maxBackendBody is the largest OpenSearch request a query may make:
	// 32 matchers with regexps of 1000 characters each in two forms, with
	// JSON's escapes, and the rest of the query.
	maxBackendBody = 160 << 10
	// maxAllocPerRequest is what one request may allocate in all, answer
	// included, while OpenSearch answers nothing heavy.
	maxAllocPerRequest = 32 << 20
)

// fakeStore stands in for OpenSearch in process: every search finds
// nothing, the mapping is empty, and it remembers the largest body sent.
type fakeStore struct {
	mu      sync.Mutex
	largest int
}

func (f *fakeStore) RoundTrip(r *http.Request) (*http.Response, error) {
	var body []byte
	if r.Body != nil {
		body, _ = io.ReadAll(r.Body)
		r.Body.Close()
	}
	f.mu.Lock()
	f.largest = max(f.largest, len(body))
	f.mu.Unlock()
	answer := `{}`
	if strings.Contains(r.URL.Path, "_search") {
		answer = `{"timed_out":false,"hits":{"total":{"value":0},"hits":[]},"aggregations":{}}`
	}
	return &http.Response{
		StatusCode: http.StatusOK, Header: http.Header{"Content-Type": {"application/json"}},
		Body: io.NopCloser(strings.NewReader(answer)), Request: r,
	}, nil
}

func (f *fakeStore) takeLargest() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := f.largest
	f.largest = 0
	return n
}

// fuzzEndpoints are the API paths the fuzzer picks from; {name} is
// replaced with its label name input.
var fuzzEndpoints = []string{
	"series", "flamegraph", "top", "search", "diff", "pprof", "labels", "labels/{name}/values", "config", "sandwich",
}

// FuzzQueryParams sends any query string (and label name) to every API
// endpoint through the whole server handler, with OpenSearch replaced by
// fakeStore: no input may cause a 500 (a bad parameter is a 400 naming
// it), the queries built must stay under maxBackendBody, and one request
// must allocate less than maxAllocPerRequest.
//
//	go test -run '^$' -fuzz FuzzQueryParams -fuzztime 60s ./services/query/internal/server
func FuzzQueryParams(f *testing.F) {
	seeds := []struct {
		endpoint uint8
		name     string
		query    string
	}{
		{0, "", "type=cpu&query=%7Bservice%3D%22checkout%22%7D&from=now-1h&to=now&step=60s&group_by=host"},
		{0, "", "function=main.work&from=now-7d&step=1h"},
		{0, "", "step=9.2e9"},
		{0, "", "step=NaN&from=now-999999w"},
		{1, "", "query=%7Bteam%3D~%22(%3Fi)re.*%22%2Ccomm!~%22a%7Cb%22%7D&max_nodes=10"},
		{1, "", "query=%7Bteam%3D~%22(a%7Cb)*a(a%7Cb)%7B19%7D%22%7D"},
		{2, "", "limit=10000&from=2026-11-30T00:00:00Z&to=2026-11-30T06:00:00Z"},
		{3, "", "q=web&limit=5&from=1796032800000&to=now"},
		{3, "", "q=%5C*%3F&from=now-30d"},
		{4, "", "base=%7Bhost%3D%22a%22%7D&compare=%7Bhost%3D%22b%22%7D&base_from=now-2h&base_to=now-1h"},
		{5, "", "type=memory&query=%7Bk8s_pod!%3D%22%22%7D"},
		{6, "", "from=now-24h"},
		{7, "team", "query=%7Bzone%3D%22eu%22%7D&limit=3"},
		{7, "a.b", ""},
		// (?i)k is [kKK] in Lucene: 32 of these would be 450 KB of regexps.
		{1, "", "query=" + url.QueryEscape("{"+strings.Repeat(`team=~"(?i)k{1000}",`, 32)+"}")},
		{8, "", ""},
	}
	for _, s := range seeds {
		f.Add(s.endpoint, s.name, s.query)
	}
	store := &fakeStore{}
	cl, err := opensearchapi.NewClient(opensearchapi.Config{Client: osgo.Config{Addresses: []string{"http://fake.invalid"}, Transport: store}})
	if err != nil {
		f.Fatal(err)
	}
	h := server.New(cl, indices.Default, server.Options{}, prometheus.NewRegistry(), slog.New(slog.NewTextHandler(io.Discard, nil)))
	f.Fuzz(func(t *testing.T, endpoint uint8, name, query string) {
		path := "/api/v1/" + strings.Replace(fuzzEndpoints[int(endpoint)%len(fuzzEndpoints)], "{name}", name, 1)
		req, err := http.NewRequest(http.MethodGet, "http://localhost", nil)
		if err != nil {
			t.Fatal(err)
		}
		// Set the parts as a client's request line would deliver them,
		// without NewRequest's own parsing rejecting odd bytes first.
		req.URL.Path, req.URL.RawQuery = path, query
		req.Host, req.RequestURI = "localhost:8080", path+"?"+query
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		runtime.ReadMemStats(&after)
		body := rec.Body.Bytes()
		switch rec.Code {
		case http.StatusOK, http.StatusNotFound, http.StatusRequestURITooLong,
			http.StatusMovedPermanently, http.StatusTemporaryRedirect, http.StatusPermanentRedirect: // the mux cleaning a path
		case http.StatusBadRequest:
			if !bytes.Contains(body, []byte(`"parameter":`)) {
				t.Fatalf("GET %s?%s: 400 without naming the parameter: %s", path, query, body)
			}
		default:
			t.Fatalf("GET %s?%s: HTTP %d %s", path, query, rec.Code, body)
		}
		if n := store.takeLargest(); n > maxBackendBody {
			t.Fatalf("GET %s?%s sent OpenSearch a %d-byte request, more than %d", path, query, n, maxBackendBody)
		}
		if n := after.TotalAlloc - before.TotalAlloc; n > maxAllocPerRequest {
			t.Fatalf("GET %s?%s allocated %d bytes, more than %d", path, query, n, maxAllocPerRequest)
		}
	})
}
