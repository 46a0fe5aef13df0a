package pipeline

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/eddy-stream/eddy/statestore"
)

// CheckpointStore is where the coordinator writes checkpoints. A checkpoint
// is a set of named parts written while the job runs, then completed
// atomically: a checkpoint that did not complete is never restored.
type CheckpointStore interface {
	Begin(id int64, meta CheckpointMeta) (PendingCheckpoint, error)
}

// PendingCheckpoint is a checkpoint being written.
type PendingCheckpoint interface {
	// Put stores one part; it may be called from several goroutines.
	Put(part string, blob []byte) error
	// Complete durably marks the checkpoint complete, after all its parts.
	Complete(ctx context.Context) error
	// Abort discards what was written.
	Abort() error
}

// RestoredCheckpoint is a completed checkpoint (or savepoint) a run
// restores from.
type RestoredCheckpoint interface {
	ID() int64
	// Parts lists the part names, sorted.
	Parts() []string
	Get(part string) ([]byte, error)
}

// CheckpointMeta describes a checkpoint; it is written with it.
type CheckpointMeta struct {
	ID       int64
	Pipeline string
	FileHash string
	Time     time.Time
	// Savepoint is true for a user-requested savepoint.
	Savepoint bool
	// Parallelism of every source, step and sink, by id.
	Parallelism map[string]int
}

// Part names of a checkpoint: source positions, operator keyed state, sink
// committables, each per subtask.
func sourcePart(id string, sub int) string { return "src/" + id + "/" + strconv.Itoa(sub) }
func statePart(id string, sub int) string  { return "op/" + id + "/" + strconv.Itoa(sub) }
func sinkPart(id string, sub int) string   { return "sink/" + id + "/" + strconv.Itoa(sub) }

// parsePart splits a part name into kind, id and subtask.
func parsePart(part string) (kind, id string, sub int, ok bool) {
	kind, rest, ok1 := strings.Cut(part, "/")
	id, s, ok2 := strings.Cut(rest, "/")
	n, err := strconv.Atoi(s)
	return kind, id, n, ok1 && ok2 && err == nil
}

// ErrCheckpointFailed is returned when more checkpoints failed than
// checkpoint.tolerable_failures allows.
var ErrCheckpointFailed = errors.New("checkpoint failed")

// coordinator triggers checkpoints, collects the tasks' acks, writes their
// snapshots asynchronously and completes checkpoints (DESIGN.md §2–§3). It
// runs on its own goroutine; tasks talk to it through channels.
type coordinator struct {
	job    *Job
	spec   CheckpointSpec
	store  CheckpointStore
	logger *slog.Logger
	nextID int64

	acks    chan Ack
	written chan writeResult
	ended   chan *task // source tasks whose input ended or stopped

	pending      map[int64]*inFlight
	failures     int
	lastComplete time.Time
	sourcesEnded map[*task]bool
	// final is the id of the final checkpoint, once triggered.
	final int64
}

// inFlight is a checkpoint that is not complete yet.
type inFlight struct {
	id       int64
	started  time.Time
	pending  PendingCheckpoint
	acked    int
	writing  int
	err      error
	final    bool
	complete bool
}

type writeResult struct {
	id  int64
	err error
}

func newCoordinator(j *Job, spec CheckpointSpec, store CheckpointStore, firstID int64) *coordinator {
	return &coordinator{
		job: j, spec: spec, store: store, logger: j.opts.Logger, nextID: firstID,
		acks: make(chan Ack, 64), written: make(chan writeResult, 64), ended: make(chan *task, 64),
		pending: map[int64]*inFlight{}, sourcesEnded: map[*task]bool{},
	}
}

func (c *coordinator) run() {
	tick := time.NewTicker(min(c.spec.Interval.D(), time.Second))
	defer tick.Stop()
	nextTrigger := time.Now().Add(c.spec.Interval.D())
	for {
		select {
		case now := <-tick.C:
			c.expire(now)
			if now.After(nextTrigger) && c.final == 0 {
				if c.trigger(false) {
					nextTrigger = now.Add(c.spec.Interval.D())
				}
			}
		case a := <-c.acks:
			c.onAck(a)
		case w := <-c.written:
			c.onWritten(w)
		case t := <-c.ended:
			c.sourcesEnded[t] = true
			if len(c.sourcesEnded) == c.job.sourceTasks() && c.final == 0 {
				c.trigger(true)
			}
		case <-c.job.cancel:
			for _, f := range c.pending {
				_ = f.pending.Abort()
			}
			return
		case <-c.job.done:
			return
		}
	}
}

// trigger starts checkpoint nextID unless too many are in flight (the final
// checkpoint always starts). It reports whether it started one.
func (c *coordinator) trigger(final bool) bool {
	if !final && (len(c.pending) >= c.spec.MaxConcurrent || time.Since(c.lastComplete) < c.spec.MinPause.D()) {
		return false
	}
	id := c.nextID
	c.nextID++
	meta := CheckpointMeta{ID: id, Pipeline: c.job.plan.Spec.Name, FileHash: c.job.plan.Spec.Hash, Time: time.Now(), Parallelism: map[string]int{}}
	for _, n := range c.job.plan.Nodes {
		meta.Parallelism[n.ID] = n.Parallelism
	}
	if final {
		c.final = id // a final checkpoint that fails fails the job
	}
	p, err := c.store.Begin(id, meta)
	if err != nil {
		c.failed(id, fmt.Errorf("begin checkpoint %d: %w", id, err))
		return true
	}
	c.pending[id] = &inFlight{id: id, started: time.Now(), pending: p, final: final}
	c.logger.Debug("checkpoint triggered", "checkpoint", id, "final", final)
	for _, t := range c.job.tasks {
		if t.head.src != nil {
			t.post(mail{barrier: &Barrier{ID: id, Final: final}})
		}
	}
	return true
}

// onAck takes a task's snapshot: the synchronous part was captured on the
// task goroutine; encoding and writing happen here, off the task.
func (c *coordinator) onAck(a Ack) {
	f, ok := c.pending[a.Checkpoint]
	if !ok {
		a.release()
		return // expired or aborted
	}
	f.acked++
	parts := map[string][]byte{}
	for id, pos := range a.Positions {
		parts[sourcePart(id, a.Subtask)] = pos
	}
	for id, com := range a.Committables {
		parts[sinkPart(id, a.Subtask)] = com
	}
	f.writing++
	go func() {
		err := writeAck(f.pending, a, parts)
		c.written <- writeResult{id: a.Checkpoint, err: err}
	}()
}

func writeAck(p PendingCheckpoint, a Ack, parts map[string][]byte) error {
	defer a.release()
	for _, name := range slices.Sorted(maps.Keys(parts)) {
		if err := p.Put(name, parts[name]); err != nil {
			return err
		}
	}
	for id, snap := range a.States {
		var buf bytes.Buffer
		if _, err := snap.WriteTo(&buf); err != nil {
			return fmt.Errorf("encode state of step %q: %w", id, err)
		}
		if err := p.Put(statePart(id, a.Subtask), buf.Bytes()); err != nil {
			return err
		}
	}
	return nil
}

func (c *coordinator) onWritten(w writeResult) {
	f, ok := c.pending[w.id]
	if !ok {
		return
	}
	f.writing--
	if w.err != nil && f.err == nil {
		f.err = w.err
	}
	if f.writing > 0 || f.acked < len(c.job.tasks) {
		return
	}
	if f.err != nil {
		c.failed(f.id, fmt.Errorf("write checkpoint %d: %w", f.id, f.err))
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.spec.Timeout.D())
	err := f.pending.Complete(ctx)
	cancel()
	if err != nil {
		c.failed(f.id, fmt.Errorf("complete checkpoint %d: %w", f.id, err))
		return
	}
	delete(c.pending, f.id)
	c.lastComplete = time.Now()
	c.failures = 0
	c.logger.Info("checkpoint complete", "checkpoint", f.id, "duration", time.Since(f.started).Round(time.Millisecond), "final", f.final)
	for _, t := range c.job.tasks {
		t.post(mail{complete: f.id, final: f.final})
	}
	// Older checkpoints still in flight are subsumed by this one.
	for id, old := range c.pending {
		if id < f.id {
			_ = old.pending.Abort()
			delete(c.pending, id)
		}
	}
}

// expire aborts checkpoints past checkpoint.timeout.
func (c *coordinator) expire(now time.Time) {
	for id, f := range c.pending {
		if now.Sub(f.started) > c.spec.Timeout.D() {
			c.failed(id, fmt.Errorf("checkpoint %d timed out after %s (%d of %d tasks acknowledged)", id, c.spec.Timeout.D(), f.acked, len(c.job.tasks)))
		}
	}
}

// failed aborts checkpoint id and counts the failure; past
// tolerable_failures (or for the final checkpoint) the job fails.
func (c *coordinator) failed(id int64, err error) {
	f, ok := c.pending[id]
	if ok {
		_ = f.pending.Abort()
		delete(c.pending, id)
	}
	c.failures++
	c.logger.Warn("checkpoint failed", "checkpoint", id, "error", err, "consecutive_failures", c.failures)
	if (ok && f.final) || id == c.final || c.failures > c.spec.TolerableFailures {
		c.job.fail(fmt.Errorf("%w: %w", ErrCheckpointFailed, err))
	}
}

// release frees the snapshots of an ack.
func (a Ack) release() {
	for _, s := range a.States {
		s.Release()
	}
}

// restoredParts returns the parts of kind/id in a restored checkpoint, by
// the subtask that wrote them.
func restoredParts(r RestoredCheckpoint, kind, id string) (map[int][]byte, error) {
	out := map[int][]byte{}
	if r == nil {
		return out, nil
	}
	for _, p := range r.Parts() {
		k, pid, sub, ok := parsePart(p)
		if !ok || k != kind || pid != id {
			continue
		}
		b, err := r.Get(p)
		if err != nil {
			return nil, fmt.Errorf("read %s of checkpoint %d: %w", p, r.ID(), err)
		}
		out[sub] = b
	}
	return out, nil
}

// restoreState loads the keyed state of step id for the key groups of b
// from every subtask's blob stream of the restored checkpoint (which may
// come from another parallelism).
func restoreState(r RestoredCheckpoint, id string, b statestore.Backend) error {
	parts, err := restoredParts(r, "op", id)
	if err != nil {
		return err
	}
	start, end := b.KeyGroupRange()
	var blobs [][]byte
	for _, sub := range slices.Sorted(maps.Keys(parts)) {
		err := statestore.ReadBlobs(bytes.NewReader(parts[sub]), func(group int, blob []byte) error {
			if group >= start && group < end {
				blobs = append(blobs, blob)
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("read state of step %q from checkpoint %d: %w", id, r.ID(), err)
		}
	}
	return b.Restore(blobs...)
}
