package admin

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/eddy-stream/eddy/checkpoint"
	"github.com/eddy-stream/eddy/pipeline"
)

// `eddy serve`: many pipelines in one process (docs/running.md, "eddy
// serve"). The Manager runs every pipeline file of a folder, each with its
// own runner, state dir, checkpoints and metrics, and follows the folder:
// a file added starts its pipeline, a file removed stops it with a
// savepoint, a file changed replaces it from a savepoint when the state is
// compatible. A pipeline that fails, or whose file is invalid, is reported
// and does not touch the others.

// DefaultMaxUpload bounds the body of POST /api/pipelines.
const DefaultMaxUpload = 1 << 20

// DefaultPoll is how often Run looks at the folder.
const DefaultPoll = time.Second

// ServeOptions configure a Manager.
type ServeOptions struct {
	// Dir is the folder of pipeline files (*.yaml, *.yml); a pipeline is
	// named by its file: NAME.yaml must hold name: NAME.
	Dir string
	// StateDir is the runners' state dir: each pipeline keeps its
	// checkpoints and savepoints in <StateDir>/<name>, as with `eddy run`
	// (a file's state.dir wins).
	StateDir string
	// DataDir is the folder that the files an uploaded pipeline reads or
	// writes must be in; "": an uploaded pipeline may name no file.
	DataDir string
	// MaxCheckpointAge is each pipeline's readiness bound
	// (PipelineOptions.MaxCheckpointAge).
	MaxCheckpointAge time.Duration
	// MaxUpload bounds an uploaded file; 0: DefaultMaxUpload.
	MaxUpload int64
	// Poll is how often Run looks at the folder; 0: DefaultPoll.
	Poll   time.Duration
	Logger *slog.Logger
	// Env is the registry pipeline files are loaded with; nil:
	// pipeline.Default.
	Env *pipeline.Env
}

// Manager runs the pipelines of a folder: Run follows the folder until
// its context ends, then stops them all; Handler serves their admin
// endpoint and the REST interface.
type Manager struct {
	opts   ServeOptions
	logger *slog.Logger

	mu      sync.Mutex
	entries map[string]*entry
	// changed is closed, and replaced, whenever an entry changes.
	changed chan struct{}
	// closing is set once Run stops the pipelines: nothing starts after.
	closing bool
	// base is the URL of the admin endpoint written to each pipeline's
	// admin.addr; "" while there is none.
	base string
	// duplicates are the files already reported as another file's
	// duplicate.
	duplicates map[string]bool
	// scanned is set once a scan read the folder; lastScan is when the
	// newest scan ended, whether or not it could read the folder.
	scanned  bool
	lastScan time.Time

	// transitions counts the starts, stops and replacements under way.
	transitions sync.WaitGroup
}

// entry is one pipeline of the folder.
type entry struct {
	name string
	file string

	// op serializes the pipeline's transitions (start, stop, replace,
	// remove, restart): each holds it from start to end.
	op sync.Mutex

	// Guarded by Manager.mu.
	hash string // of the file text the last scan acted on
	run  *run   // the current run, or the last; nil before the first
	// held is set by a stop on request: a scan starts the pipeline again
	// only when its file changes, POST .../restart always.
	held bool
	// problems are those of the file's text, nil when it loads.
	problems pipeline.Problems
	// reason says why the last change was not applied, or why the pipeline
	// does not run; "" when there is nothing to say.
	reason  string
	removed bool
}

// run is one run of a pipeline: a runner and its admin endpoint.
type run struct {
	spec    *pipeline.Spec
	runner  *pipeline.Runner
	metrics *pipeline.Metrics
	admin   *Pipeline
	// endpoint is the pipeline's own admin endpoint (/pipelines/NAME/).
	endpoint http.Handler
	dir      string // the pipeline's state dir
	// started is closed when the first job started; done when Run
	// returned, err then holding what it returned.
	started chan struct{}
	done    chan struct{}
	err     error
}

// ended tells whether the run's Run returned.
func (r *run) ended() bool {
	select {
	case <-r.done:
		return true
	default:
		return false
	}
}

// savepointDir is where the run's savepoints go.
func (r *run) savepointDir() string { return filepath.Join(r.dir, SavepointsDir) }

// NewManager returns the manager of the pipelines in o.Dir; nothing runs
// until Run. The folder must exist.
func NewManager(o ServeOptions) (*Manager, error) {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Env == nil {
		o.Env = pipeline.Default
	}
	if o.MaxUpload <= 0 {
		o.MaxUpload = DefaultMaxUpload
	}
	if o.Poll <= 0 {
		o.Poll = DefaultPoll
	}
	st, err := os.Stat(o.Dir)
	if err != nil {
		return nil, fmt.Errorf("pipelines folder: %w", err)
	}
	if !st.IsDir() {
		return nil, fmt.Errorf("pipelines folder %s: not a directory", o.Dir)
	}
	return &Manager{opts: o, logger: o.Logger, entries: map[string]*entry{}, changed: make(chan struct{}),
		duplicates: map[string]bool{}}, nil
}

// SetBaseURL sets the URL of the admin endpoint (http://HOST:PORT): each
// pipeline with a checkpoint block writes BASE/pipelines/NAME to
// <state dir>/admin.addr while it runs, for `eddy savepoint trigger`.
// Called before Run.
func (m *Manager) SetBaseURL(base string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.base = strings.TrimSuffix(base, "/")
}

// Changed returns a channel closed at the next change of a pipeline (a
// run started or ended, a file loaded, a change refused).
func (m *Manager) Changed() <-chan struct{} {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.changed
}

// notify wakes the waiters of Changed; m.mu is held.
func (m *Manager) notify() {
	close(m.changed)
	m.changed = make(chan struct{})
}

// Run scans the folder now and every ServeOptions.Poll until ctx ends,
// then stops every pipeline as its checkpoint.on_sigterm says (with a
// savepoint by default) and returns once all ended. A second call of
// Cancel meanwhile cancels those still stopping.
func (m *Manager) Run(ctx context.Context) {
	m.Scan()
	tick := time.NewTicker(m.opts.Poll)
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
			m.Scan()
		case <-ctx.Done():
			m.shutdown()
			return
		}
	}
}

// Cancel cancels every run at once, dropping the records in flight (a
// second signal while Run stops them).
func (m *Manager) Cancel() {
	for _, r := range m.runs() {
		r.runner.Cancel()
	}
}

// runs returns the current run of every pipeline.
func (m *Manager) runs() []*run {
	m.mu.Lock()
	defer m.mu.Unlock()
	var rs []*run
	for _, e := range m.entries {
		if e.run != nil {
			rs = append(rs, e.run)
		}
	}
	return rs
}

// shutdown stops every pipeline and waits for them.
func (m *Manager) shutdown() {
	m.mu.Lock()
	m.closing = true
	m.notify()
	m.mu.Unlock()
	// No transition starts from now on; those under way end first.
	m.transitions.Wait()
	rs := m.runs()
	for _, r := range rs {
		if !r.ended() {
			m.stopForShutdown(r)
		}
	}
	for _, r := range rs {
		<-r.done
	}
}

// stopForShutdown asks r to stop as `eddy run` does on SIGTERM: as the
// checkpoint block's on_sigterm says, with a savepoint by default.
func (m *Manager) stopForShutdown(r *run) {
	logger := r.admin.opts.Logger
	cp := r.spec.Checkpoint
	switch {
	case cp != nil && cp.OnSigterm == pipeline.SigtermSavepoint:
		if err := r.runner.StopWithSavepoint(context.Background(), r.savepointDir()); err != nil {
			logger.Warn("stopping with the final checkpoint, without a savepoint", "reason", err.Error())
			_ = r.runner.Stop()
			return
		}
		logger.Info("stopping with a savepoint: sources stop, in-flight records drain, sinks flush", "dir", r.savepointDir())
	case cp != nil && cp.OnSigterm == pipeline.SigtermNone:
		logger.Info("stopping without a final checkpoint (on_sigterm: none)")
		_ = r.runner.StopWithoutCheckpoint()
	default:
		logger.Info("stopping gracefully: sources stop, in-flight records drain, sinks flush")
		_ = r.runner.Stop()
	}
}

// stateDirOf returns the state dir of spec's pipeline: <state dir>/<name>,
// as for eddy run (the file's state.dir wins).
func (m *Manager) stateDirOf(spec *pipeline.Spec) string {
	root := spec.State.Dir
	if root == "" {
		root = m.opts.StateDir
	}
	return filepath.Join(root, spec.Name)
}

// sha256Hex returns the SHA-256 of data in hex: a file's version.
func sha256Hex(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

// isPipelineFile tells whether the folder's entry name is a pipeline file.
func isPipelineFile(name string) bool {
	ext := filepath.Ext(name)
	return !strings.HasPrefix(name, ".") && (ext == ".yaml" || ext == ".yml")
}

// folderFile is a pipeline file as a scan read it.
type folderFile struct {
	path string
	data []byte
	hash string
}

// readFolder reads the pipeline files of the folder, by name; of two
// files with one name (NAME.yaml, NAME.yml) the first in sorted order
// counts, and the other is reported once.
func (m *Manager) readFolder() (map[string]folderFile, error) {
	des, err := os.ReadDir(m.opts.Dir)
	if err != nil {
		return nil, fmt.Errorf("read the pipelines folder: %w", err)
	}
	files := map[string]folderFile{}
	for _, de := range des {
		if !isPipelineFile(de.Name()) || de.IsDir() {
			continue
		}
		name := strings.TrimSuffix(de.Name(), filepath.Ext(de.Name()))
		path := filepath.Join(m.opts.Dir, de.Name())
		if f, ok := files[name]; ok {
			m.reportDuplicate(path, f.path)
			continue
		}
		data, err := os.ReadFile(path)
		if err != nil {
			m.logger.Warn("cannot read a pipeline file", "file", path, "err", err.Error())
			continue
		}
		files[name] = folderFile{path: path, data: data, hash: sha256Hex(data)}
	}
	return files, nil
}

// reportDuplicate logs, once, that path is ignored for first.
func (m *Manager) reportDuplicate(path, first string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.duplicates[path] {
		m.duplicates[path] = true
		m.logger.Warn("ignoring a pipeline file: another file names the same pipeline", "file", path, "pipeline_file", first)
	}
}

// Scan looks at the folder once: a new file starts its pipeline, a file
// gone stops its pipeline with a savepoint, a changed file replaces its
// pipeline. The transitions go on in the background; one pipeline's
// never waits for another's.
func (m *Manager) Scan() { m.scan() }

// scan is Scan; it returns the transitions it began, by pipeline: each
// channel is closed when its transition ended.
func (m *Manager) scan() map[string]<-chan struct{} {
	files, err := m.readFolder()
	m.mu.Lock()
	defer m.mu.Unlock()
	m.lastScan = time.Now()
	if err != nil {
		m.logger.Error("cannot scan the pipelines folder", "dir", m.opts.Dir, "err", err.Error())
		return nil
	}
	if m.closing {
		return nil
	}
	m.scanned = true
	began := map[string]<-chan struct{}{}
	for name, e := range m.entries {
		if _, ok := files[name]; !ok && !e.removed {
			e.removed = true
			began[name] = m.begin(e, func() { m.remove(e) })
		}
	}
	for name, f := range files {
		e := m.entries[name]
		if e == nil {
			e = &entry{name: name, file: f.path}
			m.entries[name] = e
			m.notify()
		} else if e.hash == f.hash && !e.removed {
			continue
		}
		e.hash, e.removed, e.file = f.hash, false, f.path
		began[name] = m.begin(e, func() {
			if m.latest(e, f.hash) {
				m.apply(e, f.data)
			}
		})
	}
	return began
}

// begin runs the transition fn of e on a goroutine of its own, after the
// transitions of e before it, and returns a channel closed when it
// ended; m.mu is held.
func (m *Manager) begin(e *entry, fn func()) <-chan struct{} {
	m.transitions.Add(1)
	done := make(chan struct{})
	go func() {
		defer m.transitions.Done()
		defer close(done)
		e.op.Lock()
		defer e.op.Unlock()
		fn()
	}()
	return done
}

// latest tells whether hash is still the version of e's file that the
// newest scan saw: a transition of an older version, which waited for
// another, is skipped.
func (m *Manager) latest(e *entry, hash string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return e.hash == hash && !e.removed
}

// settle waits for the transitions under way (tests).
func (m *Manager) settle() { m.transitions.Wait() }

// load loads and compiles the text of e's file; an invalid one gives its
// problems.
func (m *Manager) load(e *entry, data []byte) (*pipeline.Spec, *pipeline.Plan, pipeline.Problems) {
	spec, err := pipeline.Load(m.opts.Env, e.file, data)
	if err != nil {
		var ps pipeline.Problems
		if errors.As(err, &ps) {
			return nil, nil, ps
		}
		return nil, nil, pipeline.Problems{{Pos: pipeline.Pos{File: e.file, Line: 1, Col: 1}, Msg: err.Error()}}
	}
	if spec.Name != e.name {
		return nil, nil, pipeline.Problems{{Pos: pipeline.Pos{File: e.file, Line: 1, Col: 1},
			Msg: fmt.Sprintf("name %q: eddy serve names a pipeline by its file, so %s must hold name: %s", spec.Name, filepath.Base(e.file), e.name)}}
	}
	plan, err := pipeline.Compile(spec)
	if err != nil {
		return nil, nil, pipeline.Problems{{Pos: pipeline.Pos{File: e.file, Line: 1, Col: 1}, Msg: err.Error()}}
	}
	return spec, plan, nil
}

// set updates e's problems and reason, and tells the waiters.
func (m *Manager) set(e *entry, problems pipeline.Problems, reason string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e.problems, e.reason = problems, reason
	m.notify()
}

// current returns e's run, nil before the first.
func (m *Manager) current(e *entry) *run {
	m.mu.Lock()
	defer m.mu.Unlock()
	return e.run
}

// apply makes e's pipeline run the file text data: it starts it, or
// replaces the running one. An invalid file leaves a running pipeline
// running. A pipeline stopped on request stays stopped.
func (m *Manager) apply(e *entry, data []byte) {
	logger := m.logger.With("pipeline", e.name)
	spec, plan, problems := m.load(e, data)
	old := m.current(e)
	running := old != nil && !old.ended()
	if problems != nil {
		reason := "the file is invalid"
		if running {
			reason = "the changed file is invalid: the pipeline runs on as it was"
		}
		logger.Warn(reason, "file", e.file, "problems", problems.Error())
		m.set(e, problems, reason)
		return
	}
	m.mu.Lock()
	held := e.held
	m.mu.Unlock()
	switch {
	case running && old.spec.Hash == spec.Hash:
		m.set(e, nil, "") // the file came back as it was
	case held && !running:
		m.set(e, nil, "stopped on request: POST /api/pipelines/"+e.name+"/restart starts it")
	case !running:
		m.set(e, nil, "")
		m.start(e, spec, "")
	default:
		m.replace(e, old, spec, plan)
	}
}

// start starts a run of spec for e, restoring fromSavepoint, else the
// latest checkpoint of its state dir. It returns the run, or nil when it
// could not be made (the reason is set).
func (m *Manager) start(e *entry, spec *pipeline.Spec, fromSavepoint string) *run {
	logger := m.logger.With("pipeline", e.name)
	m.mu.Lock()
	if m.closing {
		m.mu.Unlock()
		return nil
	}
	base := m.base
	m.mu.Unlock()
	r := &run{spec: spec, metrics: pipeline.NewMetrics(), dir: m.stateDirOf(spec),
		started: make(chan struct{}), done: make(chan struct{})}
	var unpublish func()
	runner, err := pipeline.NewRunner(spec, pipeline.RunnerOptions{Logger: logger, Metrics: r.metrics, StateDir: r.dir,
		FromSavepoint: fromSavepoint,
		OnStart: func(attempt int) {
			r.admin.JobStarted()
			if attempt != 1 {
				return
			}
			if spec.Checkpoint != nil && base != "" {
				var err error
				if unpublish, err = PublishAddr(filepath.Join(r.dir, AddrFile), base+"/pipelines/"+e.name); err != nil {
					logger.Warn("eddy savepoint trigger will not find this pipeline", "err", err.Error())
				}
			}
			close(r.started)
			m.mu.Lock()
			m.notify()
			m.mu.Unlock()
		},
		OnRunning: func(int) {
			// Every task opened: the pipeline's state is running now.
			m.mu.Lock()
			m.notify()
			m.mu.Unlock()
		}})
	if err != nil {
		logger.Error("cannot start", "err", err.Error())
		m.set(e, nil, "cannot start: "+err.Error())
		return nil
	}
	r.runner = runner
	r.admin = NewPipeline(PipelineOptions{Name: e.name, Target: runner, Metrics: r.metrics, SavepointDir: r.savepointDir(),
		Checkpoints: spec.Checkpoint != nil, MaxCheckpointAge: m.opts.MaxCheckpointAge, Logger: logger})
	r.endpoint = r.handler()
	m.mu.Lock()
	e.run = r
	m.notify()
	m.mu.Unlock()
	logger.Info("starting pipeline", "file", e.file, "state_dir", r.dir, "from_savepoint", fromSavepoint)
	go func() {
		r.err = runner.Run(context.Background())
		if unpublish != nil {
			unpublish()
		}
		close(r.done)
		state := runner.State()
		switch {
		case r.err != nil:
			logger.Error("pipeline "+state.String(), "err", r.err.Error())
		default:
			logger.Info("pipeline " + state.String())
		}
		m.mu.Lock()
		m.notify()
		m.mu.Unlock()
	}()
	return r
}

// stop stops r and waits for it to end: with a savepoint (whose path it
// returns) when savepoint is set and the pipeline checkpoints, else
// gracefully with a final checkpoint, if any.
func (m *Manager) stop(r *run, savepoint bool) (string, error) {
	if r == nil || r.ended() {
		return "", nil
	}
	ctx := context.Background()
	sp := ""
	if savepoint && r.spec.Checkpoint != nil {
		if err := r.runner.StopWithSavepoint(ctx, r.savepointDir()); err != nil {
			r.admin.opts.Logger.Warn("stopping with the final checkpoint, without a savepoint", "reason", err.Error())
			_ = r.runner.Stop()
		} else {
			s, err := r.runner.FinalSavepoint(ctx)
			if err != nil {
				<-r.done
				return "", fmt.Errorf("stop with a savepoint: %w", err)
			}
			sp = s.Path
		}
	} else {
		_ = r.runner.Stop()
	}
	<-r.done
	return sp, nil
}

// replace replaces the running old with spec: when both checkpoint, it
// takes a savepoint of old and checks that spec can restore it (no state
// of a step or sink that spec no longer has); if not, old runs on and the
// reason is reported. Otherwise old stops with a savepoint and spec starts
// from it; should it not start, old starts again from that savepoint.
func (m *Manager) replace(e *entry, old *run, spec *pipeline.Spec, plan *pipeline.Plan) {
	logger := m.logger.With("pipeline", e.name)
	carry := old.spec.Checkpoint != nil && spec.Checkpoint != nil
	if carry {
		if err := m.checkCompatible(old, plan); err != nil {
			reason := "the changed file was not applied, the pipeline runs on as it was: " + err.Error()
			logger.Warn("the changed file was not applied: the pipeline runs on as it was", "reason", err.Error())
			m.set(e, nil, reason)
			return
		}
	}
	logger.Info("the file changed: replacing the pipeline", "file", e.file, "from_savepoint", carry)
	sp, err := m.stop(old, carry)
	if err != nil {
		logger.Error("the changed file was not applied: the pipeline did not stop with a savepoint", "err", err.Error())
		m.set(e, nil, "the changed file was not applied: "+err.Error())
		return
	}
	m.set(e, nil, "")
	r := m.start(e, spec, sp)
	if r == nil {
		m.restore(e, old, sp, "the changed file could not start")
		return
	}
	select {
	case <-r.started:
	case <-r.done:
		if r.runner.State() == pipeline.RunAborted {
			m.restore(e, old, sp, "the changed file could not start: "+errText(r.err))
		}
	}
}

// restore starts the previous version of e's pipeline (old's spec) again
// from savepoint sp after its replacement could not start.
func (m *Manager) restore(e *entry, old *run, sp, why string) {
	m.logger.Warn(why+": the previous version starts again", "pipeline", e.name, "savepoint", sp)
	if r := m.start(e, old.spec, sp); r != nil {
		m.set(e, nil, why+"; the previous version runs again")
	}
}

// errText is err's text, or "" for nil.
func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// checkCompatible takes a savepoint of old, which runs on, and checks that
// plan can restore it; the savepoint is removed after.
func (m *Manager) checkCompatible(old *run, plan *pipeline.Plan) error {
	dir, err := os.MkdirTemp(old.dir, ".probe-")
	if err != nil {
		return fmt.Errorf("savepoint to check the change against: %w", err)
	}
	defer func() { _ = os.RemoveAll(dir) }()
	sp, err := old.runner.TriggerSavepoint(context.Background(), dir)
	if err != nil {
		return fmt.Errorf("savepoint to check the change against: %w", err)
	}
	cp, err := checkpoint.OpenSavepoint(sp.Path)
	if err != nil {
		return fmt.Errorf("savepoint to check the change against: %w", err)
	}
	defer func() { _ = cp.Close() }()
	return pipeline.CheckRestore(plan, cp, false)
}

// remove stops e's pipeline with a savepoint and forgets it: its file is
// gone.
func (m *Manager) remove(e *entry) {
	m.mu.Lock()
	r, gone := e.run, e.removed
	m.mu.Unlock()
	if !gone {
		return // the file came back: the transition after this one applies it
	}
	sp, err := m.stop(r, true)
	attrs := []any{"file", e.file}
	if sp != "" {
		attrs = append(attrs, "savepoint", sp)
	}
	if err != nil {
		attrs = append(attrs, "err", err.Error())
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if !e.removed || m.entries[e.name] != e {
		return // the file came back meanwhile, or DELETE forgot it
	}
	delete(m.entries, e.name)
	m.notify()
	m.logger.Info("pipeline removed: its file is gone", append(attrs, "pipeline", e.name)...)
}

// names returns the pipelines' names, sorted.
func (m *Manager) names() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	names := make([]string, 0, len(m.entries))
	for n := range m.entries {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}
