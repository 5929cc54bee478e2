package server_test

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

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
