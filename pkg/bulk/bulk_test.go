package bulk

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	neturl "net/url"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	osgo "github.com/opensearch-project/opensearch-go/v4"
	"github.com/opensearch-project/opensearch-go/v4/opensearchapi"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/stackstream/stackstream/pkg/opensearch"
	"github.com/stackstream/stackstream/pkg/testenv"
)

func client(t *testing.T, url string) *opensearchapi.Client {
	t.Helper()
	cl, err := opensearchapi.NewClient(opensearchapi.Config{Client: osgo.Config{
		Addresses: []string{url}, RequestTimeout: 30 * time.Second, DisableRetry: true,
	}})
	if err != nil {
		t.Fatal(err)
	}
	return cl
}

// testIndex creates an index with a strict mapping {n: long, s: keyword} and
// deletes it when the test ends.
func testIndex(t *testing.T, cl *opensearchapi.Client) string {
	t.Helper()
	name := testenv.Name(t, "bulk-")
	ctx := context.Background()
	status, body, err := opensearch.Raw(ctx, cl, http.MethodPut, "/"+name, []byte(`{
		"settings": {"number_of_shards": 1, "number_of_replicas": 0},
		"mappings": {"dynamic": "strict", "properties": {"n": {"type": "long"}, "s": {"type": "keyword"}}}}`))
	if err != nil || status != http.StatusOK {
		t.Fatalf("create index %s: %d %s %v", name, status, body, err)
	}
	t.Cleanup(func() { opensearch.Raw(context.Background(), cl, http.MethodDelete, "/"+name, nil) })
	return name
}

// stored returns the documents of index by ID.
func stored(t *testing.T, cl *opensearchapi.Client, index string) map[string]int64 {
	t.Helper()
	ctx := context.Background()
	if status, body, err := opensearch.Raw(ctx, cl, http.MethodPost, "/"+index+"/_refresh", nil); err != nil || status != http.StatusOK {
		t.Fatalf("refresh: %d %s %v", status, body, err)
	}
	status, body, err := opensearch.Raw(ctx, cl, http.MethodPost, "/"+index+"/_search", []byte(`{"size": 10000}`))
	if err != nil || status != http.StatusOK {
		t.Fatalf("search: %d %s %v", status, body, err)
	}
	var resp struct {
		Hits struct {
			Hits []struct {
				ID     string `json:"_id"`
				Source struct {
					N int64 `json:"n"`
				} `json:"_source"`
			} `json:"hits"`
		} `json:"hits"`
	}
	if err := json.Unmarshal(body, &resp); err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for _, h := range resp.Hits.Hits {
		out[h.ID] = h.Source.N
	}
	return out
}

func items(index string, n int, create bool) []Item {
	out := make([]Item, n)
	for i := range out {
		out[i] = Item{Index: index, ID: fmt.Sprintf("doc-%d", i), Create: create, Doc: []byte(fmt.Sprintf(`{"n": %d, "s": "v%d"}`, i, i))}
	}
	return out
}

func TestWriteStoresEverything(t *testing.T) {
	cl := client(t, testenv.OpenSearchURL(t))
	index := testIndex(t, cl)
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg, "test")
	// Small requests, so one Write spans many of them.
	w := New(cl, Options{MaxBytes: 2 << 10, Metrics: m})
	in := items(index, 500, false)
	rej, err := w.Write(context.Background(), in)
	if err != nil || len(rej) != 0 {
		t.Fatalf("Write = %v, %v", rej, err)
	}
	got := stored(t, cl, index)
	if len(got) != len(in) {
		t.Fatalf("stored %d documents, want %d", len(got), len(in))
	}
	for i := range in {
		if got[in[i].ID] != int64(i) {
			t.Fatalf("doc %s: n = %d, want %d", in[i].ID, got[in[i].ID], i)
		}
	}
	if n := testutil.ToFloat64(m.Requests); n < 10 {
		t.Fatalf("%v requests for 500 docs under 2 KiB each: MaxBytes not applied", n)
	}
	if n := testutil.ToFloat64(m.Docs.WithLabelValues("stored")); n != 500 {
		t.Fatalf("stored metric = %v, want 500", n)
	}
}

func TestCreateTwiceCountsAsStored(t *testing.T) {
	cl := client(t, testenv.OpenSearchURL(t))
	index := testIndex(t, cl)
	m := NewMetrics(nil, "")
	w := New(cl, Options{Metrics: m})
	in := items(index, 20, true)
	for round := range 2 {
		rej, err := w.Write(context.Background(), in)
		if err != nil || len(rej) != 0 {
			t.Fatalf("round %d: Write = %v, %v", round, rej, err)
		}
	}
	if n := testutil.ToFloat64(m.Docs.WithLabelValues("existed")); n != 20 {
		t.Fatalf("existed = %v, want 20 (409 on the second create)", n)
	}
	if got := stored(t, cl, index); len(got) != 20 {
		t.Fatalf("stored %d, want 20", len(got))
	}
}

func TestMappingErrorsAreRejectedRestStored(t *testing.T) {
	cl := client(t, testenv.OpenSearchURL(t))
	index := testIndex(t, cl)
	w := New(cl, Options{})
	in := items(index, 10, false)
	in[3].Doc = []byte(`{"n": "not a number"}`)
	in[7].Doc = []byte(`{"unknown_field": 1}`)
	rej, err := w.Write(context.Background(), in)
	if err != nil {
		t.Fatal(err)
	}
	if len(rej) != 2 || rej[0].Item.ID != "doc-3" || rej[1].Item.ID != "doc-7" {
		t.Fatalf("rejected %+v, want doc-3 and doc-7", rej)
	}
	for _, r := range rej {
		if r.Status != http.StatusBadRequest || !strings.Contains(r.Reason, "exception") {
			t.Fatalf("rejection %+v lacks status 400 and a reason", r)
		}
	}
	if got := stored(t, cl, index); len(got) != 8 {
		t.Fatalf("stored %d, want the 8 valid documents", len(got))
	}
}

func TestOutageIsRetriedUntilBack(t *testing.T) {
	url := testenv.OpenSearchURL(t)
	direct := client(t, url)
	index := testIndex(t, direct)
	proxy := testenv.NewProxy(t, strings.TrimPrefix(url, "http://"))
	proxy.SetDown(true)
	m := NewMetrics(nil, "")
	w := New(client(t, "http://"+proxy.Addr()), Options{Backoff: 20 * time.Millisecond, MaxBackoff: 200 * time.Millisecond, Metrics: m})

	done := make(chan error, 1)
	go func() {
		rej, err := w.Write(context.Background(), items(index, 50, false))
		if len(rej) != 0 {
			err = fmt.Errorf("rejected %v", rej)
		}
		done <- err
	}()
	time.Sleep(1500 * time.Millisecond)
	select {
	case err := <-done:
		t.Fatalf("Write returned %v while OpenSearch was unreachable", err)
	default:
	}
	if testutil.ToFloat64(m.Retries) < 3 {
		t.Fatalf("retries = %v during the outage, want several", testutil.ToFloat64(m.Retries))
	}
	proxy.SetDown(false)
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Write did not finish after OpenSearch came back")
	}
	if got := stored(t, direct, index); len(got) != 50 {
		t.Fatalf("stored %d, want 50", len(got))
	}
}

func TestOutageEndsWithContextOrRetryLimit(t *testing.T) {
	url := testenv.OpenSearchURL(t)
	proxy := testenv.NewProxy(t, strings.TrimPrefix(url, "http://"))
	proxy.SetDown(true)
	cl := client(t, "http://"+proxy.Addr())
	in := items("whatever", 5, false)

	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if _, err := New(cl, Options{Backoff: 10 * time.Millisecond}).Write(ctx, in); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Write with an ending context = %v, want context.DeadlineExceeded", err)
	}
	if _, err := New(cl, Options{Backoff: time.Millisecond, MaxRetries: 2}).Write(context.Background(), in); !errors.Is(err, ErrRetriesExhausted) {
		t.Fatalf("Write with MaxRetries = %v, want ErrRetriesExhausted", err)
	}
}

// TestItemLevelRetry needs per-item 429 and 503 answers, which a healthy node
// does not give on demand: a scripted server answers the first attempt with
// them and checks that only those items are sent again.
func TestItemLevelRetry(t *testing.T) {
	var mu sync.Mutex
	var bodies []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		bodies = append(bodies, string(b))
		attempt := len(bodies)
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Elastic-Product", "Elasticsearch")
		if r.URL.Path != "/_bulk" {
			io.WriteString(w, `{}`)
			return
		}
		lines := strings.Count(string(b), "\n") / 2
		var res []string
		for i := range lines {
			status := 201
			if attempt == 1 && i == 1 {
				status = 429
			}
			if attempt == 1 && i == 2 {
				status = 503
			}
			if attempt == 1 && i == 3 {
				status = 400
			}
			res = append(res, fmt.Sprintf(`{"index":{"status":%d,"error":{"type":"x","reason":"y"}}}`, status))
		}
		fmt.Fprintf(w, `{"errors":true,"items":[%s]}`, strings.Join(res, ","))
	}))
	defer srv.Close()
	w := New(client(t, srv.URL), Options{Backoff: time.Millisecond})
	rej, err := w.Write(context.Background(), items("i", 5, false))
	if err != nil {
		t.Fatal(err)
	}
	if len(rej) != 1 || rej[0].Item.ID != "doc-3" || rej[0].Reason != "x: y" {
		t.Fatalf("rejected %+v, want doc-3 with reason x: y", rej)
	}
	if len(bodies) != 2 {
		t.Fatalf("%d requests, want 2", len(bodies))
	}
	if !strings.Contains(bodies[1], `"doc-1"`) || !strings.Contains(bodies[1], `"doc-2"`) || strings.Count(bodies[1], "\n") != 4 {
		t.Fatalf("retry sent %q, want exactly doc-1 and doc-2", bodies[1])
	}
}

func TestAppendItemFormat(t *testing.T) {
	tests := []struct {
		name string
		in   Item
		want string
	}{
		{"index", Item{Index: "a", ID: "1", Doc: []byte(`{"n":1}`)}, "{\"index\":{\"_index\":\"a\",\"_id\":\"1\"}}\n{\"n\":1}\n"},
		{"create", Item{Index: "a", ID: "1", Create: true, Doc: []byte("{\"n\":1}\n")}, "{\"create\":{\"_index\":\"a\",\"_id\":\"1\"}}\n{\"n\":1}\n"},
		{"escaped id", Item{Index: "a", ID: `q"\`, Doc: []byte(`{}`)}, "{\"index\":{\"_index\":\"a\",\"_id\":\"q\\\"\\\\\"}}\n{}\n"},
		{"pretty doc", Item{Index: "a", ID: "1", Doc: []byte("{\n  \"n\": 1\n}")}, "{\"index\":{\"_index\":\"a\",\"_id\":\"1\"}}\n{\"n\":1}\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b bytes.Buffer
			appendItem(&b, &tt.in)
			if b.String() != tt.want {
				t.Fatalf("got %q, want %q", b.String(), tt.want)
			}
		})
	}
}

func TestAllStored(t *testing.T) {
	tests := []struct {
		in   string
		want bool
	}{
		{`{"took":3,"errors":false,"items":[{"index":{"status":201}}]}`, true},
		{`{"took":3, "errors": false, "items":[]}`, true},
		{`{"took":3,"errors":true,"items":[{"index":{"status":400}}]}`, false},
		{`{"took":3,"items":[]}`, false},
		{`garbage`, false},
	}
	for _, tt := range tests {
		if got := allStored([]byte(tt.in)); got != tt.want {
			t.Errorf("allStored(%s) = %v, want %v", tt.in, got, tt.want)
		}
	}
}

// faultProxy is a reverse proxy in front of the real node that answers a
// bulk request itself when fault says so (status > 0), else forwards it.
func faultProxy(t *testing.T, fault func(body []byte) (status int, answer string)) *httptest.Server {
	t.Helper()
	target, err := neturl.Parse(testenv.OpenSearchURL(t))
	if err != nil {
		t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(target)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/_bulk") {
			body, err := io.ReadAll(r.Body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadGateway)
				return
			}
			if status, answer := fault(body); status > 0 {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(status)
				io.WriteString(w, answer)
				return
			}
			r.Body = io.NopCloser(bytes.NewReader(body))
			r.ContentLength = int64(len(body))
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv
}

// TestRequestTooLargeIsSplit: the node (behind a proxy that enforces a
// 16 KiB http.max_content_length, as OpenSearch does with its own limit)
// refuses the request with 413; the writer splits it down to the one
// document too large, rejects that one with 413 and stores every other.
func TestRequestTooLargeIsSplit(t *testing.T) {
	cl := client(t, testenv.OpenSearchURL(t))
	index := testIndex(t, cl)
	const maxContent = 16 << 10
	var refused atomic.Int32
	srv := faultProxy(t, func(body []byte) (int, string) {
		if len(body) > maxContent {
			refused.Add(1)
			return http.StatusRequestEntityTooLarge, `{"error":{"type":"content_too_long_exception","reason":"request body is too large"},"status":413}`
		}
		return 0, ""
	})
	m := NewMetrics(nil, "")
	w := New(client(t, srv.URL), Options{Metrics: m})
	in := items(index, 200, false)
	in[137].Doc = []byte(`{"n": 137, "s": "` + strings.Repeat("x", maxContent) + `"}`)
	done := make(chan struct{})
	var rej []Rejected
	var err error
	go func() {
		defer close(done)
		rej, err = w.Write(context.Background(), in)
	}()
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatal("Write still retrying a request the node refuses as too large")
	}
	if err != nil {
		t.Fatal(err)
	}
	if len(rej) != 1 || rej[0].Item.ID != "doc-137" || rej[0].Status != http.StatusRequestEntityTooLarge || !strings.Contains(rej[0].Reason, "http.max_content_length") {
		t.Fatalf("rejected %+v, want doc-137 with 413", rej)
	}
	if got := stored(t, cl, index); len(got) != 199 {
		t.Fatalf("stored %d documents, want the 199 others", len(got))
	}
	if refused.Load() == 0 || testutil.ToFloat64(m.Splits) == 0 {
		t.Fatalf("%d requests refused, %v splits: the proxy's limit was not reached", refused.Load(), testutil.ToFloat64(m.Splits))
	}
}

// TestTimeoutIsSplit: a node too busy to answer a large request within the
// client's timeout (a proxy holds every request of more than 50 documents
// past it, as a node still working on it would) gets halves, then quarters,
// until the requests fit; every document is stored. Re-sending the whole
// request would time out forever.
func TestTimeoutIsSplit(t *testing.T) {
	cl := client(t, testenv.OpenSearchURL(t))
	index := testIndex(t, cl)
	var held atomic.Int32
	srv := faultProxy(t, func(body []byte) (int, string) {
		if bytes.Count(body, []byte("\n"))/2 > 50 {
			held.Add(1)
			time.Sleep(time.Second)
			return http.StatusServiceUnavailable, `{"error":"held past the client's timeout"}`
		}
		return 0, ""
	})
	slow, err := opensearchapi.NewClient(opensearchapi.Config{Client: osgo.Config{
		Addresses: []string{srv.URL}, RequestTimeout: 300 * time.Millisecond, DisableRetry: true,
	}})
	if err != nil {
		t.Fatal(err)
	}
	m := NewMetrics(nil, "")
	w := New(slow, Options{Metrics: m, MaxBackoff: 200 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if rej, err := w.Write(ctx, items(index, 300, false)); err != nil || len(rej) > 0 {
		t.Fatalf("Write: %v, rejected %d: the timed-out request was not split", err, len(rej))
	}
	if got := stored(t, cl, index); len(got) != 300 {
		t.Fatalf("stored %d documents, want 300", len(got))
	}
	if held.Load() == 0 || testutil.ToFloat64(m.Splits) == 0 {
		t.Fatalf("%d requests held, %v splits: the timeout was not reached", held.Load(), testutil.ToFloat64(m.Splits))
	}
}

// TestWholeRequestStatuses: what the writer does with a whole request
// answered 400, 422, 429, 503 or 401 (injected in front of the real node):
// refusals of the content are split down to the document at fault, the
// others retried until the node stores everything.
func TestWholeRequestStatuses(t *testing.T) {
	tests := []struct {
		name   string
		status int
		// poison: refused whenever the request holds doc-7; else only the
		// first two requests are answered with status.
		poison bool
	}{
		{"400 isolates the document", http.StatusBadRequest, true},
		{"422 isolates the document", http.StatusUnprocessableEntity, true},
		{"429 retried", http.StatusTooManyRequests, false},
		{"503 retried", http.StatusServiceUnavailable, false},
		{"401 retried", http.StatusUnauthorized, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cl := client(t, testenv.OpenSearchURL(t))
			index := testIndex(t, cl)
			var n atomic.Int32
			srv := faultProxy(t, func(body []byte) (int, string) {
				if tt.poison && bytes.Contains(body, []byte(`"doc-7"`)) || !tt.poison && n.Add(1) <= 2 {
					return tt.status, `{"error":{"type":"test_exception","reason":"injected"},"status":` + strconv.Itoa(tt.status) + `}`
				}
				return 0, ""
			})
			m := NewMetrics(nil, "")
			w := New(client(t, srv.URL), Options{Backoff: time.Millisecond, Metrics: m})
			rej, err := w.Write(context.Background(), items(index, 20, false))
			if err != nil {
				t.Fatal(err)
			}
			want := 20
			if tt.poison {
				want = 19
				if len(rej) != 1 || rej[0].Item.ID != "doc-7" || rej[0].Status != tt.status || !strings.Contains(rej[0].Reason, "test_exception: injected") {
					t.Fatalf("rejected %+v, want doc-7 alone with %d", rej, tt.status)
				}
			} else if len(rej) != 0 || testutil.ToFloat64(m.Retries) != 2 {
				t.Fatalf("rejected %+v after %v retries, want none after 2", rej, testutil.ToFloat64(m.Retries))
			}
			if got := stored(t, cl, index); len(got) != want {
				t.Fatalf("stored %d, want %d", len(got), want)
			}
		})
	}
}

// FuzzParseResponse: any bulk response body gives n results or an error,
// never a panic, and decoding it allocates in proportion to its size.
func FuzzParseResponse(f *testing.F) {
	f.Add([]byte(`{"took":3,"errors":false,"items":[{"index":{"status":201}}]}`), 1)
	f.Add([]byte(`{"took":3,"errors":true,"items":[{"index":{"status":400,"error":{"type":"mapper_parsing_exception","reason":"failed","caused_by":{"type":"x","reason":"y"}}}},{"create":{"status":409}}]}`), 2)
	f.Add([]byte(`{"errors":true,"items":[{}]}`), 1)
	f.Add([]byte(`{"errors":true,"items":[{"update":{"status":429,"error":"plain"}}]}`), 1)
	f.Add([]byte(`{"error":{"type":"content_too_long_exception","reason":"too long"},"status":413}`), 3)
	f.Fuzz(func(t *testing.T, raw []byte, n int) {
		n = min(max(n, 0), 1<<16)
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		out, err := parseResponse(raw, n)
		if err == nil && len(out) != n {
			t.Fatalf("%d results for %d items", len(out), n)
		}
		for _, r := range out {
			_ = r.reason()
			_ = transient(r.Status)
		}
		_ = requestError(raw)
		runtime.ReadMemStats(&after)
		if got, bound := after.TotalAlloc-before.TotalAlloc, uint64(1<<20+64*n+200*len(raw)); got > bound {
			t.Fatalf("parsing %d bytes for %d items allocated %d bytes (bound %d)", len(raw), n, got, bound)
		}
	})
}

// TestUpdateUpsertsAndScripts: an update item creates its upsert document
// when there is none, then runs its script on the stored one, and several
// updates of one document in one request all apply.
func TestUpdateUpsertsAndScripts(t *testing.T) {
	cl := client(t, testenv.OpenSearchURL(t))
	index := testIndex(t, cl)
	w := New(cl, Options{Metrics: NewMetrics(nil, "")})
	raise := func(id string, n int) Item {
		body := fmt.Sprintf(`{"script":{"lang":"painless","source":"if (ctx._source.n < params.n) { ctx._source.n = params.n } else { ctx.op = 'none' }","params":{"n":%d}},"upsert":{"n":%d,"s":"first"}}`, n, n)
		return Item{Index: index, ID: id, Update: []byte(body), Doc: []byte(`{"ignored": true}`)}
	}
	for _, round := range [][]Item{
		{raise("a", 5), raise("b", 1)},
		{raise("a", 9), raise("a", 3), raise("b", 2), raise("b", 7)},
	} {
		if rej, err := w.Write(context.Background(), round); err != nil || len(rej) != 0 {
			t.Fatalf("Write = %v, %v", rej, err)
		}
	}
	if got := stored(t, cl, index); got["a"] != 9 || got["b"] != 7 || len(got) != 2 {
		t.Fatalf("stored %v, want a=9 (3 came later but is lower) and b=7", got)
	}
}
