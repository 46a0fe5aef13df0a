package admin

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// AddrFile is the file in a pipeline's state dir that holds the base URL
// of its admin endpoint while it runs, where `eddy savepoint trigger` and
// `eddy checkpoints status` find it: HOST:PORT for `eddy run`,
// http://HOST:PORT/pipelines/NAME under `eddy serve`.
const AddrFile = "admin.addr"

// Server is a listening admin endpoint.
type Server struct {
	srv    *http.Server
	addr   string
	served chan error
}

// Listen listens on addr (HOST:PORT; port 0 picks a free one) and serves
// h, its state-changing requests guarded by token (Guard). It refuses a
// non-loopback address without a token (CheckAddr: ErrNoToken), before
// listening.
func Listen(logger *slog.Logger, addr string, h http.Handler, token string) (*Server, error) {
	if err := CheckAddr(addr, token); err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("admin endpoint: %w", err)
	}
	s := &Server{addr: ln.Addr().String(), served: make(chan error, 1)}
	s.srv = &http.Server{Handler: Guard(h, token), ReadHeaderTimeout: 10 * time.Second}
	go func() { s.served <- s.srv.Serve(ln) }()
	logger.Info("admin endpoint listening", "addr", s.addr)
	return s, nil
}

// Addr returns the address the server listens on (with the port chosen).
func (s *Server) Addr() string { return s.addr }

// Close shuts the server down, waiting for the requests in flight (a
// savepoint request ends when the job did) until ctx ends.
func (s *Server) Close(ctx context.Context) error {
	if err := s.srv.Shutdown(ctx); err != nil {
		return fmt.Errorf("stop the admin endpoint: %w", err)
	}
	if err := <-s.served; !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("admin endpoint: %w", err)
	}
	return nil
}

// PublishAddr writes base (the endpoint's HOST:PORT, or the base URL of a
// pipeline's endpoint) to path (path.tmp, then a rename), where `eddy
// savepoint trigger` looks for it. The returned func removes it, unless
// another run wrote its own meanwhile.
func PublishAddr(path, base string) (remove func(), err error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("write the admin endpoint's address: %w", err)
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(base+"\n"), 0o644); err != nil {
		return nil, fmt.Errorf("write the admin endpoint's address: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return nil, fmt.Errorf("write the admin endpoint's address: %w", err)
	}
	return func() {
		if b, err := os.ReadFile(path); err == nil && strings.TrimSpace(string(b)) == base {
			_ = os.Remove(path)
		}
	}, nil
}

// LocalURL returns the URL to reach an endpoint listening on addr
// (HOST:PORT) from this machine: an unspecified host (0.0.0.0, [::]) is
// reached on the loopback address.
func LocalURL(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "http://" + addr
	}
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		host = "127.0.0.1"
		if ip != nil && ip.To4() == nil {
			host = "::1"
		}
	}
	return "http://" + net.JoinHostPort(host, port)
}
