//go:build !windows

package e2e_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/eddy-stream/eddy/checkpoint"
	"github.com/eddy-stream/eddy/checkpoint/checkpointtest"
	"github.com/eddy-stream/eddy/internal/testkit"
)

// Crash tests: SIGKILL `eddy run` at random moments, restart it with the
// same command until a run ends, and compare the committed output with an
// uninterrupted run of the same pipeline. The pipelines are under
// testdata/crash/; each has a checkpoint block (interval 50ms, retain 3) and
// a file sink, whose part files a checkpoint commits.
//
// The kill moments come from a seeded math/rand (-crash.seed, else a seed
// from the clock, logged) and the run's own progress: a kill waits for 0–2
// "checkpoint complete" log lines of the incarnation, then a random delay
// that is sometimes 0 (between the completion and the sink's commit), a few
// milliseconds (during the commit or the next barrier) or up to two
// checkpoint intervals (while records flow and checkpoints are written).
// Timing still varies from run to run, so a seed does not replay a failure
// exactly; the log names the kill moments.
//
//	exactly_once: the committed output is the uninterrupted run's, as a
//	  multiset of lines (and, for windows, per key and window).
//	at_least_once: nothing is lost; what a replay may repeat is allowed
//	  (for dedupe: every input record is kept or within a kept record's span).
//
// -short runs fewer kills on smaller inputs; -crash.kills sets the number
// of kills (a soak test: -crash.kills=30 -count=5).

var (
	crashSeed  = flag.Uint64("crash.seed", 0, "seed of the crash tests' kill moments (0: from the clock)")
	crashKills = flag.Int("crash.kills", 0, "kills per crash scenario (0: 6, or 3 with -short)")
	crashKeep  = flag.String("crash.keep", "", "copy the work directory of a failed crash test (inputs, outputs, state, logs) under this directory")
)

const (
	// crashBase is the first event time of the inputs (a whole second).
	crashBase = int64(1_700_000_000_000)
	// crashInterval is checkpoint.interval of the pipelines.
	crashInterval = 50 * time.Millisecond
)

// windowRecords is the size of the window scenario's input.
var windowRecords = map[bool]int{false: 200_000, true: 120_000}[raceEnabled]

// crashScenario is one pipeline of testdata/crash.
type crashScenario struct {
	name string
	file string
	// records is the input size; rate the generator's records per second
	// during the crash runs (0: a file source).
	records, shortRecords int
	rate                  int
	// input writes the input files into dir, for a file source.
	input func(t *testing.T, dir string, n int)
	// expected returns the records the pipeline must commit for n inputs.
	expected func(n int) []map[string]any
	// atLeastOnce checks the output of an at_least_once run over n inputs
	// against the expected lines.
	atLeastOnce func(t *testing.T, n int, want, got []string)
	// exact adds checks of an exactly_once run beyond multiset equality.
	exact func(t *testing.T, want, got []string)
	// state, when set, is a state block appended to the pipeline file.
	// With incremental, its checkpoints are incremental and retain one.
	state       string
	incremental bool
}

func crashScenarios() []crashScenario {
	return []crashScenario{
		{
			// The file source reads as fast as the CPU allows, so the input
			// is sized for about 6 kills: a race build runs ~8x slower.
			name: "window", file: "testdata/crash/window.yaml",
			records: windowRecords, shortRecords: windowRecords / 3,
			input: writeWindowInput, expected: expectedWindows,
			atLeastOnce: checkWindowsAtLeastOnce, exact: checkWindowsExact,
		},
		{
			name: "dedupe", file: "testdata/crash/dedupe.yaml",
			records: 30_000, shortRecords: 12_000, rate: 10_000,
			expected: expectedDedupe, atLeastOnce: checkDedupeAtLeastOnce,
		},
		{
			name: "aggregate", file: "testdata/crash/aggregate.yaml",
			records: 30_000, shortRecords: 12_000, rate: 10_000,
			expected: expectedAggregate, atLeastOnce: checkAggregateAtLeastOnce, exact: checkAggregateExact,
		},
	}
}

// TestCrashRecovery runs every crash scenario in both checkpoint modes, with
// incremental checkpoints, and again with the live state on disk
// (state.backend bbolt), full and incremental.
func TestCrashRecovery(t *testing.T) {
	kills := 6
	if testing.Short() {
		kills = 3
	}
	if *crashKills > 0 {
		kills = *crashKills
	}
	seed := *crashSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("crash seed %d (rerun with -crash.seed=%d)", seed, seed)
	// run runs scenario sc in mode as a parallel subtest, its kills drawn
	// from random stream number stream.
	run := func(name string, sc crashScenario, mode string, stream int) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			n := sc.records
			if testing.Short() {
				n = sc.shortRecords
			}
			runCrashScenario(t, sc, mode, n, kills, rand.New(rand.NewPCG(seed, uint64(stream))))
		})
	}
	for si, sc := range crashScenarios() {
		for mi, mode := range []string{"exactly_once", "at_least_once"} {
			run(sc.name+"/"+mode, sc, mode, si*2+mi)
		}
		// Incremental checkpoints, retaining one: a restore reads a chain
		// of deltas, whose bases retention must keep.
		inc := sc
		inc.incremental = true
		run(sc.name+"/exactly_once/incremental", inc, "exactly_once", 300+si)
	}
	// The same with the bbolt backend, with caches smaller than the keys of
	// a subtask (1000 ids for dedupe, 13 keys for window, the aggregate's
	// groups): the runs evict, flush and load keys between checkpoints.
	cache := map[string]int{"window": 12, "dedupe": 8, "aggregate": 4}
	for si, sc := range crashScenarios() {
		sc.state = fmt.Sprintf("state:\n  backend: bbolt\n  cache_entries: %d\n", cache[sc.name])
		for mi, mode := range []string{"exactly_once", "at_least_once"} {
			run(sc.name+"/"+mode+"/bbolt", sc, mode, 100+si*2+mi)
		}
		inc := sc
		inc.incremental = true
		run(sc.name+"/exactly_once/bbolt-incremental", inc, "exactly_once", 200+si)
	}
}

func runCrashScenario(t *testing.T, sc crashScenario, mode string, n, kills int, rng *rand.Rand) {
	work := crashWorkDir(t)
	in := filepath.Join(work, "in")
	require.NoError(t, os.MkdirAll(in, 0o755))
	if sc.input != nil {
		sc.input(t, in, n)
	}
	env := func(out, state string, rate int) map[string]string {
		return map[string]string{
			"EDDY_LOG_FORMAT": "json", "EDDY_STATE_DIR": state,
			"CRASH_MODE": mode, "CRASH_IN": in, "CRASH_OUT": out,
			"CRASH_COUNT": strconv.Itoa(n), "CRASH_RATE": strconv.Itoa(rate),
		}
	}
	file := mustAbs(t, sc.file)
	if sc.state != "" || sc.incremental {
		b, err := os.ReadFile(file)
		require.NoError(t, err)
		require.Contains(t, string(b), "  retain: 3\n")
		if sc.incremental {
			b = bytes.Replace(b, []byte("  retain: 3\n"), []byte("  retain: 1\n  incremental: true\n"), 1)
		}
		file = filepath.Join(work, filepath.Base(file))
		require.NoError(t, os.WriteFile(file, append(b, sc.state...), 0o644))
	}
	want := canonicalLines(t, sc.expected(n))

	// The uninterrupted run, at full speed: the output must not depend on
	// the rate.
	refOut := filepath.Join(work, "ref-out")
	r := eddy(t, work, env(refOut, filepath.Join(work, "ref-state"), 0), "run", file)
	require.Equal(t, 0, r.code, r.stderr)
	ref := committedLines(t, refOut)
	requireSameLines(t, want, ref, "uninterrupted run vs the expected records")

	out, state := filepath.Join(work, "out"), filepath.Join(work, "state")
	cr := crashLoop(t, work, env(out, state, sc.rate), file, kills, rng)
	t.Logf("%s/%s: %d records, %d kills, %d incarnations, last completed checkpoint before the final run: %d; kill moments: %s",
		sc.name, mode, n, cr.kills, cr.incarnations, cr.lastCompleted, strings.Join(cr.moments, ", "))
	require.Positive(t, cr.kills, "the run ended before any kill")
	if sc.incremental {
		t.Logf("%d delta parts written, %d restores of a checkpoint with delta parts", cr.deltasWritten, cr.chainRestores)
		require.Positive(t, cr.deltasWritten, "no checkpoint wrote a delta part")
	} else {
		require.Zero(t, cr.deltasWritten, "delta parts without checkpoint.incremental")
	}
	if sc.state != "" {
		// The live files were under the state dir, and the final run
		// removed those that the killed ones left.
		live, err := filepath.Glob(filepath.Join(state, "*", "live"))
		require.NoError(t, err)
		require.Len(t, live, 1, "no live state directory: did the bbolt backend run?")
		left, err := os.ReadDir(live[0])
		require.NoError(t, err)
		require.Empty(t, left, "live state files left after the final run")
	}

	got := committedLines(t, out)
	requireNoHiddenParts(t, out)
	cr.requireCommittedUnchanged(t, out)
	if mode == "exactly_once" {
		requireSameLines(t, ref, got, "crashed runs vs the uninterrupted run")
		if sc.exact != nil {
			sc.exact(t, ref, got)
		}
		return
	}
	sc.atLeastOnce(t, n, ref, got)
}

// TestCrashRescaleFileSource: the window scenario over twelve input files
// (consecutive ranges of its records), killed at random moments, each restart with another parallelism of the
// file source (its positions rescale, the window step's keyed state stays
// at 2): the committed windows are those of an uninterrupted run.
func TestCrashRescaleFileSource(t *testing.T) {
	kills, rng := rescaleCrashSetup(t, 200)
	n := windowRecords
	if testing.Short() {
		n /= 3
	}
	work := crashWorkDir(t)
	in := filepath.Join(work, "in")
	require.NoError(t, os.MkdirAll(in, 0o755))
	// Consecutive ranges of event time, one per file: a subtask reads its
	// files one after the other, in name order, so a file of earlier
	// events after a later one would be late.
	writeWindowInputFiles(t, in, n, 12, func(i int) int { return i * 12 / n })
	b, err := os.ReadFile(mustAbs(t, "testdata/crash/window.yaml"))
	require.NoError(t, err)
	file := filepath.Join(work, "window.yaml")
	// Late records go to a stream of their own (committed to
	// $CRASH_OUT-late), not dropped: a file read twice after a rescale
	// would be late, and must show.
	yaml := strings.Replace(string(b), "    type: file\n", "    type: file\n    parallelism: ${CRASH_SOURCE_PARALLELISM}\n", 1)
	yaml = strings.Replace(yaml, "    window: { type: tumbling, size: 1s }\n", "    window: { type: tumbling, size: 1s }\n    late_output: late_records\n", 1)
	yaml += "  - id: late\n    from: late_records\n    type: file\n    path: ${CRASH_OUT}-late/\n"
	require.Equal(t, 2, strings.Count(yaml, "CRASH_OUT}"))
	require.Contains(t, yaml, "late_output: late_records\n")
	require.NoError(t, os.WriteFile(file, []byte(yaml), 0o644))
	env := func(out, state string) map[string]string {
		return map[string]string{
			"EDDY_LOG_FORMAT": "json", "EDDY_STATE_DIR": state, "CRASH_MODE": "exactly_once",
			"CRASH_IN": in, "CRASH_OUT": out, "CRASH_SOURCE_PARALLELISM": "2",
		}
	}
	refOut := filepath.Join(work, "ref-out")
	r := eddy(t, work, env(refOut, filepath.Join(work, "ref-state")), "run", file)
	require.Equal(t, 0, r.code, r.stderr)
	ref := committedLines(t, refOut)
	requireSameLines(t, canonicalLines(t, expectedWindows(n)), ref, "uninterrupted run vs the expected records")
	require.Empty(t, committedLines(t, refOut+"-late"), "late records in the uninterrupted run")

	out := filepath.Join(work, "out")
	crashEnv := env(out, filepath.Join(work, "state"))
	pars := []string{"2"}
	cr := crashLoopAt(t, work, crashEnv, file, kills, killRescaling(crashEnv, rng, &pars))
	t.Logf("%d records, %d kills, source parallelism by incarnation %v, last completed checkpoint before the final run: %d; kill moments: %s",
		n, cr.kills, pars[:cr.incarnations], cr.lastCompleted, strings.Join(cr.moments, ", "))
	require.Positive(t, cr.kills, "the run ended before any kill")
	got := committedLines(t, out)
	requireNoHiddenParts(t, out)
	cr.requireCommittedUnchanged(t, out)
	requireSameLines(t, ref, got, "crashed, rescaled runs vs the uninterrupted run")
	checkWindowsExact(t, ref, got)
	require.Empty(t, committedLines(t, out+"-late"), "late records: a file was read again")
}

// TestCrashRescaleGenerator: a generator written straight to files,
// killed at random moments, each restart with another parallelism of the
// generator: its positions rescale (the new subtasks generate what none of
// the old ones did), and the committed output holds every record once.
func TestCrashRescaleGenerator(t *testing.T) {
	kills, rng := rescaleCrashSetup(t, 300)
	const n = 20_000
	work := crashWorkDir(t)
	file := filepath.Join(work, "generator.yaml")
	require.NoError(t, os.WriteFile(file, []byte(`version: 1
name: crash-generator
checkpoint:
  interval: 50ms
  timeout: 30s
  retain: 3
sources:
  - id: events
    type: generator
    parallelism: ${CRASH_SOURCE_PARALLELISM}
    count: ${CRASH_COUNT}
    rate: ${CRASH_RATE}
    fields:
      n: i
sinks:
  - id: out
    type: file
    path: ${CRASH_OUT}/
    parallelism: 2
`), 0o644))
	out := filepath.Join(work, "out")
	env := map[string]string{
		"EDDY_LOG_FORMAT": "json", "EDDY_STATE_DIR": filepath.Join(work, "state"), "CRASH_OUT": out,
		"CRASH_COUNT": strconv.Itoa(n), "CRASH_RATE": "8000", "CRASH_SOURCE_PARALLELISM": "2",
	}
	pars := []string{"2"}
	cr := crashLoopAt(t, work, env, file, kills, killRescaling(env, rng, &pars))
	t.Logf("%d records, %d kills, generator parallelism by incarnation %v; kill moments: %s",
		n, cr.kills, pars[:cr.incarnations], strings.Join(cr.moments, ", "))
	require.Positive(t, cr.kills, "the run ended before any kill")
	want := make([]map[string]any, n)
	for i := range want {
		want[i] = map[string]any{"n": i}
	}
	got := committedLines(t, out)
	requireNoHiddenParts(t, out)
	cr.requireCommittedUnchanged(t, out)
	requireSameLines(t, canonicalLines(t, want), got, "crashed, rescaled runs vs every record once")
}

// rescaleCrashSetup returns the kills of a rescaling crash test and its
// random numbers (stream of -crash.seed), logging the seed for a rerun.
func rescaleCrashSetup(t *testing.T, stream uint64) (int, *rand.Rand) {
	t.Helper()
	kills := 6
	if testing.Short() {
		kills = 3
	}
	seed := *crashSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("crash seed %d (rerun with -crash.seed=%d)", seed, seed)
	return kills, rand.New(rand.NewPCG(seed, stream))
}

// killRescaling draws the kill moments of crashLoopAt; called once an
// incarnation started, it also sets the source parallelism of the next
// one (env's CRASH_SOURCE_PARALLELISM) to another of 1 to 4, appended to
// pars.
func killRescaling(env map[string]string, rng *rand.Rand, pars *[]string) func() (int, time.Duration, string) {
	return func() (int, time.Duration, string) {
		next := strconv.Itoa(1 + rng.IntN(4))
		for next == env["CRASH_SOURCE_PARALLELISM"] {
			next = strconv.Itoa(1 + rng.IntN(4))
		}
		env["CRASH_SOURCE_PARALLELISM"] = next
		*pars = append(*pars, next)
		return killMoment(rng)
	}
}

// crashWorkDir returns a temporary directory that is copied under
// -crash.keep when the test fails.
func crashWorkDir(t *testing.T) string {
	t.Helper()
	work := t.TempDir()
	t.Cleanup(func() {
		if !t.Failed() || *crashKeep == "" {
			return
		}
		dst := filepath.Join(*crashKeep, strings.ReplaceAll(t.Name(), "/", "_"))
		if err := os.CopyFS(dst, os.DirFS(work)); err != nil {
			t.Logf("keep %s: %v", work, err)
			return
		}
		t.Logf("work directory kept in %s", dst)
	})
	return work
}

// crashResult is what crashLoop did.
type crashResult struct {
	kills, incarnations int
	lastCompleted       int64
	// deltasWritten counts the delta parts of completed checkpoints;
	// chainRestores the restores of a checkpoint with delta parts.
	deltasWritten, chainRestores int
	moments                      []string
	// committed maps each final part file seen after a kill to the SHA-256
	// of its content: committed files never change again.
	committed map[string][sha256.Size]byte
}

// crashLoop runs `eddy run file` in dir with env, SIGKILLs it up to kills
// times at random moments, then lets the last run end; it requires exit 0
// and that every restart after a completed checkpoint restores from it or a
// newer one.
func crashLoop(t *testing.T, dir string, env map[string]string, file string, kills int, rng *rand.Rand) crashResult {
	t.Helper()
	return crashLoopAt(t, dir, env, file, kills, func() (int, time.Duration, string) { return killMoment(rng) })
}

// crashLoopAt is crashLoop with the kill moments drawn by moment.
func crashLoopAt(t *testing.T, dir string, env map[string]string, file string, kills int, draw func() (wait int, delay time.Duration, what string)) crashResult {
	t.Helper()
	cr := crashResult{committed: map[string][sha256.Size]byte{}}
	out := env["CRASH_OUT"]
	for {
		p := startEddy(t, dir, env, "run", file)
		cr.incarnations++
		kill := cr.kills < kills
		var moment string
		if kill {
			wait, delay, what := draw()
			moment = p.killAt(wait, delay) + what
		}
		res := p.wait(t)
		require.NoError(t, os.WriteFile(filepath.Join(dir, fmt.Sprintf("stderr-%02d.log", cr.incarnations)), []byte(p.log.text()), 0o644))
		p.requireRestoredFrom(t, cr.lastCompleted)
		cr.lastCompleted = max(cr.lastCompleted, p.log.lastCompleted())
		written, restored := p.log.deltas()
		cr.deltasWritten += written
		if restored > 0 {
			cr.chainRestores++
		}
		if !res.killed {
			require.Equal(t, 0, res.code, "incarnation %d failed; stderr:\n%s", cr.incarnations, p.log.text())
			s := summary(t, p.log.text())
			require.Equal(t, "finished", s.status)
			return cr
		}
		cr.kills++
		cr.moments = append(cr.moments, moment)
		for name, sum := range committedFiles(t, out) {
			if old, ok := cr.committed[name]; ok {
				require.Equal(t, old, sum, "committed part %s changed after a restart", name)
			}
			cr.committed[name] = sum
		}
	}
}

// killMoment draws when to kill an incarnation: after wait checkpoint
// completions of it, plus delay.
func killMoment(rng *rand.Rand) (wait int, delay time.Duration, what string) {
	wait = rng.IntN(3)
	switch k := rng.IntN(4); {
	case wait == 0:
		// From the start: during the restore, the commit of the restored
		// checkpoint's parts, or the first checkpoint.
		return 0, time.Duration(rng.Int64N(int64(6 * crashInterval))), ""
	case k == 0:
		return wait, 0, " (at completion)"
	case k == 1:
		return wait, time.Duration(rng.Int64N(int64(3 * time.Millisecond))), " (commit)"
	default:
		return wait, time.Duration(rng.Int64N(int64(2 * crashInterval))), ""
	}
}

func (cr crashResult) requireCommittedUnchanged(t *testing.T, out string) {
	t.Helper()
	now := committedFiles(t, out)
	for name, sum := range cr.committed {
		got, ok := now[name]
		require.True(t, ok, "committed part %s disappeared", name)
		require.Equal(t, sum, got, "committed part %s changed", name)
	}
}

// proc is a running eddy whose json log is watched.
type proc struct {
	cmd    *exec.Cmd
	cancel context.CancelFunc
	log    *logWatch
	done   chan struct{}
	err    error
}

func startEddy(t *testing.T, dir string, env map[string]string, args ...string) *proc {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), runTimeout)
	p := &proc{cancel: cancel, log: newLogWatch(), done: make(chan struct{})}
	p.cmd = eddyCommand(ctx, dir, env, args...)
	p.cmd.Stderr = p.log
	var stdout bytes.Buffer
	p.cmd.Stdout = &stdout
	require.NoError(t, p.cmd.Start())
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		testkit.WaitFor(t, p.done, "the killed eddy to exit")
		cancel()
	})
	return p
}

// killAt SIGKILLs the process once it logged wait checkpoint completions
// and delay passed, unless it ends first. It describes the moment.
func (p *proc) killAt(wait int, delay time.Duration) string {
	seen := int64(0)
	for range wait {
		select {
		case seen = <-p.log.completed:
		case <-p.done:
			return "ended first"
		}
	}
	if delay > 0 {
		select {
		case <-time.After(delay):
		case <-p.done:
			return "ended first"
		}
	}
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	if wait == 0 {
		return fmt.Sprintf("%s after start", delay.Round(time.Millisecond))
	}
	return fmt.Sprintf("%s after checkpoint %d", delay.Round(100*time.Microsecond), seen)
}

type procResult struct {
	code   int
	killed bool
}

func (p *proc) wait(t *testing.T) procResult {
	t.Helper()
	testkit.WaitFor(t, p.done, "eddy to exit")
	p.cancel()
	var ee *exec.ExitError
	if errors.As(p.err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			require.Equal(t, syscall.SIGKILL, ws.Signal(), "stderr:\n%s", p.log.text())
			return procResult{code: -1, killed: true}
		}
		return procResult{code: ee.ExitCode()}
	}
	require.NoError(t, p.err)
	return procResult{}
}

// requireRestoredFrom checks the restore of an incarnation: from
// checkpoint last or a newer one when a checkpoint had completed (a kill
// may land between the completion and its log line), never from nothing.
func (p *proc) requireRestoredFrom(t *testing.T, last int64) {
	t.Helper()
	id, fresh := p.log.restore()
	if last == 0 {
		return
	}
	require.False(t, fresh, "checkpoint %d had completed, but the restart started from the beginning; stderr:\n%s", last, p.log.text())
	if id == 0 {
		return // killed before it logged its restore
	}
	require.GreaterOrEqual(t, id, last, "restored from an older checkpoint than the last completed; stderr:\n%s", p.log.text())
}

// logWatch is the stderr of a run with EDDY_LOG_FORMAT=json: it keeps the
// text and reports checkpoint completions as they are logged.
type logWatch struct {
	completed chan int64

	mu       sync.Mutex
	buf      bytes.Buffer
	partial  []byte
	last     int64
	restored int64
	fresh    bool
	entries  []logEntry
	// Delta parts written by the completed checkpoints, and in the
	// checkpoint restored (checkpoint.incremental).
	deltasWritten, deltasRestored int
}

// logEntry is a json log line's fields that the tests look at.
type logEntry struct {
	Level      string `json:"level"`
	Msg        string `json:"msg"`
	Checkpoint *int64 `json:"checkpoint"`
	Fallback   *int64 `json:"fallback"`
	Reason     string `json:"reason"`
	Err        string `json:"err"`
	Path       string `json:"path"`
	ImportedAs *int64 `json:"imported_as"`
	DeltaParts int    `json:"delta_parts"`
	Addr       string `json:"addr"`
}

func newLogWatch() *logWatch { return &logWatch{completed: make(chan int64, 4096)} }

func (w *logWatch) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(b)
	w.partial = append(w.partial, b...)
	for {
		i := bytes.IndexByte(w.partial, '\n')
		if i < 0 {
			break
		}
		line := w.partial[:i]
		w.partial = w.partial[i+1:]
		var e logEntry
		if json.Unmarshal(line, &e) != nil {
			continue // summary() reports lines that are not json
		}
		w.entries = append(w.entries, e)
		switch {
		case e.Msg == "checkpoint complete" && e.Checkpoint != nil:
			w.last = max(w.last, *e.Checkpoint)
			w.deltasWritten += e.DeltaParts
			select {
			case w.completed <- *e.Checkpoint:
			default:
			}
		case e.Msg == "restoring from checkpoint" && e.Checkpoint != nil:
			w.restored = *e.Checkpoint
			w.deltasRestored = e.DeltaParts
		case strings.HasPrefix(e.Msg, "no checkpoint to restore"):
			w.fresh = true
		}
	}
	return len(b), nil
}

func (w *logWatch) text() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

func (w *logWatch) deltas() (written, restored int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.deltasWritten, w.deltasRestored
}

func (w *logWatch) lastCompleted() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.last
}

func (w *logWatch) restore() (id int64, fresh bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.restored, w.fresh
}

func (w *logWatch) find(msg string) []logEntry {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []logEntry
	for _, e := range w.entries {
		if e.Msg == msg {
			out = append(out, e)
		}
	}
	return out
}

// committedFiles returns the final part files of dir (names without a
// leading '.') with the SHA-256 of their content.
func committedFiles(t *testing.T, dir string) map[string][sha256.Size]byte {
	t.Helper()
	out := map[string][sha256.Size]byte{}
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return out
	}
	require.NoError(t, err)
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".") || !e.Type().IsRegular() {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		require.NoError(t, err)
		out[e.Name()] = sha256.Sum256(b)
	}
	return out
}

// committedLines returns the lines of dir's final part files, in file name
// order (for a subtask, the order they were written).
func committedLines(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	var lines []string
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".") || !e.Type().IsRegular() {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		require.NoError(t, err)
		if len(b) == 0 {
			continue
		}
		require.Equal(t, byte('\n'), b[len(b)-1], "committed part %s ends within a line", e.Name())
		for line := range strings.Lines(string(b)) {
			lines = append(lines, strings.TrimSuffix(line, "\n"))
		}
	}
	return lines
}

// requireNoHiddenParts: a run that ended leaves no in-progress or pending
// part file.
func requireNoHiddenParts(t *testing.T, dir string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	var hidden []string
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".") {
			hidden = append(hidden, e.Name())
		}
	}
	require.Empty(t, hidden, "hidden part files left in %s after the run ended", dir)
}

// requireSameLines compares two multisets of lines and, when they differ,
// says which lines are missing and which are extra (a few of each).
func requireSameLines(t *testing.T, want, got []string, what string) {
	t.Helper()
	missing, extra := lineDiff(want, got)
	if len(missing) == 0 && len(extra) == 0 {
		return
	}
	require.Failf(t, what, "%d lines expected, %d got; %d missing, %d extra\nmissing (first 10):\n%s\nextra (first 10):\n%s",
		len(want), len(got), len(missing), len(extra), firstLines(missing, 10), firstLines(extra, 10))
}

// lineDiff returns the lines of want not in got and those of got not in
// want, counting repetitions.
func lineDiff(want, got []string) (missing, extra []string) {
	count := map[string]int{}
	for _, l := range want {
		count[l]++
	}
	for _, l := range got {
		count[l]--
	}
	for _, l := range slices.Sorted(maps.Keys(count)) {
		for c := count[l]; c > 0; c-- {
			missing = append(missing, l)
		}
		for c := count[l]; c < 0; c++ {
			extra = append(extra, l)
		}
	}
	return missing, extra
}

func firstLines(lines []string, n int) string {
	if len(lines) > n {
		lines = append(lines[:n:n], "...")
	}
	return strings.Join(lines, "\n")
}

// canonicalLines encodes records as the json sink does: keys sorted.
func canonicalLines(t *testing.T, recs []map[string]any) []string {
	t.Helper()
	out := make([]string, len(recs))
	for i, r := range recs {
		b, err := json.Marshal(r)
		require.NoError(t, err)
		out[i] = string(b)
	}
	return out
}

// decodeLine decodes a committed json line; numbers stay exact.
func decodeLine(t *testing.T, line string) map[string]any {
	t.Helper()
	d := json.NewDecoder(strings.NewReader(line))
	d.UseNumber()
	var m map[string]any
	require.NoError(t, d.Decode(&m), "%s", line)
	return m
}

func intField(t *testing.T, m map[string]any, k string) int64 {
	t.Helper()
	n, ok := m[k].(json.Number)
	require.True(t, ok, "field %q of %v is not a number", k, m)
	v, err := n.Int64()
	require.NoError(t, err)
	return v
}

// eventTime is the event time of input record i: 10ms apart, up to 39ms
// late, so out of order by less than the 100ms bound.
func eventTime(i int) int64 { return eventTimeFrom(crashBase, i) }

// eventTimeFrom is eventTime with another first event time.
func eventTimeFrom(base int64, i int) int64 { return base + int64(i)*10 + int64(i*7919%40) }

// (a) windows

// writeWindowInput writes record i of n to events-(i%2).jsonl: one split per
// source subtask, and the keys of a split share i's parity.
func writeWindowInput(t *testing.T, dir string, n int) {
	t.Helper()
	writeWindowInputFiles(t, dir, n, 2, func(i int) int { return i % 2 })
}

// writeWindowInputFiles writes the window scenario's n records into nf
// files, events-<k>.jsonl: record i into file fileOf(i).
func writeWindowInputFiles(t *testing.T, dir string, n, nf int, fileOf func(i int) int) {
	t.Helper()
	files := make([]*bufio.Writer, nf)
	for k := range files {
		f, err := os.Create(filepath.Join(dir, fmt.Sprintf("events-%02d.jsonl", k)))
		require.NoError(t, err)
		defer func() { require.NoError(t, f.Close()) }()
		files[k] = bufio.NewWriter(f)
		defer func() { require.NoError(t, files[k].Flush()) }()
	}
	for i := range n {
		fmt.Fprintf(files[fileOf(i)], `{"i":%d,"key":"k%d","v":%d,"ts":%d}`+"\n", i, i%26, i%100, eventTime(i))
	}
}

type windowKey struct {
	key   string
	start int64
}

type windowAgg struct{ n, total int64 }

func windowsOf(base int64, n int) map[windowKey]windowAgg {
	w := map[windowKey]windowAgg{}
	for i := range n {
		ts := eventTimeFrom(base, i)
		k := windowKey{key: "k" + strconv.Itoa(i%26), start: ts - ts%1000}
		a := w[k]
		a.n++
		a.total += int64(i % 100)
		w[k] = a
	}
	return w
}

func expectedWindows(n int) []map[string]any { return expectedWindowsFrom(crashBase, n) }

// expectedWindowsFrom is expectedWindows for inputs whose first event time
// is base.
func expectedWindowsFrom(base int64, n int) []map[string]any {
	var out []map[string]any
	for k, a := range windowsOf(base, n) {
		out = append(out, map[string]any{
			"_firing": "on_time", "key": k.key, "n": a.n, "total": a.total,
			"window_start": k.start, "window_end": k.start + 1000,
		})
	}
	return out
}

// windowResults groups window results by key and window.
func windowResults(t *testing.T, lines []string) map[windowKey][]windowAgg {
	t.Helper()
	out := map[windowKey][]windowAgg{}
	for _, l := range lines {
		m := decodeLine(t, l)
		k := windowKey{key: m["key"].(string), start: intField(t, m, "window_start")}
		require.Equal(t, k.start+1000, intField(t, m, "window_end"), "%s", l)
		out[k] = append(out[k], windowAgg{n: intField(t, m, "n"), total: intField(t, m, "total")})
	}
	return out
}

// checkWindowsExact: one final result per key and window, as expected.
func checkWindowsExact(t *testing.T, want, got []string) {
	t.Helper()
	w, g := windowResults(t, want), windowResults(t, got)
	require.Equal(t, len(w), len(g), "windows with results")
	for k, ws := range w {
		require.Equal(t, ws, g[k], "results of key %s, window %d", k.key, k.start)
	}
}

// checkWindowsAtLeastOnce: every key and window has a result that counts
// at least its records. Without aligned barriers a checkpoint may hold the
// effect of records its source positions are before: a window may count a
// replayed record twice, and a window that fired before the checkpoint may
// fire again after the restore with only the replayed records, so extra
// results (larger, or partial) are allowed. A partial result may even
// count a replayed record twice and miss another, when it fired before the
// missing one was replayed: {x, y, x, y} of a window of {x, y, z} (seen
// with n=4 beside the complete n=3), so the largest count is not the
// result to check. A result for a window that has no records is an error.
func checkWindowsAtLeastOnce(t *testing.T, _ int, want, got []string) {
	t.Helper()
	w, g := windowResults(t, want), windowResults(t, got)
	for k := range g {
		if _, ok := w[k]; !ok {
			require.Failf(t, "unexpected window", "a result for key %s, window %d, which has no records", k.key, k.start)
		}
	}
	for k, ws := range w {
		if !slices.ContainsFunc(g[k], func(a windowAgg) bool { return a.n >= ws[0].n && a.total >= ws[0].total }) {
			require.Failf(t, "records missing", "key %s, window %d: expected n=%d total=%d, got results %v",
				k.key, k.start, ws[0].n, ws[0].total, g[k])
		}
	}
}

// (b) dedupe

func expectedDedupe(n int) []map[string]any {
	const within = 30_000
	spanStart := map[int]int64{}
	var out []map[string]any
	for i := range n {
		id, ts := i%2000, eventTime(i)
		if t0, ok := spanStart[id]; ok && ts < t0+within {
			continue
		}
		spanStart[id] = ts
		out = append(out, map[string]any{"n": i, "id": "o" + strconv.Itoa(id), "ts": ts})
	}
	return out
}

// checkDedupeAtLeastOnce checks what at_least_once promises a dedupe:
// nothing is lost without a trace. A restore may replay records whose
// effect the restored state already holds (barriers are not aligned),
// including a span that a watermark past the checkpoint's positions
// closed: a replayed record of that span is kept again and opens a new
// span, and a record the uninterrupted run keeps can then be dropped as a
// duplicate of it. So every output line is an input record, and every
// input record is covered: a record of its key is in the output from
// within its span (at or less than `within` before it). Runs without
// replays (most) match the uninterrupted run exactly; the test logs
// which.
func checkDedupeAtLeastOnce(t *testing.T, n int, want, got []string) {
	t.Helper()
	const within = 30_000
	kept := map[string][]int64{} // output times by id
	for _, l := range got {
		var r struct {
			ID string `json:"id"`
			N  int    `json:"n"`
			TS int64  `json:"ts"`
		}
		require.NoError(t, json.Unmarshal([]byte(l), &r), l)
		require.True(t, r.N >= 0 && r.N < n && r.ID == "o"+strconv.Itoa(r.N%2000) && r.TS == eventTime(r.N),
			"an output line that is no input record: %s", l)
		kept[r.ID] = append(kept[r.ID], r.TS)
	}
	var uncovered []int
	for i := range n {
		id, ts := "o"+strconv.Itoa(i%2000), eventTime(i)
		if !slices.ContainsFunc(kept[id], func(k int64) bool { return k <= ts && ts-k < within }) {
			uncovered = append(uncovered, i)
		}
	}
	require.Empty(t, uncovered, "input records (n) neither in the output nor within the span of a kept record of their id")
	missing, extra := lineDiff(want, got)
	t.Logf("against the uninterrupted run: %d records missing, %d extra (replays)", len(missing), len(extra))
}

// (c) continuous aggregate, upsert changelog

func expectedAggregate(n int) []map[string]any {
	type row struct{ n, total, hi int64 }
	rows := map[int]*row{}
	var out []map[string]any
	for i := range n {
		k, v := i%26, int64(i%100)
		r, op := rows[k], "+U"
		if r == nil {
			r, op = &row{hi: v}, "+I"
			rows[k] = r
		}
		r.n++
		r.total += v
		r.hi = max(r.hi, v)
		out = append(out, map[string]any{"_op": op, "key": "c" + strconv.Itoa(k), "n": r.n, "total": r.total, "hi": r.hi})
	}
	return out
}

type aggRow struct{ n, total, hi int64 }

// aggregateRows returns the rows of each key in the order written: the
// rows of a key come from one sink subtask, whose part files sort in the
// order they were written.
func aggregateRows(t *testing.T, lines []string) map[string][]aggRow {
	t.Helper()
	out := map[string][]aggRow{}
	for _, l := range lines {
		m := decodeLine(t, l)
		k := m["key"].(string)
		out[k] = append(out[k], aggRow{n: intField(t, m, "n"), total: intField(t, m, "total"), hi: intField(t, m, "hi")})
	}
	return out
}

// checkAggregateExact: each key's rows come in order, and its last row is
// the final aggregate.
func checkAggregateExact(t *testing.T, want, got []string) {
	t.Helper()
	w, g := aggregateRows(t, want), aggregateRows(t, got)
	require.Equal(t, len(w), len(g), "keys")
	for k, rows := range w {
		require.Equal(t, rows, g[k], "rows of key %s in the order written", k)
	}
}

// checkAggregateAtLeastOnce: without aligned barriers a restored row may
// count replayed records twice, so no row can be expected verbatim; but
// every count from 1 to the key's number of records appears (nothing is
// skipped), and the final row counts, sums and maxes at least every record.
func checkAggregateAtLeastOnce(t *testing.T, _ int, want, got []string) {
	t.Helper()
	w, g := aggregateRows(t, want), aggregateRows(t, got)
	require.Equal(t, len(w), len(g), "keys")
	for k, rows := range w {
		final := rows[len(rows)-1]
		seen := map[int64]bool{}
		last := aggRow{}
		for _, r := range g[k] {
			seen[r.n] = true
			if r.n >= last.n {
				last = r
			}
		}
		for c := int64(1); c <= final.n; c++ {
			require.True(t, seen[c], "key %s: no row with count %d (of %d)", k, c, final.n)
		}
		require.GreaterOrEqual(t, last.total, final.total, "key %s: final sum", k)
		require.Equal(t, final.hi, last.hi, "key %s: final max", k)
	}
}

// Faults of the checkpoint store: a corrupt newest checkpoint, no valid
// checkpoint at all, a store whose bbolt pages are damaged.

// TestCrashCorruptCheckpoint kills the aggregate pipeline after a few
// checkpoints and damages its checkpoint store before the restart.
func TestCrashCorruptCheckpoint(t *testing.T) {
	n := 20_000
	if testing.Short() {
		n = 12_000
	}
	// interrupted starts the aggregate pipeline and SIGKILLs it once it
	// logged `completions` checkpoint completions.
	interrupted := func(t *testing.T, completions int) (work string, env map[string]string) {
		t.Helper()
		work = crashWorkDir(t)
		env = map[string]string{
			"EDDY_LOG_FORMAT": "json", "EDDY_STATE_DIR": filepath.Join(work, "state"),
			"CRASH_MODE": "exactly_once", "CRASH_IN": work, "CRASH_OUT": filepath.Join(work, "out"),
			"CRASH_COUNT": strconv.Itoa(n), "CRASH_RATE": "10000",
		}
		p := startEddy(t, work, env, "run", mustAbs(t, "testdata/crash/aggregate.yaml"))
		p.killAt(completions, 0)
		require.True(t, p.wait(t).killed, "the run ended before %d checkpoints; stderr:\n%s", completions, p.log.text())
		return work, env
	}
	storeOf := func(work string) string {
		return filepath.Join(work, "state", "crash-aggregate", checkpoint.FileName)
	}
	file := mustAbs(t, "testdata/crash/aggregate.yaml")
	want := canonicalLines(t, expectedAggregate(n))

	t.Run("newest corrupt: falls back to the previous one", func(t *testing.T) {
		work, env := interrupted(t, 4)
		ids := completedCheckpoints(t, storeOf(work))
		require.GreaterOrEqual(t, len(ids), 2, "checkpoints %v", ids)
		newest, previous := ids[0], ids[1]
		// Parts that the newest checkpoint committed (or would have) and the
		// previous one did not list: a restore of the previous checkpoint
		// keeps those already committed, and the replay writes their records
		// again (docs/connectors.md, "With checkpoints: part files, exactly-once").
		dups := map[string]bool{}
		for _, f := range committableFinals(t, storeOf(work), newest) {
			dups[f] = true
		}
		for _, f := range committableFinals(t, storeOf(work), previous) {
			delete(dups, f)
		}
		checkpointtest.CorruptLargestPart(t, storeOf(work), newest)
		expect := slices.Clone(want)
		out := filepath.Join(work, "out")
		for f := range dups {
			if b, err := os.ReadFile(filepath.Join(out, f)); err == nil {
				expect = append(expect, strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")...)
			}
		}

		t.Logf("checkpoint %d corrupt, falls back to %d; %d records of parts committed by %d are replayed", newest, previous, len(expect)-len(want), newest)
		p := startEddy(t, work, env, "run", file)
		res := p.wait(t)
		require.Equal(t, procResult{}, res, "stderr:\n%s", p.log.text())
		warns := p.log.find("checkpoint is unreadable; falling back to the previous retained checkpoint")
		require.Len(t, warns, 1, "stderr:\n%s", p.log.text())
		require.Equal(t, "WARN", warns[0].Level)
		require.Equal(t, newest, *warns[0].Checkpoint)
		require.Equal(t, previous, *warns[0].Fallback)
		require.Contains(t, warns[0].Reason, "corrupt checkpoint")
		restored, fresh := p.log.restore()
		require.False(t, fresh)
		require.Equal(t, previous, restored)
		requireSameLines(t, expect, committedLines(t, out), "output after the fallback vs the expected records plus the replayed parts")
		requireNoHiddenParts(t, out)
	})

	t.Run("none valid: the run fails, never starts fresh", func(t *testing.T) {
		work, env := interrupted(t, 4)
		ids := completedCheckpoints(t, storeOf(work))
		require.NotEmpty(t, ids)
		for _, id := range ids {
			checkpointtest.CorruptLargestPart(t, storeOf(work), id)
		}
		out := filepath.Join(work, "out")
		before := committedFiles(t, out)

		r := eddy(t, work, env, "run", file)
		require.Equal(t, 1, r.code, r.stderr)
		s := summaryOrStartFailure(t, r.stderr)
		require.Contains(t, s, "no valid checkpoint")
		require.Contains(t, s, fmt.Sprintf("tried %d completed checkpoint(s)", len(ids)))
		require.Contains(t, s, "eddy never starts fresh on its own")
		for _, id := range ids {
			require.Contains(t, s, fmt.Sprintf("checkpoint %d: corrupt checkpoint", id))
		}
		require.Equal(t, before, committedFiles(t, out), "the failed run changed the committed output")
		require.Equal(t, ids, completedCheckpoints(t, storeOf(work)), "the failed run changed the checkpoints")

		// The checkpoints command shows why.
		r = eddy(t, work, env, "checkpoints", "list", file)
		require.Equal(t, 0, r.code, r.stderr)
		require.Contains(t, r.stdout, "no checkpoint verifies")
		require.Equal(t, len(ids), strings.Count(r.stdout, "corrupt: "), r.stdout)

		// Starting over is explicit: --fresh --yes writes every record
		// again, after the parts committed before.
		r = eddy(t, work, map[string]string{
			"EDDY_LOG_FORMAT": "json", "EDDY_STATE_DIR": env["EDDY_STATE_DIR"], "CRASH_MODE": "exactly_once",
			"CRASH_IN": work, "CRASH_OUT": out, "CRASH_COUNT": strconv.Itoa(n), "CRASH_RATE": "0",
		}, "run", "--fresh", "--yes", file)
		require.Equal(t, 0, r.code, r.stderr)
		var old []string
		for name := range before {
			b, err := os.ReadFile(filepath.Join(out, name))
			require.NoError(t, err)
			old = append(old, strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")...)
		}
		requireSameLines(t, append(old, want...), committedLines(t, out), "output after --fresh")
	})

	// A store whose bbolt pages (not only a checksummed part) are garbage,
	// or that lost its tail: the run must fail with exit 1 and a message
	// that names the store, not start fresh and not crash.
	for _, damage := range []struct {
		name string
		do   func(t *testing.T, path string)
	}{
		{"garbage over every page after the meta pages", func(t *testing.T, path string) {
			st, err := os.Stat(path)
			require.NoError(t, err)
			page := int64(os.Getpagesize())
			garbage := make([]byte, st.Size()-2*page)
			for i := range garbage {
				garbage[i] = byte(i*37 + 11)
			}
			f, err := os.OpenFile(path, os.O_WRONLY, 0)
			require.NoError(t, err)
			_, err = f.WriteAt(garbage, 2*page)
			require.NoError(t, err)
			require.NoError(t, f.Close())
		}},
		{"truncated to its meta pages", func(t *testing.T, path string) {
			require.NoError(t, os.Truncate(path, 2*int64(os.Getpagesize())))
		}},
	} {
		t.Run("damaged store: "+damage.name, func(t *testing.T) {
			work, env := interrupted(t, 3)
			out := filepath.Join(work, "out")
			before := committedFiles(t, out)
			damage.do(t, storeOf(work))

			r := eddy(t, work, env, "run", file)
			require.NotEqual(t, 0, r.code, "the run succeeded on a damaged store: it started fresh; stderr:\n%s", r.stderr)
			require.Equal(t, before, committedFiles(t, out), "the failed run changed the committed output")
			// bbolt panics or faults on damaged pages; eddy must report
			// that as a failure (exit 1), not crash with a stack trace.
			require.NotContains(t, r.stderr, "\npanic: ")
			require.NotContains(t, r.stderr, "\nfatal error: ")
			require.Equal(t, 1, r.code, r.stderr)
			require.Contains(t, summaryOrStartFailure(t, r.stderr), storeOf(work))
		})
	}
}

// TestCrashSavepointExport kills a run, exports its latest checkpoint with
// `eddy checkpoints export`, and restores the savepoint with
// `eddy run --from-savepoint` and an empty state dir: the output is exactly
// the expected one.
func TestCrashSavepointExport(t *testing.T) {
	n := 20_000
	if testing.Short() {
		n = 12_000
	}
	work := crashWorkDir(t)
	env := map[string]string{
		"EDDY_LOG_FORMAT": "json", "EDDY_STATE_DIR": filepath.Join(work, "state"),
		"CRASH_MODE": "exactly_once", "CRASH_IN": work, "CRASH_OUT": filepath.Join(work, "out"),
		"CRASH_COUNT": strconv.Itoa(n), "CRASH_RATE": "10000",
	}
	file := mustAbs(t, "testdata/crash/dedupe.yaml")
	p := startEddy(t, work, env, "run", file)
	p.killAt(3, 10*time.Millisecond)
	require.True(t, p.wait(t).killed, "the run ended early; stderr:\n%s", p.log.text())

	sp := filepath.Join(work, "savepoint.db")
	r := eddy(t, work, env, "checkpoints", "export", file, "latest", sp)
	require.Equal(t, 0, r.code, r.stderr)
	require.Regexp(t, `^exported checkpoint (\d+) of pipeline crash-dedupe to `+regexp.QuoteMeta(sp), r.stdout)
	id := completedCheckpoints(t, filepath.Join(work, "state", "crash-dedupe", checkpoint.FileName))[0]
	require.Contains(t, r.stdout, fmt.Sprintf("exported checkpoint %d ", id))

	env["EDDY_STATE_DIR"] = filepath.Join(work, "other-state")
	p = startEddy(t, work, env, "run", "--from-savepoint", sp, file)
	require.Equal(t, procResult{}, p.wait(t), "stderr:\n%s", p.log.text())
	restored := p.log.find("restoring from savepoint")
	require.Len(t, restored, 1, p.log.text())
	require.Equal(t, id, *restored[0].Checkpoint)
	require.Equal(t, sp, restored[0].Path)
	out := env["CRASH_OUT"]
	requireSameLines(t, canonicalLines(t, expectedDedupe(n)), committedLines(t, out), "output restored from the savepoint")
	requireNoHiddenParts(t, out)
}

// summaryOrStartFailure returns the errors of a run's json log: the err of
// "cannot start" and of the final summary, and the warnings' reasons.
// A run restored with --from-savepoint imports the savepoint into its store
// as the newest checkpoint: killed before its first checkpoint, a plain
// restart restores the savepoint again, not the store's newer checkpoint of
// before, and the output is that of an uninterrupted run from the
// savepoint.
func TestCrashFromSavepointBeforeFirstCheckpoint(t *testing.T) {
	n := 20_000
	if testing.Short() {
		n = 12_000
	}
	work := crashWorkDir(t)
	envFor := func(state, out string) map[string]string {
		return map[string]string{
			"EDDY_LOG_FORMAT": "json", "EDDY_STATE_DIR": filepath.Join(work, state),
			"CRASH_MODE": "exactly_once", "CRASH_IN": work, "CRASH_OUT": filepath.Join(work, out),
			"CRASH_COUNT": strconv.Itoa(n), "CRASH_RATE": "10000",
		}
	}
	file := mustAbs(t, "testdata/crash/dedupe.yaml")
	env := envFor("state", "out-first")
	p := startEddy(t, work, env, "run", file)
	p.killAt(4, 0)
	require.True(t, p.wait(t).killed, "the run ended early; stderr:\n%s", p.log.text())
	ids := completedCheckpoints(t, filepath.Join(work, "state", "crash-dedupe", checkpoint.FileName))
	require.GreaterOrEqual(t, len(ids), 2)
	oldest, newest := ids[len(ids)-1], ids[0]

	// The savepoint is the oldest retained checkpoint: older than the
	// store's newest.
	sp := filepath.Join(work, "savepoint.db")
	r := eddy(t, work, env, "checkpoints", "export", file, strconv.FormatInt(oldest, 10), sp)
	require.Equal(t, 0, r.code, r.stderr)

	// What an uninterrupted run from the savepoint commits.
	refEnv := envFor("ref-state", "out-ref")
	r = eddy(t, work, refEnv, "run", "--from-savepoint", sp, file)
	require.Equal(t, 0, r.code, r.stderr)
	ref := committedLines(t, refEnv["CRASH_OUT"])
	require.NotEmpty(t, ref)

	// Into the first run's store, killed as soon as it restored: before
	// its first checkpoint. Then a plain restart.
	env = envFor("state", "out")
	p = startEddy(t, work, env, "run", "--from-savepoint", sp, file)
	var restored []logEntry
	for len(restored) == 0 {
		select {
		case <-p.done:
			require.FailNow(t, "the run ended before it restored", p.log.text())
		case <-time.After(time.Millisecond):
		}
		restored = p.log.find("restoring from savepoint")
	}
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	p.wait(t)
	require.Equal(t, oldest, *restored[0].Checkpoint)
	require.NotNil(t, restored[0].ImportedAs)
	imported := *restored[0].ImportedAs
	require.Greater(t, imported, newest, "the savepoint is imported after every checkpoint of the store")

	p = startEddy(t, work, env, "run", file)
	require.Equal(t, procResult{}, p.wait(t), "stderr:\n%s", p.log.text())
	id, fresh := p.log.restore()
	require.False(t, fresh)
	require.GreaterOrEqual(t, id, imported, "the restart restores the imported savepoint (or a checkpoint after it), not checkpoint %d", newest)
	requireSameLines(t, ref, committedLines(t, env["CRASH_OUT"]), "savepoint restore killed and restarted vs uninterrupted")
	requireNoHiddenParts(t, env["CRASH_OUT"])
}

func summaryOrStartFailure(t *testing.T, stderr string) string {
	t.Helper()
	var b strings.Builder
	for line := range strings.Lines(stderr) {
		var e logEntry
		if json.Unmarshal([]byte(line), &e) != nil {
			b.WriteString(line)
			continue
		}
		for _, s := range []string{e.Err, e.Reason} {
			if s != "" {
				b.WriteString(s + "\n")
			}
		}
	}
	return b.String()
}

// completedCheckpoints returns the ids of the completed checkpoints in the
// store at path, newest first, without verifying them.
func completedCheckpoints(t *testing.T, path string) []int64 {
	t.Helper()
	s, err := checkpoint.Open(filepath.Dir(path), checkpoint.Options{Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	defer func() { require.NoError(t, s.Close(context.Background())) }()
	infos, err := s.List()
	require.NoError(t, err)
	var ids []int64
	for _, i := range infos {
		if i.Complete {
			ids = append(ids, i.ID)
		}
	}
	return ids
}

// committableFinals returns the final names of the part files that the file
// sinks' committables of checkpoint id list.
func committableFinals(t *testing.T, path string, id int64) []string {
	t.Helper()
	s, err := checkpoint.Open(filepath.Dir(path), checkpoint.Options{Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	defer func() { require.NoError(t, s.Close(context.Background())) }()
	cp, err := s.Checkpoint(context.Background(), id)
	require.NoError(t, err)
	defer func() { require.NoError(t, cp.Close()) }()
	var finals []string
	for name, blob := range cp.Prefix("sink/") {
		// A sink part frames the subtask's committables: a uvarint count,
		// then each as a uvarint length and its bytes (pipeline/stage.go).
		n, w := binary.Uvarint(blob)
		require.Positive(t, w, "committables of %s", name)
		blob = blob[w:]
		for range n {
			l, w := binary.Uvarint(blob)
			require.True(t, w > 0 && l <= uint64(len(blob)-w), "committables of %s", name)
			var c struct {
				Files []struct {
					Final string `json:"final"`
				} `json:"files"`
			}
			require.NoError(t, json.Unmarshal(blob[w:w+int(l)], &c), "committable of %s: %q", name, blob[w:w+int(l)])
			for _, f := range c.Files {
				finals = append(finals, f.Final)
			}
			blob = blob[w+int(l):]
		}
		require.Empty(t, blob, "committables of %s", name)
	}
	require.NoError(t, cp.Err())
	return finals
}
