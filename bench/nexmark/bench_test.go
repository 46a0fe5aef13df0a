package nexmark

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/stretchr/testify/require"
)

// childEnv makes the test binary a child of Bench: "QUERY EVENTS CHECKPOINT".
const childEnv = "EDDY_TEST_NEXMARK_CHILD"

// testConfigs are the query files of the tests.
var testConfigs = fstest.MapFS{"q0.yaml": {Data: []byte(scratchQuery)}}

func TestMain(m *testing.M) {
	if arg := os.Getenv(childEnv); arg != "" {
		os.Exit(runChild(arg))
	}
	os.Exit(m.Run())
}

// runChild is the child process: RunQuery, then the result line.
func runChild(arg string) int {
	var q string
	var s Setup
	if _, err := fmt.Sscanf(arg, "%s %d %s", &q, &s.Events, new(string)); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	s.Checkpoint, _ = time.ParseDuration(strings.Fields(arg)[2])
	r, err := RunQuery(context.Background(), slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})), testConfigs, q, s)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println("some output before the result line")
	fmt.Println(r)
	return 0
}

// spawnTest spawns the test binary as a child.
func spawnTest(ctx context.Context, query string, s Setup) *exec.Cmd {
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s %d %s", childEnv, query, s.Events, s.Checkpoint))
	cmd.Stderr = os.Stderr
	return cmd
}

func TestRunQuery(t *testing.T) {
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	r, err := RunQuery(context.Background(), logger, testConfigs, "q0", Setup{Events: 1000})
	require.NoError(t, err)
	require.Equal(t, "q0", r.Query)
	require.Equal(t, int64(1000), r.Events)
	require.Positive(t, r.Seconds)
	require.Positive(t, r.CPUSeconds)
	require.Positive(t, r.RSSMB)
	require.Zero(t, r.Checkpoint)
	require.Zero(t, r.Checkpoints)

	// With a checkpoint block: the final checkpoint at the end of the input.
	r, err = RunQuery(context.Background(), logger, testConfigs, "q0", Setup{Events: 1000, Checkpoint: time.Hour})
	require.NoError(t, err)
	require.Equal(t, time.Hour, r.Checkpoint)
	require.Positive(t, r.Checkpoints)

	_, err = RunQuery(context.Background(), logger, testConfigs, "q99", Setup{Events: 1})
	require.ErrorContains(t, err, "q99")
}

// With a profile folder, each run leaves its CPU profile there (a gzipped
// protocol buffer), named after the query and whether it checkpointed.
func TestRunQueryProfile(t *testing.T) {
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	dir := t.TempDir()
	for _, s := range []Setup{{Events: 1000, ProfileDir: dir}, {Events: 1000, Checkpoint: time.Hour, ProfileDir: dir}} {
		_, err := RunQuery(context.Background(), logger, testConfigs, "q0", s)
		require.NoError(t, err)
	}
	for _, name := range []string{"q0.pprof", "q0-checkpoint.pprof"} {
		b, err := os.ReadFile(filepath.Join(dir, name))
		require.NoError(t, err)
		require.Greater(t, len(b), 2)
		require.Equal(t, []byte{0x1f, 0x8b}, b[:2], "%s is gzipped", name)
	}

	_, err := RunQuery(context.Background(), logger, testConfigs, "q0", Setup{Events: 10, ProfileDir: filepath.Join(dir, "missing")})
	require.ErrorContains(t, err, "CPU profile")
}

// Each run is measured in a child process: its peak RSS is its own, not
// this process's, which touched more memory before.
func TestBenchMeasuresInChildProcesses(t *testing.T) {
	const parentMB = 256
	ballast := make([]byte, parentMB<<20)
	for i := 0; i < len(ballast); i += 4096 {
		ballast[i] = 1
	}
	require.GreaterOrEqual(t, peakRSS()>>20, int64(parentMB))

	var progress strings.Builder
	results, err := Bench(context.Background(), []string{"q0"}, Setup{Events: 2000, Checkpoint: time.Hour}, spawnTest, &progress)
	runtime.KeepAlive(ballast)
	require.NoError(t, err)
	require.Len(t, results, 2, "without and with checkpoints")
	require.Zero(t, results[0].Checkpoint)
	require.Equal(t, time.Hour, results[1].Checkpoint)
	require.Positive(t, results[1].Checkpoints)
	for _, r := range results {
		require.Equal(t, int64(2000), r.Events)
		require.Positive(t, r.CPUSeconds)
		require.Positive(t, r.RSSMB)
		require.Less(t, r.RSSMB, int64(parentMB), "the child's own peak RSS")
	}
	require.Equal(t, results[0].String()+"\n"+results[1].String()+"\n", progress.String())

	// Without a checkpoint interval, one run per query.
	results, err = Bench(context.Background(), []string{"q0"}, Setup{Events: 10}, spawnTest, io.Discard)
	require.NoError(t, err)
	require.Len(t, results, 1)

	// A child that fails fails the benchmark, naming the query.
	_, err = Bench(context.Background(), []string{"q0", "q7"}, Setup{Events: 10}, spawnTest, io.Discard)
	require.ErrorContains(t, err, "query q7")
}
