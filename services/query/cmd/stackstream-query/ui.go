package main

import (
	"net/http"

	"github.com/stackstream/stackstream/services/query/ui"
)

// uiHandler serves the embedded web UI at "/".
func uiHandler() http.Handler { return ui.Handler() }
