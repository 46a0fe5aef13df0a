package nexmark

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os/exec"
	"strings"
)

// Spawn returns the command of a child process that runs one query with
// setup s in-process (RunQuery) and writes its Result line on stdout, last.
// `eddy bench nexmark` spawns itself with a hidden flag.
type Spawn func(ctx context.Context, query string, s Setup) *exec.Cmd

// Bench measures each query in a child process of its own, so that the
// peak RSS is the query's: without checkpoints, then, if s.Checkpoint is
// set, with them. It returns the results in that order (per query: without,
// with) and writes each run's line to progress as it ends.
func Bench(ctx context.Context, queries []string, s Setup, spawn Spawn, progress io.Writer) ([]Result, error) {
	modes := []Setup{s}
	modes[0].Checkpoint = 0
	if s.Checkpoint > 0 {
		modes = append(modes, s)
	}
	var results []Result
	for _, q := range queries {
		for _, m := range modes {
			r, err := Measure(spawn(ctx, q, m))
			if err != nil {
				return results, fmt.Errorf("query %s: %w", q, err)
			}
			if r.Query != q || r.Events != m.Events || r.Checkpoint != m.Checkpoint {
				return results, fmt.Errorf("query %s: the child measured something else: %s", q, r)
			}
			fmt.Fprintln(progress, r)
			results = append(results, r)
		}
	}
	return results, nil
}

// Measure runs cmd, a child process of Spawn, and returns the Result of the
// line it wrote last on stdout. Its stderr is left as cmd has it.
func Measure(cmd *exec.Cmd) (Result, error) {
	var out bytes.Buffer
	cmd.Stdout = &out
	if err := cmd.Run(); err != nil {
		return Result{}, fmt.Errorf("child %s: %w", strings.Join(cmd.Args, " "), err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	return ParseResult(lines[len(lines)-1])
}

// Overhead returns what checkpoints cost a query: the loss of events per
// second and of events per CPU-second of the run with checkpoints against
// the run without (0.05 is 5% fewer; negative when the run with
// checkpoints was faster, which is noise).
func Overhead(without, with Result) (wall, cpu float64) {
	return loss(without.EventsPerSecond(), with.EventsPerSecond()),
		loss(without.EventsPerCPUSecond(), with.EventsPerCPUSecond())
}

// loss is how much less x is than base, as a fraction of base (0 when
// base is 0: nothing to compare with).
func loss(base, x float64) float64 {
	if base == 0 {
		return 0
	}
	return 1 - x/base
}
