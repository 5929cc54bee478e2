package ui

import (
	"io/fs"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestHandler(t *testing.T) {
	h := Handler()
	assets, err := fs.Glob(dist, "dist/assets/*.js")
	if err != nil || len(assets) == 0 {
		t.Fatalf("no built JavaScript in dist/assets (run npm run build): %v", err)
	}
	asset := strings.TrimPrefix(assets[0], "dist")

	for _, tc := range []struct {
		name, method, path string
		status             int
		cache, body, ctype string
	}{
		{"root is the app", "GET", "/", 200, "no-cache", `<div id="root">`, "text/html"},
		{"client route falls back to the app", "GET", "/search?q=work", 200, "no-cache", `<div id="root">`, "text/html"},
		{"nested client route", "GET", "/some/deep/link", 200, "no-cache", `<div id="root">`, "text/html"},
		{"hashed asset is cached for good", "GET", asset, 200, "public, max-age=31536000, immutable", "", "javascript"},
		{"missing asset is a 404, not the app", "GET", "/assets/index-missing.js", 404, "", "", ""},
		{"missing file with an extension is a 404", "GET", "/favicon.ico", 404, "", "", ""},
		{"head works", "HEAD", "/", 200, "no-cache", "", "text/html"},
		{"post is refused", "POST", "/", 405, "", "", ""},
		{"dot segments stay inside dist", "GET", "/../../ui.go", 404, "", "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(tc.method, tc.path, nil))
			if rec.Code != tc.status {
				t.Fatalf("status %d, want %d (body %.200q)", rec.Code, tc.status, rec.Body.String())
			}
			if got := rec.Header().Get("Cache-Control"); tc.cache != "" && got != tc.cache {
				t.Errorf("Cache-Control %q, want %q", got, tc.cache)
			}
			if tc.ctype != "" && !strings.Contains(rec.Header().Get("Content-Type"), tc.ctype) {
				t.Errorf("Content-Type %q, want %s", rec.Header().Get("Content-Type"), tc.ctype)
			}
			if !strings.Contains(rec.Body.String(), tc.body) {
				t.Errorf("body %.200q does not contain %q", rec.Body.String(), tc.body)
			}
		})
	}
}

func TestIndexReferencesEmbeddedAssets(t *testing.T) {
	index, err := fs.ReadFile(dist, "dist/index.html")
	if err != nil {
		t.Fatal(err)
	}
	h := Handler()
	for _, part := range strings.Split(string(index), `"`) {
		if !strings.HasPrefix(part, "/assets/") {
			continue
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", part, nil))
		if rec.Code != http.StatusOK {
			t.Errorf("index.html references %s, served with HTTP %d", part, rec.Code)
		}
	}
}
