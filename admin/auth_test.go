package admin

import (
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/eddy-stream/eddy/pipeline"
)

// TestCheckAddr: without a token only loopback addresses are allowed;
// with one, any.
func TestCheckAddr(t *testing.T) {
	for _, tt := range []struct {
		addr    string
		token   string
		noToken bool // ErrNoToken
		bad     bool // another error
	}{
		{addr: "127.0.0.1:0"},
		{addr: "127.0.0.2:9249"},
		{addr: "[::1]:9249"},
		{addr: "localhost:9249"},
		{addr: "LOCALHOST:9249"},
		{addr: "0.0.0.0:9249", noToken: true},
		{addr: ":9249", noToken: true},
		{addr: "[::]:9249", noToken: true},
		{addr: "10.1.2.3:9249", noToken: true},
		{addr: "eddy.internal:9249", noToken: true},
		{addr: "0.0.0.0:9249", token: "s3cret"},
		{addr: "eddy.internal:9249", token: "s3cret"},
		{addr: "9249", bad: true},
	} {
		err := CheckAddr(tt.addr, tt.token)
		switch {
		case tt.noToken:
			require.ErrorIs(t, err, ErrNoToken, tt.addr)
			require.Contains(t, err.Error(), "set EDDY_ADMIN_TOKEN")
		case tt.bad:
			require.Error(t, err, tt.addr)
			require.NotErrorIs(t, err, ErrNoToken, tt.addr)
		default:
			require.NoError(t, err, tt.addr)
		}
	}
}

// TestListenRefusesWithoutToken: Listen does not listen on every
// interface without a token, and does with one.
func TestListenRefusesWithoutToken(t *testing.T) {
	h := http.NotFoundHandler()
	_, err := Listen(quietLogger(), "0.0.0.0:0", h, "")
	require.ErrorIs(t, err, ErrNoToken)
	s, err := Listen(quietLogger(), "0.0.0.0:0", h, "s3cret")
	require.NoError(t, err)
	require.NoError(t, s.Close(t.Context()))
}

// reached is a handler that answers 200 "reached": the request got past
// Guard.
var reached = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "reached") })

// TestGuard: which requests pass Guard, with and without a token.
func TestGuard(t *testing.T) {
	const token = "0123456789abcdef-token"
	open := httptest.NewServer(Guard(reached, ""))
	defer open.Close()
	locked := httptest.NewServer(Guard(reached, token))
	defer locked.Close()
	openHost := strings.TrimPrefix(open.URL, "http://")
	lockedHost := strings.TrimPrefix(locked.URL, "http://")

	tests := []struct {
		name   string
		srv    *httptest.Server
		method string
		hdr    []string
		code   int
		// err is a substring of the JSON error; "" when the request passes.
		err string
	}{
		{name: "no token: reading", srv: open, method: http.MethodGet, code: 200},
		{name: "no token: a POST on loopback", srv: open, method: http.MethodPost, code: 200},
		{name: "no token: DELETE on localhost", srv: open, method: http.MethodDelete, hdr: []string{"Host", "localhost:9249"}, code: 200},
		{name: "no token: a POST to another host name (DNS rebinding)", srv: open, method: http.MethodPost,
			hdr: []string{"Host", "evil.example:9249"}, code: 403, err: "must name a loopback address"},
		{name: "no token: a cross-origin POST", srv: open, method: http.MethodPost,
			hdr: []string{"Origin", "http://evil.example"}, code: 403, err: "cross-origin requests are refused"},
		{name: "no token: a same-origin POST (the dashboard's)", srv: open, method: http.MethodPost,
			hdr: []string{"Origin", "http://" + openHost}, code: 200},
		{name: "no token: Sec-Fetch-Site cross-site", srv: open, method: http.MethodPost,
			hdr: []string{"Sec-Fetch-Site", "cross-site"}, code: 403, err: "cross-origin"},
		{name: "no token: Origin null", srv: open, method: http.MethodPost,
			hdr: []string{"Origin", "null"}, code: 403, err: "cross-origin"},

		{name: "token: reading needs none", srv: locked, method: http.MethodGet, code: 200},
		{name: "token: a POST without it", srv: locked, method: http.MethodPost, code: 401, err: "Authorization: Bearer $EDDY_ADMIN_TOKEN"},
		{name: "token: a wrong one", srv: locked, method: http.MethodPost, hdr: []string{"Authorization", "Bearer nope"}, code: 401, err: "Authorization: Bearer"},
		{name: "token: a prefix of it", srv: locked, method: http.MethodPost, hdr: []string{"Authorization", "Bearer " + token[:10]}, code: 401, err: "Authorization: Bearer"},
		{name: "token: as basic auth", srv: locked, method: http.MethodPost, hdr: []string{"Authorization", "Basic " + token}, code: 401, err: "Authorization: Bearer"},
		{name: "token: the right one", srv: locked, method: http.MethodPost, hdr: []string{"Authorization", "Bearer " + token}, code: 200},
		{name: "token: the scheme in lower case", srv: locked, method: http.MethodDelete, hdr: []string{"Authorization", "bearer " + token}, code: 200},
		{name: "token: any host name", srv: locked, method: http.MethodPost,
			hdr: []string{"Authorization", "Bearer " + token, "Host", "eddy.internal:9249"}, code: 200},
		{name: "token: cross-origin with the token", srv: locked, method: http.MethodPost,
			hdr: []string{"Authorization", "Bearer " + token, "Origin", "http://evil.example"}, code: 403, err: "cross-origin"},
		{name: "token: same origin with the token", srv: locked, method: http.MethodPut,
			hdr: []string{"Authorization", "Bearer " + token, "Origin", "http://" + lockedHost}, code: 200},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, body := do(t, tt.method, tt.srv.URL+"/x", nil, tt.hdr...)
			require.Equal(t, tt.code, code, body)
			if tt.err == "" {
				require.Equal(t, "reached", body)
				return
			}
			require.Contains(t, body, tt.err)
			if code == http.StatusUnauthorized {
				require.NotContains(t, body, token)
			}
		})
	}
}

// TestGuardedSavepoint: through Listen, POST /savepoints of a pipeline
// needs the token and reaches the run with it; GET /healthz does not.
func TestGuardedSavepoint(t *testing.T) {
	const token = "tok-tok-tok-tok"
	target := newFakeTarget(pipeline.RunRunning)
	target.sp = pipeline.Savepoint{ID: 3, Path: "/sp/3.db"}
	p := newTestPipeline(t, target)
	s, err := Listen(slog.New(slog.DiscardHandler), "127.0.0.1:0", p.Handler(), token)
	require.NoError(t, err)
	defer func() { require.NoError(t, s.Close(t.Context())) }()
	url := "http://" + s.Addr()

	code, _ := do(t, http.MethodPost, url+"/savepoints", nil)
	require.Equal(t, http.StatusUnauthorized, code, "a token set is needed on loopback too")
	require.Empty(t, target.dirs, "the run was not asked")
	code, body := do(t, http.MethodPost, url+"/savepoints", nil, "Authorization", "Bearer "+token)
	require.Equal(t, http.StatusOK, code, body)
	require.Len(t, target.dirs, 1)
	code, _ = do(t, http.MethodGet, url+"/healthz", nil)
	require.Equal(t, http.StatusOK, code)
}
