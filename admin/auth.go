package admin

import (
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
)

// TokenEnv is the environment variable that holds the admin endpoint's
// bearer token.
const TokenEnv = "EDDY_ADMIN_TOKEN"

// ErrNoToken is CheckAddr's error: the endpoint would be reachable from
// other machines without a token.
var ErrNoToken = errors.New("the admin endpoint would be reachable from other machines without a token")

// CheckAddr refuses to serve the admin endpoint on addr (HOST:PORT)
// without a token unless HOST is a loopback address (127.0.0.1, ::1,
// localhost): anyone who reaches it could stop the pipelines. An empty
// HOST, 0.0.0.0 and [::] listen on every interface; a host name other
// than localhost may resolve to any address.
func CheckAddr(addr, token string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("admin endpoint %q: want HOST:PORT: %w", addr, err)
	}
	if token != "" || isLoopbackHost(host) {
		return nil
	}
	return fmt.Errorf("%w: %s listens on %s; set %s to a secret (state-changing requests then need \"Authorization: Bearer $%s\"), or listen on a loopback address such as 127.0.0.1",
		ErrNoToken, addr, describeHost(host), TokenEnv, TokenEnv)
}

// describeHost says which interfaces a listen on host reaches.
func describeHost(host string) string {
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		return "every interface"
	}
	return "a non-loopback address"
}

// isLoopbackHost tells whether host (of HOST:PORT, or of a Host header) is
// a loopback address or localhost.
func isLoopbackHost(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(strings.TrimSuffix(strings.TrimPrefix(host, "["), "]"))
	return ip != nil && ip.IsLoopback()
}

// Guard protects the state-changing requests of h (every method but GET,
// HEAD and OPTIONS): with a token, they need the header "Authorization:
// Bearer TOKEN" (compared in constant time); without one, which CheckAddr
// allows on loopback addresses only, their Host must be a loopback
// address or localhost, so that a web page whose name resolves to
// 127.0.0.1 (DNS rebinding) cannot use them. Cross-origin requests, which
// only a browser sends, are refused either way. Reading requests pass.
func Guard(h http.Handler, token string) http.Handler {
	var want [sha256.Size]byte
	if token != "" {
		want = sha256.Sum256([]byte(token))
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.Method {
		case http.MethodGet, http.MethodHead, http.MethodOptions:
			h.ServeHTTP(w, r)
			return
		}
		if crossOrigin(r) {
			writeJSON(w, http.StatusForbidden, ErrorReply{"cross-origin requests are refused"})
			return
		}
		if token == "" {
			host, _, err := net.SplitHostPort(r.Host)
			if err != nil {
				host = r.Host
			}
			if !isLoopbackHost(host) {
				writeJSON(w, http.StatusForbidden, ErrorReply{fmt.Sprintf("Host %q: without %s, state-changing requests must name a loopback address", r.Host, TokenEnv)})
				return
			}
			h.ServeHTTP(w, r)
			return
		}
		scheme, got, _ := strings.Cut(r.Header.Get("Authorization"), " ")
		sum := sha256.Sum256([]byte(strings.TrimSpace(got)))
		if !strings.EqualFold(scheme, "Bearer") || subtle.ConstantTimeCompare(sum[:], want[:]) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="eddy"`)
			writeJSON(w, http.StatusUnauthorized, ErrorReply{fmt.Sprintf("this request needs the header \"Authorization: Bearer $%s\"", TokenEnv)})
			return
		}
		h.ServeHTTP(w, r)
	})
}

// crossOrigin tells whether a browser sent r from a page of another
// origin: its Origin (which browsers send with every POST) names another
// host than the request's, or Sec-Fetch-Site says cross-site.
func crossOrigin(r *http.Request) bool {
	if r.Header.Get("Sec-Fetch-Site") == "cross-site" {
		return true
	}
	origin := r.Header.Get("Origin")
	if origin == "" {
		return false
	}
	u, err := url.Parse(origin)
	return err != nil || u.Host == "" || !strings.EqualFold(u.Host, r.Host)
}
