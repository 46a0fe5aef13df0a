// Package e2e_test runs the eddy binary the way a user does: it builds it
// once (TestMain), then runs it as a child process on the example pipelines
// of configs/ and on pipelines under testdata/, checking exit codes, stdout,
// stderr and the files the sinks write.
//
// Golden files live under testdata/ and are refreshed with
//
//	go test ./e2e -update
//
// Output order: a pipeline whose every source, step and sink runs with
// parallelism 1 produces its records in a deterministic order, and its
// outputs are compared byte for byte. When any node runs with parallelism
// above 1, subtasks interleave nondeterministically, so lines are sorted
// before they are compared (and the golden file holds them sorted).
//
// When the tests run with -race, the binary is built with -race too, so a
// data race in a real run (signals included) fails the test (exit code 66).
package e2e_test

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

var (
	// eddyBin is the binary TestMain built.
	eddyBin string
	// repoRoot is the module's root directory.
	repoRoot string
)

// runTimeout bounds every run of the binary so that a hang fails the test
// instead of blocking it; no assertion depends on how long a run takes.
const runTimeout = 3 * time.Minute

// waitDelay bounds how long a Wait of a killed binary waits for its output
// to be copied: a child it left behind that holds the pipes open cannot
// make Wait hang.
const waitDelay = 10 * time.Second

func TestMain(m *testing.M) {
	flag.Parse()
	os.Exit(buildAndRun(m))
}

func buildAndRun(m *testing.M) int {
	root, err := filepath.Abs("..")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	repoRoot = root
	dir, err := os.MkdirTemp("", "eddy-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	eddyBin = filepath.Join(dir, "eddy")
	args := []string{"build", "-o", eddyBin}
	if raceEnabled {
		args = append(args, "-race")
	}
	build := exec.Command("go", append(args, ".")...)
	build.Dir = repoRoot
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "e2e: go build:", err)
		return 1
	}
	return m.Run()
}

type result struct {
	code           int
	stdout, stderr string
}

// eddyCommand returns the command that runs the binary with args in dir,
// with the test's environment minus EDDY_* plus env.
func eddyCommand(ctx context.Context, dir string, env map[string]string, args ...string) *exec.Cmd {
	c := exec.CommandContext(ctx, eddyBin, args...)
	c.Dir = dir
	c.WaitDelay = waitDelay
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "EDDY_") {
			c.Env = append(c.Env, kv)
		}
	}
	for k, v := range env {
		c.Env = append(c.Env, k+"="+v)
	}
	return c
}

// eddy runs the binary to the end and returns its exit code and output.
func eddy(t *testing.T, dir string, env map[string]string, args ...string) result {
	t.Helper()
	return eddyWithInput(t, dir, env, "", args...)
}

// eddyWithInput is eddy with stdin as the binary's standard input (none
// when empty).
func eddyWithInput(t *testing.T, dir string, env map[string]string, stdin string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), runTimeout)
	defer cancel()
	c := eddyCommand(ctx, dir, env, args...)
	if stdin != "" {
		c.Stdin = strings.NewReader(stdin)
	}
	var stdout, stderr bytes.Buffer
	c.Stdout, c.Stderr = &stdout, &stderr
	err := c.Run()
	require.NoError(t, ctx.Err(), "eddy %s did not end; stderr:\n%s", strings.Join(args, " "), stderr.String())
	return result{code: exitCode(t, err), stdout: stdout.String(), stderr: stderr.String()}
}

func exitCode(t *testing.T, err error) int {
	t.Helper()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	require.NoError(t, err)
	return 0
}

// golden compares got with the golden file at path, or rewrites it with -update.
func golden(t *testing.T, path, got string) {
	t.Helper()
	if *update {
		require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
		require.NoError(t, os.WriteFile(path, []byte(got), 0o644))
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err, "no golden file: run go test ./e2e -update")
	require.Equal(t, string(want), got, "differs from %s (refresh with -update)", path)
}
