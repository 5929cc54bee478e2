package server_test

import (
	"bufio"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	osgo "github.com/opensearch-project/opensearch-go/v4"
	"github.com/opensearch-project/opensearch-go/v4/opensearchapi"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/stackstream/stackstream/schemas/indices"
	"github.com/stackstream/stackstream/services/query/internal/server"
)

func newServer(t *testing.T, opts server.Options) string {
	t.Helper()
	// A stand-in for OpenSearch: only /readyz reaches it in these tests.
	fake := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "{}") }))
	t.Cleanup(fake.Close)
	cl, err := opensearchapi.NewClient(opensearchapi.Config{Client: osgo.Config{Addresses: []string{fake.URL}}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(server.New(cl, indices.Default, opts, prometheus.NewRegistry(), slog.New(slog.NewTextHandler(io.Discard, nil))))
	t.Cleanup(srv.Close)
	return srv.URL
}

type request struct {
	path, token, user, password string
}

func do(t *testing.T, base string, r request) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, base+r.path, nil)
	if r.token != "" {
		req.Header.Set("Authorization", "Bearer "+r.token)
	}
	if r.user != "" {
		req.SetBasicAuth(r.user, r.password)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// A request that passes authentication reaches the API, whose validation
// answers 400 without touching OpenSearch.
const apiPath = "/api/v1/labels/bad%20name/values"

func TestAuth(t *testing.T) {
	tests := []struct {
		name string
		opts server.Options
		req  request
		want int
	}{
		{"no auth configured", server.Options{}, request{path: apiPath}, http.StatusBadRequest},
		{"token missing", server.Options{AuthToken: "s3cret"}, request{path: apiPath}, http.StatusUnauthorized},
		{"token wrong", server.Options{AuthToken: "s3cret"}, request{path: apiPath, token: "nope"}, http.StatusUnauthorized},
		{"token right", server.Options{AuthToken: "s3cret"}, request{path: apiPath, token: "s3cret"}, http.StatusBadRequest},
		{"token as basic password", server.Options{AuthToken: "s3cret"}, request{path: apiPath, user: "x", password: "s3cret"}, http.StatusBadRequest},
		{"wrong basic password for token", server.Options{AuthToken: "s3cret"}, request{path: apiPath, user: "x", password: "nope"}, http.StatusUnauthorized},
		{"token leaves the UI files open", server.Options{AuthToken: "s3cret"}, request{path: "/"}, http.StatusOK},
		{"basic right", server.Options{BasicUser: "ann", BasicPassword: "pw"}, request{path: apiPath, user: "ann", password: "pw"}, http.StatusBadRequest},
		{"basic wrong password", server.Options{BasicUser: "ann", BasicPassword: "pw"}, request{path: apiPath, user: "ann", password: "px"}, http.StatusUnauthorized},
		{"basic protects the UI", server.Options{BasicUser: "ann", BasicPassword: "pw"}, request{path: "/"}, http.StatusUnauthorized},
		{"either accepted", server.Options{AuthToken: "s3cret", BasicUser: "ann", BasicPassword: "pw"}, request{path: apiPath, token: "s3cret"}, http.StatusBadRequest},
		{"healthz open", server.Options{AuthToken: "s3cret"}, request{path: "/healthz"}, http.StatusOK},
		{"readyz open", server.Options{AuthToken: "s3cret"}, request{path: "/readyz"}, http.StatusOK},
		{"metrics open", server.Options{AuthToken: "s3cret"}, request{path: "/metrics"}, http.StatusOK},
		{"config open", server.Options{AuthToken: "s3cret"}, request{path: "/api/v1/config"}, http.StatusOK},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, body := do(t, newServer(t, tc.opts), tc.req)
			if code != tc.want {
				t.Fatalf("GET %s: HTTP %d %s, want %d", tc.req.path, code, body, tc.want)
			}
		})
	}
}

func TestConfigAndPlaceholder(t *testing.T) {
	base := newServer(t, server.Options{AuthToken: "t"})
	if _, body := do(t, base, request{path: "/api/v1/config"}); !strings.Contains(body, `"auth":true`) {
		t.Fatalf("config %s, want auth true", body)
	}
	if code, body := do(t, base, request{path: "/", token: "t"}); code != http.StatusOK || !strings.Contains(body, "/flamegraph") {
		t.Fatalf("placeholder page HTTP %d %q", code, body)
	}
	ui := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ui "+r.URL.Path) })
	base = newServer(t, server.Options{UI: ui})
	if _, body := do(t, base, request{path: "/flame"}); body != "ui /flame" {
		t.Fatalf("UI handler answered %q", body)
	}
	do(t, base, request{path: apiPath})
	if code, body := do(t, base, request{path: "/metrics"}); code != http.StatusOK || !strings.Contains(body, "stackstream_query_request_duration_seconds") {
		t.Fatalf("metrics HTTP %d lacks the query metrics", code)
	}
}

func TestHostCheck(t *testing.T) {
	tests := []struct {
		name    string
		allowed []string
		host    string
		want    int
	}{
		{"loopback address", nil, "127.0.0.1:8080", http.StatusOK},
		{"localhost any port", nil, "localhost:1234", http.StatusOK},
		{"localhost upper case with a dot", nil, "LOCALHOST.", http.StatusOK},
		{"ipv6 loopback", nil, "[::1]:8080", http.StatusOK},
		{"rebinding name", nil, "evil.example:8080", http.StatusForbidden},
		{"loopback as a prefix", nil, "127.0.0.1.evil.example", http.StatusForbidden},
		{"bad port", nil, "localhost:http", http.StatusForbidden},
		{"configured name", []string{"profiler.example"}, "profiler.example:443", http.StatusOK},
		{"configured leaves out localhost", []string{"profiler.example"}, "localhost:8080", http.StatusForbidden},
		{"configured ipv6", []string{"[fd00::1]"}, "[fd00::1]:8080", http.StatusOK},
		{"any", []string{"*"}, "evil.example", http.StatusOK},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			base := newServer(t, server.Options{AllowedHosts: tc.allowed})
			for _, path := range []string{"/healthz", "/api/v1/config", "/"} {
				req, _ := http.NewRequest(http.MethodGet, base+path, nil)
				req.Host = tc.host
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != tc.want {
					t.Fatalf("GET %s with Host %q: HTTP %d %s, want %d", path, tc.host, resp.StatusCode, body, tc.want)
				}
				if tc.want == http.StatusForbidden && !strings.Contains(string(body), "STACKSTREAM_QUERY_ALLOWED_HOSTS") {
					t.Fatalf("403 %s does not say how to allow the host", body)
				}
			}
		})
	}
	t.Run("no host header", func(t *testing.T) {
		base := newServer(t, server.Options{})
		conn, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		io.WriteString(conn, "GET /healthz HTTP/1.0\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != http.StatusForbidden {
			t.Fatalf("HTTP/1.0 without Host: HTTP %d, want 403", resp.StatusCode)
		}
	})
}

// TestConcurrencyLimit holds one API request inside a stand-in OpenSearch
// with one slot: the next API request is refused after the queue wait
// with 503 and Retry-After, while health, metrics, config and the UI answer.
func TestConcurrencyLimit(t *testing.T) {
	arrived, release := make(chan struct{}, 10), make(chan struct{})
	fake := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.Contains(r.URL.Path, "_search") {
			arrived <- struct{}{}
			<-release
		}
		io.WriteString(w, "{}")
	}))
	t.Cleanup(fake.Close)
	defer close(release)
	cl, err := opensearchapi.NewClient(opensearchapi.Config{Client: osgo.Config{Addresses: []string{fake.URL}}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(server.New(cl, indices.Default, server.Options{MaxConcurrent: 1, QueueWait: 50 * time.Millisecond},
		prometheus.NewRegistry(), slog.New(slog.NewTextHandler(io.Discard, nil))))
	t.Cleanup(srv.Close)

	first := make(chan int, 1)
	go func() {
		resp, err := http.Get(srv.URL + "/api/v1/top")
		if err != nil {
			first <- 0
			return
		}
		resp.Body.Close()
		first <- resp.StatusCode
	}()
	<-arrived // the first request holds the only slot

	resp, err := http.Get(srv.URL + "/api/v1/flamegraph")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" || !strings.Contains(string(body), "STACKSTREAM_QUERY_MAX_CONCURRENT") {
		t.Fatalf("second request: HTTP %d Retry-After %q %s, want 503 with Retry-After naming the limit", resp.StatusCode, resp.Header.Get("Retry-After"), body)
	}
	for _, path := range []string{"/healthz", "/readyz", "/api/v1/config", "/"} {
		if code, body := do(t, srv.URL, request{path: path}); code != http.StatusOK {
			t.Errorf("GET %s while busy: HTTP %d %s", path, code, body)
		}
	}
	if _, body := do(t, srv.URL, request{path: "/metrics"}); !strings.Contains(body, `stackstream_query_rejected_requests_total{reason="busy"} 1`) ||
		!strings.Contains(body, "stackstream_query_requests_in_flight 1") {
		t.Errorf("metrics lack the busy rejection or the request in flight:\n%s", body)
	}
	release <- struct{}{}
	if code := <-first; code != http.StatusOK {
		t.Fatalf("first request: HTTP %d", code)
	}
	// The slot is free again.
	go func() { <-arrived; release <- struct{}{} }()
	if code, body := do(t, srv.URL, request{path: "/api/v1/top"}); code != http.StatusOK {
		t.Fatalf("request after the first finished: HTTP %d %s", code, body)
	}
}

func TestURLLimit(t *testing.T) {
	base := newServer(t, server.Options{MaxURLBytes: 1000})
	code, body := do(t, base, request{path: "/api/v1/top?query=" + strings.Repeat("x", 1000)})
	if code != http.StatusRequestURITooLong || !strings.Contains(body, "longer than 1000") {
		t.Fatalf("HTTP %d %s, want 414", code, body)
	}
	if code, _ := do(t, base, request{path: "/api/v1/labels/bad%20name/values?q=" + strings.Repeat("x", 900)}); code != http.StatusBadRequest {
		t.Fatalf("URL under the limit: HTTP %d, want the API's 400", code)
	}
}
