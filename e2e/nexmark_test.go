package e2e_test

import (
	"encoding/json"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
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
// check its file.
func TestNexmarkQueryFiles(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(repoRoot, "configs", "nexmark", "q*.yaml"))
	require.NoError(t, err)
	var got, want []string
	for _, f := range files {
		got = append(got, strings.TrimSuffix(filepath.Base(f), ".yaml"))
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
