package pipeline

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/eddy-stream/eddy/statestore"
)

// JobOptions configure a run of a plan.
type JobOptions struct {
	Logger  *slog.Logger
	Metrics *Metrics
	// AtLeastOnce disables barrier alignment (checkpoint mode at_least_once).
	AtLeastOnce bool
	// OnAck receives every task's acknowledgement of a checkpoint barrier,
	// for tests; it is called from task goroutines and must not block.
	OnAck func(Ack)
	// Store receives checkpoints; required when the spec has a checkpoint
	// block.
	Store CheckpointStore
	// Restore is the checkpoint or savepoint to start from, or nil.
	Restore RestoredCheckpoint
	// FirstCheckpointID is the id of the first checkpoint this run takes;
	// 0 means one after Restore's. It must exceed every id in the store.
	FirstCheckpointID int64
	// AllowNonRestoredState lets a restore drop the state of steps that are
	// no longer in the pipeline; without it such a restore fails.
	AllowNonRestoredState bool
	// StateDir is the pipeline's state directory (`eddy run`: state.dir or
	// --state-dir, plus the pipeline name); write-ahead sinks keep their
	// commit markers under it, and state.backend bbolt its live files
	// (under live/; empty: a temporary directory). Required for a sink
	// with write_ahead.
	StateDir string
	// Stdin and Stdout are the job's standard input and output: what the
	// stdin source reads and the stdout sink writes (SourceContext.Stdin,
	// SinkContext.Stdout). Nil: the process's. `eddy run` passes its
	// command's.
	Stdin  io.Reader
	Stdout io.Writer
}

// Ack is a task's acknowledgement of checkpoint barrier Checkpoint: the task
// saw the barrier on all inputs (or emitted it, for a source), captured its
// state and forwarded the barrier.
type Ack struct {
	Checkpoint int64
	Chain      int
	Subtask    int
	// Positions holds each source's position at the barrier, by source id.
	Positions map[string][]byte
	// Watermarks holds each event-time source's watermark at the barrier,
	// by source id: a restore starts from it, so that what was late stays
	// late and a window that fired does not fire again.
	Watermarks map[string]int64
	// States holds the keyed-state snapshots of the chain's stateful steps,
	// by step id, captured at the barrier and encoded later.
	States map[string]statestore.Snapshot
	// Committables holds what 2PC sinks pre-committed, by sink id.
	Committables map[string][]byte
	// Alignment is how long the task held inputs that had delivered the
	// barrier, waiting for it on the others.
	Alignment time.Duration
}

// Job is a running plan: one goroutine per task (chain subtask).
type Job struct {
	plan   *Plan
	opts   JobOptions
	tasks  []*task
	stop   chan struct{}
	cancel chan struct{}

	coord *coordinator

	stopOnce, cancelOnce sync.Once
	errOnce              sync.Once
	err                  error
	wg                   sync.WaitGroup
	// tasksEnded is closed when every task ended; done once the
	// coordinator and the savepoint exports (bg) ended too.
	tasksEnded chan struct{}
	bg         sync.WaitGroup
	done       chan struct{}
	// opened is closed once every task opened (taskOpened); unopened
	// counts the tasks that have not.
	opened   chan struct{}
	unopened atomic.Int64

	mu       sync.Mutex
	finalReq *savepointReq // of StopWithSavepoint
}

// Start builds every task of plan and starts them.
func Start(ctx context.Context, plan *Plan, opts JobOptions) (*Job, error) {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Metrics == nil {
		opts.Metrics = NewMetrics()
	}
	j := &Job{plan: plan, opts: opts, stop: make(chan struct{}), cancel: make(chan struct{}),
		tasksEnded: make(chan struct{}), done: make(chan struct{}), opened: make(chan struct{})}
	if cp := plan.Spec.Checkpoint; cp != nil {
		if opts.Store == nil {
			return nil, errors.New("start pipeline: the checkpoint block needs a checkpoint store")
		}
		j.opts.AtLeastOnce = cp.Mode == AtLeastOnceMode
		first := int64(1)
		if opts.Restore != nil {
			first = opts.Restore.ID() + 1
		}
		first = max(first, opts.FirstCheckpointID)
		j.coord = newCoordinator(j, *cp, opts.Store, first)
	}
	if err := checkRestore(plan, opts); err != nil {
		return nil, err
	}
	if err := j.build(); err != nil {
		return nil, err
	}
	restored := int64(0)
	if opts.Restore != nil {
		restored = opts.Restore.ID()
	}
	opts.Metrics.checkpointRestored(restored, time.Now())
	if j.coord != nil {
		go j.coord.run()
	}
	// Tasks run under their own context, cancelled on failure or Cancel;
	// the caller's ctx only asks for a graceful stop.
	runCtx, cancelRun := context.WithCancel(context.WithoutCancel(ctx))
	go func() {
		select {
		case <-j.cancel:
		case <-j.done:
		}
		cancelRun()
	}()
	j.unopened.Store(int64(len(j.tasks)))
	for _, t := range j.tasks {
		j.wg.Add(1)
		go func() {
			defer j.wg.Done()
			if err := t.run(runCtx); err != nil {
				j.fail(fmt.Errorf("task %s: %w", t.name, err))
			}
		}()
	}
	go func() {
		select {
		case <-ctx.Done():
			j.Stop()
		case <-j.done:
		}
	}()
	go func() {
		j.wg.Wait()
		close(j.tasksEnded)
		if j.coord != nil {
			// Every export starts on the coordinator goroutine: once it
			// returned, bg counts them all.
			<-j.coord.exited
		}
		j.bg.Wait()
		close(j.done)
	}()
	return j, nil
}

// Stop asks the job to stop gracefully: sources stop reading, what they
// read drains through the pipeline and sinks flush. Safe to call many times.
func (j *Job) Stop() {
	j.stopOnce.Do(func() { close(j.stop) })
}

// fail records the first error and cancels every task.
func (j *Job) fail(err error) {
	j.errOnce.Do(func() { j.err = err })
	j.cancelOnce.Do(func() { close(j.cancel) })
}

// Cancel stops the job at once, without draining. It does nothing once
// the job ended.
func (j *Job) Cancel() {
	select {
	case <-j.done:
	default:
		j.fail(context.Canceled)
	}
}

// Wait blocks until every task ended (and the savepoint files being
// written, a stop with savepoint's included, are written) and returns the
// first failure.
func (j *Job) Wait() error {
	<-j.done
	return j.err
}

// Done is closed when every task ended.
func (j *Job) Done() <-chan struct{} { return j.done }

// Opened is closed once every task opened its sinks, steps (restoring
// their keyed state) and source, before reading or processing anything:
// the job restored and runs. It stays open when a task fails to open.
func (j *Job) Opened() <-chan struct{} { return j.opened }

// taskOpened records that t opened every stage; the last one closes
// opened.
func (j *Job) taskOpened(t *task) {
	t.opened.Store(true)
	if j.unopened.Add(-1) == 0 {
		close(j.opened)
	}
}

// TriggerCheckpoint makes every source emit barrier id (the coordinator's
// trigger). Acks arrive at JobOptions.OnAck.
func (j *Job) TriggerCheckpoint(ctx context.Context, b Barrier) error {
	for _, t := range j.tasks {
		if t.head.src == nil {
			continue
		}
		select {
		case t.mailbox <- mail{barrier: &b}:
		case <-j.done:
			return errors.New("trigger checkpoint: the job has ended")
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// TriggerSavepoint takes a savepoint of the running job: an aligned
// checkpoint (also in at_least_once mode) that goes through the
// coordinator like a periodic one (it waits for max_concurrent and
// min_pause, and goes before the next periodic checkpoint), marked as a
// savepoint, then written as a self-contained savepoint file into dir
// (created if needed) named SavepointFileName. Its checkpoint stays in the
// store as a regular one; the file is never removed by retention. A failed
// savepoint does not count against checkpoint.tolerable_failures.
//
// Called from any goroutine (the admin endpoint's handlers); it blocks
// until the file is written, the savepoint failed, or the job ends
// (ErrJobEnding), or ctx ends (the savepoint then goes on without a
// caller). ErrNoCheckpoints without a checkpoint block.
func (j *Job) TriggerSavepoint(ctx context.Context, dir string) (Savepoint, error) {
	req, err := j.savepointReq(dir)
	if err != nil {
		return Savepoint{}, err
	}
	select {
	case j.coord.requests <- req:
	case <-j.coord.exited:
		return Savepoint{}, fmt.Errorf("trigger savepoint: %w: it ended", ErrJobEnding)
	case <-ctx.Done():
		return Savepoint{}, fmt.Errorf("trigger savepoint: %w", ctx.Err())
	}
	select {
	case <-req.done:
		if req.err != nil {
			return Savepoint{}, fmt.Errorf("trigger savepoint: %w", req.err)
		}
		return req.sp, nil
	case <-ctx.Done():
		return Savepoint{}, fmt.Errorf("trigger savepoint: %w (the savepoint goes on)", ctx.Err())
	}
}

// StopWithSavepoint stops the job gracefully, as Stop does, with its final
// checkpoint taken as a savepoint and written into dir (Flink's
// stop-with-savepoint). It returns once the coordinator accepted, without
// waiting for the stop; FinalSavepoint tells the outcome after Wait. It
// fails with ErrJobEnding when the final checkpoint was triggered already
// (the input ended, or a stop with savepoint is under way) and with
// ErrNoCheckpoints without a checkpoint block; the job is not stopped then.
// Called from any goroutine (the run's signal handling, the admin
// endpoint).
func (j *Job) StopWithSavepoint(ctx context.Context, dir string) error {
	req, err := j.savepointReq(dir)
	if err != nil {
		return err
	}
	select {
	case j.coord.stops <- req:
	case <-j.coord.exited:
		return fmt.Errorf("stop with savepoint: %w: it ended", ErrJobEnding)
	case <-ctx.Done():
		return fmt.Errorf("stop with savepoint: %w", ctx.Err())
	}
	if err := <-req.accept; err != nil {
		return fmt.Errorf("stop with savepoint: %w", err)
	}
	j.mu.Lock()
	j.finalReq = req
	j.mu.Unlock()
	j.Stop()
	return nil
}

// FinalSavepoint returns the savepoint that StopWithSavepoint asked for,
// or why there is none (the final checkpoint or its export failed, the job
// was cancelled). Call it after Wait; before, it blocks until the job ends.
// Safe from any goroutine.
func (j *Job) FinalSavepoint() (Savepoint, error) {
	j.mu.Lock()
	req := j.finalReq
	j.mu.Unlock()
	if req == nil {
		return Savepoint{}, errors.New("final savepoint: no stop with savepoint was requested")
	}
	<-req.done
	if req.err != nil {
		return Savepoint{}, fmt.Errorf("final savepoint: %w", req.err)
	}
	return req.sp, nil
}

// savepointReq checks that the job can take savepoints into dir.
func (j *Job) savepointReq(dir string) (*savepointReq, error) {
	if j.coord == nil {
		return nil, ErrNoCheckpoints
	}
	if dir == "" {
		return nil, errors.New("savepoint: no directory to write it to")
	}
	if _, ok := j.coord.store.(SavepointExporter); !ok {
		return nil, errors.New("savepoint: the checkpoint store cannot write savepoint files")
	}
	return newSavepointReq(dir), nil
}

// checkRestore rejects a restore that would drop state: keyed state of a
// step that is gone (unless allowed), or sink transactions of a sink that
// is gone (never allowed: they hold committed output).
func checkRestore(plan *Plan, opts JobOptions) error {
	if opts.Restore == nil {
		return nil
	}
	for _, part := range opts.Restore.Parts() {
		kind, id, _, ok := parsePart(part.Name)
		if !ok || plan.Node(id) != nil {
			continue
		}
		switch {
		case kind == "op" && !opts.AllowNonRestoredState:
			return fmt.Errorf("%w: checkpoint %d holds state of step %q, which the pipeline no longer has; run with --allow-non-restored-state to drop it",
				ErrRestore, opts.Restore.ID(), id)
		case kind == "sink":
			return fmt.Errorf("%w: checkpoint %d holds pending output of sink %q, which the pipeline no longer has",
				ErrRestore, opts.Restore.ID(), id)
		}
	}
	return nil
}

// sourceTasks counts the tasks whose head is a source.
func (j *Job) sourceTasks() int {
	n := 0
	for _, t := range j.tasks {
		if t.head.src != nil {
			n++
		}
	}
	return n
}

// build creates the channels, stages and writers of every task.
func (j *Job) build() error {
	rt := j.plan.Spec.Runtime
	// chans[edge][sender][receiver]
	chans := map[*Edge][][]chan Batch{}
	connect := func(e *Edge) {
		m := make([][]chan Batch, e.From.Parallelism)
		for s := range m {
			m[s] = make([]chan Batch, e.To.Parallelism)
			for r := range m[s] {
				if e.connects(s, r) {
					m[s][r] = make(chan Batch, rt.ChannelCapacity)
				}
			}
		}
		chans[e] = m
	}
	for _, n := range j.plan.Nodes {
		for _, e := range n.Inputs {
			if e.Chained {
				continue
			}
			connect(e)
			if e.DeadLetters != nil {
				connect(e.DeadLetters)
			}
		}
	}
	for _, c := range j.plan.Chains {
		for sub := range c.Parallelism {
			t, err := j.newTask(c, sub, chans)
			if err != nil {
				j.closeBuilt()
				return err
			}
			j.tasks = append(j.tasks, t)
		}
	}
	return nil
}

func (j *Job) closeBuilt() {
	for _, t := range j.tasks {
		for _, s := range t.stages {
			_ = s.close(context.Background())
		}
	}
}

func (j *Job) newTask(c *Chain, sub int, chans map[*Edge][][]chan Batch) (*task, error) {
	spec := j.plan.Spec
	t := &task{
		job: j, chain: c, subtask: sub, mailbox: make(chan mail, 64),
		name: fmt.Sprintf("%s[%d/%d]", c.Name(), sub, c.Parallelism),
	}
	t.logger = j.opts.Logger.With("task", t.name)
	t.stats = j.opts.Metrics.taskStats(SubtaskInfo{ID: c.Head().ID, Subtask: sub})
	// Inputs of the head, in edge order then sender order, then those of
	// the edges' dead letters.
	addInputs := func(e *Edge, deadLetters bool) {
		for _, row := range chans[e] {
			if ch := row[sub]; ch != nil {
				t.inputs = append(t.inputs, &input{ch: ch, edge: e, index: len(t.inputs), wm: MinWatermark, deadLetters: deadLetters})
			}
		}
	}
	for _, e := range c.Head().Inputs {
		addInputs(e, false)
	}
	for _, e := range c.Head().Inputs {
		if e.DeadLetters != nil {
			addInputs(e.DeadLetters, true)
		}
	}
	t.align = newBarrierAligner(len(t.inputs), j.opts.AtLeastOnce)
	byNode := map[*Node]*stage{}
	for _, n := range c.Nodes {
		info := SubtaskInfo{
			ID: n.ID, Subtask: sub, Parallelism: c.Parallelism, MaxParallelism: spec.MaxParallelism,
			PipelineName: spec.Name, Logger: j.opts.Logger.With(n.Kind.String(), n.ID, "subtask", sub),
			Metrics: j.opts.Metrics,
		}
		s, err := newStage(n, info, j.opts.StateDir)
		if err != nil {
			return nil, err
		}
		s.restore, s.checkpointing, s.spec = j.opts.Restore, j.coord != nil, spec
		s.stdin, s.stdout = j.opts.Stdin, j.opts.Stdout
		byNode[n] = s
		t.stages = append(t.stages, s)
	}
	t.head = t.stages[0]
	if h, ok := t.head.op.(WatermarkHolder); ok {
		t.hold = h.WatermarkHold()
	}
	// Wire outputs: chained children first, then writers, per stream.
	for _, s := range t.stages {
		streams := map[string][]Emitter{}
		for _, e := range s.node.Outputs {
			if e.Chained {
				streams[e.Side] = append(streams[e.Side], byNode[e.To])
				continue
			}
			var deadLetters Emitter
			if d := e.DeadLetters; d != nil {
				dw := newWriter(d, d.receivers(sub, chans[d][sub]), spec.Runtime.BatchSize, s.info, j.cancel, t.stats, nil)
				t.writers = append(t.writers, dw)
				deadLetters = dw
			}
			w := newWriter(e, e.receivers(sub, chans[e][sub]), spec.Runtime.BatchSize, s.info, j.cancel, t.stats, deadLetters)
			t.writers = append(t.writers, w)
			streams[e.Side] = append(streams[e.Side], w)
		}
		s.sides = map[string]Emitter{}
		for side, targets := range streams {
			if side != "" {
				s.sides[side] = newFanout(targets)
			}
		}
		if s.node.Kind != SinkNode {
			s.out = counting{c: j.opts.Metrics.RecordsOut(s.info), next: newFanout(streams[""])}
		}
	}
	return t, nil
}
