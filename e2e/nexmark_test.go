package e2e_test

import (
	"encoding/json"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"
)

// The Nexmark queries of configs/nexmark, run by the real binary over the
// nexmark source's events, against the reference computations of
// nexmark_ref_test.go: the output, as a multiset of rows (a changelog
// folded into its final table), must be the reference's.

// nexmarkQuery is the check of one query file.
type nexmarkQuery struct {
	name string
	// span is the event time that the check's events cover (the source's
	// rate is the event count over it), chosen so that the query's windows
	// or days see several instances: 100 s for windows of 10 s, 100,000 s
	// (28 hours) for days and hours. 0 keeps the file's rate, the Nexmark
	// benchmark's 10,000,000 events/s.
	span time.Duration
	// ref computes the query's result; nil for q12, whose windows are
	// in processing time (checkQ12).
	ref func(nxEvents) ([]nxRow, error)
}

// noErr adapts a reference that cannot fail.
func noErr(f func(nxEvents) []nxRow) func(nxEvents) ([]nxRow, error) {
	return func(ev nxEvents) ([]nxRow, error) { return f(ev), nil }
}

// benchmarkRate is the rate of the query files: the Nexmark benchmark's.
const benchmarkRate = 10_000_000

// The spans of the checks.
const (
	spanWindows = 100 * time.Second
	spanDays    = 100_000 * time.Second
	spanAuction = 10 * time.Second
)

func nexmarkQueries() []nexmarkQuery {
	return []nexmarkQuery{
		{"q0", 0, noErr(refQ0)},
		{"q1", 0, noErr(refQ1)},
		{"q2", 0, noErr(refQ2)},
		{"q3", 0, noErr(refQ3)},
		{"q4", spanAuction, noErr(refQ4)},
		{"q5", spanWindows, noErr(refQ5)},
		{"q7", spanWindows, noErr(refQ7)},
		{"q8", spanWindows, noErr(refQ8)},
		{"q9", spanAuction, refQ9},
		{"q11", spanWindows, noErr(refQ11)},
		{"q12", 0, nil},
		{"q13", 0, noErr(refQ13)},
		{"q14", spanDays, noErr(refQ14)},
		{"q15", spanDays, noErr(refQ15)},
		{"q16", spanDays, noErr(refQ16)},
		{"q17", spanDays, noErr(refQ17)},
		{"q18", 0, refQ18},
		{"q19", 0, refQ19},
		{"q20", 0, noErr(refQ20)},
		{"q21", 0, noErr(refQ21)},
		{"q22", 0, noErr(refQ22)},
	}
}

// nexmarkEventCount is the number of events each query runs on: 100,000,
// or 20,000 under -race, which makes the binary and the checks about
// five times slower (the queries' 100,000 events take 140 s of a 2-core
// machine there, 23 s without).
var nexmarkEventCount = map[bool]int64{false: 100_000, true: 20_000}[raceEnabled]

// rate is the source's rate for the check of q.
func (q nexmarkQuery) rate() float64 {
	if q.span == 0 {
		return benchmarkRate
	}
	return float64(nexmarkEventCount) / q.span.Seconds()
}

// eventsAt caches the reference's events per rate: generating them is
// shared by the queries that run at one rate.
var eventsAt = struct {
	sync.Mutex
	m map[float64]func() nxEvents
}{m: map[float64]func() nxEvents{}}

func referenceEvents(rate float64) nxEvents {
	eventsAt.Lock()
	f, ok := eventsAt.m[rate]
	if !ok {
		f = sync.OnceValue(func() nxEvents { return nexmarkEvents(nexmarkEventCount, rate) })
		eventsAt.m[rate] = f
	}
	eventsAt.Unlock()
	return f()
}

// TestNexmarkQueryFiles: every query file has its check here, and every
// check its file; each file follows the conventions of
// configs/nexmark/README.md: a source with id nexmark of type nexmark whose
// count and rate come from NEXMARK_EVENTS and NEXMARK_RATE, and one sink,
// with id out, reading the step named after the query.
func TestNexmarkQueryFiles(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(repoRoot, "configs", "nexmark", "q*.yaml"))
	require.NoError(t, err)
	var got, want []string
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".yaml")
		got = append(got, name)
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		var p struct {
			Parallelism string           `yaml:"parallelism"`
			Sources     []map[string]any `yaml:"sources"`
			Sinks       []map[string]any `yaml:"sinks"`
		}
		require.NoError(t, yaml.Unmarshal(b, &p), f)
		require.Equal(t, "${NEXMARK_PARALLELISM:1}", p.Parallelism, f)
		src := slices.IndexFunc(p.Sources, func(s map[string]any) bool { return s["id"] == "nexmark" })
		require.GreaterOrEqual(t, src, 0, "%s: no source with id nexmark", f)
		require.Equal(t, "nexmark", p.Sources[src]["type"], f)
		require.Equal(t, "${NEXMARK_EVENTS:1000000}", p.Sources[src]["count"], f)
		require.Equal(t, "${NEXMARK_RATE:10000000}", p.Sources[src]["rate"], f)
		require.Len(t, p.Sinks, 1, f)
		require.Equal(t, "out", p.Sinks[0]["id"], f)
		require.Equal(t, name, p.Sinks[0]["from"], f)
		require.Equal(t, "${NEXMARK_OUT:nexmark-out/"+name+"}/", p.Sinks[0]["path"], f)
	}
	for _, q := range nexmarkQueries() {
		want = append(want, q.name)
	}
	slices.Sort(got)
	slices.Sort(want)
	require.Equal(t, want, got, "configs/nexmark/q*.yaml vs the queries checked by TestNexmarkQueries")
}

// TestNexmarkQueries runs every query file over nexmarkEventCount events at
// parallelism 2 and compares its output with the reference's.
func TestNexmarkQueries(t *testing.T) {
	for _, q := range nexmarkQueries() {
		t.Run(q.name, func(t *testing.T) {
			t.Parallel()
			lines := runNexmarkQuery(t, q.name, map[string]string{
				"NEXMARK_EVENTS":      strconv.FormatInt(nexmarkEventCount, 10),
				"NEXMARK_RATE":        strconv.FormatFloat(q.rate(), 'f', -1, 64),
				"NEXMARK_PARALLELISM": "2",
			})
			ev := referenceEvents(q.rate())
			if q.ref == nil {
				checkQ12(t, ev, lines)
				return
			}
			want, err := q.ref(ev)
			require.NoError(t, err)
			require.NotEmpty(t, want, "the reference's result is empty: the check would prove little")
			got := foldChangelog(t, lines)
			requireSameLines(t, canonicalRows(t, want), got, q.name+": pipeline output vs the reference")
			t.Logf("%s: %d output lines, %d rows", q.name, len(lines), len(got))
		})
	}
}

// runNexmarkQuery runs configs/nexmark/<name>.yaml with env and returns the
// lines its sink wrote.
func runNexmarkQuery(t *testing.T, name string, env map[string]string) []string {
	t.Helper()
	work := t.TempDir()
	out := filepath.Join(work, "out")
	env["NEXMARK_OUT"] = out
	env["EDDY_STATE_DIR"] = filepath.Join(work, "state")
	r := eddy(t, work, env, "run", filepath.Join(repoRoot, "configs", "nexmark", name+".yaml"))
	require.Equal(t, 0, r.code, r.stderr)
	return committedLines(t, out)
}

// foldChangelog returns the rows of lines without _op: a plain row counts
// once, a changelog's +I and +U add a row, -U and -D take one out (which
// must be there). The file sink writes a row's keys sorted, so _op comes
// first and a row has one text whatever its _op.
func foldChangelog(t *testing.T, lines []string) []string {
	t.Helper()
	const opPrefix = `{"_op":"`
	count := map[string]int{}
	for _, l := range lines {
		op, row := "", l
		if strings.HasPrefix(l, opPrefix) {
			// {"_op":"+I","a":1} -> op +I, row {"a":1}
			rest := l[len(opPrefix):]
			i := strings.Index(rest, `",`)
			require.Positive(t, i, "%s", l)
			op, row = rest[:i], "{"+rest[i+2:]
		}
		switch op {
		case "", "+I", "+U":
			count[row]++
		case "-U", "-D":
			require.Positive(t, count[row], "the changelog retracts a row it does not hold: %s", l)
			count[row]--
		default:
			require.Failf(t, "unknown _op", "%s", l)
		}
	}
	var out []string
	for row, c := range count {
		for range c {
			out = append(out, row)
		}
	}
	return out
}

// canonicalRows encodes rows as the file sink does: compact json, keys
// sorted, '<', '>' and '&' not escaped (docs/connectors.md).
func canonicalRows(t *testing.T, rows []nxRow) []string {
	t.Helper()
	out := make([]string, len(rows))
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	for i, r := range rows {
		b.Reset()
		require.NoError(t, enc.Encode(r))
		out[i] = strings.TrimSuffix(b.String(), "\n")
	}
	return out
}

// checkQ12: processing-time windows depend on the run's speed, so the
// check is what does not: each row is a bidder's count in a window of
// 10 s aligned on the epoch, no bidder has two rows for one window, and a
// bidder's counts add up to its bids.
func checkQ12(t *testing.T, ev nxEvents, lines []string) {
	t.Helper()
	type window struct{ bidder, start int64 }
	seen := map[window]bool{}
	total := map[int64]int64{}
	for _, l := range lines {
		var row struct {
			Bidder    *int64 `json:"bidder"`
			BidCount  *int64 `json:"bid_count"`
			Starttime *int64 `json:"starttime"`
			Endtime   *int64 `json:"endtime"`
		}
		d := json.NewDecoder(strings.NewReader(l))
		d.DisallowUnknownFields()
		require.NoError(t, d.Decode(&row), "%s", l)
		require.True(t, row.Bidder != nil && row.BidCount != nil && row.Starttime != nil && row.Endtime != nil, "%s", l)
		require.Zero(t, *row.Starttime%10_000, "%s", l)
		require.Equal(t, *row.Starttime+10_000, *row.Endtime, "%s", l)
		require.Positive(t, *row.BidCount, "%s", l)
		w := window{*row.Bidder, *row.Starttime}
		require.False(t, seen[w], "two rows for bidder %d, window %d", w.bidder, w.start)
		seen[w] = true
		total[*row.Bidder] += *row.BidCount
	}
	require.Equal(t, bidsPerBidder(ev), total, "bids per bidder over all windows")
}

// TestNexmarkCrash runs every query file with exactly-once checkpoints
// every 50ms and a paced source, SIGKILLs it at a random moment (as
// TestCrashRecovery does: -crash.seed, -crash.kills) and restarts it until
// a run ends: once for most queries, 6 times for q1 (stateless), q5
// (sliding windows, then windows over their results) and q4 (a regular
// join, then two continuous aggregates, the second over the first's
// changelog). The committed output must be the
// reference's: for q1 and q5 line for line the uninterrupted run's too,
// and for q4 a changelog that never retracts a row it did not insert and
// folds into the reference's table.
func TestNexmarkCrash(t *testing.T) {
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
	for i, q := range nexmarkQueries() {
		n := 1 // every other query: one SIGKILL and restore
		if slices.Contains([]string{"q1", "q5", "q4"}, q.name) || *crashKills > 0 {
			n = kills
		}
		t.Run(q.name, func(t *testing.T) {
			t.Parallel()
			runNexmarkCrash(t, q, n, rand.New(rand.NewPCG(seed, uint64(500+i))))
		})
	}
}

// nexmarkCrashEvents is the size of TestNexmarkCrash's runs (half under
// -race, where q4's checkpoints of its growing join state slow the runs
// down most), and nexmarkCrashRate the pace of its source (events per
// second of wall clock) in the runs it kills: about 4 s a run without
// -race, time for several checkpoints and kills.
var nexmarkCrashEvents = map[bool]int{false: 40_000, true: 20_000}[raceEnabled]

const nexmarkCrashRate = 10_000

func runNexmarkCrash(t *testing.T, q nexmarkQuery, kills int, rng *rand.Rand) {
	work := crashWorkDir(t)
	file := nexmarkCrashFile(t, work, q.name)
	rate := float64(benchmarkRate)
	if q.span > 0 {
		rate = float64(nexmarkCrashEvents) / q.span.Seconds()
	}
	env := func(out, state string, emitRate int) map[string]string {
		return map[string]string{
			"EDDY_LOG_FORMAT": "json", "EDDY_STATE_DIR": state, "CRASH_OUT": out, "NEXMARK_OUT": out,
			"NEXMARK_EVENTS": strconv.Itoa(nexmarkCrashEvents), "NEXMARK_RATE": strconv.FormatFloat(rate, 'f', -1, 64),
			"NEXMARK_PARALLELISM": "2", "NEXMARK_EMIT_RATE": strconv.Itoa(emitRate),
		}
	}
	ev := nexmarkEvents(int64(nexmarkCrashEvents), rate)
	var want []string
	if q.ref != nil {
		rows, err := q.ref(ev)
		require.NoError(t, err)
		want = canonicalRows(t, rows)
	}
	// check is the reference check; q12's processing-time windows have
	// checkQ12's instead.
	check := func(lines []string, what string) {
		if q.ref == nil {
			checkQ12(t, ev, lines)
			return
		}
		requireSameLines(t, want, foldChangelog(t, lines), q.name+": "+what+" vs the reference")
	}

	// The uninterrupted run, unpaced.
	refOut := filepath.Join(work, "ref-out")
	r := eddy(t, work, env(refOut, filepath.Join(work, "ref-state"), 0), "run", file)
	require.Equal(t, 0, r.code, r.stderr)
	ref := committedLines(t, refOut)
	require.NotEmpty(t, ref, "the uninterrupted run wrote nothing: the check would prove little")
	check(ref, "uninterrupted run")

	out := filepath.Join(work, "out")
	cr := crashLoop(t, work, env(out, filepath.Join(work, "state"), nexmarkCrashRate), file, kills, rng)
	t.Logf("%s: %d events, %d kills, %d incarnations, last completed checkpoint before the final run: %d; kill moments: %s",
		q.name, nexmarkCrashEvents, cr.kills, cr.incarnations, cr.lastCompleted, strings.Join(cr.moments, ", "))
	require.Positive(t, cr.kills, "the run ended before any kill")
	got := committedLines(t, out)
	requireNoHiddenParts(t, out)
	cr.requireCommittedUnchanged(t, out)
	check(got, "crashed runs")
	if q.ref != nil && !strings.HasPrefix(ref[0], `{"_op":`) { // ref is not empty: check
		requireSameLines(t, ref, got, q.name+": crashed runs vs the uninterrupted run")
	}
}

// nexmarkCrashFile writes configs/nexmark/<name>.yaml into dir with an
// exactly-once checkpoint block and the source paced by
// NEXMARK_EMIT_RATE, and returns its path.
func nexmarkCrashFile(t *testing.T, dir, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, "configs", "nexmark", name+".yaml"))
	require.NoError(t, err)
	yaml := string(b)
	const top, rate = "parallelism: ${NEXMARK_PARALLELISM:1}\n", "    rate: ${NEXMARK_RATE:10000000}\n"
	require.Contains(t, yaml, top)
	require.Contains(t, yaml, rate)
	yaml = strings.Replace(yaml, top, top+"checkpoint:\n  interval: 50ms\n  mode: exactly_once\n  timeout: 30s\n  retain: 3\n", 1)
	yaml = strings.Replace(yaml, rate, rate+"    emit_rate: ${NEXMARK_EMIT_RATE}\n", 1)
	file := filepath.Join(dir, name+".yaml")
	require.NoError(t, os.WriteFile(file, []byte(yaml), 0o644))
	return file
}
