// Package ui embeds the built web UI (dist/, committed so `go build` needs no
// npm) and serves it as a single-page app.
package ui

import (
	"embed"
	"io/fs"
	"net/http"
	"path"
	"strings"
)

//go:embed all:dist
var dist embed.FS

// Handler serves the UI: files from dist/, index.html for every other path
// that looks like a page (the app reads its state from the URL), and a 404 for
// missing assets so a stale page fails visibly instead of loading HTML as
// JavaScript. Vite's hashed assets never change under one name, so they are
// cached for a year; index.html is revalidated so a new build is picked up.
func Handler() http.Handler {
	root, err := fs.Sub(dist, "dist")
	if err != nil {
		// The embed pattern guarantees dist exists at build time.
		panic("ui: dist missing from the embedded files: " + err.Error())
	}
	files := http.FileServerFS(root)
	index, indexErr := fs.ReadFile(root, "index.html")
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		name := strings.TrimPrefix(path.Clean("/"+r.URL.Path), "/")
		if name != "" && name != "index.html" {
			if st, err := fs.Stat(root, name); err == nil && !st.IsDir() {
				if strings.HasPrefix(name, "assets/") {
					w.Header().Set("Cache-Control", "public, max-age=31536000, immutable")
				} else {
					w.Header().Set("Cache-Control", "no-cache")
				}
				files.ServeHTTP(w, r)
				return
			}
			if strings.HasPrefix(name, "assets/") || path.Ext(name) != "" {
				http.NotFound(w, r)
				return
			}
		}
		if indexErr != nil {
			http.Error(w, "the web UI is not built: run `npm ci && npm run build` in services/query/ui", http.StatusNotFound)
			return
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("Cache-Control", "no-cache")
		w.Write(index)
	})
}
