package cmd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/eddy-stream/eddy/pipeline"
)

// The admin endpoint of `eddy run` (docs/checkpoints.md, "Savepoints of a
// running pipeline"): a small HTTP server, on 127.0.0.1 and a free port by
// default, that takes savepoints and serves health, metrics and the recent
// checkpoints. The run writes its address to <state dir>/<pipeline>/
// admin.addr, where `eddy savepoint trigger` finds it.

const (
	keyAdminAddr     = "admin-addr"
	defaultAdminAddr = "127.0.0.1:0"
	// adminAddrFile is the file in the pipeline's state dir that holds the
	// admin endpoint's address while the run lasts.
	adminAddrFile = "admin.addr"
	// savepointsDir is the directory of savepoint files in the pipeline's
	// state dir.
	savepointsDir = "savepoints"
)

// adminTarget is what the admin endpoint acts on: the run's
// pipeline.Runner. Its methods are called from the server's handler
// goroutines.
type adminTarget interface {
	TriggerSavepoint(ctx context.Context, dir string) (pipeline.Savepoint, error)
	StopWithSavepoint(ctx context.Context, dir string) error
	FinalSavepoint(ctx context.Context) (pipeline.Savepoint, error)
	State() pipeline.RunState
}

// adminServer is the running admin endpoint.
type adminServer struct {
	srv      *http.Server
	addr     string
	addrFile string // written by publish, removed by close; "" when not written
	served   chan error
}

// adminEnabled reports whether --admin-addr asks for an endpoint.
func adminEnabled(addr string) bool {
	addr = strings.TrimSpace(addr)
	return addr != "" && !strings.EqualFold(addr, "off")
}

// startAdmin listens on addr and serves the admin endpoint for target:
// savepoints of pipeline name go to spDir unless a request names another
// directory, and /metrics and /checkpoints serve m. An unparsable addr is
// invalid input; a failure to listen is returned as is. Called by the run
// before its first job starts; publish then tells `eddy savepoint` where
// it is.
func startAdmin(logger *slog.Logger, addr string, target adminTarget, m *pipeline.Metrics, name, spDir string) (*adminServer, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, usageError("--%s %q: want HOST:PORT (port 0 picks a free one), or off: %v", keyAdminAddr, addr, err)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("admin endpoint: %w (choose another --%s or %s, or turn it off with %q)", err, keyAdminAddr, envName(keyAdminAddr), "off")
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		logger.Warn("the admin endpoint is reachable from other machines and has no authentication: anyone who reaches it can take savepoints and stop the pipeline",
			"addr", ln.Addr().String())
	}
	a := &adminServer{addr: ln.Addr().String(), served: make(chan error, 1)}
	a.srv = &http.Server{Handler: adminHandler(logger, target, m, name, spDir), ReadHeaderTimeout: 10 * time.Second}
	go func() { a.served <- a.srv.Serve(ln) }()
	logger.Info("admin endpoint listening", "addr", a.addr)
	return a, nil
}

// publish writes the endpoint's address to path (path.tmp, then a rename),
// where `eddy savepoint trigger` looks for it; close removes it. The run
// calls it once its first job started, so that a request it lets in finds
// a job.
func (a *adminServer) publish(path string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("write the admin endpoint's address: %w", err)
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(a.addr+"\n"), 0o644); err != nil {
		return fmt.Errorf("write the admin endpoint's address: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("write the admin endpoint's address: %w", err)
	}
	a.addrFile = path
	return nil
}

// close removes the address file, then shuts the server down, waiting for
// the requests in flight (a savepoint request ends when the job did).
// Called by the run once its job ended.
func (a *adminServer) close(ctx context.Context) error {
	if a.addrFile != "" {
		if b, err := os.ReadFile(a.addrFile); err == nil && strings.TrimSpace(string(b)) == a.addr {
			_ = os.Remove(a.addrFile)
		}
	}
	if err := a.srv.Shutdown(ctx); err != nil {
		return fmt.Errorf("stop the admin endpoint: %w", err)
	}
	if err := <-a.served; !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("admin endpoint: %w", err)
	}
	return nil
}

// savepointReply is the JSON answer of POST /savepoints.
type savepointReply struct {
	ID    int64  `json:"id"`
	Path  string `json:"path"`
	Final bool   `json:"final"`
}

// adminError is the JSON answer of a failed request.
type adminError struct {
	Error string `json:"error"`
}

// adminEndpoints are the requests the admin endpoint serves, in the order
// GET / and `eddy run --help` list them.
var adminEndpoints = []struct{ pattern, what string }{
	{"GET /", "this list"},
	{"GET /healthz", "200 while running or stopping, 503 starting or restarting"},
	{"GET /metrics", "Prometheus metrics"},
	{"GET /checkpoints", "the recent checkpoints and savepoints as JSON"},
	{"GET /savepoints", "the savepoint files, as JSON"},
	{"POST /savepoints", "take a savepoint (?dir=DIR; ?stop=true stops with it)"},
	{"GET /debug/pprof/", "Go's profiles (go tool pprof http://ADDR/debug/pprof/heap)"},
}

// adminEndpointList returns adminEndpoints as aligned lines, each indented
// by indent.
func adminEndpointList(indent string) string {
	width := 0
	for _, e := range adminEndpoints {
		width = max(width, len(e.pattern))
	}
	var b strings.Builder
	for _, e := range adminEndpoints {
		fmt.Fprintf(&b, "%s%-*s  %s\n", indent, width, e.pattern, e.what)
	}
	return b.String()
}

func adminHandler(logger *slog.Logger, target adminTarget, m *pipeline.Metrics, name, spDir string) http.Handler {
	mux := http.NewServeMux()
	// Only "/" itself: other unknown paths stay 404.
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintf(w, "eddy admin endpoint of pipeline %s\n\n%s", name, adminEndpointList(""))
	})
	mux.HandleFunc("POST /savepoints", func(w http.ResponseWriter, r *http.Request) {
		// A browser page must not make the local endpoint stop the
		// pipeline: browsers send Origin on cross-origin requests.
		if r.Header.Get("Origin") != "" {
			writeJSON(w, http.StatusForbidden, adminError{"cross-origin requests are refused"})
			return
		}
		dir := r.URL.Query().Get("dir")
		if dir == "" {
			dir = spDir
		}
		dir, err := filepath.Abs(dir)
		if err != nil {
			writeJSON(w, http.StatusBadRequest, adminError{fmt.Sprintf("dir %q: %v", r.URL.Query().Get("dir"), err)})
			return
		}
		stop := false
		if s := r.URL.Query().Get("stop"); s != "" {
			if stop, err = strconv.ParseBool(s); err != nil {
				writeJSON(w, http.StatusBadRequest, adminError{fmt.Sprintf("stop=%q: want true or false", s)})
				return
			}
		}
		sp, err := savepoint(r.Context(), logger, target, dir, stop)
		switch {
		case err == nil:
			writeJSON(w, http.StatusOK, savepointReply{ID: sp.ID, Path: sp.Path, Final: sp.Final})
		case errors.Is(err, pipeline.ErrRestarting):
			writeJSON(w, http.StatusServiceUnavailable, adminError{err.Error()})
		case errors.Is(err, pipeline.ErrStopping), errors.Is(err, pipeline.ErrJobEnding), errors.Is(err, pipeline.ErrNoCheckpoints):
			writeJSON(w, http.StatusConflict, adminError{err.Error()})
		default:
			writeJSON(w, http.StatusInternalServerError, adminError{err.Error()})
		}
	})
	mux.HandleFunc("GET /savepoints", func(w http.ResponseWriter, r *http.Request) {
		rows, err := listSavepoints(spDir)
		if err != nil {
			writeJSON(w, http.StatusInternalServerError, adminError{err.Error()})
			return
		}
		writeJSON(w, http.StatusOK, savepointList{Pipeline: name, Dir: spDir, Savepoints: rows})
	})
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		state := target.State()
		if state > pipeline.RunRestarting {
			state = pipeline.RunStopping // the run ended: the process exits
		}
		code := http.StatusOK
		if state == pipeline.RunStarting || state == pipeline.RunRestarting {
			code = http.StatusServiceUnavailable
		}
		writeJSON(w, code, map[string]string{"status": state.String()})
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /checkpoints", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, m.CheckpointStats())
	})
	// Go's profiles of the running process (go tool pprof URL).
	mux.HandleFunc("GET /debug/pprof/", pprof.Index)
	mux.HandleFunc("GET /debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
	return mux
}

// savepoint takes a savepoint into dir, or stops the run with one (stop),
// and returns once the file is written.
func savepoint(ctx context.Context, logger *slog.Logger, target adminTarget, dir string, stop bool) (pipeline.Savepoint, error) {
	if !stop {
		return target.TriggerSavepoint(ctx, dir)
	}
	if err := target.StopWithSavepoint(ctx, dir); err != nil {
		return pipeline.Savepoint{}, err
	}
	logger.Info("stopping with a savepoint, as the admin endpoint was asked: sources stop, in-flight records drain, sinks flush; signal to cancel", "dir", dir)
	return target.FinalSavepoint(ctx)
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}
