package server_test

import (
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/stackstream/stackstream/services/query/internal/server"
)

// TestLongSelectorByPost: a selector listing 5000 hosts (65 KB) is refused
// as a GET by the URL limit (414) but passes through the whole server as a
// POST form, behind authentication like a GET: the API parses it (the 400
// for top=0 names top, so the selector itself was accepted); 10001 hosts
// are a 400 naming query.
func TestLongSelectorByPost(t *testing.T) {
	base := newServer(t, server.Options{AuthToken: "tok"})
	list := func(n int) string {
		names := make([]string, n)
		for i := range names {
			names[i] = fmt.Sprintf("host-%07d", i)
		}
		return `{host=~"` + strings.Join(names, "|") + `"}`
	}
	form := url.Values{"query": {list(5000)}, "group_by": {"host"}, "top": {"0"}}
	if code, _ := do(t, base, request{path: "/api/v1/series?" + form.Encode(), token: "tok"}); code != http.StatusRequestURITooLong {
		t.Fatalf("GET of %d bytes: HTTP %d, want 414", len(form.Encode()), code)
	}
	post := func(form url.Values, token string) (int, string) {
		req, _ := http.NewRequest(http.MethodPost, base+"/api/v1/series", strings.NewReader(form.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, _ := post(form, ""); code != http.StatusUnauthorized {
		t.Fatalf("POST without the token: HTTP %d, want 401", code)
	}
	if code, body := post(form, "tok"); code != http.StatusBadRequest || !strings.Contains(body, `"parameter":"top"`) {
		t.Fatalf("POST of 5000 hosts with top=0: HTTP %d %s, want the 400 naming top", code, body)
	}
	form.Set("query", list(10001))
	if code, body := post(form, "tok"); code != http.StatusBadRequest || !strings.Contains(body, `"parameter":"query"`) || !strings.Contains(body, "more than 10000 values") {
		t.Fatalf("POST of 10001 hosts: HTTP %d %.300s, want the 400 naming query", code, body)
	}
}
