package pipeline

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
)

// The runtime of group mode (docs/group.md, "How it runs"). A process joins
// the group's consumer group; each generation of the group (an assignment
// of partitions to the members) is one run of the single-process engine:
// a Job whose plan is the group plan's stages that have partitions here,
// each at parallelism 1 over its assigned partitions. The connector (the
// GroupRunner of the group block's client) owns the membership, the
// transactional producer and the components that read and write Kafka;
// this file builds the plan of a generation from them.
//
// A hash edge of the plan becomes an exchange: in the sending stage a
// sink (ExchangeWriter) that writes each record to the partition of its
// key group, in the receiving stage a source (ExchangeReader) that reads
// the assigned partitions of that topic. A checkpoint of the generation's
// job is one Kafka transaction (the connector's CheckpointStore).

// GroupRunner is implemented by a group block's client config (the Kafka
// connector's) that can run group mode: RunGroup joins the group and runs
// a job per generation (GroupRun.StartGeneration) until ctx ends, which
// leaves the group, or a job fails.
type GroupRunner interface {
	RunGroup(ctx context.Context, run *GroupRun) error
}

// GroupGeneration is one generation of the group as the connector sees
// it: what this process was assigned and the components that read and
// write its partitions.
type GroupGeneration interface {
	// Assigned returns the partitions of the stage's input topics this
	// process owns in the generation, sorted; none: the stage does not run
	// here.
	Assigned(s *GroupStage) []int32
	// Source returns the config of src, a source of a stage that runs
	// here, reading its assigned partitions.
	Source(src GroupSourceInput) (SourceConfig, error)
	// ExchangeWriter returns the sink that sends x's records, from its
	// sending stage, to the partitions of their key groups.
	ExchangeWriter(x *GroupExchange) (SinkConfig, error)
	// ExchangeReader returns the source that reads the assigned
	// partitions of x's topic in its receiving stage.
	ExchangeReader(x *GroupExchange) (SourceConfig, error)
	// Sink returns the config of sink s in group mode (its output goes
	// into the process's transactions).
	Sink(s *SinkSpec) (SinkConfig, error)
	// Store is where the job's checkpoints go: each one is a transaction.
	Store() CheckpointStore
	// Restore is the keyed state of the assigned partitions, or nil.
	Restore() RestoredCheckpoint
}

// GroupRun is one process's run of a pipeline in group mode.
type GroupRun struct {
	Plan    *GroupPlan
	Logger  *slog.Logger
	Metrics *Metrics
	// StateDir is the pipeline's state directory: the process id is kept
	// there, and bbolt state's live files.
	StateDir string
	// ProcessID names the process for as long as its state directory
	// lives: a restarted process takes over what it left (its transactions
	// are fenced at once).
	ProcessID string
	// started and ended, if set, are told of each generation's job.
	started func(*Job)
	ended   func(*Job, error)
	// failed, if set, records a generation's failure that a restart
	// follows.
	failed func(error)
	// report, if set, keeps what the run reports (group_run_status.go).
	report *groupReport
}

// Exchange node ids: the reader source and the writer sink of an exchange
// in a generation's plan. They cannot clash with ids of the file, which
// take no ':'.
func exchangeReaderID(x *GroupExchange) string { return "from:" + x.Topic.Name }
func exchangeWriterID(x *GroupExchange) string { return "to:" + x.Topic.Name }

// IsExchangeNode reports whether id names a generation's exchange reader
// or writer (group mode's own nodes, not the file's).
func IsExchangeNode(id string) bool {
	return strings.HasPrefix(id, "from:") || strings.HasPrefix(id, "to:")
}

// StartGeneration starts the job of one generation: the stages with
// partitions here, at parallelism 1. It returns nil, nil when no stage
// has partitions here.
func (r *GroupRun) StartGeneration(ctx context.Context, gen GroupGeneration) (*Job, error) {
	spec, err := r.generationSpec(gen)
	if err != nil || spec == nil {
		return nil, err
	}
	plan, err := Compile(spec)
	if err != nil {
		return nil, fmt.Errorf("group generation plan: %w", err)
	}
	opts := JobOptions{Logger: r.Logger, Metrics: r.Metrics, StateDir: r.StateDir, Store: gen.Store(), Restore: gen.Restore(),
		AllowNonRestoredState: true}
	job, err := Start(ctx, plan, opts)
	if err != nil {
		return nil, err
	}
	if r.started != nil {
		r.started(job)
	}
	return job, nil
}

// Restarting tells the run that a generation failed with err and the
// process joins the group again (the restart strategy allowed it).
func (r *GroupRun) Restarting(err error) {
	r.Metrics.Restarted()
	if r.failed != nil {
		r.failed(err)
	}
}

// EndGeneration tells the run that the generation's job ended with err
// (nil, or why it failed).
func (r *GroupRun) EndGeneration(job *Job, err error) {
	if r.ended != nil && job != nil {
		r.ended(job, err)
	}
}

// generationSpec builds the spec of a generation: the file's spec cut to
// the stages that run here, every node at parallelism 1, the sources and
// sinks the connector's, each hash edge an exchange writer and reader, and
// checkpoints every commit interval, one transaction each.
func (r *GroupRun) generationSpec(gen GroupGeneration) (*Spec, error) {
	gp := r.Plan
	file := gp.Plan.Spec
	runs := map[*GroupStage]bool{}
	any := false
	for _, s := range gp.Stages {
		if len(gen.Assigned(s)) > 0 {
			runs[s], any = true, true
		}
	}
	if !any {
		return nil, nil
	}
	spec := *file
	spec.Group = nil
	spec.Parallelism = 1
	cp := DefaultCheckpoint()
	cp.Interval = gp.Group.CommitInterval
	// A checkpoint is a transaction, which the brokers abort once it is
	// open longer than the transaction timeout: a slower checkpoint fails.
	cp.Timeout = gp.Group.TransactionTimeout
	cp.OnSigterm = SigtermNone
	// The keyed state's snapshots are deltas on the last commit's: the
	// changelogs get the entries that changed (docs/group.md, "State").
	cp.Incremental, cp.changelog = true, true
	spec.Checkpoint = &cp
	spec.Restart = RestartSpec{Strategy: "none"}
	spec.Sources, spec.Steps, spec.Sinks = nil, nil, nil
	exchangeOf := map[*Edge]*GroupExchange{}
	for _, x := range gp.Exchanges {
		exchangeOf[x.Edge] = x
	}
	for _, n := range gp.Plan.Nodes {
		if !runs[gp.StageOf(n)] {
			continue
		}
		switch n.Kind {
		case SourceNode:
			s := *n.Source
			s.Parallelism = 1
			i := -1
			for j, in := range gp.StageOf(n).Sources {
				if in.Node == n {
					i = j
				}
			}
			cfg, err := gen.Source(gp.StageOf(n).Sources[i])
			if err != nil {
				return nil, err
			}
			s.Config = cfg
			spec.Sources = append(spec.Sources, &s)
		case StepNode:
			s := *n.Step
			s.Parallelism = 1
			s.Inputs = append([]StreamRef(nil), s.Inputs...)
			for _, e := range n.Inputs {
				x := exchangeOf[e]
				if x == nil {
					continue
				}
				cfg, err := gen.ExchangeReader(x)
				if err != nil {
					return nil, err
				}
				id := exchangeReaderID(x)
				spec.Sources = append(spec.Sources, &SourceSpec{ID: id, Type: "exchange", Parallelism: 1, Config: cfg, Pos: s.Pos})
				s.Inputs[e.Input] = StreamRef{Node: id}
			}
			spec.Steps = append(spec.Steps, &s)
		case SinkNode:
			s := *n.Sink
			s.Parallelism = 1
			s.WriteAhead, s.wrap = false, nil
			cfg, err := gen.Sink(n.Sink)
			if err != nil {
				return nil, err
			}
			s.Config = cfg
			spec.Sinks = append(spec.Sinks, &s)
		}
		for _, e := range n.Outputs {
			x := exchangeOf[e]
			if x == nil {
				continue
			}
			cfg, err := gen.ExchangeWriter(x)
			if err != nil {
				return nil, err
			}
			spec.Sinks = append(spec.Sinks, &SinkSpec{ID: exchangeWriterID(x), Type: "exchange", Parallelism: 1, Config: cfg,
				Inputs: []StreamRef{{Node: n.ID, Side: e.Side}}, Pos: Pos{File: file.File}})
		}
	}
	return &spec, nil
}

// runGroup runs the pipeline in group mode (the Runner's Run with a group
// block): the group client's GroupRunner drives the generations, each one
// job; a stop leaves the group.
func (r *Runner) runGroup(ctx context.Context) error {
	gp, err := NewGroupPlan(r.plan)
	if err != nil {
		return r.end(RunAborted, err)
	}
	runner, ok := r.spec.Group.Client.(GroupRunner)
	if !ok {
		err := fmt.Errorf("pipeline %q: the group client cannot run group mode", r.spec.Name)
		return r.end(RunAborted, err)
	}
	pid, err := groupProcessID(r.opts.StateDir)
	if err != nil {
		r.logger.Error("cannot start", "err", err)
		return r.end(RunAborted, err)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	r.mu.Lock()
	r.groupStop = cancel
	stopped := r.stop != notStopped
	r.mu.Unlock()
	if stopped {
		cancel()
	}
	report := newGroupReport(r.metrics, gp.Group.ID, pid)
	r.mu.Lock()
	r.group = report
	r.mu.Unlock()
	run := &GroupRun{Plan: gp, Logger: r.logger, Metrics: r.metrics, StateDir: r.opts.StateDir, ProcessID: pid, report: report,
		started: func(j *Job) {
			r.started(ctx, j)
			if r.opts.OnStart != nil {
				r.opts.OnStart(r.attemptCount())
			}
		},
		ended:  func(*Job, error) { r.jobEnded() },
		failed: r.failed,
	}
	r.logger.Info("joining the group", "group", gp.Group.ID, "process", pid)
	err = runner.RunGroup(ctx, run)
	r.mu.Lock()
	stop := r.stop
	r.mu.Unlock()
	switch {
	case stop == stopCancel:
		return r.end(RunCancelled, context.Canceled)
	case err == nil || (stop != notStopped && errors.Is(err, context.Canceled)):
		return r.end(RunStopped, nil)
	}
	r.logger.Error("group run failed", "err", err)
	return r.end(RunFailed, err)
}

// attemptCount returns how many jobs the run started.
func (r *Runner) attemptCount() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.attempts
}

// groupProcessFile is the file in the state directory that holds the
// process id of group mode.
const groupProcessFile = "group-process-id"

// groupProcessID returns the process id kept in dir, creating it on the
// first run.
func groupProcessID(dir string) (string, error) {
	if dir == "" {
		return "", errors.New("group mode needs a state directory (state.dir or --state-dir): it keeps the process's id there")
	}
	path := filepath.Join(dir, groupProcessFile)
	if b, err := os.ReadFile(path); err == nil {
		if id := strings.TrimSpace(string(b)); id != "" {
			return id, nil
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("read the group process id: %w", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("create state dir: %w", err)
	}
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	id := hex.EncodeToString(b[:])
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(id+"\n"), 0o644); err != nil {
		return "", fmt.Errorf("write the group process id: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return "", fmt.Errorf("write the group process id: %w", err)
	}
	return id, nil
}
