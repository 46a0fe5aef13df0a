//go:build !windows

package e2e_test

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Join tests: the join step in whole pipelines of the real binary.
//
// testdata/join_interval.yaml joins two rate-limited generators, orders and
// payments, with an interval join into an exactly-once file sink. The test
// computes the join itself, with nested loops over the records the
// generators generate (joinOrders, joinPayments), and requires the
// committed output to hold every expected row exactly once and nothing
// else, after SIGKILLs at random moments (TestJoinCrashRecovery), after
// SIGKILLs and restarts at other parallelisms (TestJoinCrashRescale), and
// after stops with a savepoint restored at other parallelisms
// (TestJoinRescaleSavepoint). The kill moments come from -crash.seed as in
// crash_test.go.
//
// testdata/join_idle.yaml (TestJoinIdleSide) joins two followed files, one
// of which stays empty: its idle_timeout lets the other side's watermark
// close intervals while the run goes on.

// joinBase is the first event time of the join tests' inputs.
const joinBase = int64(1_700_000_000_000)

// joinLower and joinUpper are the bounds of testdata/join_interval.yaml in
// ms: a payment joins an order when its time is within [order + lower,
// order + upper].
const joinLower, joinUpper = int64(-1000), int64(2000)

// joinRecords is the number of orders, and of payments; joinRate the
// records per second of each generator during the interrupted runs.
var joinRecords = map[bool]int{false: 15_000, true: 6_000}[raceEnabled]

const joinRate = 5000

// joinEvent is an order or a payment.
type joinEvent struct{ id, k, ts int64 }

// joinOrders returns the first n records of the orders generator of
// testdata/join_interval.yaml: keys 0..49, 10ms apart, up to 39ms late.
func joinOrders(n int) []joinEvent {
	out := make([]joinEvent, n)
	for i := range out {
		j := int64(i)
		out[i] = joinEvent{id: j, k: j % 50, ts: joinBase + j*10 + j*7919%40}
	}
	return out
}

// joinPayments returns the first n records of the payments generator:
// keys 0..39, so that orders of keys 40..49 never match.
func joinPayments(n int) []joinEvent {
	out := make([]joinEvent, n)
	for i := range out {
		j := int64(i)
		out[i] = joinEvent{id: j, k: j * 3 % 40, ts: joinBase + 5 + j*10 + j*104729%40}
	}
	return out
}

// expectedIntervalJoin is the interval join of orders and payments as the
// select of testdata/join_interval.yaml writes it, computed with nested
// loops: every pair of equal keys whose payment time is within the bounds
// of the order's, and with outer every order without such a payment,
// padded with nulls.
func expectedIntervalJoin(orders, payments []joinEvent, lower, upper int64, outer bool) []map[string]any {
	var out []map[string]any
	for _, o := range orders {
		matched := false
		for _, p := range payments {
			if p.k != o.k || p.ts < o.ts+lower || p.ts > o.ts+upper {
				continue
			}
			matched = true
			out = append(out, map[string]any{"order": o.id, "payment": p.id, "k": o.k, "order_ts": o.ts, "payment_ts": p.ts})
		}
		if outer && !matched {
			out = append(out, map[string]any{"order": o.id, "payment": nil, "k": o.k, "order_ts": o.ts, "payment_ts": nil})
		}
	}
	return out
}

// joinWant returns the canonical lines of the join of n orders and n
// payments of type typ (inner or left).
func joinWant(t *testing.T, typ string, n int) []string {
	t.Helper()
	want := expectedIntervalJoin(joinOrders(n), joinPayments(n), joinLower, joinUpper, typ == "left")
	require.NotEmpty(t, want)
	return canonicalLines(t, want)
}

// joinEnv is the environment of a run of testdata/join_interval.yaml with
// n records a side, join type typ, parallelism par (of the output sink
// too), output out and state dir state.
func joinEnv(typ string, n, par int, out, state string) map[string]string {
	return map[string]string{
		"EDDY_LOG_FORMAT": "json", "EDDY_STATE_DIR": state, "CRASH_OUT": out,
		"JOIN_TYPE": typ, "JOIN_PARALLELISM": strconv.Itoa(par), "JOIN_SINK_PARALLELISM": strconv.Itoa(par),
		"JOIN_ORDERS": strconv.Itoa(n), "JOIN_PAYMENTS": strconv.Itoa(n), "JOIN_RATE": strconv.Itoa(joinRate),
	}
}

// joinPipeline returns testdata/join_interval.yaml, or a copy in work with
// incremental checkpoints (retaining one) and state appended.
func joinPipeline(t *testing.T, work, state string, incremental bool) string {
	t.Helper()
	file := mustAbs(t, "testdata/join_interval.yaml")
	if state == "" && !incremental {
		return file
	}
	b, err := os.ReadFile(file)
	require.NoError(t, err)
	yaml := string(b)
	require.Contains(t, yaml, "  retain: 3\n")
	if incremental {
		yaml = strings.Replace(yaml, "  retain: 3\n", "  retain: 1\n  incremental: true\n", 1)
	}
	file = filepath.Join(work, "join_interval.yaml")
	require.NoError(t, os.WriteFile(file, []byte(yaml+state), 0o644))
	return file
}

// requireJoinOutput: the committed output of a run that ended holds every
// line of want once and nothing else, no part is left hidden, and no record
// was late.
func requireJoinOutput(t *testing.T, out string, want []string, what string) {
	t.Helper()
	got := committedLines(t, out)
	requireNoHiddenParts(t, out)
	requireSameLines(t, want, got, what)
	late := out + "-late"
	if _, err := os.Stat(late); !errors.Is(err, os.ErrNotExist) {
		require.Empty(t, committedLines(t, late), "late records: the sources' disorder is within their bounds")
	}
}

// TestJoinCrashRecovery SIGKILLs the interval join pipeline at random
// moments and restarts it with the same command until a run ends: inner
// and left outer, with the memory backend, and an inner join with the
// bbolt backend (a cache smaller than a subtask's keys) and incremental
// checkpoints. The committed output is the computed join, each row once.
func TestJoinCrashRecovery(t *testing.T) {
	kills, rng := rescaleCrashSetup(t, 400)
	for i, c := range []struct {
		name, typ, state string
		incremental      bool
	}{
		{name: "inner", typ: "inner"},
		{name: "left", typ: "left"},
		{name: "inner/bbolt-incremental", typ: "inner", incremental: true,
			state: "state:\n  backend: bbolt\n  cache_entries: 8\n"},
	} {
		seed := rng.Uint64()
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			n := joinRecords
			if testing.Short() {
				n /= 2
			}
			work := crashWorkDir(t)
			out := filepath.Join(work, "out")
			env := joinEnv(c.typ, n, 2, out, filepath.Join(work, "state"))
			file := joinPipeline(t, work, c.state, c.incremental)
			cr := crashLoop(t, work, env, file, kills, rand.New(rand.NewPCG(seed, uint64(i))))
			t.Logf("%s: %d records a side, %d kills, %d incarnations, last completed checkpoint before the final run: %d; kill moments: %s",
				c.name, n, cr.kills, cr.incarnations, cr.lastCompleted, strings.Join(cr.moments, ", "))
			require.Positive(t, cr.kills, "the run ended before any kill")
			if c.incremental {
				require.Positive(t, cr.deltasWritten, "no checkpoint wrote a delta part")
			}
			cr.requireCommittedUnchanged(t, out)
			requireJoinOutput(t, out, joinWant(t, c.typ, n), "crashed runs vs the computed join")
		})
	}
}

// TestJoinCrashRescale SIGKILLs the left outer interval join at random
// moments and restarts it each time with another parallelism (1 to 4) of
// the sources and the join: the join's keyed state and timers are
// redistributed by key group, the generators' positions rescale, and the
// committed output is still the computed join, each row once. The output
// sink stays at 2: a file sink subtask that a restart drops leaves its
// in-progress part behind (each subtask deletes only its own), which
// TestJoinRescaleSavepoint's stops never leave.
func TestJoinCrashRescale(t *testing.T) {
	kills, rng := rescaleCrashSetup(t, 401)
	n := joinRecords
	if testing.Short() {
		n /= 2
	}
	work := crashWorkDir(t)
	out := filepath.Join(work, "out")
	env := joinEnv("left", n, 2, out, filepath.Join(work, "state"))
	env["JOIN_SINK_PARALLELISM"] = "2"
	pars := []string{"2"}
	draw := func() (int, time.Duration, string) {
		next := env["JOIN_PARALLELISM"]
		for next == env["JOIN_PARALLELISM"] {
			next = strconv.Itoa(1 + rng.IntN(4))
		}
		env["JOIN_PARALLELISM"] = next
		pars = append(pars, next)
		return killMoment(rng)
	}
	cr := crashLoopAt(t, work, env, mustAbs(t, "testdata/join_interval.yaml"), kills, draw)
	t.Logf("%d records a side, %d kills, parallelism by incarnation %v; kill moments: %s",
		n, cr.kills, pars[:cr.incarnations], strings.Join(cr.moments, ", "))
	require.Positive(t, cr.kills, "the run ended before any kill")
	cr.requireCommittedUnchanged(t, out)
	requireJoinOutput(t, out, joinWant(t, "left", n), "crashed, rescaled runs vs the computed join")
}

// TestJoinRescaleSavepoint stops the left outer interval join with SIGTERM
// (a final savepoint) while it runs at parallelism 2, restores the
// savepoint at parallelism 3, stops that run the same way, and restores
// its savepoint at parallelism 1 to the end. Each savepoint holds join
// state (orders and payments waiting for their intervals to close), and
// the committed output is the computed join, each row once.
//
// The generators are paced so that the input lasts savepointRunSeconds:
// the first two runs must still be reading when their third checkpoint
// completes (slow under -race), or there is no savepoint to stop with.
func TestJoinRescaleSavepoint(t *testing.T) {
	const savepointRunSeconds = 5
	n := joinRecords
	work := t.TempDir()
	out, state := filepath.Join(work, "out"), filepath.Join(work, "state")
	file := mustAbs(t, "testdata/join_interval.yaml")
	pars := []int{2, 3, 1}
	sp := ""
	for k, par := range pars {
		args := []string{"run", file}
		if sp != "" {
			args = []string{"run", "--from-savepoint", sp, file}
		}
		env := joinEnv("left", n, par, out, state)
		env["JOIN_RATE"] = strconv.Itoa(n / savepointRunSeconds)
		p := startEddy(t, work, env, args...)
		last := k == len(pars)-1
		if !last {
			sp = stopWithSavepoint(t, p, 3)
		} else {
			require.Equal(t, procResult{}, p.wait(t), "stderr:\n%s", p.log.text())
			require.Equal(t, "finished", summary(t, p.log.text()).status)
		}
		if k > 0 {
			restored := p.log.find("restoring from savepoint")
			require.Len(t, restored, 1, "run %d at parallelism %d; stderr:\n%s", k+1, par, p.log.text())
		}
		t.Logf("run %d at parallelism %d: %d checkpoints completed", k+1, par, len(p.log.find("checkpoint complete")))
	}
	requireJoinOutput(t, out, joinWant(t, "left", n), "runs restored from savepoints at parallelism 2, 3, 1 vs the computed join")
}

// stopWithSavepoint waits until run p completed `completions` checkpoints,
// stops it with SIGTERM, and returns the path of the final savepoint, which
// must hold keyed state.
func stopWithSavepoint(t *testing.T, p *proc, completions int) string {
	t.Helper()
	for range completions {
		select {
		case <-p.log.completed:
		case <-p.done:
			t.Fatalf("the run ended before %d checkpoints; stderr:\n%s", completions, p.log.text())
		}
	}
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	require.Equal(t, procResult{}, p.wait(t), "stderr:\n%s", p.log.text())
	require.Equal(t, "stopped", summary(t, p.log.text()).status, "the run ended before the signal")
	stopped := p.log.find("stopped with a savepoint")
	require.Len(t, stopped, 1, "stderr:\n%s", p.log.text())
	bytes := savepointStateBytes(t, p.log.text())
	require.Len(t, bytes, 1, "stderr:\n%s", p.log.text())
	require.Positive(t, bytes[0], "the savepoint holds no keyed state")
	return stopped[0].Path
}

// savepointStateBytes returns the state_bytes of the savepoints that a
// run's json log says completed.
func savepointStateBytes(t *testing.T, stderr string) []int64 {
	t.Helper()
	var out []int64
	for line := range strings.Lines(stderr) {
		var e struct {
			Msg        string `json:"msg"`
			Savepoint  bool   `json:"savepoint"`
			StateBytes int64  `json:"state_bytes"`
		}
		if json.Unmarshal([]byte(line), &e) == nil && e.Msg == "checkpoint complete" && e.Savepoint {
			out = append(out, e.StateBytes)
		}
	}
	return out
}

// TestJoinIdleSide runs testdata/join_idle.yaml, a left outer interval
// join of two followed files, orders and payments, whose payments file is
// empty. Its idle_timeout lets the orders' watermark (the newest order's
// time - 1) close the intervals of the orders before it: while the run
// goes on, those orders are committed padded with a null payment, and
// only those. A payment appended then joins the orders still open of its
// key. SIGTERM stops the run (no watermark of the end: the open orders are
// never padded).
func TestJoinIdleSide(t *testing.T) {
	work := t.TempDir()
	in, out := filepath.Join(work, "in"), filepath.Join(work, "out")
	require.NoError(t, os.MkdirAll(in, 0o755))
	// Orders 0..99, 100ms apart, keys 0..4; the watermark ends at order
	// 99's time - 1, which closes orders 0..88 (time + 1050ms at or below
	// it) and leaves 89..99 open.
	const orders, closed = 100, 89
	f, err := os.Create(filepath.Join(in, "orders.jsonl"))
	require.NoError(t, err)
	w := bufio.NewWriter(f)
	for i := range orders {
		fmt.Fprintf(w, `{"id":%d,"k":%d,"ts":%d}`+"\n", i, i%5, joinBase+int64(i)*100)
	}
	require.NoError(t, w.Flush())
	require.NoError(t, f.Close())
	payments := filepath.Join(in, "payments.jsonl")
	require.NoError(t, os.WriteFile(payments, nil, 0o644))

	env := map[string]string{
		"EDDY_LOG_FORMAT": "json", "EDDY_STATE_DIR": filepath.Join(work, "state"),
		"JOIN_IN": in, "JOIN_OUT": out,
	}
	p := startEddy(t, work, env, "run", mustAbs(t, "testdata/join_idle.yaml"))
	var want []map[string]any
	for i := range closed {
		want = append(want, map[string]any{"order": i, "payment": nil})
	}
	waitForCommitted(t, p, out, len(want))
	requireSameLines(t, canonicalLines(t, want), committedLines(t, out), "orders padded while the payments side is idle")

	// Payment 1000 of key 0 at order 99's time joins the open orders of
	// key 0 whose interval holds it: 90 and 95 (order 85's closed).
	pf, err := os.OpenFile(payments, os.O_APPEND|os.O_WRONLY, 0)
	require.NoError(t, err)
	_, err = fmt.Fprintf(pf, `{"id":1000,"k":0,"ts":%d}`+"\n", joinBase+9900)
	require.NoError(t, err)
	require.NoError(t, pf.Close())
	want = append(want, map[string]any{"order": 90, "payment": 1000}, map[string]any{"order": 95, "payment": 1000})
	waitForCommitted(t, p, out, len(want))

	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	require.Equal(t, procResult{}, p.wait(t), "stderr:\n%s", p.log.text())
	require.Equal(t, "stopped", summary(t, p.log.text()).status)
	requireJoinOutput(t, out, canonicalLines(t, want), "orders padded while the payments side is idle, then joined")

	// The state of the final savepoint holds the open orders and none of
	// the closed ones: their times (multiples of 100ms after joinBase)
	// appear in it for orders 89..99 only.
	stopped := p.log.find("stopped with a savepoint")
	require.Len(t, stopped, 1, "stderr:\n%s", p.log.text())
	state := joinStepState(t, work, stopped[0].Path, "paid")
	for i := range orders {
		ts := strconv.FormatInt(joinBase+int64(i)*100, 10)
		if i < closed {
			require.NotContains(t, state, ts, "order %d was closed, but its time is still in the join's state:\n%s", i, state)
		} else {
			require.Contains(t, state, ts, "order %d is open, but its time is not in the join's state:\n%s", i, state)
		}
	}
}

// joinStepState returns the keyed state and timers of step in the
// savepoint sp, as the JSON text that `eddy state inspect` prints.
func joinStepState(t *testing.T, dir, sp, step string) string {
	t.Helper()
	r := eddy(t, dir, nil, "state", "inspect", "--step", step, sp)
	require.Equal(t, 0, r.code, r.stderr)
	var st struct {
		Steps []struct {
			ID        string          `json:"id"`
			KeyGroups json.RawMessage `json:"key_groups"`
		} `json:"steps"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &st), r.stdout)
	require.Len(t, st.Steps, 1, r.stdout)
	require.Equal(t, step, st.Steps[0].ID)
	return string(st.Steps[0].KeyGroups)
}

// waitForCommitted polls dir until its committed part files hold at least
// n lines (the run's output is the signal), failing if run p ends first.
func waitForCommitted(t *testing.T, p *proc, dir string, n int) {
	t.Helper()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		if _, err := os.Stat(dir); err == nil && len(committedLines(t, dir)) >= n {
			return
		}
		select {
		case <-tick.C:
		case <-p.done:
			t.Fatalf("eddy run ended before %d lines were committed in %s; stderr:\n%s", n, dir, p.log.text())
		}
	}
}
