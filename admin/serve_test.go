package admin

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/eddy-stream/eddy/pipeline"
)

// keyedText is an unbounded pipeline NAME that checkpoints every 20ms and
// keeps keyed state in step STEP; EXTRA are steps before it.
const keyedText = `version: 1
name: NAME
checkpoint:
  interval: 20ms
sources:
  - id: numbers
    type: generator
    rate: 500
    fields:
      k: '"k" + string(i % 4)'
      v: i
steps:EXTRA
  - id: STEP
    key_by: k
    aggregate:
      n: count()
sinks:
  - id: out
    type: blackhole
`

// keyed returns keyedText for pipeline name with its state in step and
// the steps extra before it.
func keyed(name, step, extra string) string {
	return strings.NewReplacer("NAME", name, "STEP", step, "EXTRA", extra).Replace(keyedText)
}

// failingText fails on its first record and does not restart.
const failingText = `version: 1
name: failing
restart:
  strategy: none
sources:
  - id: numbers
    type: generator
    count: 100
    fields:
      i: i
steps:
  - id: boom
    set:
      x: 10 % (i - i)
sinks:
  - id: out
    type: blackhole
`

// brokenText has an unknown key at 6:5.
const brokenText = `version: 1
name: broken
sources:
  - id: numbers
    type: generator
    colour: red
    fields:
      i: i
sinks:
  - id: out
    type: blackhole
`

// serveFixture is a Manager on a folder of the test's.
type serveFixture struct {
	t                   *testing.T
	m                   *Manager
	dir, stateDir, data string
	cancel              context.CancelFunc
	ran                 chan struct{}
}

// newServe writes files (name -> text) into a new folder and starts a
// Manager on it that scans only when the test says (Scan), besides the
// first scan of Run.
func newServe(t *testing.T, files map[string]string) *serveFixture {
	t.Helper()
	f := &serveFixture{t: t, dir: t.TempDir(), stateDir: t.TempDir(), data: t.TempDir(), ran: make(chan struct{})}
	for name, text := range files {
		f.write(name, text)
	}
	var err error
	f.m, err = NewManager(ServeOptions{Dir: f.dir, StateDir: f.stateDir, DataDir: f.data, Poll: time.Hour, Logger: quietLogger()})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	f.cancel = cancel
	go func() {
		defer close(f.ran)
		f.m.Run(ctx)
	}()
	t.Cleanup(f.shutdown)
	return f
}

// shutdown ends Run (as SIGTERM does) and waits until every pipeline
// stopped.
func (f *serveFixture) shutdown() {
	f.cancel()
	<-f.ran
}

func (f *serveFixture) write(name, text string) {
	require.NoError(f.t, os.WriteFile(filepath.Join(f.dir, name), []byte(text), 0o644))
}

// rescan scans the folder and waits for the transitions it started.
func (f *serveFixture) rescan() {
	f.m.Scan()
	f.m.settle()
}

// waitFor waits until cond holds: it is checked at every change of a
// pipeline, and every few milliseconds for the changes no event tells of
// (a job's restore ending, a checkpoint completing).
func (f *serveFixture) waitFor(what string, cond func() bool) {
	f.t.Helper()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		ch := f.m.Changed()
		if cond() {
			return
		}
		select {
		case <-ch:
		case <-tick.C:
		case <-f.ran:
			require.True(f.t, cond(), "Run returned before %s", what)
			return
		}
	}
}

// row returns pipeline name's row; ok false when there is no such
// pipeline.
func (f *serveFixture) row(name string) (PipelineRow, bool) {
	e := f.m.lookup(name)
	if e == nil {
		return PipelineRow{}, false
	}
	r, _ := f.m.row(e)
	return r, true
}

// state returns the state of pipeline name, "" when there is none.
func (f *serveFixture) state(name string) string {
	r, _ := f.row(name)
	return r.State
}

// waitState waits until pipeline name is in state.
func (f *serveFixture) waitState(name, state string) {
	f.t.Helper()
	f.waitFor(name+" "+state, func() bool { return f.state(name) == state })
}

// run returns the current run of pipeline name.
func (f *serveFixture) run(name string) *run {
	e := f.m.lookup(name)
	require.NotNil(f.t, e, "no pipeline %s", name)
	return f.m.current(e)
}

// savepoints returns the savepoint files of pipeline name.
func (f *serveFixture) savepoints(name string) []SavepointRow {
	rows, err := ListSavepoints(filepath.Join(f.stateDir, name, SavepointsDir))
	require.NoError(f.t, err)
	return rows
}

// recordsOut is what the source of the run r emitted.
func recordsOut(r *run) float64 {
	return pipeline.CounterValue(r.metrics.RecordsOut(pipeline.SubtaskInfo{ID: "numbers", Subtask: 0, Parallelism: 1}))
}

// waitCheckpoint waits until the run of pipeline name completed a
// checkpoint: a savepoint can then be taken.
func (f *serveFixture) waitCheckpoint(name string) {
	f.t.Helper()
	r := f.run(name)
	f.waitFor(name+" checkpointed", func() bool { return r.metrics.CheckpointStats().LatestCompleted != nil })
}

// TestServeFolder: three pipelines and an invalid file in a folder: one
// fails (the others run on), one is replaced by a changed file (from a
// savepoint; an incompatible change is refused and the old one runs on),
// one is removed (stopped with a savepoint). The end of Run stops the
// rest with savepoints.
func TestServeFolder(t *testing.T) {
	f := newServe(t, map[string]string{
		"steady.yaml":   keyed("steady", "totals", ""),
		"failing.yaml":  failingText,
		"changing.yaml": keyed("changing", "totals", ""),
		"removed.yml":   keyed("removed", "totals", ""),
		"broken.yaml":   brokenText,
		"notes.txt":     "not a pipeline",
	})
	for _, name := range []string{"steady", "changing", "removed"} {
		f.waitState(name, "running")
	}
	f.waitState("failing", "failed")
	f.waitFor("broken loaded", func() bool { return f.state("broken") == "invalid" })
	failing, _ := f.row("failing")
	require.Contains(t, failing.Error, "integer divide by zero")
	broken, _ := f.row("broken")
	require.Equal(t, []ProblemReply{{File: filepath.Join(f.dir, "broken.yaml"), Line: 6, Col: 5,
		Message: `unknown key "colour" in source "numbers" (generator)`}}, broken.Problems)
	require.Equal(t, []string{"broken", "changing", "failing", "removed", "steady"}, f.m.names(), "notes.txt is not a pipeline")
	steady := f.run("steady")
	steadyRead := recordsOut(steady)

	// A file removed: its pipeline stops with a savepoint and is gone.
	f.waitCheckpoint("removed")
	require.NoError(t, os.Remove(filepath.Join(f.dir, "removed.yml")))
	f.rescan()
	_, ok := f.row("removed")
	require.False(t, ok, "removed is forgotten")
	sps := f.savepoints("removed")
	require.Len(t, sps, 1)
	require.True(t, sps[0].Final, "a stop with a savepoint")
	require.Equal(t, SavepointOK, sps[0].Status)

	// A compatible change: the new version starts from a savepoint of the
	// old one.
	f.waitCheckpoint("changing")
	old := f.run("changing")
	f.write("changing.yaml", keyed("changing", "totals", "\n  - id: positive\n    filter: v >= 0"))
	f.rescan()
	replaced := f.run("changing")
	require.NotSame(t, old, replaced, "a new run")
	require.True(t, old.ended())
	require.Equal(t, pipeline.RunStopped, old.runner.State())
	require.NotNil(t, replaced.runner.Status().Checkpoints.Restored, "the new run restored the savepoint")
	sps = f.savepoints("changing")
	require.Len(t, sps, 1)
	require.True(t, sps[0].Final)
	require.Equal(t, sps[0].ID, replaced.runner.Status().Checkpoints.Restored.ID-1,
		"restored from the savepoint, imported as the checkpoint after it")
	row, _ := f.row("changing")
	require.Empty(t, row.Reason)
	require.Len(t, replaced.runner.Plan().Nodes, 4, "the new file's plan")

	// An incompatible change (the keyed state's step renamed): refused,
	// the running version runs on, the reason is reported.
	f.waitState("changing", "running")
	f.waitCheckpoint("changing")
	f.write("changing.yaml", keyed("changing", "sums", ""))
	f.rescan()
	require.Same(t, replaced, f.run("changing"), "the same run")
	require.False(t, replaced.ended())
	row, _ = f.row("changing")
	require.Equal(t, "running", row.State)
	require.Contains(t, row.Reason, "the changed file was not applied, the pipeline runs on as it was")
	require.Contains(t, row.Reason, `holds state of step "totals", which the pipeline no longer has`)
	probes, err := filepath.Glob(filepath.Join(f.stateDir, "changing", ".probe-*"))
	require.NoError(t, err)
	require.Empty(t, probes, "the savepoint checked against is removed")

	// An invalid change: the running version runs on.
	f.write("changing.yaml", brokenText)
	f.rescan()
	require.Same(t, replaced, f.run("changing"))
	row, _ = f.row("changing")
	require.Equal(t, "running", row.State)
	require.Equal(t, "the changed file is invalid: the pipeline runs on as it was", row.Reason)
	require.NotEmpty(t, row.Problems)

	// The failure, the replacement and the removal left steady alone.
	require.Same(t, steady, f.run("steady"))
	require.Equal(t, "running", f.state("steady"))
	f.waitFor("steady reads on", func() bool { return recordsOut(steady) > steadyRead })

	// The end of Run stops the rest as on_sigterm says: with savepoints.
	f.shutdown()
	for _, name := range []string{"steady", "changing"} {
		r := f.run(name)
		require.True(t, r.ended(), name)
		require.Equal(t, pipeline.RunStopped, r.runner.State(), name)
	}
	require.Len(t, f.savepoints("steady"), 1)
	require.True(t, f.savepoints("steady")[0].Final)
}

// TestServeDuplicateName: of NAME.yaml and NAME.yml the first counts.
func TestServeDuplicateName(t *testing.T) {
	f := newServe(t, map[string]string{
		"twin.yaml": keyed("twin", "totals", ""),
		"twin.yml":  keyed("twin", "other", ""),
	})
	f.waitState("twin", "running")
	row, _ := f.row("twin")
	require.Equal(t, filepath.Join(f.dir, "twin.yaml"), row.File)
}

// TestServeNameMismatch: a file must hold the pipeline its name names.
func TestServeNameMismatch(t *testing.T) {
	f := newServe(t, map[string]string{"alias.yaml": keyed("real", "totals", "")})
	f.waitState("alias", "invalid")
	row, _ := f.row("alias")
	require.Len(t, row.Problems, 1)
	require.Equal(t, fmt.Sprintf(`name "real": eddy serve names a pipeline by its file, so alias.yaml must hold name: alias`), row.Problems[0].Message)
}
