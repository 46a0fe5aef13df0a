package pipeline

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"reflect"
	"slices"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/eddy-stream/eddy/expr"
	"github.com/eddy-stream/eddy/statestore"
)

// mail is a message to a task's control mailbox, handled between batches on
// the task goroutine.
type mail struct {
	// barrier asks a source task to emit checkpoint barrier *barrier.
	barrier *Barrier
	// complete says checkpoint complete is durable: sinks commit.
	complete int64
	// final is set with complete for the run's final checkpoint.
	final bool
	// aborted says the coordinator gave checkpoint aborted up (it failed,
	// timed out or was declined): stop aligning for it.
	aborted int64
}

// post sends m to the task's mailbox without blocking the caller for long.
func (t *task) post(m mail) {
	select {
	case t.mailbox <- m:
	default:
		go func() {
			select {
			case t.mailbox <- m:
			case <-t.job.done:
			}
		}()
	}
}

// input is one channel into a task: from one sender subtask over one edge.
type input struct {
	ch     chan Batch
	edge   *Edge
	index  int // in task.inputs and the task's barrierAligner
	wm     int64
	ended  bool // end of data
	closed bool // terminated
	idle   bool
	// deadLetters: the input carries the dead letters of a key_by head,
	// which go to its errors stream.
	deadLetters bool
}

// task runs one chain on one subtask: Flink's StreamTask with its mailbox.
type task struct {
	job     *Job
	chain   *Chain
	subtask int
	name    string
	logger  *slog.Logger
	inputs  []*input
	stages  []*stage
	head    *stage
	writers []*writer
	mailbox chan mail
	// stats are the task's live numbers: its time by phase and its
	// watermark (Runner.Status, eddy_task_*_seconds_total).
	stats *taskStats
	// opened is set once every stage opened: a source head's SplitStatus
	// may be called from then on.
	opened atomic.Bool

	wm      int64
	wmGauge prometheus.Gauge
	flush   *time.Timer
	armed   bool
	// idle is true while the task told its receivers it is idle.
	idle bool

	// Processing-time timers: the earliest wake-up any stage asked for.
	wake   *time.Timer
	wakeAt int64

	// align tracks the checkpoint barriers of the inputs.
	align *barrierAligner
	// cpGauges describe the newest checkpoint the task took.
	cpGauges TaskCheckpointGauges
	// hold is how far the head holds the watermark back (WatermarkHolder).
	hold int64
	// position is the source head's position after the last emitted record.
	position []byte
	// committed is the last checkpoint whose completion the task handled;
	// committables are the 2PC sinks' pre-committed transactions by
	// checkpoint, waiting for completion.
	committed    int64
	committables map[int64]map[*stage][]byte
	// srcPositions are a SourceCheckpointListener head's positions by
	// checkpoint, waiting for completion.
	srcPositions map[int64][]byte
	// srcSplits are the splits the source declared at Open, srcSplitTimes
	// their restored event times (SourceContext.SplitTimes).
	srcSplits     []int
	srcSplitTimes map[int]int64
	// finalDone is set once the run's final checkpoint completed.
	finalDone bool
	// Event time of a source head: its watermark generator, VM and the
	// on_error policy for records whose timestamp fails.
	wmGen   *watermarks
	vm      expr.VM
	srcErrs *ErrorHandler
	// one is the batch of a record emitted on its own (watermark.interval 0).
	one [1]Record
}

func (t *task) run(ctx context.Context) (err error) {
	t.stats.wm.Store(MinWatermark)
	t.stats.enter(phaseBusy, time.Now())
	defer func() { t.stats.enter(phaseEnded, time.Now()) }()
	t.wm = MinWatermark
	t.wmGauge = t.job.opts.Metrics.Watermark(t.head.info)
	t.cpGauges = t.job.opts.Metrics.TaskCheckpoint(t.head.info)
	t.flush = time.NewTimer(time.Hour)
	t.flush.Stop()
	defer t.flush.Stop()
	t.wake = time.NewTimer(time.Hour)
	t.wake.Stop()
	defer t.wake.Stop()
	// Open sinks first so that nothing is emitted into an unopened stage.
	opened := []*stage{}
	defer func() {
		for _, s := range slices.Backward(opened) {
			if cerr := s.close(context.WithoutCancel(ctx)); cerr != nil && err == nil {
				err = fmt.Errorf("close %s %q: %w", s.node.Kind, s.node.ID, cerr)
			}
		}
	}()
	for _, s := range slices.Backward(t.stages) {
		if s.src != nil {
			continue
		}
		if err := s.open(ctx, t.wakeAtFunc(s)); err != nil {
			return err
		}
		opened = append(opened, s)
	}
	if t.head.src != nil {
		sc, err := t.head.sourceContext()
		if err != nil {
			return err
		}
		if err := t.head.src.Open(ctx, sc); err != nil {
			return fmt.Errorf("open source %q: %w", t.head.node.ID, err)
		}
		// Until it reads, the source is where it was restored to, or where
		// Open said it starts.
		t.position = slices.Clone(sc.Restored)
		if sc.Position != nil {
			t.position = slices.Clone(sc.Position)
		}
		t.srcSplits, t.srcSplitTimes = sc.Splits, sc.SplitTimes
		opened = append(opened, t.head)
		t.job.taskOpened(t)
		return t.runSource(ctx)
	}
	t.job.taskOpened(t)
	return t.runInputs(ctx)
}

// armFlush starts the buffer timeout when records wait in output buffers,
// in a sink's buffer, or in a sink's sample (published at a flush once its
// period passed).
func (t *task) armFlush() {
	if t.armed {
		return
	}
	pending := false
	for _, w := range t.writers {
		pending = pending || w.pending > 0
	}
	for _, s := range t.stages {
		// A sink's sample waits for the flush timer too, to be published.
		pending = pending || s.unflushed || s.sample.waiting()
	}
	if pending {
		t.flush.Reset(t.job.plan.Spec.Runtime.BufferTimeout.D())
		t.armed = true
	}
}

// flushBuffers sends partly filled batches and flushes sinks written since
// their last flush, at the buffer timeout: a quiet stream still flows.
func (t *task) flushBuffers(ctx context.Context) error {
	for _, w := range t.writers {
		if err := w.flush(); err != nil {
			return err
		}
	}
	return t.flushSinks(ctx)
}

func (t *task) flushSinks(ctx context.Context) error {
	var now time.Time
	for _, s := range t.stages {
		if s.sink != nil && s.unflushed {
			if err := s.flush(ctx); err != nil {
				return fmt.Errorf("flush sink %q: %w", s.node.ID, err)
			}
		}
		if s.sample.waiting() {
			if now.IsZero() {
				now = time.Now()
			}
			s.sample.publish(now, false)
		}
	}
	return nil
}

// broadcast flushes every writer and sends ctl on every output channel.
func (t *task) broadcast(ctl *Control) error {
	for _, w := range t.writers {
		if err := w.broadcast(ctl); err != nil {
			return err
		}
	}
	return nil
}

// advance moves the task's watermark to wm: operators fire what wm
// completes, then wm goes downstream after their output.
func (t *task) advance(wm int64) error {
	if wm <= t.wm {
		return nil
	}
	t.wm = wm
	t.idle = false
	in := wm
	for _, s := range t.stages {
		if s.wmh != nil {
			if err := s.wmh.OnWatermark(wm, s.out); err != nil {
				return fmt.Errorf("step %q at watermark %d: %w", s.node.ID, wm, err)
			}
		}
		if s == t.head {
			wm = heldWatermark(wm, t.hold)
		}
	}
	t.stats.wm.Store(wm)
	if wm != MaxWatermark {
		t.wmGauge.Set(float64(wm))
	}
	if wm == MinWatermark && in != MinWatermark {
		return nil // held back to before the first watermark
	}
	return t.broadcast(&Control{Kind: ControlWatermark, Watermark: wm})
}

// heldWatermark is wm held back by hold ms (WatermarkHolder); the end of
// event time stays the end, and the start stays the start.
func heldWatermark(wm, hold int64) int64 {
	switch {
	case hold <= 0 || wm == MaxWatermark:
		return wm
	case wm < MinWatermark+hold:
		return MinWatermark
	}
	return wm - hold
}

// checkpoint captures the chain's state at barrier b, whose first copy
// arrived at first, acks it and forwards the barrier. Sinks flush so that
// everything before the barrier is out.
func (t *task) checkpoint(ctx context.Context, b Barrier, first time.Time) error {
	start := time.Now()
	if first.IsZero() {
		first = start // a source head's barrier arrives when the task takes it
	}
	ack := Ack{Checkpoint: b.ID, Chain: t.chain.Index, Subtask: t.subtask, Alignment: start.Sub(first)}
	if t.head.src != nil {
		ack.Positions = map[string][]byte{t.head.node.ID: slices.Clone(t.position)}
		if t.wmGen != nil && t.wmGen.emitted != MinWatermark {
			ack.Watermarks = map[string]int64{t.head.node.ID: t.wmGen.emitted}
		}
		if _, ok := t.head.src.(SourceCheckpointListener); ok {
			if t.srcPositions == nil {
				t.srcPositions = map[int64][]byte{}
			}
			t.srcPositions[b.ID] = ack.Positions[t.head.node.ID]
		}
	}
	coord := t.job.coord
	for _, s := range t.stages {
		if s.sink != nil {
			if err := s.flush(ctx); err != nil {
				return fmt.Errorf("sink %q at checkpoint %d: %w", s.node.ID, b.ID, err)
			}
			if tpc, ok := s.sink.(TwoPhaseCommitSink); ok && coord != nil {
				c, err := tpc.PreCommit(ctx, b.ID)
				if err != nil {
					return fmt.Errorf("pre-commit sink %q at checkpoint %d: %w", s.node.ID, b.ID, err)
				}
				s.preCommitted(b.ID, c)
				if t.committables == nil {
					t.committables = map[int64]map[*stage][]byte{}
				}
				if t.committables[b.ID] == nil {
					t.committables[b.ID] = map[*stage][]byte{}
				}
				t.committables[b.ID][s] = c
				if ack.Committables == nil {
					ack.Committables = map[string][]byte{}
				}
				// The checkpoint carries every transaction of this sink not
				// committed yet: a restore commits them all, also those whose
				// notify-complete the crash came before.
				ack.Committables[s.node.ID] = encodeCommittables(t.uncommitted(s))
			}
		}
		if s.state != nil && coord != nil {
			// The synchronous part: cheap capture; encoding happens on the
			// coordinator's side while this task goes on.
			var snap statestore.Snapshot
			var err error
			if inc, ok := s.state.(statestore.IncrementalBackend); ok {
				snap, err = inc.SnapshotCheckpoint(b.ID)
			} else {
				snap, err = s.state.Snapshot()
			}
			if err != nil {
				ack.release()
				return fmt.Errorf("snapshot state of step %q at checkpoint %d: %w", s.node.ID, b.ID, err)
			}
			if ack.States == nil {
				ack.States = map[string]statestore.Snapshot{}
			}
			ack.States[s.node.ID] = snap
		}
	}
	if err := t.broadcast(&Control{Kind: ControlBarrier, Barrier: b}); err != nil {
		ack.release()
		return err
	}
	t.cpGauges.taken(b.Triggered, first, start, time.Now())
	if t.job.opts.OnAck != nil {
		t.job.opts.OnAck(ack)
	}
	if coord != nil {
		select {
		case coord.acks <- ack:
		case <-t.job.cancel:
			ack.release()
			return context.Canceled
		}
	}
	return nil
}

// uncommitted returns the pre-committed transactions of sink stage s not
// committed yet, oldest first.
func (t *task) uncommitted(s *stage) [][]byte {
	var out [][]byte
	for _, id := range slices.Sorted(maps.Keys(t.committables)) {
		if c, ok := t.committables[id][s]; ok {
			out = append(out, c)
		}
	}
	return out
}

// onMail handles a mailbox message on the task goroutine; done is true
// when the run's final checkpoint completed.
func (t *task) onMail(ctx context.Context, m mail) (done bool, err error) {
	if m.aborted != 0 {
		return false, t.onAborted(ctx, m.aborted)
	}
	if m.complete == 0 || m.complete <= t.committed {
		return false, nil
	}
	t.committed = m.complete
	for _, s := range t.stages {
		if inc, ok := s.state.(statestore.IncrementalBackend); ok {
			inc.CheckpointCompleted(m.complete)
		}
	}
	// The final completion can arrive before this task saw its inputs
	// terminate: awaitFinal must not wait for it again.
	t.finalDone = t.finalDone || m.final
	// Commit every transaction up to the completed checkpoint: those of
	// checkpoints that failed or were subsumed go with it.
	ids := slices.Sorted(maps.Keys(t.committables))
	for _, s := range t.stages {
		tpc, ok := s.sink.(TwoPhaseCommitSink)
		if !ok {
			continue
		}
		var cs [][]byte
		for _, id := range ids {
			if c, ok := t.committables[id][s]; ok && id <= m.complete {
				cs = append(cs, c)
			}
		}
		if len(cs) > 0 {
			if err := tpc.Commit(ctx, cs); err != nil {
				return false, fmt.Errorf("commit sink %q at checkpoint %d: %w", s.node.ID, m.complete, err)
			}
			t.job.opts.Metrics.txnCommitted(cs)
		}
		s.committed(m.complete)
	}
	for _, id := range ids {
		if id <= m.complete {
			delete(t.committables, id)
		}
	}
	t.notifySource(ctx, m.complete)
	return m.final, nil
}

// onAborted handles notify-aborted of checkpoint id: inputs held for its
// alignment are released and its late barriers are ignored, its source
// position is dropped, and the stages that listen are told. What 2PC sinks
// pre-committed for it stays pending: the next completed checkpoint
// commits it.
func (t *task) onAborted(ctx context.Context, id int64) error {
	if ended := t.align.abort(id); ended != 0 {
		t.logger.Info("checkpoint aborted: releasing the inputs held for it", "checkpoint", ended)
	}
	delete(t.srcPositions, id)
	for _, s := range t.stages {
		var l CheckpointAbortListener
		switch {
		case s.sink != nil:
			l, _ = s.sink.(CheckpointAbortListener)
		case s.op != nil:
			l, _ = s.op.(CheckpointAbortListener)
		case s.src != nil:
			l, _ = s.src.(CheckpointAbortListener)
		}
		if l == nil {
			continue
		}
		if err := l.CheckpointAborted(ctx, id); err != nil {
			t.logger.Warn("could not act on an aborted checkpoint", s.node.Kind.String(), s.node.ID, "checkpoint", id, "err", err)
		}
	}
	return nil
}

// notifySource tells a SourceCheckpointListener head that checkpoint id
// completed, with its position at that barrier; positions of earlier
// checkpoints are subsumed.
func (t *task) notifySource(ctx context.Context, id int64) {
	l, ok := t.head.src.(SourceCheckpointListener)
	pos, have := t.srcPositions[id]
	for k := range t.srcPositions {
		if k <= id {
			delete(t.srcPositions, k)
		}
	}
	if !ok || !have {
		return
	}
	if err := l.CheckpointComplete(ctx, id, pos); err != nil {
		t.head.info.Logger.Warn("source could not act on a completed checkpoint", "source", t.head.node.ID, "checkpoint", id, "err", err)
	}
}

// awaitFinal waits, after the task terminated its outputs, until the final
// checkpoint completed (and sinks committed), handling the mailbox.
func (t *task) awaitFinal(ctx context.Context) error {
	if t.job.coord == nil || t.finalDone {
		return nil
	}
	for {
		t.waiting()
		select {
		case m := <-t.mailbox:
			t.busy()
			done, err := t.onMail(ctx, m)
			if err != nil || done {
				return err
			}
		case <-t.job.cancel:
			return context.Canceled
		}
	}
}

// finish ends the task after its input ended: operators emit what they
// hold, sinks flush, and end-of-input goes downstream.
func (t *task) finish(ctx context.Context) error {
	for _, s := range t.stages {
		if s.fin != nil {
			if err := s.fin.Finish(s.out); err != nil {
				return fmt.Errorf("finish step %q: %w", s.node.ID, err)
			}
		}
		if s.sink != nil {
			if err := s.flush(ctx); err != nil {
				return fmt.Errorf("flush sink %q: %w", s.node.ID, err)
			}
		}
	}
	return t.broadcast(&Control{Kind: ControlEndOfInput})
}

// terminate closes the task's outputs and, with checkpoints, waits for the
// final one to complete.
func (t *task) terminate(ctx context.Context) error {
	if err := t.broadcast(&Control{Kind: ControlTerminate}); err != nil {
		return err
	}
	return t.awaitFinal(ctx)
}

// runSource runs a source task: a reader goroutine calls Source.Read, the
// task goroutine emits what it read, handles its mailbox and flushes.
func (t *task) runSource(ctx context.Context) error {
	readCtx, stopReading := context.WithCancel(ctx)
	batches := make(chan *ReadBatch, 2)
	free := make(chan *ReadBatch, 3)
	quit := make(chan struct{})
	readerDone := make(chan struct{})
	defer func() {
		// The source closes after this returns: the reader must be out of Read.
		stopReading()
		close(quit)
		<-readerDone
	}()
	var readErr error
	go func() {
		defer close(readerDone)
		defer close(batches)
		for {
			var rb *ReadBatch
			select {
			case rb = <-free:
				rb.Records, rb.Position, rb.Failed, rb.SplitDone = rb.Records[:0], nil, rb.Failed[:0], false
				rb.KeyFailed = rb.KeyFailed[:0]
				rb.HasWatermark, rb.Idle = false, false
			default:
				rb = &ReadBatch{Records: make([]Record, 0, t.job.plan.Spec.Runtime.BatchSize)}
			}
			err := t.head.src.Read(readCtx, rb)
			if len(rb.Records) > 0 || len(rb.Failed) > 0 || len(rb.KeyFailed) > 0 || rb.Position != nil || rb.SplitDone || rb.HasWatermark {
				select {
				case batches <- rb:
				case <-quit:
					return
				}
			}
			if err != nil {
				readErr = err
				return
			}
		}
	}()
	stop := t.job.stop
	stopping := false
	src := t.head.node.Source
	var tick <-chan time.Time
	if src.EventTime != nil {
		t.wmGen = newWatermarks(src.Watermark)
		for _, s := range t.srcSplits {
			t.wmGen.declare(s)
			if ts, ok := t.srcSplitTimes[s]; ok {
				t.wmGen.split(s).maxTs = ts
			}
		}
		// Start where the checkpoint's watermark was: downstream, the
		// windows it fired are gone from the restored state, and records
		// at or below it are late, as they were before the restore.
		if wm, ok, err := t.head.restoredWatermark(); err != nil {
			return err
		} else if ok && wm != MaxWatermark {
			t.wmGen.emitted = wm
			if err := t.advance(wm); err != nil {
				return err
			}
		}
		if iv := src.Watermark.Interval.D(); iv > 0 {
			ticker := time.NewTicker(iv)
			defer ticker.Stop()
			tick = ticker.C
		}
	}
	t.srcErrs = NewErrorHandler(t.head.info, src.OnError, t.head.side(ErrorsStream))
	for {
		// Waiting here is idle time: for the reader's next batch, the
		// mailbox or a timer.
		t.waiting()
		select {
		case rb, ok := <-batches:
			t.busy()
			if !ok {
				if err := t.endSource(ctx, readErr, stopping); err != nil {
					return err
				}
				if t.job.coord == nil {
					return t.terminate(ctx)
				}
				// Wait for the final checkpoint: the coordinator triggers it
				// once every source ended.
				batches, stop, tick = nil, nil, nil
				select {
				case t.job.coord.ended <- t:
				case <-t.job.cancel:
					return context.Canceled
				}
				continue
			}
			if err := t.emitRead(rb); err != nil {
				return err
			}
			if rb.Position != nil {
				t.position = append(t.position[:0], rb.Position...)
			}
			clear(rb.Records)
			clear(rb.Failed)
			clear(rb.KeyFailed)
			select {
			case free <- rb:
			default:
			}
			t.armFlush()
		case now := <-tick:
			t.busy()
			if err := t.emitWatermark(now); err != nil {
				return err
			}
			t.armFlush()
		case m := <-t.mailbox:
			t.busy()
			if m.barrier != nil {
				if err := t.checkpoint(ctx, *m.barrier, time.Time{}); err != nil {
					return err
				}
				if m.barrier.Final {
					return t.terminate(ctx)
				}
				continue
			}
			if _, err := t.onMail(ctx, m); err != nil {
				return err
			}
		case <-t.flush.C:
			t.busy()
			t.armed = false
			if err := t.flushBuffers(ctx); err != nil {
				return err
			}
			t.armFlush() // a sink's sample may wait for its period
		case <-t.wake.C:
			t.busy()
			if err := t.onWake(); err != nil {
				return err
			}
			t.armFlush()
		case <-stop:
			t.busy()
			// Stop reading; what the reader already read still drains.
			stopping, stop = true, nil
			stopReading()
		case <-t.job.cancel:
			return context.Canceled
		}
	}
}

// emitRead assigns event times to what the reader read and emits it; with
// watermark.interval 0 a watermark follows every record.
func (t *task) emitRead(rb *ReadBatch) error {
	// Input that failed to decode takes its turn among the records, so
	// that on_error fail emits what was read before it.
	done := 0
	for _, f := range rb.Failed {
		at := min(max(f.At, done), len(rb.Records))
		if err := t.emitRecords(rb, rb.Records[done:at]); err != nil {
			return err
		}
		done = at
		if err := t.srcErrs.Handle(Record{Fields: f.Fields, Time: NoTime}, f.Err); err != nil {
			return err
		}
	}
	if err := t.emitRecords(rb, rb.Records[done:]); err != nil {
		return err
	}
	for _, k := range rb.KeyFailed {
		if err := t.keyFailed(k); err != nil {
			return err
		}
	}
	if rb.SplitDone && t.wmGen != nil {
		t.wmGen.split(rb.Split).done = true
	}
	if rb.HasWatermark && t.wmGen == nil {
		if err := t.advance(rb.Watermark); err != nil {
			return err
		}
		if rb.Idle {
			return t.markIdle()
		}
	}
	return nil
}

// keyFailed applies to k, a record whose key failed before the source
// read it, the on_error policy of each keyed step the head feeds: its
// hash writer's, which sends a dead letter over the edge's dead letters
// to the step's errors stream, as for a key that fails here.
func (t *task) keyFailed(k KeyFailure) error {
	n := 0
	for _, w := range t.writers {
		if w.errs == nil || w.edge.From != t.head.node {
			continue
		}
		n++
		if err := w.errs.Handle(k.Record, k.Err); err != nil {
			return err
		}
	}
	if n == 0 {
		return fmt.Errorf("source %q read a record whose key failed, but feeds no keyed step", t.head.node.ID)
	}
	return nil
}

// emitRecords assigns event times to recs, records of rb, and emits them.
func (t *task) emitRecords(rb *ReadBatch, recs []Record) error {
	et := t.head.node.Source.EventTime
	if et != nil {
		perRecord := t.head.node.Source.Watermark.Interval == 0
		now := time.Now()
		n := 0
		for _, r := range recs {
			ts, err := evalEventTime(&t.vm, et, &r)
			if err != nil {
				if herr := t.srcErrs.Handle(r, err); herr != nil {
					return herr
				}
				continue
			}
			r.Time = ts
			t.wmGen.observe(rb.Split, ts, now)
			if perRecord {
				t.one[0] = r
				if err := t.head.out.Emit(t.one[:]); err != nil {
					return err
				}
				if err := t.emitWatermark(now); err != nil {
					return err
				}
				continue
			}
			recs[n] = r
			n++
		}
		if perRecord {
			recs = recs[:0]
		} else {
			recs = recs[:n]
		}
	}
	if len(recs) == 0 {
		return nil
	}
	t.idle = false
	return t.head.out.Emit(recs)
}

// emitWatermark emits the source's current watermark, or idleness.
func (t *task) emitWatermark(now time.Time) error {
	wm, idle := t.wmGen.current(now)
	if idle {
		return t.markIdle()
	}
	if wm <= t.wm {
		return nil
	}
	t.wmGen.emitted = wm
	return t.advance(wm)
}

func (t *task) endSource(ctx context.Context, readErr error, stopping bool) error {
	switch {
	case errors.Is(readErr, io.EOF):
		// A bounded input ended: event time ends too, every window fires.
		if err := t.advance(MaxWatermark); err != nil {
			return err
		}
	case stopping && errors.Is(readErr, context.Canceled):
		t.logger.Debug("source stopped on request")
	case readErr != nil:
		return fmt.Errorf("read source %q: %w", t.head.node.ID, readErr)
	}
	return t.finish(ctx)
}

const fixedCases = 4 // mailbox, flush timer, cancel, processing-time wake-up

// runInputs runs a task whose head reads from channels.
func (t *task) runInputs(ctx context.Context) error {
	cases := []reflect.SelectCase{
		{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(t.mailbox)},
		{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(t.flush.C)},
		{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(t.job.cancel)},
		{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(t.wake.C)},
	}
	var active []*input
	rebuild := func() {
		cases, active = cases[:fixedCases], active[:0]
		for _, in := range t.inputs {
			if !in.closed && !t.align.blocked(in.index) {
				cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(in.ch)})
				active = append(active, in)
			}
		}
	}
	rebuild()
	for {
		t.waiting()
		chosen, v, _ := reflect.Select(cases)
		t.busy()
		switch chosen {
		case 0:
			m := v.Interface().(mail)
			if _, err := t.onMail(ctx, m); err != nil {
				return err
			}
			if m.aborted != 0 {
				rebuild() // inputs held for the aborted checkpoint are free
			}
			continue
		case 1:
			t.armed = false
			if err := t.flushBuffers(ctx); err != nil {
				return err
			}
			t.armFlush() // a sink's sample may wait for its period
			continue
		case 2:
			return context.Canceled
		case 3:
			if err := t.onWake(); err != nil {
				return err
			}
			t.armFlush()
			continue
		}
		in := active[chosen-fixedCases]
		b := v.Interface().(Batch)
		if len(b.Records) > 0 {
			in.idle = false
			var err error
			if in.deadLetters {
				err = t.head.side(ErrorsStream).Emit(b.Records)
			} else {
				err = t.head.emitInput(in.edge.Input, b.Records)
			}
			if err != nil {
				return err
			}
			putBatch(b.Records)
			if err := t.stateErr(); err != nil {
				return err
			}
		}
		if b.Control != nil {
			changed, err := t.onControl(ctx, in, b.Control)
			if err != nil {
				return err
			}
			if changed {
				if t.allClosed() {
					return t.terminate(ctx)
				}
				rebuild()
			}
		}
		t.armFlush()
	}
}

func (t *task) allClosed() bool {
	for _, in := range t.inputs {
		if !in.closed {
			return false
		}
	}
	return true
}

func (t *task) allEnded() bool {
	for _, in := range t.inputs {
		if !in.ended {
			return false
		}
	}
	return true
}

// onControl handles a control event from in; changed reports that the set
// of readable inputs changed.
func (t *task) onControl(ctx context.Context, in *input, c *Control) (changed bool, err error) {
	switch c.Kind {
	case ControlWatermark:
		in.wm = max(in.wm, c.Watermark)
		in.idle = false
		return false, t.updateWatermark()
	case ControlIdle:
		in.idle = true
		return false, t.updateWatermark()
	case ControlBarrier:
		return t.onBarrier(ctx, in, c.Barrier)
	case ControlEndOfInput:
		in.ended = true
		if err := t.updateWatermark(); err != nil {
			return false, err
		}
		if t.allEnded() {
			return false, t.finish(ctx)
		}
		return false, nil
	case ControlTerminate:
		in.closed = true
		return true, t.aligned(ctx, t.align.onClosed(in.index))
	}
	return false, fmt.Errorf("unknown control event %d", c.Kind)
}

// inputWatermark is the minimum watermark over the inputs that are not
// idle; active is false when every input is idle, and wm then the highest
// watermark of the open inputs.
func (t *task) inputWatermark() (wm int64, active bool) {
	wm, highest := MaxWatermark, MinWatermark
	for _, in := range t.inputs {
		if in.closed {
			continue
		}
		highest = max(highest, in.wm)
		// An input that ended keeps its last watermark (+inf after a
		// bounded input): it never goes idle.
		if in.ended || !in.idle {
			wm, active = min(wm, in.wm), true
		}
	}
	if !active {
		return highest, false
	}
	return wm, active
}

// updateWatermark advances to the input watermark. When every open input
// is idle, none holds the watermark back: it advances to the highest of
// theirs, and the task goes idle. (An input that went idle right after
// its last watermark, while another held the minimum, would otherwise
// keep that watermark from ever counting.)
func (t *task) updateWatermark() error {
	wm, active := t.inputWatermark()
	if !active {
		if t.allEnded() {
			return nil
		}
		if err := t.advance(wm); err != nil {
			return err
		}
		return t.markIdle()
	}
	return t.advance(wm)
}

// onBarrier hands a checkpoint barrier to the aligner and checkpoints once
// it is aligned; changed reports that inputs were blocked or released.
func (t *task) onBarrier(ctx context.Context, in *input, b Barrier) (changed bool, err error) {
	a := t.align.onBarrier(in.index, b, time.Now())
	if a.Abandoned != 0 {
		t.logger.Warn("checkpoint abandoned: a newer barrier arrived before alignment finished",
			"checkpoint", a.Abandoned, "newer", b.ID)
	}
	return a.Changed || a.Done, t.aligned(ctx, a)
}

// aligned takes the checkpoint of a completed alignment.
func (t *task) aligned(ctx context.Context, a alignment) error {
	if !a.Done {
		return nil
	}
	return t.checkpoint(ctx, a.Barrier, a.First)
}

// nowMillis is the processing time in epoch ms.
func nowMillis() int64 { return time.Now().UnixMilli() }

// wakeAtFunc returns the WakeAt of stage s: it keeps s's earliest request
// and arms the task's timer for the earliest of all stages.
func (t *task) wakeAtFunc(s *stage) func(int64) {
	return func(at int64) {
		if s.wakeAt == 0 || at < s.wakeAt {
			s.wakeAt = at
		}
		t.scheduleWake()
	}
}

func (t *task) scheduleWake() {
	next := int64(0)
	for _, s := range t.stages {
		if s.wakeAt != 0 && (next == 0 || s.wakeAt < next) {
			next = s.wakeAt
		}
	}
	if next == t.wakeAt {
		return
	}
	t.wakeAt = next
	if next == 0 {
		t.wake.Stop()
		return
	}
	t.wake.Reset(time.Duration(max(next-nowMillis(), 0)) * time.Millisecond)
}

// onWake calls the processing-time handlers whose time has come.
func (t *task) onWake() error {
	now := nowMillis()
	t.wakeAt = 0
	for _, s := range t.stages {
		if s.pth != nil && s.wakeAt != 0 && s.wakeAt <= now {
			s.wakeAt = 0
			if err := s.pth.OnProcessingTime(now, s.out); err != nil {
				return fmt.Errorf("step %q at processing time %d: %w", s.node.ID, now, err)
			}
		}
	}
	t.scheduleWake()
	return nil
}

// stateErr returns the first failure of a stage's keyed state: state
// accessors record failures instead of returning them.
func (t *task) stateErr() error {
	for _, s := range t.stages {
		if s.state != nil {
			if err := s.state.Err(); err != nil {
				return fmt.Errorf("keyed state of step %q: %w", s.node.ID, err)
			}
		}
	}
	return nil
}

// waiting begins the task's idle time: it waits for input, its mailbox or
// a timer.
func (t *task) waiting() { t.stats.enter(phaseIdle, time.Now()) }

// busy ends the task's idle time: it handles what it waited for.
func (t *task) busy() { t.stats.enter(phaseBusy, time.Now()) }

// markIdle tells the receivers that this task carries nothing for a while.
func (t *task) markIdle() error {
	if t.idle {
		return nil
	}
	t.idle = true
	for _, s := range t.stages {
		if h, ok := s.sink.(IdleHandler); ok {
			if err := h.OnIdle(); err != nil {
				return fmt.Errorf("sink %q going idle: %w", s.node.ID, err)
			}
		}
	}
	return t.broadcast(&Control{Kind: ControlIdle})
}
