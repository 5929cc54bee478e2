package main

import "net/http"

// uiHandler serves the web UI. TODO(ui): once services/query/ui provides
// `func Handler() http.Handler`, return ui.Handler() here; until then the
// server answers "/" with a short text page.
func uiHandler() http.Handler { return nil }
