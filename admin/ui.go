package admin

import "net/http"

// UI is the web dashboard, where one is built in: GET / of the admin
// endpoint serves it to a browser (a request that accepts text/html), as
// does GET /pipelines/NAME/ under `eddy serve` (its URL.Path stripped to
// "/": RequestURI tells which), and every GET under /ui/ of the root goes
// to it (its scripts, styles and images: refer to them as /ui/...). It
// reads the JSON API: GET /api/status of a pipeline's endpoint (`eddy
// run`'s, or /pipelines/NAME/api/status under `eddy serve`) and, under
// `eddy serve` only, GET /api/pipelines (404 under `eddy run`). nil: GET /
// lists the endpoints as text, and /ui/ is not served.
var UI http.Handler

// registerUI routes GET /ui/ to UI, where one is built in.
func registerUI(mux *http.ServeMux) {
	mux.HandleFunc("GET /ui/", func(w http.ResponseWriter, r *http.Request) {
		if UI == nil {
			http.NotFound(w, r)
			return
		}
		UI.ServeHTTP(w, r)
	})
}
