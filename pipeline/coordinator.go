package pipeline

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/eddy-stream/eddy/statestore"

	"github.com/eddy-stream/eddy/checkpoint"
)

// CheckpointStore is where the coordinator writes checkpoints: a
// *checkpoint.Store, or a test's fake. A checkpoint is a set of named parts
// written while the job runs, then completed atomically (checkpoint.Writer):
// a checkpoint that did not complete is never restored. The coordinator's
// goroutine calls Begin when it triggers checkpoint id.
type CheckpointStore interface {
	Begin(id int64, meta checkpoint.Meta) (checkpoint.Writer, error)
}

// SavepointExporter is a CheckpointStore that writes a completed checkpoint
// as a self-contained savepoint file (*checkpoint.Store does). The
// coordinator's export goroutine calls it once a savepoint's checkpoint
// completed; it must not overwrite an existing path.
type SavepointExporter interface {
	ExportSavepoint(id int64, path string) error
}

// RestoredCheckpoint is a completed checkpoint (or savepoint) a run
// restores from: a *checkpoint.Checkpoint, or a test's fake.
type RestoredCheckpoint interface {
	ID() int64
	// Parts lists the parts, sorted by name; restores read only Name.
	Parts() []checkpoint.PartInfo
	Get(part string) ([]byte, error)
}

// SavepointMetaPart is the part of a savepoint's checkpoint that describes
// it: a SavepointMeta in JSON. Only savepoints have it; restores ignore it.
const SavepointMetaPart = "meta/savepoint"

// SavepointMeta describes a savepoint (docs/checkpoints.md, "Savepoints"):
// what `eddy savepoint list` shows. The coordinator writes it into
// every savepoint as SavepointMetaPart.
type SavepointMeta struct {
	Version  int       `json:"version"`
	ID       int64     `json:"id"`
	Pipeline string    `json:"pipeline"`
	FileHash string    `json:"file_hash"`
	Time     time.Time `json:"time"`
	// Final is true for the savepoint of a stop with savepoint: the run
	// ended at it.
	Final          bool            `json:"final"`
	MaxParallelism int             `json:"max_parallelism"`
	Nodes          []SavepointNode `json:"nodes"`
}

// SavepointNode is a source, step or sink of a savepoint's pipeline.
type SavepointNode struct {
	ID          string `json:"id"`
	Kind        string `json:"kind"` // source, step or sink
	Parallelism int    `json:"parallelism"`
}

// DecodeSavepointMeta decodes the SavepointMetaPart of a savepoint. Called
// by `eddy savepoint list` and the admin endpoint, from any goroutine.
func DecodeSavepointMeta(b []byte) (SavepointMeta, error) {
	var m SavepointMeta
	if err := json.Unmarshal(b, &m); err != nil {
		return m, fmt.Errorf("decode %s: %w", SavepointMetaPart, err)
	}
	if m.Version != 1 {
		return m, fmt.Errorf("decode %s: version %d, this eddy reads version 1", SavepointMetaPart, m.Version)
	}
	return m, nil
}

// SavepointFileName is the name of savepoint id triggered at t in its
// directory: savepoint-<id>-<UTC time>.db. The coordinator's export
// goroutine names the files with it.
func SavepointFileName(id int64, t time.Time) string {
	return fmt.Sprintf("savepoint-%d-%s.db", id, t.UTC().Format("20060102T150405Z"))
}

// Part names of a checkpoint: source positions, operator keyed state, sink
// committables, each per subtask.
func sourcePart(id string, sub int) string { return "src/" + id + "/" + strconv.Itoa(sub) }
func statePart(id string, sub int) string  { return "op/" + id + "/" + strconv.Itoa(sub) }
func sinkPart(id string, sub int) string   { return "sink/" + id + "/" + strconv.Itoa(sub) }
func wmPart(id string, sub int) string     { return "wm/" + id + "/" + strconv.Itoa(sub) }

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
// snapshots asynchronously and completes checkpoints (docs/architecture.md). It
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
	metrics      *Metrics
	sourcesEnded map[*task]bool
	// final is the id of the final checkpoint, once triggered.
	final int64

	// Savepoints: requests from TriggerSavepoint and StopWithSavepoint,
	// those waiting for a free slot (max_concurrent, min_pause), the
	// stop-with-savepoint request, and every request not answered yet.
	requests chan *savepointReq
	stops    chan *savepointReq
	queued   []*savepointReq
	finalReq *savepointReq
	open     map[*savepointReq]bool
	// exporting counts savepoint files being written; while one is, no
	// checkpoint is triggered or completed, so that retention cannot
	// delete the savepoint's checkpoint before the export reads it.
	exporting int
	exported  chan struct{}
	// writers counts the goroutines writing parts (onAck's, a savepoint's
	// metadata) that have not reported on written yet: run waits for them
	// before it returns, so that nothing writes to the store once the job
	// ended.
	writers int
	// exited is closed when run returns.
	exited chan struct{}
}

// savepointReq is a request for a savepoint written to dir. The coordinator
// (or the export goroutine it hands the request to) answers it once with
// finish.
type savepointReq struct {
	dir string
	// accept answers a stop with savepoint: nil once the final checkpoint
	// will be a savepoint.
	accept chan error
	done   chan struct{} // closed by finish, after sp and err are set
	sp     Savepoint
	err    error
}

func newSavepointReq(dir string) *savepointReq {
	return &savepointReq{dir: dir, accept: make(chan error, 1), done: make(chan struct{})}
}

func (r *savepointReq) finish(sp Savepoint, err error) {
	r.sp, r.err = sp, err
	close(r.done)
}

// Savepoint is a savepoint file that TriggerSavepoint or a stop with
// savepoint wrote.
type Savepoint struct {
	ID   int64
	Path string
	// Time is when its checkpoint was triggered.
	Time time.Time
	// Final is true for the savepoint of a stop with savepoint.
	Final bool
}

// inFlight is a checkpoint that is not complete yet.
type inFlight struct {
	id      int64
	meta    checkpoint.Meta
	started time.Time
	pending checkpoint.Writer
	acked   int
	writing int
	err     error
	final   bool
	// ready is set when every part is written but completion waits for a
	// savepoint export to end.
	ready bool
	// req is the savepoint request this checkpoint answers, or nil.
	req *savepointReq
	// Of the keyed state parts written: their bytes, and how many of them
	// are deltas (checkpoint.incremental).
	stateBytes int64
	deltaParts int
	// stateSizes are the bytes of each state part, by step and subtask.
	stateSizes map[seriesKey]int64
}

type writeResult struct {
	id  int64
	err error
	partStats
	// sizes are the bytes of subtask's state parts, by step id.
	subtask int
	sizes   map[string]int64
}

// partStats sums up the keyed state parts of an ack.
type partStats struct {
	bytes  int64
	deltas int
}

func newCoordinator(j *Job, spec CheckpointSpec, store CheckpointStore, firstID int64) *coordinator {
	j.opts.Metrics.initCheckpoints()
	return &coordinator{
		job: j, spec: spec, store: store, logger: j.opts.Logger, nextID: firstID, metrics: j.opts.Metrics,
		acks: make(chan Ack, 64), written: make(chan writeResult, 64), ended: make(chan *task, 64),
		pending: map[int64]*inFlight{}, sourcesEnded: map[*task]bool{},
		requests: make(chan *savepointReq), stops: make(chan *savepointReq),
		open: map[*savepointReq]bool{}, exported: make(chan struct{}), exited: make(chan struct{}),
	}
}

func (c *coordinator) run() {
	defer close(c.exited)
	interval := c.spec.Interval.D()
	tick := time.NewTicker(min(interval, time.Second))
	defer tick.Stop()
	// The periodic checkpoint is due when its timer fires, and triggered
	// then unless max_concurrent, min_pause, a savepoint or an export holds
	// it back; then it is tried again on each tick.
	periodic := time.NewTimer(interval)
	defer periodic.Stop()
	due := false
	tryPeriodic := func() {
		if c.final == 0 && len(c.queued) == 0 && c.exporting == 0 && c.trigger(false, nil) {
			due = false
			periodic.Reset(interval)
		}
	}
	for {
		select {
		case <-periodic.C:
			due = true
			tryPeriodic()
		case now := <-tick.C:
			c.expire(now)
			c.startQueued()
			if due {
				tryPeriodic()
			}
		case a := <-c.acks:
			c.onAck(a)
		case w := <-c.written:
			c.writers--
			c.onWritten(w)
		case t := <-c.ended:
			c.sourcesEnded[t] = true
			if len(c.sourcesEnded) == c.job.sourceTasks() && c.final == 0 {
				c.trigger(true, c.finalReq)
			}
		case req := <-c.requests:
			c.open[req] = true
			if c.final != 0 {
				c.finish(req, fmt.Errorf("%w: it is taking its final checkpoint", ErrJobEnding))
				continue
			}
			c.queued = append(c.queued, req)
			c.startQueued()
		case req := <-c.stops:
			if c.final != 0 || c.finalReq != nil {
				req.accept <- fmt.Errorf("%w: it is taking its final checkpoint already", ErrJobEnding)
				continue
			}
			c.finalReq, c.open[req] = req, true
			req.accept <- nil
		case <-c.exported:
			c.exporting--
			c.completeReady()
			c.startQueued()
		case <-c.job.cancel:
			c.exit(fmt.Errorf("%w: it was cancelled or failed", ErrJobEnding))
			return
		case <-c.job.tasksEnded:
			c.exit(fmt.Errorf("%w: it ended before the savepoint completed", ErrJobEnding))
			return
		}
	}
}

// exit ends the coordinator's work when the job ends: the checkpoints in
// flight will not complete, so they are aborted; the requests not answered
// get err; and the writers still running (those of a checkpoint aborted
// before they got to the store) are waited for.
func (c *coordinator) exit(err error) {
	now := time.Now()
	for id, f := range c.pending {
		_ = f.pending.Abort()
		delete(c.pending, id)
		c.metrics.checkpointEnded(id, resultAborted, now, err)
	}
	c.finishOpen(err)
	for ; c.writers > 0; c.writers-- {
		<-c.written
	}
}

// finish answers a savepoint request with an error or a savepoint.
func (c *coordinator) finish(req *savepointReq, err error) {
	delete(c.open, req)
	req.finish(Savepoint{}, err)
}

// finishOpen answers every request not answered yet with err.
func (c *coordinator) finishOpen(err error) {
	for req := range c.open {
		c.finish(req, err)
	}
	c.queued = nil
}

// canTrigger reports whether max_concurrent and min_pause allow a new
// checkpoint now.
func (c *coordinator) canTrigger() bool {
	return len(c.pending) < c.spec.MaxConcurrent && time.Since(c.lastComplete) >= c.spec.MinPause.D()
}

// startQueued triggers the queued savepoints, oldest first, as far as
// max_concurrent and min_pause allow.
func (c *coordinator) startQueued() {
	for len(c.queued) > 0 && c.final == 0 && c.exporting == 0 && c.canTrigger() {
		req := c.queued[0]
		c.queued = c.queued[1:]
		c.trigger(false, req)
	}
}

// trigger starts checkpoint nextID unless too many are in flight (the final
// checkpoint always starts). It reports whether it started one. With req,
// the checkpoint is a savepoint that answers req.
func (c *coordinator) trigger(final bool, req *savepointReq) bool {
	if !final && !c.canTrigger() {
		return false
	}
	id := c.nextID
	c.nextID++
	meta := checkpoint.Meta{Pipeline: c.job.plan.Spec.Name, FileHash: c.job.plan.Spec.Hash, Time: time.Now()}
	if final {
		c.final = id // a final checkpoint that fails fails the job
		for _, q := range c.queued {
			c.finish(q, fmt.Errorf("%w: it is taking its final checkpoint", ErrJobEnding))
		}
		c.queued = nil
	}
	c.metrics.checkpointTriggered(id, kindOf(req), final, meta.Time, len(c.job.tasks))
	p, err := c.store.Begin(id, meta)
	if err != nil {
		err = fmt.Errorf("begin checkpoint %d: %w", id, err)
		c.metrics.checkpointEnded(id, resultFailed, time.Now(), err)
		if req != nil {
			c.finish(req, err)
		}
		if req == nil || final {
			c.failed(id, err)
		}
		return true
	}
	f := &inFlight{id: id, meta: meta, started: meta.Time, pending: p, final: final, req: req}
	c.pending[id] = f
	c.logger.Debug("checkpoint triggered", "checkpoint", id, "final", final, "savepoint", req != nil)
	if req != nil {
		blob, err := json.Marshal(c.savepointMeta(id, meta, final))
		f.writing++
		c.writers++
		go func() {
			if err == nil {
				err = p.Put(SavepointMetaPart, blob)
			}
			c.written <- writeResult{id: id, err: err}
		}()
	}
	for _, t := range c.job.tasks {
		if t.head.src != nil {
			t.post(mail{barrier: &Barrier{ID: id, Final: final, Savepoint: req != nil, Triggered: f.started}})
		}
	}
	return true
}

// savepointMeta describes the savepoint of checkpoint id.
func (c *coordinator) savepointMeta(id int64, meta checkpoint.Meta, final bool) SavepointMeta {
	m := SavepointMeta{Version: 1, ID: id, Pipeline: meta.Pipeline, FileHash: meta.FileHash, Time: meta.Time.UTC(),
		Final: final, MaxParallelism: c.job.plan.Spec.MaxParallelism}
	for _, n := range c.job.plan.Nodes {
		m.Nodes = append(m.Nodes, SavepointNode{ID: n.ID, Kind: n.Kind.String(), Parallelism: n.Parallelism})
	}
	return m
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
	c.metrics.checkpointAcked(f.id, a.Alignment)
	parts := map[string][]byte{}
	for id, pos := range a.Positions {
		parts[sourcePart(id, a.Subtask)] = pos
	}
	for id, com := range a.Committables {
		parts[sinkPart(id, a.Subtask)] = com
	}
	for id, wm := range a.Watermarks {
		parts[wmPart(id, a.Subtask)] = binary.BigEndian.AppendUint64(nil, uint64(wm))
	}
	f.writing++
	c.writers++
	go func() {
		sizes := make(map[string]int64, len(a.States))
		st, err := writeAckSizes(f.pending, a, parts, sizes)
		c.written <- writeResult{id: a.Checkpoint, err: err, partStats: st, subtask: a.Subtask, sizes: sizes}
	}()
}

// writeAck writes the parts of an ack and its keyed state snapshots.
func writeAck(p checkpoint.Writer, a Ack, parts map[string][]byte) (partStats, error) {
	return writeAckSizes(p, a, parts, nil)
}

// writeAckSizes is writeAck that also puts into sizes (unless nil) the
// bytes each step's state took, by step id.
func writeAckSizes(p checkpoint.Writer, a Ack, parts map[string][]byte, sizes map[string]int64) (partStats, error) {
	defer a.release()
	var st partStats
	for _, name := range slices.Sorted(maps.Keys(parts)) {
		if err := p.Put(name, parts[name]); err != nil {
			return st, err
		}
	}
	for id, snap := range a.States {
		n, delta, err := writeState(p, statePart(id, a.Subtask), snap)
		if err != nil {
			return st, fmt.Errorf("state of step %q: %w", id, err)
		}
		st.bytes += n
		if sizes != nil {
			sizes[id] = n
		}
		if delta {
			st.deltas++
		}
	}
	return st, nil
}

// writeState encodes a snapshot into part name and releases it as soon as
// it is encoded (key group by key group when streamed to a part file), so
// that the garbage collector gets back what it kept alive (the values the
// task has replaced since) while the part is made durable.
func writeState(p checkpoint.Writer, name string, snap statestore.Snapshot) (size int64, delta bool, err error) {
	var base int64
	ds, _ := snap.(statestore.DeltaSnapshot)
	if ds != nil {
		base = ds.Base()
	}
	var w checkpoint.PartWriter
	if base != 0 {
		if w, err = p.Create(name, base); errors.Is(err, checkpoint.ErrDeltaBase) {
			ds.Full() // the base's part is gone (retention): write in full
			w, err = nil, nil
		}
	}
	delta = w != nil
	if w == nil && err == nil {
		w, err = p.Create(name, 0)
	}
	if err != nil {
		snap.Release()
		return 0, false, err
	}
	size, err = snap.WriteAndRelease(w)
	if err != nil {
		w.Abort()
		return size, delta, fmt.Errorf("encode: %w", err)
	}
	return size, delta, w.Close()
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
	f.stateBytes += w.bytes
	f.deltaParts += w.deltas
	for id, n := range w.sizes {
		if f.stateSizes == nil {
			f.stateSizes = map[seriesKey]int64{}
		}
		f.stateSizes[seriesKey{id, w.subtask}] = n
	}
	if f.writing > 0 || f.acked < len(c.job.tasks) {
		return
	}
	if f.err != nil {
		c.failed(f.id, fmt.Errorf("write checkpoint %d: %w", f.id, f.err))
		return
	}
	if c.exporting > 0 {
		f.ready = true // completeReady completes it once the export ended
		return
	}
	c.complete(f)
}

// completeReady completes, oldest first, the checkpoints whose completion
// waited for an export, until one of them starts an export itself.
func (c *coordinator) completeReady() {
	for c.exporting == 0 {
		var next *inFlight
		for _, f := range c.pending {
			if f.ready && (next == nil || f.id < next.id) {
				next = f
			}
		}
		if next == nil {
			return
		}
		next.ready = false
		c.complete(next)
	}
}

// complete marks checkpoint f complete in the store, starts the export of a
// savepoint, and sends notify-complete to the tasks.
func (c *coordinator) complete(f *inFlight) {
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
	c.metrics.checkpointStored(f.id, c.lastComplete, f.stateBytes, f.deltaParts)
	c.metrics.stateSizesStored(f.stateSizes)
	if f.req == nil {
		c.metrics.checkpointEnded(f.id, resultCompleted, c.lastComplete, nil)
	}
	c.logger.Info("checkpoint complete", "checkpoint", f.id, "duration", time.Since(f.started).Round(time.Millisecond),
		"final", f.final, "savepoint", f.req != nil, "state_bytes", f.stateBytes, "delta_parts", f.deltaParts)
	if f.req != nil {
		// Before notify-complete: the tasks end after the final one, and
		// the job's end waits for the exports started before.
		c.export(f)
	}
	for _, t := range c.job.tasks {
		t.post(mail{complete: f.id, final: f.final})
	}
	// Older checkpoints still in flight are subsumed by this one.
	for id, old := range c.pending {
		if id < f.id {
			_ = old.pending.Abort()
			delete(c.pending, id)
			c.metrics.checkpointEnded(id, resultSubsumed, c.lastComplete, nil)
			if old.req != nil {
				c.finish(old.req, fmt.Errorf("savepoint %d was subsumed by checkpoint %d, which completed first: trigger it again", id, f.id))
			}
		}
	}
	c.startQueued()
}

// export writes completed savepoint f to its file on a goroutine of the
// job's, which answers f's request and then reports on c.exported.
func (c *coordinator) export(f *inFlight) {
	req := f.req
	delete(c.open, req)
	exp, ok := c.store.(SavepointExporter)
	if !ok {
		err := fmt.Errorf("savepoint %d is checkpoint %d of the store, which cannot write savepoint files", f.id, f.id)
		c.metrics.checkpointEnded(f.id, resultFailed, time.Now(), err)
		req.finish(Savepoint{}, err)
		return
	}
	c.exporting++
	c.job.bg.Add(1)
	go func() {
		defer c.job.bg.Done()
		sp := Savepoint{ID: f.id, Path: filepath.Join(req.dir, SavepointFileName(f.id, f.meta.Time)), Time: f.meta.Time, Final: f.final}
		err := os.MkdirAll(req.dir, 0o755)
		if err == nil {
			err = exp.ExportSavepoint(f.id, sp.Path)
		}
		if err != nil {
			err = fmt.Errorf("write savepoint %d to %s: %w", f.id, req.dir, err)
			c.metrics.checkpointEnded(f.id, resultFailed, time.Now(), err)
			c.logger.Warn("savepoint failed", "checkpoint", f.id, "error", err.Error())
			req.finish(Savepoint{}, err)
		} else {
			c.metrics.checkpointEnded(f.id, resultCompleted, time.Now(), nil)
			c.logger.Info("savepoint written", "checkpoint", f.id, "path", sp.Path, "final", f.final)
			req.finish(sp, nil)
		}
		select {
		case c.exported <- struct{}{}:
		case <-c.exited:
		}
	}()
}

// expire aborts checkpoints past checkpoint.timeout.
func (c *coordinator) expire(now time.Time) {
	for id, f := range c.pending {
		if !f.ready && now.Sub(f.started) > c.spec.Timeout.D() {
			c.failed(id, fmt.Errorf("checkpoint %d timed out after %s (%d of %d tasks acknowledged)", id, c.spec.Timeout.D(), f.acked, len(c.job.tasks)))
		}
	}
}

// failed aborts checkpoint id and counts the failure; past
// tolerable_failures (or for the final checkpoint) the job fails. A
// savepoint that fails answers its request and is not counted (as in
// Flink): the job goes on.
func (c *coordinator) failed(id int64, err error) {
	f, ok := c.pending[id]
	if ok {
		_ = f.pending.Abort()
		delete(c.pending, id)
		c.metrics.checkpointEnded(id, resultFailed, time.Now(), err)
		if f.req != nil {
			c.finish(f.req, err)
			if !f.final {
				c.logger.Warn("savepoint failed", "checkpoint", id, "error", err)
				c.notifyAborted(id)
				c.startQueued()
				return
			}
		}
	}
	c.failures++
	c.logger.Warn("checkpoint failed", "checkpoint", id, "error", err, "consecutive_failures", c.failures)
	c.notifyAborted(id)
	if (ok && f.final) || id == c.final || c.failures > c.spec.TolerableFailures {
		c.job.fail(fmt.Errorf("%w: %w", ErrCheckpointFailed, err))
		return
	}
	c.startQueued()
}

// kindOf returns the kind label of a checkpoint that answers req.
func kindOf(req *savepointReq) string {
	if req != nil {
		return kindSavepoint
	}
	return kindCheckpoint
}

// notifyAborted tells every task that checkpoint id will not complete.
func (c *coordinator) notifyAborted(id int64) {
	for _, t := range c.job.tasks {
		t.post(mail{aborted: id})
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
		k, pid, sub, ok := parsePart(p.Name)
		if !ok || k != kind || pid != id {
			continue
		}
		b, err := r.Get(p.Name)
		if err != nil {
			return nil, fmt.Errorf("read %s of checkpoint %d: %w", p.Name, r.ID(), err)
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
		err := statestore.SplitBlobs(parts[sub], func(group int, blob []byte) error {
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
