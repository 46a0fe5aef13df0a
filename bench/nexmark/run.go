package nexmark

import (
	"context"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"runtime/pprof"
	"time"

	"github.com/eddy-stream/eddy/internal/cputime"
	"github.com/eddy-stream/eddy/internal/memlimit"
	"github.com/eddy-stream/eddy/pipeline"

	// The sources, sinks and steps the query files use register themselves
	// in pipeline.Default.
	_ "github.com/eddy-stream/eddy/connectors/all"
	_ "github.com/eddy-stream/eddy/operators"
)

// RunQuery runs query (configs' file query.yaml, prepared by Prepare for s)
// in this process with pipeline.Runner, with a checkpoint store in a
// temporary directory when s.Checkpoint is set, and returns what it
// measured. It applies the GC settings of `eddy run` (memlimit) first.
// The CPU time and wall time are those of the run, from the runner's start
// to its end (loading the file is left out); the peak RSS is the process's
// (it never goes down: run one query per process for a per-query figure,
// as Bench does). The run fails unless the source read s.Events events.
// With s.ProfileDir set, the CPU profile of the same span goes into the
// file ProfileFile names there.
func RunQuery(ctx context.Context, logger *slog.Logger, configs fs.FS, query string, s Setup) (Result, error) {
	file := query + ".yaml"
	text, err := fs.ReadFile(configs, file)
	if err != nil {
		return Result{}, fmt.Errorf("query %s: %w", query, err)
	}
	text, err = Prepare(text, s)
	if err != nil {
		return Result{}, fmt.Errorf("query %s: %w", query, err)
	}
	spec, err := pipeline.Load(pipeline.Default, file, text)
	if err != nil {
		return Result{}, fmt.Errorf("query %s: %w", query, err)
	}
	opts := pipeline.RunnerOptions{Logger: logger, Metrics: pipeline.NewMetrics()}
	if s.Checkpoint > 0 {
		dir, err := os.MkdirTemp("", "eddy-bench-nexmark-")
		if err != nil {
			return Result{}, err
		}
		defer func() { _ = os.RemoveAll(dir) }()
		opts.StateDir = dir
	}
	r, err := pipeline.NewRunner(spec, opts)
	if err != nil {
		return Result{}, fmt.Errorf("query %s: %w", query, err)
	}
	memlimit.Apply(logger, memlimit.DefaultGCPercent)
	stopProfile, err := startProfile(query, s)
	if err != nil {
		return Result{}, fmt.Errorf("query %s: %w", query, err)
	}

	cpu0, t0 := cputime.Process(), time.Now()
	err = r.Run(ctx)
	wall, cpu := time.Since(t0), cputime.Process()-cpu0
	if perr := stopProfile(); perr != nil && err == nil {
		err = perr
	}
	if err != nil {
		return Result{}, fmt.Errorf("query %s: %w", query, err)
	}
	if st := r.State(); st != pipeline.RunFinished {
		return Result{}, fmt.Errorf("query %s: the run ended %s, not finished", query, st)
	}
	if read := sourceRecords(r.Plan(), opts.Metrics); read != s.Events {
		return Result{}, fmt.Errorf("query %s: the source read %d events, not %d", query, read, s.Events)
	}
	return Result{
		Query: query, Events: s.Events,
		Seconds: wall.Seconds(), CPUSeconds: cpu.Seconds(), RSSMB: peakRSS() >> 20,
		Checkpoint: s.Checkpoint, Checkpoints: completedCheckpoints(opts.Metrics),
	}, nil
}

// startProfile starts the CPU profile of query's run with s, if
// s.ProfileDir is set, and returns what stops it and closes its file.
func startProfile(query string, s Setup) (stop func() error, err error) {
	if s.ProfileDir == "" {
		return func() error { return nil }, nil
	}
	f, err := os.Create(filepath.Join(s.ProfileDir, ProfileFile(query, s)))
	if err != nil {
		return nil, fmt.Errorf("CPU profile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("CPU profile: %w", err)
	}
	return func() error {
		pprof.StopCPUProfile()
		if err := f.Close(); err != nil {
			return fmt.Errorf("CPU profile: %w", err)
		}
		return nil
	}, nil
}

// sourceRecords returns the records the source with id nexmark read, over
// its subtasks.
func sourceRecords(plan *pipeline.Plan, m *pipeline.Metrics) int64 {
	var sum float64
	for _, n := range plan.Nodes {
		if n.Kind != pipeline.SourceNode || n.ID != SourceID {
			continue
		}
		for sub := range n.Parallelism {
			sum += pipeline.CounterValue(m.RecordsOut(pipeline.SubtaskInfo{ID: n.ID, Subtask: sub, Parallelism: n.Parallelism}))
		}
	}
	return int64(sum)
}

// completedCheckpoints reads eddy_checkpoints_total{kind="checkpoint",
// result="completed"}.
func completedCheckpoints(m *pipeline.Metrics) int64 {
	families, err := m.Registry.Gather()
	if err != nil {
		return 0
	}
	for _, f := range families {
		if f.GetName() != "eddy_checkpoints_total" {
			continue
		}
		for _, s := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range s.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["kind"] == "checkpoint" && labels["result"] == "completed" {
				return int64(s.GetCounter().GetValue())
			}
		}
	}
	return 0
}
