// Package ui is eddy's web dashboard: one HTML page with its script and
// style sheet, embedded in the binary, that polls the admin endpoint's JSON
// API (GET /api/status and /savepoints of a pipeline; GET /api/pipelines
// under `eddy serve`) and renders it (docs/running.md, "Dashboard"). It
// needs no build step and loads nothing from elsewhere.
//
// Importing the package installs the dashboard as admin.UI: the binary's
// main package does, so that admin itself, and its tests, stay without it.
package ui

import (
	"embed"
	"fmt"
	"net/http"
	"strings"

	"github.com/eddy-stream/eddy/admin"
)

//go:embed index.html app.js style.css
var files embed.FS

// AssetPrefix is the path under which the page's script and style sheet
// are served (the page names them absolutely, so that it works from any
// path it is served at).
const AssetPrefix = "/ui/"

// Content types of the files, by name.
var contentTypes = map[string]string{
	"index.html": "text/html; charset=utf-8",
	"app.js":     "text/javascript; charset=utf-8",
	"style.css":  "text/css; charset=utf-8",
}

// pagePolicy is the Content-Security-Policy of the page: its own script,
// style sheet and API only, no inline script or style, no framing. The
// page renders data as text anyway; the policy keeps markup that slipped
// through from running.
const pagePolicy = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

func init() {
	admin.UI = Handler()
}

// Handler serves the dashboard: its files under AssetPrefix, the page at
// any other path (GET / of the admin endpoint, where a browser asks for
// HTML).
func Handler() http.Handler {
	contents := make(map[string][]byte, len(contentTypes))
	for name := range contentTypes {
		b, err := files.ReadFile(name)
		if err != nil {
			panic(fmt.Sprintf("dashboard: embedded file %s: %v", name, err)) // the build embeds them all
		}
		contents[name] = b
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name := "index.html"
		if rest, ok := strings.CutPrefix(r.URL.Path, AssetPrefix); ok {
			name = rest
			if name == "index.html" || contents[name] == nil {
				http.NotFound(w, r)
				return
			}
		}
		h := w.Header()
		h.Set("Content-Type", contentTypes[name])
		h.Set("Cache-Control", "no-cache")
		h.Set("X-Content-Type-Options", "nosniff")
		if name == "index.html" {
			h.Set("Content-Security-Policy", pagePolicy)
			h.Set("Referrer-Policy", "no-referrer")
		}
		_, _ = w.Write(contents[name])
	})
}
