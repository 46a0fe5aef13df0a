package ui_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/eddy-stream/eddy/admin"
	"github.com/eddy-stream/eddy/admin/ui"
)

// get sends a GET with the given Accept header ("" for none) and returns
// the response with its body read.
func get(t *testing.T, url, accept string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	require.NoError(t, err)
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp, string(b)
}

// file returns the source of an embedded file.
func file(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(name)
	require.NoError(t, err)
	return string(b)
}

// TestHandlerServesTheFiles: the page at /, its script and style sheet
// under /ui/, byte for byte as in the source tree, with their content
// types, no caching without revalidation, no sniffing; the page with its
// content security policy. Other names under /ui/ are not found.
func TestHandlerServesTheFiles(t *testing.T) {
	srv := httptest.NewServer(ui.Handler())
	defer srv.Close()
	for _, tt := range []struct{ path, file, contentType string }{
		{"/", "index.html", "text/html; charset=utf-8"},
		{"/ui/app.js", "app.js", "text/javascript; charset=utf-8"},
		{"/ui/style.css", "style.css", "text/css; charset=utf-8"},
	} {
		resp, body := get(t, srv.URL+tt.path, "")
		require.Equal(t, http.StatusOK, resp.StatusCode, tt.path)
		require.Equal(t, tt.contentType, resp.Header.Get("Content-Type"), tt.path)
		require.Equal(t, "nosniff", resp.Header.Get("X-Content-Type-Options"), tt.path)
		require.Equal(t, "no-cache", resp.Header.Get("Cache-Control"), tt.path)
		require.Equal(t, file(t, tt.file), body, "%s does not serve %s as embedded", tt.path, tt.file)
	}
	resp, _ := get(t, srv.URL+"/", "text/html")
	csp := resp.Header.Get("Content-Security-Policy")
	for _, want := range []string{"default-src 'none'", "script-src 'self'", "style-src 'self'", "connect-src 'self'", "frame-ancestors 'none'"} {
		require.Contains(t, csp, want)
	}
	require.NotContains(t, csp, "unsafe-inline")
	for _, path := range []string{"/ui/", "/ui/index.html", "/ui/ui.go", "/ui/nope.js"} {
		resp, _ := get(t, srv.URL+path, "")
		require.Equal(t, http.StatusNotFound, resp.StatusCode, path)
	}
}

// TestPageLoadsOnlyItsOwnFiles: the page names its script and style sheet
// under /ui/ (served), and nothing in the files points elsewhere: no
// fonts, CDNs or imports, so that it works offline from the endpoint.
func TestPageLoadsOnlyItsOwnFiles(t *testing.T) {
	srv := httptest.NewServer(ui.Handler())
	defer srv.Close()
	page := file(t, "index.html")
	refs := regexp.MustCompile(`(?:src|href)="([^"]*)"`).FindAllStringSubmatch(page, -1)
	var assets []string
	for _, m := range refs {
		switch ref := m[1]; {
		case ref == "/", ref == "data:,":
		default:
			require.True(t, strings.HasPrefix(ref, ui.AssetPrefix), "the page loads %s", ref)
			assets = append(assets, ref)
		}
	}
	require.ElementsMatch(t, []string{"/ui/app.js", "/ui/style.css"}, assets)
	for _, a := range assets {
		resp, _ := get(t, srv.URL+a, "")
		require.Equal(t, http.StatusOK, resp.StatusCode, a)
	}
	// url(#id) names an element of the page itself.
	external := regexp.MustCompile(`://|@import|url\(\s*['"]?[^#'"\s]`)
	for _, name := range []string{"index.html", "app.js", "style.css"} {
		src := strings.ReplaceAll(file(t, name), `"http://www.w3.org/2000/svg"`, "") // a namespace, not a request
		require.Empty(t, external.FindAllString(src, -1), "%s loads from elsewhere", name)
	}
}

// TestScriptWritesNoMarkup: the script renders what the server sends as
// text (textContent, attributes) only: none of the APIs that parse a
// string as HTML or code appears in it.
func TestScriptWritesNoMarkup(t *testing.T) {
	src := file(t, "app.js")
	for _, api := range []string{"innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "new Function", "setAttribute(\"style\""} {
		require.NotContains(t, src, api)
	}
}

// TestMountedOnTheAdminEndpoint: importing the package installs the
// dashboard as admin.UI: a browser gets the page at GET / of a pipeline's
// endpoint and its files under /ui/, while curl still gets the plain-text
// list of endpoints there.
func TestMountedOnTheAdminEndpoint(t *testing.T) {
	require.NotNil(t, admin.UI)
	srv := httptest.NewServer(newFakePipeline(newFakeTarget(), t.TempDir()).Handler())
	defer srv.Close()

	resp, body := get(t, srv.URL+"/", "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "text/html; charset=utf-8", resp.Header.Get("Content-Type"))
	require.Equal(t, file(t, "index.html"), body)

	resp, body = get(t, srv.URL+"/ui/app.js", "*/*")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, file(t, "app.js"), body)

	for _, accept := range []string{"", "*/*", "text/plain"} {
		resp, body = get(t, srv.URL+"/", accept)
		require.Equal(t, "text/plain; charset=utf-8", resp.Header.Get("Content-Type"), "Accept %q", accept)
		require.True(t, strings.HasPrefix(body, "eddy admin endpoint of pipeline "+fakeName+"\n"), body)
		require.Contains(t, body, "GET /api/status")
	}
}
