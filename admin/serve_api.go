package admin

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/eddy-stream/eddy/pipeline"
)

// ServeEndpoints are the requests `eddy serve`'s admin endpoint serves, in
// the order GET / and `eddy serve --help` list them. Every POST and
// DELETE needs the bearer token when one is set (Guard).
var ServeEndpoints = []Endpoint{
	{"GET /", "this list (a browser gets the dashboard, where built in)"},
	{"GET /healthz", "200 while eddy serve runs, with each pipeline's state"},
	{"GET /readyz", "200 when every pipeline meant to run is ready, else 503 with the reasons"},
	{"GET /metrics", "Prometheus metrics of every pipeline, labelled pipeline=NAME"},
	{"GET /api/pipelines", "the pipelines: name, file, state (JSON)"},
	{"POST /api/pipelines", "add a pipeline: the file is the body (?replace=true replaces one)"},
	{"GET /api/pipelines/{name}", "one pipeline, with its readiness and status"},
	{"POST /api/pipelines/{name}/stop", "stop it (?savepoint=true with a savepoint)"},
	{"POST /api/pipelines/{name}/restart", "start it again from its latest savepoint"},
	{"DELETE /api/pipelines/{name}", "stop it with a savepoint and delete its file"},
	{"GET /pipelines/{name}/", "its own admin endpoint: /healthz, /readyz, /metrics, /checkpoints, /savepoints, /api/status"},
	{"GET /debug/pprof/", "Go's profiles (go tool pprof http://ADDR/debug/pprof/heap)"},
}

// ServeEndpointList returns ServeEndpoints as aligned lines, each
// indented by indent.
func ServeEndpointList(indent string) string { return endpointList(ServeEndpoints, indent) }

// ProblemReply is one problem of a pipeline file, as JSON.
type ProblemReply struct {
	File    string `json:"file"`
	Line    int    `json:"line"`
	Col     int    `json:"col"`
	Message string `json:"message"`
}

// problemReplies returns ps as JSON rows; nil for none.
func problemReplies(ps pipeline.Problems) []ProblemReply {
	if len(ps) == 0 {
		return nil
	}
	out := make([]ProblemReply, len(ps))
	for i, p := range ps {
		out[i] = ProblemReply{File: p.Pos.File, Line: p.Pos.Line, Col: p.Pos.Col, Message: p.Msg}
	}
	return out
}

// ProblemsReply is the JSON answer (400) of a pipeline file that is
// invalid, or whose paths escape the folders eddy serve was given.
type ProblemsReply struct {
	Error    string         `json:"error"`
	Problems []ProblemReply `json:"problems"`
}

// PipelineRow is one pipeline of GET /api/pipelines.
type PipelineRow struct {
	Name string `json:"name"`
	// File is the pipeline's file in the folder.
	File string `json:"file"`
	// State is the run's (starting, restoring, running, stopping,
	// restarting, finished, stopped, cancelled, failed, aborted); without
	// a run: invalid for a file that does not load, stopped when stopped
	// on request, aborted when its run could not be made (Reason says
	// why), or pending while its first run is being set up.
	State string `json:"state"`
	Ready bool   `json:"ready"`
	// StoppedOnRequest is set by POST .../stop: the pipeline stays stopped
	// until POST .../restart or a change of its file.
	StoppedOnRequest bool `json:"stopped_on_request"`
	// Reason says why a change of the file was not applied, or why the
	// pipeline does not run.
	Reason string `json:"reason,omitempty"`
	// Error is what the last run failed with.
	Error string `json:"error,omitempty"`
	// Problems are those of the file, when it is invalid.
	Problems []ProblemReply `json:"problems,omitempty"`
	// URL is the pipeline's own admin endpoint, under this one.
	URL string `json:"url"`
}

// PipelineList is the JSON answer of GET /api/pipelines.
type PipelineList struct {
	Dir       string        `json:"dir"`
	Pipelines []PipelineRow `json:"pipelines"`
}

// PipelineDetail is the JSON answer of GET /api/pipelines/{name} and of
// the requests that change a pipeline.
type PipelineDetail struct {
	PipelineRow
	// Savepoint is the savepoint a stop, delete or restart took, or the
	// one a restart restored.
	Savepoint string `json:"savepoint,omitempty"`
	// Readiness and Status are those of the current run; nil without one.
	Readiness *Readiness       `json:"readiness,omitempty"`
	Status    *pipeline.Status `json:"status,omitempty"`
}

// row returns e's row, with its run's readiness.
func (m *Manager) row(e *entry) (PipelineRow, *run) {
	m.mu.Lock()
	row := PipelineRow{Name: e.name, File: e.file, StoppedOnRequest: e.held, Reason: e.reason,
		Problems: problemReplies(e.problems), URL: "/pipelines/" + e.name + "/"}
	r := e.run
	m.mu.Unlock()
	switch {
	case r != nil:
		rd := r.admin.Ready()
		row.State, row.Ready = rd.Status, rd.Ready
		if r.ended() && r.err != nil {
			row.Error = r.err.Error()
		}
	case row.Problems != nil:
		row.State = stateInvalid
	case row.StoppedOnRequest:
		row.State = pipeline.RunStopped.String()
	case row.Reason != "":
		row.State = pipeline.RunAborted.String()
	default:
		row.State = statePending
	}
	return row, r
}

// The states of a pipeline without a run (PipelineRow.State).
const (
	stateInvalid = "invalid"
	statePending = "pending"
)

// detail returns e's row with its run's readiness and status.
func (m *Manager) detail(e *entry) PipelineDetail {
	row, r := m.row(e)
	d := PipelineDetail{PipelineRow: row}
	if r != nil {
		rd, st := r.admin.Ready(), r.runner.Status()
		d.Readiness, d.Status = &rd, &st
	}
	return d
}

// lookup returns the pipeline name, or nil.
func (m *Manager) lookup(name string) *entry {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.entries[name]
}

// Handler returns `eddy serve`'s admin endpoint (ServeEndpoints); Listen
// wraps it in Guard.
func (m *Manager) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /{$}", index(func(w http.ResponseWriter) {
		fmt.Fprintf(w, "eddy serve: the pipelines of %s\n\n%s\nEach pipeline's own endpoint, under /pipelines/NAME:\n\n%s",
			m.opts.Dir, ServeEndpointList(""), endpointList(pipelineEndpoints(), ""))
	}))
	mux.HandleFunc("GET /healthz", m.serveHealth)
	mux.HandleFunc("GET /readyz", m.serveReady)
	mux.Handle("GET /metrics", promhttp.HandlerFor(m.Gatherer(), promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError}))
	mux.HandleFunc("GET /api/pipelines", func(w http.ResponseWriter, r *http.Request) {
		list := PipelineList{Dir: m.opts.Dir, Pipelines: []PipelineRow{}}
		for _, name := range m.names() {
			if e := m.lookup(name); e != nil {
				row, _ := m.row(e)
				list.Pipelines = append(list.Pipelines, row)
			}
		}
		writeJSON(w, http.StatusOK, list)
	})
	mux.HandleFunc("POST /api/pipelines", m.upload)
	mux.HandleFunc("GET /api/pipelines/{name}", m.withEntry(func(w http.ResponseWriter, r *http.Request, e *entry) {
		writeJSON(w, http.StatusOK, m.detail(e))
	}))
	mux.HandleFunc("POST /api/pipelines/{name}/stop", m.withEntry(m.serveStop))
	mux.HandleFunc("POST /api/pipelines/{name}/restart", m.withEntry(m.serveRestart))
	mux.HandleFunc("DELETE /api/pipelines/{name}", m.withEntry(m.serveDelete))
	mux.HandleFunc("/pipelines/{name}/", m.withEntry(func(w http.ResponseWriter, r *http.Request, e *entry) {
		run := m.current(e)
		if run == nil {
			row, _ := m.row(e)
			writeJSON(w, http.StatusNotFound, ErrorReply{fmt.Sprintf("pipeline %s has no run: %s", e.name, cmpOr(row.Reason, row.State))})
			return
		}
		http.StripPrefix("/pipelines/"+e.name, run.endpoint).ServeHTTP(w, r)
	}))
	registerProfiles(mux)
	registerUI(mux)
	return mux
}

// pipelineEndpoints are the Endpoints of one pipeline under eddy serve:
// all but Go's profiles, which are the process's.
func pipelineEndpoints() []Endpoint {
	var out []Endpoint
	for _, e := range Endpoints {
		if !strings.HasPrefix(e.Pattern, "GET /debug/") {
			out = append(out, e)
		}
	}
	return out
}

// handler returns the run's own admin endpoint under eddy serve.
func (r *run) handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /{$}", index(func(w http.ResponseWriter) {
		fmt.Fprintf(w, "eddy admin endpoint of pipeline %s\n\n%s", r.admin.Name(), endpointList(pipelineEndpoints(), ""))
	}))
	r.admin.register(mux)
	return mux
}

// withEntry resolves {name} of the request's path to its pipeline, or
// answers 404.
func (m *Manager) withEntry(h func(http.ResponseWriter, *http.Request, *entry)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		name := r.PathValue("name")
		e := m.lookup(name)
		if e == nil {
			writeJSON(w, http.StatusNotFound, ErrorReply{fmt.Sprintf("no pipeline %q", name)})
			return
		}
		h(w, r, e)
	}
}

// enter starts a transition that a request asked for, or answers 503
// once the pipelines are being stopped; leave ends it.
func (m *Manager) enter(w http.ResponseWriter, e *entry) bool {
	m.mu.Lock()
	closing := m.closing
	if !closing {
		m.transitions.Add(1)
	}
	m.mu.Unlock()
	if closing {
		writeJSON(w, http.StatusServiceUnavailable, ErrorReply{"eddy serve is stopping"})
		return false
	}
	e.op.Lock()
	return true
}

// leave ends the transition enter started.
func (m *Manager) leave(e *entry) {
	e.op.Unlock()
	m.transitions.Done()
}

// serveHealth serves GET /healthz: 200 while eddy serve runs ("running",
// then "stopping"), with each pipeline's state.
func (m *Manager) serveHealth(w http.ResponseWriter, r *http.Request) {
	s := m.Summary()
	status := "running"
	if s.Closing {
		status = "stopping"
	}
	writeJSON(w, http.StatusOK, map[string]any{"status": status, "pipelines": s.States})
}

// ServeReadiness is the JSON answer of GET /readyz under eddy serve.
type ServeReadiness struct {
	Ready  bool   `json:"ready"`
	Reason string `json:"reason,omitempty"`
	// Pipelines are the readiness of each pipeline meant to run: all but
	// those stopped on request or whose run finished or was stopped.
	Pipelines map[string]Readiness `json:"pipelines"`
}

// serveReady serves GET /readyz: ready when every pipeline meant to run
// is ready.
func (m *Manager) serveReady(w http.ResponseWriter, r *http.Request) {
	out := ServeReadiness{Ready: true, Pipelines: map[string]Readiness{}}
	var notReady []string
	for _, name := range m.names() {
		e := m.lookup(name)
		if e == nil {
			continue
		}
		row, run := m.row(e)
		var rd Readiness
		switch {
		case row.StoppedOnRequest, row.State == "finished", row.State == "stopped":
			continue
		case run == nil:
			rd = Readiness{Status: row.State, Reason: cmpOr(row.Reason, "it has not started")}
		default:
			rd = run.admin.Ready()
		}
		out.Pipelines[name] = rd
		if !rd.Ready {
			notReady = append(notReady, fmt.Sprintf("%s (%s)", name, rd.Reason))
		}
	}
	m.mu.Lock()
	closing := m.closing
	m.mu.Unlock()
	switch {
	case closing:
		out.Reason = "eddy serve is stopping"
	case len(notReady) > 0:
		out.Reason = fmt.Sprintf("%d of %d pipelines are not ready: %s", len(notReady), len(out.Pipelines), strings.Join(notReady, "; "))
	}
	out.Ready = out.Reason == ""
	code := http.StatusOK
	if !out.Ready {
		code = http.StatusServiceUnavailable
	}
	writeJSON(w, code, out)
}

// uploadName is the file name the problems of an uploaded file carry.
const uploadName = "upload.yaml"

// upload serves POST /api/pipelines: the body is a pipeline file, loaded,
// checked (its paths in the data and state dirs) and written into the
// folder as NAME.yaml, which the scan it triggers starts, or with
// ?replace=true replaces the running pipeline with (or refuses, the reason
// in the answer's row). It answers once that is done.
func (m *Manager) upload(w http.ResponseWriter, r *http.Request) {
	replace, err := boolParam(r.URL.Query().Get("replace"), "replace")
	if err != nil {
		writeJSON(w, http.StatusBadRequest, ErrorReply{err.Error()})
		return
	}
	data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, m.opts.MaxUpload))
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &tooLarge):
		writeJSON(w, http.StatusRequestEntityTooLarge, ErrorReply{fmt.Sprintf("the file is larger than %d bytes", m.opts.MaxUpload)})
		return
	case err != nil:
		writeJSON(w, http.StatusBadRequest, ErrorReply{"read the file: " + err.Error()})
		return
	}
	spec, err := pipeline.Load(m.opts.Env, uploadName, data)
	if err == nil {
		_, err = pipeline.Compile(spec)
	}
	if err != nil {
		var ps pipeline.Problems
		if !errors.As(err, &ps) {
			ps = pipeline.Problems{{Pos: pipeline.Pos{File: uploadName, Line: 1, Col: 1}, Msg: err.Error()}}
		}
		writeJSON(w, http.StatusBadRequest, ProblemsReply{Error: "the pipeline file is invalid", Problems: problemReplies(ps)})
		return
	}
	if ps := uploadProblems(spec, m.opts.DataDir, m.opts.StateDir); len(ps) > 0 {
		writeJSON(w, http.StatusBadRequest, ProblemsReply{Error: "the pipeline file names paths outside the folders of eddy serve", Problems: problemReplies(ps)})
		return
	}
	path, exists := m.fileOf(spec.Name)
	if exists && !replace {
		writeJSON(w, http.StatusConflict, ErrorReply{fmt.Sprintf("pipeline %s exists (%s): add ?replace=true to replace it", spec.Name, path)})
		return
	}
	if err := writeFileAtomic(path, data); err != nil {
		writeJSON(w, http.StatusInternalServerError, ErrorReply{err.Error()})
		return
	}
	m.logger.Info("pipeline file uploaded", "pipeline", spec.Name, "file", path, "replaced", exists)
	if done, ok := m.scan()[spec.Name]; ok {
		<-done
	}
	code := http.StatusCreated
	if exists {
		code = http.StatusOK
	}
	e := m.lookup(spec.Name)
	if e == nil {
		writeJSON(w, http.StatusServiceUnavailable, ErrorReply{"eddy serve is stopping"})
		return
	}
	w.Header().Set("Location", "/api/pipelines/"+spec.Name)
	row, _ := m.row(e)
	writeJSON(w, code, row)
}

// fileOf returns the file of pipeline name in the folder, and whether it
// exists: NAME.yaml, or NAME.yml if only that exists.
func (m *Manager) fileOf(name string) (string, bool) {
	for _, ext := range []string{".yaml", ".yml"} {
		path := filepath.Join(m.opts.Dir, name+ext)
		if _, err := os.Stat(path); err == nil {
			return path, true
		}
	}
	return filepath.Join(m.opts.Dir, name+".yaml"), false
}

// writeFileAtomic writes data to path through a hidden temporary file in
// its folder (which scans skip) and a rename.
func writeFileAtomic(path string, data []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".upload-*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	tmp := f.Name()
	_, err = f.Write(data)
	if err == nil {
		err = f.Chmod(0o640)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// serveStop serves POST /api/pipelines/{name}/stop: the pipeline stops
// (?savepoint=true: with a savepoint) and stays stopped.
func (m *Manager) serveStop(w http.ResponseWriter, r *http.Request, e *entry) {
	savepoint, err := boolParam(r.URL.Query().Get("savepoint"), "savepoint")
	if err != nil {
		writeJSON(w, http.StatusBadRequest, ErrorReply{err.Error()})
		return
	}
	if !m.enter(w, e) {
		return
	}
	defer m.leave(e)
	m.mu.Lock()
	e.held = true
	m.notify()
	m.mu.Unlock()
	m.logger.Info("stopping pipeline, as the admin endpoint was asked", "pipeline", e.name, "savepoint", savepoint)
	sp, err := m.stop(m.current(e), savepoint)
	if err != nil {
		writeJSON(w, http.StatusInternalServerError, ErrorReply{err.Error()})
		return
	}
	d := m.detail(e)
	d.Savepoint = sp
	writeJSON(w, http.StatusOK, d)
}

// serveRestart serves POST /api/pipelines/{name}/restart: the pipeline's
// file is loaded again and started from the savepoint a stop of the
// running one takes, else from its newest savepoint file, else from its
// latest checkpoint. It answers once the first job started, or the run
// ended without one.
func (m *Manager) serveRestart(w http.ResponseWriter, r *http.Request, e *entry) {
	if !m.enter(w, e) {
		return
	}
	defer m.leave(e)
	data, err := os.ReadFile(e.file)
	if err != nil {
		writeJSON(w, http.StatusInternalServerError, ErrorReply{fmt.Sprintf("read %s: %v", e.file, err)})
		return
	}
	spec, _, problems := m.load(e, data)
	if problems != nil {
		m.set(e, problems, "the file is invalid")
		writeJSON(w, http.StatusBadRequest, ProblemsReply{Error: "the pipeline file is invalid", Problems: problemReplies(problems)})
		return
	}
	old := m.current(e)
	sp := ""
	if old != nil && !old.ended() {
		if sp, err = m.stop(old, true); err != nil {
			writeJSON(w, http.StatusInternalServerError, ErrorReply{err.Error()})
			return
		}
	} else if spec.Checkpoint != nil {
		if sp, err = latestSavepoint(filepath.Join(m.stateDirOf(spec), SavepointsDir)); err != nil {
			writeJSON(w, http.StatusInternalServerError, ErrorReply{err.Error()})
			return
		}
	}
	sum := sha256Hex(data)
	m.mu.Lock()
	e.held, e.hash = false, sum
	m.mu.Unlock()
	m.set(e, nil, "")
	m.logger.Info("restarting pipeline, as the admin endpoint was asked", "pipeline", e.name, "from_savepoint", sp)
	nr := m.start(e, spec, sp)
	if nr == nil {
		row, _ := m.row(e)
		writeJSON(w, http.StatusInternalServerError, ErrorReply{row.Reason})
		return
	}
	select {
	case <-nr.started:
	case <-nr.done:
	}
	d := m.detail(e)
	d.Savepoint = sp
	writeJSON(w, http.StatusOK, d)
}

// serveDelete serves DELETE /api/pipelines/{name}: the pipeline stops
// with a savepoint, its file is deleted and it is forgotten; its state
// dir stays.
func (m *Manager) serveDelete(w http.ResponseWriter, r *http.Request, e *entry) {
	if !m.enter(w, e) {
		return
	}
	defer m.leave(e)
	sp, err := m.stop(m.current(e), true)
	if err != nil {
		writeJSON(w, http.StatusInternalServerError, ErrorReply{err.Error()})
		return
	}
	if err := os.Remove(e.file); err != nil && !errors.Is(err, os.ErrNotExist) {
		writeJSON(w, http.StatusInternalServerError, ErrorReply{fmt.Sprintf("delete %s: %v", e.file, err)})
		return
	}
	m.mu.Lock()
	e.removed = true
	if m.entries[e.name] == e {
		delete(m.entries, e.name)
	}
	m.notify()
	m.mu.Unlock()
	m.logger.Info("pipeline deleted, as the admin endpoint was asked", "pipeline", e.name, "file", e.file, "savepoint", sp)
	writeJSON(w, http.StatusOK, map[string]string{"deleted": e.name, "file": e.file, "savepoint": sp})
}
