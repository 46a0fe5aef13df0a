package cmd

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strconv"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/eddy-stream/eddy/bench/nexmark"
	"github.com/eddy-stream/eddy/configs"
)

// benchNexmarkOptions are the flags of `eddy bench nexmark`.
type benchNexmarkOptions struct {
	global      *globalOptions
	events      int64
	queries     []string
	checkpoint  time.Duration
	parallelism int
	rate        int64
	dir         string
	profileDir  string
	// child: run the one query of --queries in this process and print its
	// line (the parent spawns itself so).
	child bool
}

// AddFlags adds the flags of `eddy bench nexmark`.
func (o *benchNexmarkOptions) AddFlags(fs *pflag.FlagSet) {
	fs.Int64Var(&o.events, "events", 10_000_000, "events the source generates per query (its count)")
	fs.StringSliceVar(&o.queries, "queries", nil, "queries to run, as q0,q5 (default: every query file)")
	fs.DurationVar(&o.checkpoint, "checkpoint", 10*time.Second, "checkpoint interval of the second run of each query; 0: no run with checkpoints")
	fs.IntVar(&o.parallelism, "parallelism", 0, "default parallelism of the pipelines (0: the files')")
	fs.Int64Var(&o.rate, "rate", 10_000_000, "the source's rate, events per second of event time, as in Flink's Nexmark suite (0: the files')")
	fs.StringVar(&o.dir, "dir", "", "folder of the query files qN.yaml (default: configs/nexmark as built into eddy)")
	fs.StringVar(&o.profileDir, "cpuprofile", "", "folder to write each run's CPU profile into (qN.pprof, qN-checkpoint.pprof), for go tool pprof")
	fs.BoolVar(&o.child, "child", false, "run one query in this process and print its line (the parent runs each query so)")
	_ = fs.MarkHidden("child")
}

// newBenchCommand returns `eddy bench`, the parent of the benchmarks.
func newBenchCommand(g *globalOptions) *cobra.Command {
	c := &cobra.Command{
		Use:   "bench",
		Short: "Benchmarks (Nexmark)",
	}
	c.AddCommand(newBenchNexmarkCommand(g))
	return c
}

// newBenchNexmarkCommand returns `eddy bench nexmark`.
func newBenchNexmarkCommand(g *globalOptions) *cobra.Command {
	o := &benchNexmarkOptions{global: g}
	c := &cobra.Command{
		Use:   "nexmark",
		Short: "Run the Nexmark queries into a blackhole and print events per CPU-second",
		Long: `Runs the Nexmark queries of configs/nexmark (built into eddy; --dir reads
another folder) over --events events each: the source's count is set, every
sink is replaced by a blackhole, and each query runs twice, without a
checkpoint block and with one every --checkpoint (into a temporary state
directory), each run in a child process of its own so that its peak RSS is
its own. The CPU time is the process's (user and system, garbage collector
included) from the start of the run to its end, the event generator
included, as in Flink's published Nexmark figures.

The output is a table, then one line per run, last, in a form for tools:

  nexmark q5 events=10000000 seconds=12.300 cpu_seconds=23.900 events_per_cpu_second=418410 rss_mb=210
  nexmark q5 events=10000000 seconds=12.800 cpu_seconds=24.500 events_per_cpu_second=408163 rss_mb=215 checkpoint=10s checkpoints=2

The second line of a query is its run with checkpoints: checkpoint= is the
interval, checkpoints= the checkpoints it completed (the final one, at the
end of the input, included). scripts/bench-nexmark-flink.sh runs the same
queries on Apache Flink beside it (docs/benchmarks.md).`,
		Args: exactArgs(0, "no arguments"),
		RunE: func(c *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(c.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			if o.child {
				return o.runChild(ctx, c)
			}
			return o.run(ctx, c)
		},
	}
	o.AddFlags(c.Flags())
	return c
}

// setup checks the flags and returns the query files, the queries and the
// setup of the runs.
func (o *benchNexmarkOptions) setup() (fs.FS, []string, nexmark.Setup, error) {
	s := nexmark.Setup{Events: o.events, Rate: o.rate, Parallelism: o.parallelism, Checkpoint: o.checkpoint, ProfileDir: o.profileDir}
	switch {
	case o.events <= 0:
		return nil, nil, s, usageError("--events must be positive")
	case o.rate < 0 || o.parallelism < 0 || o.checkpoint < 0:
		return nil, nil, s, usageError("--rate, --parallelism and --checkpoint must not be negative")
	}
	files := configs.Nexmark()
	if o.dir != "" {
		files = os.DirFS(o.dir)
	}
	all, err := nexmark.Queries(files)
	if err != nil {
		return nil, nil, s, invalidInput("query files: %w", err)
	}
	queries := o.queries
	if len(queries) == 0 {
		queries = all
	}
	for _, q := range queries {
		if !slices.Contains(all, q) {
			return nil, nil, s, usageError("no query %q: the query files are %v", q, all)
		}
	}
	if len(queries) == 0 {
		return nil, nil, s, invalidInput("no query files (qN.yaml) in %s", o.dir)
	}
	return files, queries, s, nil
}

// run measures each query in child processes and prints the table and the
// result lines.
func (o *benchNexmarkOptions) run(ctx context.Context, c *cobra.Command) error {
	_, queries, s, err := o.setup()
	if err != nil {
		return err
	}
	exe, err := os.Executable()
	if err != nil {
		return runtimeFailure(fmt.Errorf("find this binary to run the queries: %w", err))
	}
	spawn := func(ctx context.Context, query string, s nexmark.Setup) *exec.Cmd {
		cmd := exec.CommandContext(ctx, exe, o.childArgs(c, query, s)...)
		cmd.Stderr = c.ErrOrStderr()
		return cmd
	}
	fmt.Fprintf(c.ErrOrStderr(), "nexmark: %d events per query, queries %v, a child process per run\n", s.Events, queries)
	results, err := nexmark.Bench(ctx, queries, s, spawn, c.ErrOrStderr())
	if err != nil {
		return runtimeFailure(err)
	}
	return writeBenchReport(c.OutOrStdout(), results)
}

// childArgs are the arguments of the child process that runs query with s.
// Its log level is the one given to this process, else warn (EDDY_LOG_LEVEL
// reaches it through the environment).
func (o *benchNexmarkOptions) childArgs(c *cobra.Command, query string, s nexmark.Setup) []string {
	args := []string{"bench", "nexmark", "--child", "--queries", query,
		"--events", strconv.FormatInt(s.Events, 10), "--checkpoint", s.Checkpoint.String(),
		"--parallelism", strconv.Itoa(s.Parallelism), "--rate", strconv.FormatInt(s.Rate, 10)}
	if o.dir != "" {
		args = append(args, "--dir", o.dir)
	}
	if s.ProfileDir != "" {
		args = append(args, "--cpuprofile", s.ProfileDir)
	}
	if f := c.Flag(keyLogLevel); f != nil && f.Changed {
		args = append(args, "--"+keyLogLevel, f.Value.String())
	} else if os.Getenv(envName(keyLogLevel)) == "" {
		args = append(args, "--"+keyLogLevel, "warn")
	}
	return args
}

// runChild runs the one query of --queries in this process and prints its
// result line.
func (o *benchNexmarkOptions) runChild(ctx context.Context, c *cobra.Command) error {
	files, queries, s, err := o.setup()
	if err != nil {
		return err
	}
	if len(queries) != 1 {
		return usageError("--child runs one query, not %v", queries)
	}
	logger, err := o.global.newLogger(c.ErrOrStderr())
	if err != nil {
		return err
	}
	r, err := nexmark.RunQuery(ctx, logger, files, queries[0], s)
	if err != nil {
		return runtimeFailure(err)
	}
	if _, err := fmt.Fprintln(c.OutOrStdout(), r); err != nil {
		return runtimeFailure(err)
	}
	return nil
}

// writeBenchReport writes the table of the results, then their lines, one
// per run, last.
func writeBenchReport(w io.Writer, results []nexmark.Result) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "query\tcheckpoints\tevents\tseconds\tevents/s\tCPU s\tevents/CPU-s\tpeak RSS MB\tloss events/s\tloss events/CPU-s\t")
	without := map[string]nexmark.Result{}
	for _, r := range results {
		cp, loss := "none", "\t"
		if r.Checkpoint == 0 {
			without[r.Query] = r
		} else {
			cp = fmt.Sprintf("every %s: %d", nexmark.FormatInterval(r.Checkpoint), r.Checkpoints)
			if base, ok := without[r.Query]; ok {
				wall, cpu := nexmark.Overhead(base, r)
				loss = fmt.Sprintf("%.1f%%\t%.1f%%", 100*wall, 100*cpu)
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%.2f\t%.0f\t%.2f\t%.0f\t%d\t%s\t\n",
			r.Query, cp, r.Events, r.Seconds, r.EventsPerSecond(), r.CPUSeconds, r.EventsPerCPUSecond(), r.RSSMB, loss)
	}
	if err := tw.Flush(); err != nil {
		return runtimeFailure(err)
	}
	fmt.Fprintln(w)
	for _, r := range results {
		if _, err := fmt.Fprintln(w, r); err != nil {
			return runtimeFailure(err)
		}
	}
	return nil
}
