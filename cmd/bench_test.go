package cmd

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/eddy-stream/eddy/bench/nexmark"
)

// asEddyEnv makes the test binary the eddy binary (the arguments after
// the program name are eddy's): `eddy bench nexmark` runs each query in a
// child process of its own binary, which is this test binary here.
const asEddyEnv = "EDDY_TEST_AS_EDDY"

func TestMain(m *testing.M) {
	if os.Getenv(asEddyEnv) != "" {
		os.Exit(Execute())
	}
	os.Exit(m.Run())
}

// lastLines returns the last n lines of s.
func lastLines(t *testing.T, s string, n int) []string {
	t.Helper()
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	require.GreaterOrEqual(t, len(lines), n, "output:\n%s", s)
	return lines[len(lines)-n:]
}

// A tiny run of q0, each run in a child process: the table, then the two
// lines of q0 (without and with checkpoints), last, in the form tools read.
func TestBenchNexmarkTinyRun(t *testing.T) {
	t.Setenv(asEddyEnv, "1")
	r := execute(t, map[string]string{asEddyEnv: "1"}, "bench", "nexmark", "--events", "1000", "--queries", "q0", "--checkpoint", "1h")
	require.Equal(t, exitOK, r.code, "stderr:\n%s", r.stderr)
	lines := lastLines(t, r.stdout, 2)
	without, err := nexmark.ParseResult(lines[0])
	require.NoError(t, err)
	with, err := nexmark.ParseResult(lines[1])
	require.NoError(t, err)
	for _, res := range []nexmark.Result{without, with} {
		require.Equal(t, "q0", res.Query)
		require.Equal(t, int64(1000), res.Events)
		require.Positive(t, res.CPUSeconds)
		require.Positive(t, res.RSSMB)
	}
	require.Zero(t, without.Checkpoint)
	require.Equal(t, time.Hour, with.Checkpoint)
	require.Positive(t, with.Checkpoints, "the final checkpoint")
	require.Contains(t, lines[1], " checkpoint=1h checkpoints=")
	require.Contains(t, r.stdout, "events/CPU-s", "the table comes first")
	require.NotContains(t, r.stderr, "level=INFO", "the children log at warn unless told otherwise")
}

// --cpuprofile reaches the child processes: each run leaves its profile.
func TestBenchNexmarkCPUProfile(t *testing.T) {
	dir := t.TempDir()
	r := execute(t, map[string]string{asEddyEnv: "1"}, "bench", "nexmark", "--events", "1000", "--queries", "q0", "--checkpoint", "1h", "--cpuprofile", dir)
	require.Equal(t, exitOK, r.code, "stderr:\n%s", r.stderr)
	for _, name := range []string{"q0.pprof", "q0-checkpoint.pprof"} {
		require.FileExists(t, filepath.Join(dir, name))
	}
}

// --child runs one query in this process and prints its line only.
func TestBenchNexmarkChild(t *testing.T) {
	r := execute(t, nil, "bench", "nexmark", "--child", "--events", "1000", "--queries", "q0", "--checkpoint", "0", "--log-level", "warn")
	require.Equal(t, exitOK, r.code, "stderr:\n%s", r.stderr)
	res, err := nexmark.ParseResult(strings.TrimSpace(r.stdout))
	require.NoError(t, err)
	require.Equal(t, int64(1000), res.Events)
	require.Zero(t, res.Checkpoint)

	r = execute(t, nil, "bench", "nexmark", "--child", "--events", "1000", "--queries", "q0,q0", "--checkpoint", "0")
	require.Equal(t, exitInvalid, r.code, "--child without one query")
}

func TestBenchNexmarkFlags(t *testing.T) {
	r := execute(t, nil, "bench", "nexmark", "--events", "0")
	require.Equal(t, exitInvalid, r.code)
	require.Contains(t, r.stderr, "--events must be positive")
	r = execute(t, nil, "bench", "nexmark", "--queries", "q99")
	require.Equal(t, exitInvalid, r.code)
	require.Contains(t, r.stderr, `no query "q99"`)
	r = execute(t, nil, "bench", "nexmark", "--dir", t.TempDir())
	require.Equal(t, exitInvalid, r.code)
	require.Contains(t, r.stderr, "no query files")
}

// The report ends with one line per run that ParseResult reads back.
func TestWriteBenchReport(t *testing.T) {
	results := []nexmark.Result{
		{Query: "q0", Events: 1000, Seconds: 1, CPUSeconds: 2, RSSMB: 30},
		{Query: "q0", Events: 1000, Seconds: 1.25, CPUSeconds: 2.5, RSSMB: 31, Checkpoint: 10 * time.Second, Checkpoints: 1},
		{Query: "q5", Events: 1000, Seconds: 3, CPUSeconds: 4, RSSMB: 50},
	}
	var b strings.Builder
	require.NoError(t, writeBenchReport(&b, results))
	lines := lastLines(t, b.String(), len(results))
	for i, l := range lines {
		got, err := nexmark.ParseResult(l)
		require.NoError(t, err)
		require.Equal(t, results[i], got)
	}
	require.Contains(t, b.String(), "every 10s: 1")
	require.Contains(t, b.String(), "20.0%", "the loss of the run with checkpoints")
}
