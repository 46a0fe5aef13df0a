//go:build !windows

package e2e_test

import (
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/eddy-stream/eddy/checkpoint"
)

// Savepoint tests: savepoints of a running `eddy run` taken with `eddy
// savepoint trigger` (through the run's admin endpoint) and on SIGTERM,
// restored with --from-savepoint into a fresh state dir. The pipeline is
// the continuous aggregate of the crash tests (testdata/crash/aggregate.yaml)
// with the checkpoint block under test; its committed output must be, row
// by row and per key in order, that of an uninterrupted run.

// savepointPipeline is the pipeline; EXTRA is the rest of its checkpoint
// block.
const savepointPipeline = `version: 1
name: sp-e2e
parallelism: 2
checkpoint:
  interval: ${SP_INTERVAL}
  mode: ${SP_MODE}
  timeout: 30s
EXTRA
sources:
  - id: events
    type: generator
    count: ${SP_COUNT}
    rate: ${SP_RATE}
    fields:
      key: '"c" + string(i % 26)'
      v: i % 100
steps:
  - id: totals
    key_by: key
    aggregate:
      n: count()
      total: sum(v)
      hi: max(v)
sinks:
  - id: out
    type: file
    path: ${SP_OUT}/
    changelog: upsert
`

// savepointRecords is the input size: at the rate of the first runs they
// would take seconds, and are stopped well before.
var savepointRecords = map[bool]int{false: 20_000, true: 8_000}[raceEnabled]

type savepointCase struct {
	dir, file, out string
	n              int
}

func newSavepointCase(t *testing.T, checkpointExtra string) savepointCase {
	t.Helper()
	work := t.TempDir()
	sc := savepointCase{dir: work, file: filepath.Join(work, "sp.yaml"), out: filepath.Join(work, "out"), n: savepointRecords}
	require.NoError(t, os.WriteFile(sc.file, []byte(strings.Replace(savepointPipeline, "EXTRA", checkpointExtra, 1)), 0o644))
	return sc
}

// env is the environment of a run (or of `eddy savepoint`, which loads the
// file too) with state dir state, the given mode and interval, and rate
// records per second (0: as fast as it can).
func (sc savepointCase) env(state, mode, interval string, rate int) map[string]string {
	return map[string]string{
		"EDDY_LOG_FORMAT": "json", "EDDY_STATE_DIR": state,
		"SP_MODE": mode, "SP_INTERVAL": interval, "SP_OUT": sc.out,
		"SP_COUNT": strconv.Itoa(sc.n), "SP_RATE": strconv.Itoa(rate),
	}
}

// waitForAdmin waits until the run wrote its admin endpoint's address.
func waitForAdmin(t *testing.T, p *proc, state string) {
	t.Helper()
	path := filepath.Join(state, "sp-e2e", "admin.addr")
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		if _, err := os.Stat(path); err == nil {
			return
		}
		select {
		case <-tick.C:
		case <-p.done:
			t.Fatalf("eddy run ended before it wrote %s; stderr:\n%s", path, p.log.text())
		}
	}
}

// trigger runs `eddy savepoint trigger` and returns the path it prints.
func (sc savepointCase) trigger(t *testing.T, env map[string]string, args ...string) string {
	t.Helper()
	r := eddy(t, sc.dir, env, append(append([]string{"savepoint", "trigger"}, args...), sc.file)...)
	require.Equal(t, 0, r.code, r.stderr)
	path := strings.TrimSuffix(r.stdout, "\n")
	require.NotContains(t, path, "\n")
	require.FileExists(t, path)
	return path
}

// requireOutput: the committed output is the uninterrupted run's, row by
// row, and each key's rows are in order.
func (sc savepointCase) requireOutput(t *testing.T) {
	t.Helper()
	want := canonicalLines(t, expectedAggregate(sc.n))
	got := committedLines(t, sc.out)
	requireNoHiddenParts(t, sc.out)
	requireSameLines(t, want, got, "runs restored from a savepoint vs an uninterrupted run")
	checkAggregateExact(t, want, got)
}

// TestSavepointTriggerAndRestore: with at_least_once checkpoints and
// on_sigterm: none, the only checkpoint of the first run is the savepoint
// that `eddy savepoint trigger` takes; SIGTERM stops the run without a
// final checkpoint, and the run restored from the savepoint into a fresh
// state dir completes the output exactly once: a savepoint is aligned in
// either mode.
func TestSavepointTriggerAndRestore(t *testing.T) {
	sc := newSavepointCase(t, "  on_sigterm: none")
	state := filepath.Join(sc.dir, "state")
	env := sc.env(state, "at_least_once", "1h", 4000)
	p := startEddy(t, sc.dir, env, "run", sc.file)
	waitForAdmin(t, p, state)
	sp := sc.trigger(t, env)
	require.Equal(t, filepath.Join(state, "sp-e2e", "savepoints"), filepath.Dir(sp))
	require.Regexp(t, `^savepoint-1-\d{8}T\d{6}Z\.db$`, filepath.Base(sp))

	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	res := p.wait(t)
	require.False(t, res.killed)
	require.Equal(t, 0, res.code, p.log.text())
	require.Equal(t, "stopped", summary(t, p.log.text()).status)
	require.Len(t, p.log.find("stopping without a final checkpoint (on_sigterm: none): records in flight are dropped, the next run restores the latest checkpoint"), 1)
	require.Empty(t, p.log.find("stopped with a savepoint"))
	require.Equal(t, []int64{1}, completedCheckpoints(t, filepath.Join(state, "sp-e2e", checkpoint.FileName)),
		"the savepoint was the first run's only checkpoint")

	fresh := filepath.Join(sc.dir, "fresh-state")
	r := eddy(t, sc.dir, sc.env(fresh, "at_least_once", "1h", 0), "run", "--from-savepoint", sp, sc.file)
	require.Equal(t, 0, r.code, r.stderr)
	require.Equal(t, "finished", summary(t, r.stderr).status)
	require.Contains(t, r.stderr, `"msg":"restoring from savepoint"`)
	sc.requireOutput(t)
}

// TestSavepointOnSigterm: SIGTERM stops a run with a savepoint (the
// default on_sigterm), after one `eddy savepoint trigger` took; `eddy
// savepoint list` shows both, and the final one restores into a fresh
// state dir and completes the output exactly once.
func TestSavepointOnSigterm(t *testing.T) {
	sc := newSavepointCase(t, "")
	state := filepath.Join(sc.dir, "state")
	env := sc.env(state, "exactly_once", "50ms", 4000)
	p := startEddy(t, sc.dir, env, "run", sc.file)
	waitForAdmin(t, p, state)
	other := filepath.Join(sc.dir, "elsewhere")
	first := sc.trigger(t, env, "--dir", other)
	require.Equal(t, other, filepath.Dir(first))

	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	res := p.wait(t)
	require.False(t, res.killed)
	require.Equal(t, 0, res.code, p.log.text())
	require.Equal(t, "stopped", summary(t, p.log.text()).status)
	stopped := p.log.find("stopped with a savepoint")
	require.Len(t, stopped, 1, p.log.text())
	final := stopped[0].Path
	require.Equal(t, filepath.Join(state, "sp-e2e", "savepoints"), filepath.Dir(final))
	_, err := os.Stat(filepath.Join(state, "sp-e2e", "admin.addr"))
	require.ErrorIs(t, err, fs.ErrNotExist, "the run removes its address file")

	r := eddy(t, sc.dir, env, "savepoint", "list", "--format", "json", sc.file)
	require.Equal(t, 0, r.code, r.stderr)
	var l struct {
		Savepoints []struct {
			ID     int64  `json:"id"`
			Path   string `json:"path"`
			Final  bool   `json:"final"`
			Status string `json:"status"`
		} `json:"savepoints"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &l))
	require.Len(t, l.Savepoints, 1, "savepoints written elsewhere are not listed")
	require.Equal(t, final, l.Savepoints[0].Path)
	require.True(t, l.Savepoints[0].Final)
	require.Equal(t, "ok", l.Savepoints[0].Status)
	cp, err := checkpoint.OpenSavepoint(first)
	require.NoError(t, err)
	firstID := cp.ID()
	require.NoError(t, cp.Close())
	require.Greater(t, l.Savepoints[0].ID, firstID)

	fresh := filepath.Join(sc.dir, "fresh-state")
	r = eddy(t, sc.dir, sc.env(fresh, "exactly_once", "50ms", 0), "run", "--from-savepoint", final, sc.file)
	require.Equal(t, 0, r.code, r.stderr)
	require.Equal(t, "finished", summary(t, r.stderr).status)
	sc.requireOutput(t)
}
