package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/pprof"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/eddy-stream/eddy/pipeline"
)

// Target is what the admin endpoint of one pipeline acts on: its
// pipeline.Runner. Its methods are called from the server's handler
// goroutines.
type Target interface {
	TriggerSavepoint(ctx context.Context, dir string) (pipeline.Savepoint, error)
	StopWithSavepoint(ctx context.Context, dir string) error
	FinalSavepoint(ctx context.Context) (pipeline.Savepoint, error)
	State() pipeline.RunState
}

// statuser is a Target that reports its status snapshot (a
// pipeline.Runner): GET /api/status serves it, and its state tells
// restoring apart from running.
type statuser interface {
	Status() pipeline.Status
}

// PipelineOptions configure a Pipeline.
type PipelineOptions struct {
	// Name is the pipeline's name.
	Name   string
	Target Target
	// Metrics is the run's registry: GET /metrics and /checkpoints.
	Metrics *pipeline.Metrics
	// SavepointDir is where POST /savepoints writes unless the request
	// names another directory.
	SavepointDir string
	// Checkpoints tells whether the pipeline has a checkpoint block.
	Checkpoints bool
	// MaxCheckpointAge makes GET /readyz answer not ready while the
	// newest completed checkpoint (or the job's start, if later) is older
	// than this; 0 turns the check off. Only with Checkpoints.
	MaxCheckpointAge time.Duration
	Logger           *slog.Logger
}

// Pipeline is the admin endpoint of one running pipeline: the whole
// endpoint of `eddy run` (Handler), one of `eddy serve`'s under
// /pipelines/NAME/.
type Pipeline struct {
	opts PipelineOptions
	// now is time.Now; tests set it to age checkpoints.
	now func() time.Time
	// created is when the Pipeline was made: the age of checkpoints before
	// a job started is counted from it.
	created time.Time
	// jobStarted is the Unix nanoseconds of the newest job's start
	// (JobStarted); 0 before the first.
	jobStarted atomic.Int64
}

// NewPipeline returns the admin endpoint of one pipeline.
func NewPipeline(o PipelineOptions) *Pipeline {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	p := &Pipeline{opts: o, now: time.Now}
	p.created = p.now()
	return p
}

// Name returns the pipeline's name.
func (p *Pipeline) Name() string { return p.opts.Name }

// JobStarted records that a job of the run started (the runner's OnStart):
// readiness counts the age of checkpoints from the newest job's start at
// the earliest, so that a restarted job has an interval to checkpoint.
func (p *Pipeline) JobStarted() {
	p.jobStarted.Store(p.now().UnixNano())
}

// ErrorReply is the JSON answer of a failed request.
type ErrorReply struct {
	Error string `json:"error"`
}

// SavepointReply is the JSON answer of POST /savepoints.
type SavepointReply struct {
	ID    int64  `json:"id"`
	Path  string `json:"path"`
	Final bool   `json:"final"`
}

// Endpoint is one request the admin endpoint of a pipeline serves.
type Endpoint struct {
	Pattern, What string
}

// Endpoints are the requests the admin endpoint of a pipeline serves, in
// the order GET / and `eddy run --help` list them. Every POST needs the
// bearer token when one is set (Guard).
var Endpoints = []Endpoint{
	{"GET /", "this list (a browser gets the dashboard, where built in)"},
	{"GET /healthz", "200 while running or stopping, 503 starting or restarting"},
	{"GET /readyz", "200 once restored and running (and checkpointing, with a bound), else 503; JSON says why"},
	{"GET /metrics", "Prometheus metrics"},
	{"GET /checkpoints", "the recent checkpoints and savepoints as JSON"},
	{"GET /savepoints", "the savepoint files, as JSON"},
	{"POST /savepoints", "take a savepoint (?dir=DIR; ?stop=true stops with it)"},
	{"GET /api/status", "the run's status: state, plan, numbers, checkpoints (JSON)"},
	{"GET /debug/pprof/", "Go's profiles (go tool pprof http://ADDR/debug/pprof/heap)"},
}

// EndpointList returns Endpoints as aligned lines, each indented by
// indent.
func EndpointList(indent string) string { return endpointList(Endpoints, indent) }

// endpointList returns list as aligned lines, each indented by indent.
func endpointList(list []Endpoint, indent string) string {
	width := 0
	for _, e := range list {
		width = max(width, len(e.Pattern))
	}
	var b strings.Builder
	for _, e := range list {
		fmt.Fprintf(&b, "%s%-*s  %s\n", indent, width, e.Pattern, e.What)
	}
	return b.String()
}

// Handler returns the admin endpoint of the pipeline as `eddy run`
// serves it: GET / (the list of endpoints, or UI), the pipeline's
// endpoints and Go's profiles. Listen wraps it in Guard.
func (p *Pipeline) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /{$}", index(func(w http.ResponseWriter) {
		fmt.Fprintf(w, "eddy admin endpoint of pipeline %s\n\n%s", p.opts.Name, EndpointList(""))
	}))
	p.register(mux)
	registerProfiles(mux)
	registerUI(mux)
	return mux
}

// register adds the pipeline's own endpoints to mux.
func (p *Pipeline) register(mux *http.ServeMux) {
	mux.HandleFunc("POST /savepoints", p.postSavepoint)
	mux.HandleFunc("GET /savepoints", func(w http.ResponseWriter, r *http.Request) {
		rows, err := ListSavepoints(p.opts.SavepointDir)
		if err != nil {
			writeJSON(w, http.StatusInternalServerError, ErrorReply{err.Error()})
			return
		}
		writeJSON(w, http.StatusOK, SavepointList{Pipeline: p.opts.Name, Dir: p.opts.SavepointDir, Savepoints: rows})
	})
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		h := p.Health()
		code := http.StatusOK
		if !h.Healthy {
			code = http.StatusServiceUnavailable
		}
		writeJSON(w, code, map[string]string{"status": h.Status})
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		rd := p.Ready()
		code := http.StatusOK
		if !rd.Ready {
			code = http.StatusServiceUnavailable
		}
		writeJSON(w, code, rd)
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(p.opts.Metrics.Registry, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /checkpoints", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, p.opts.Metrics.CheckpointStats())
	})
	mux.HandleFunc("GET /api/status", func(w http.ResponseWriter, r *http.Request) {
		s, ok := p.opts.Target.(statuser)
		if !ok {
			writeJSON(w, http.StatusNotImplemented, ErrorReply{"this run reports no status"})
			return
		}
		writeJSON(w, http.StatusOK, s.Status())
	})
}

// registerProfiles adds Go's profiles of the running process (go tool
// pprof URL) to mux.
func registerProfiles(mux *http.ServeMux) {
	mux.HandleFunc("GET /debug/pprof/", pprof.Index)
	mux.HandleFunc("GET /debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
}

// postSavepoint serves POST /savepoints.
func (p *Pipeline) postSavepoint(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	dir := q.Get("dir")
	if dir == "" {
		dir = p.opts.SavepointDir
	}
	dir, err := filepath.Abs(dir)
	if err != nil {
		writeJSON(w, http.StatusBadRequest, ErrorReply{fmt.Sprintf("dir %q: %v", q.Get("dir"), err)})
		return
	}
	stop, err := boolParam(q.Get("stop"), "stop")
	if err != nil {
		writeJSON(w, http.StatusBadRequest, ErrorReply{err.Error()})
		return
	}
	sp, err := p.savepoint(r.Context(), dir, stop)
	if err != nil {
		writeJSON(w, savepointErrorCode(err), ErrorReply{err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, SavepointReply{ID: sp.ID, Path: sp.Path, Final: sp.Final})
}

// boolParam parses the query parameter name; "" is false.
func boolParam(s, name string) (bool, error) {
	if s == "" {
		return false, nil
	}
	b, err := strconv.ParseBool(s)
	if err != nil {
		return false, fmt.Errorf("%s=%q: want true or false", name, s)
	}
	return b, nil
}

// savepointErrorCode is the status code of a savepoint that failed with err.
func savepointErrorCode(err error) int {
	switch {
	case errors.Is(err, pipeline.ErrRestarting):
		return http.StatusServiceUnavailable
	case errors.Is(err, pipeline.ErrStopping), errors.Is(err, pipeline.ErrJobEnding), errors.Is(err, pipeline.ErrNoCheckpoints):
		return http.StatusConflict
	}
	return http.StatusInternalServerError
}

// savepoint takes a savepoint into dir, or stops the run with one (stop),
// and returns once the file is written.
func (p *Pipeline) savepoint(ctx context.Context, dir string, stop bool) (pipeline.Savepoint, error) {
	t := p.opts.Target
	if !stop {
		return t.TriggerSavepoint(ctx, dir)
	}
	if err := t.StopWithSavepoint(ctx, dir); err != nil {
		return pipeline.Savepoint{}, err
	}
	p.opts.Logger.Info("stopping with a savepoint, as the admin endpoint was asked: sources stop, in-flight records drain, sinks flush; signal to cancel", "dir", dir)
	return t.FinalSavepoint(ctx)
}

// Health is the answer of GET /healthz.
type Health struct {
	// Status is the run's state: starting, running, stopping or
	// restarting (a run that ended says stopping: the process exits).
	Status string
	// Healthy is false while the run starts or waits to restart.
	Healthy bool
}

// Health says whether the run is healthy: running or stopping.
func (p *Pipeline) Health() Health {
	state := p.opts.Target.State()
	if state > pipeline.RunRestarting {
		state = pipeline.RunStopping // the run ended: the process exits
	}
	return Health{Status: state.String(), Healthy: state == pipeline.RunRunning || state == pipeline.RunStopping}
}

// index serves GET /: the UI to a browser where one is built in, else the
// plain-text list that list writes.
func index(list func(w http.ResponseWriter)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if UI != nil && strings.Contains(r.Header.Get("Accept"), "text/html") {
			UI.ServeHTTP(w, r)
			return
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		list(w)
	})
}

// writeJSON writes v as indented JSON with status code.
func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}
