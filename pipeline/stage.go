package pipeline

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"maps"
	"path/filepath"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/eddy-stream/eddy/statestore"
)

// stage is one node of a chain on one subtask: an operator, a sink, or the
// source at the head. Its Emit is the node's input.
type stage struct {
	node *Node
	info SubtaskInfo
	op   Operator
	wmh  WatermarkHandler
	fin  Finisher
	pth  ProcessingTimeHandler
	mio  MultiInputOperator
	// wakeAt is the processing time the operator asked to be called at (0: none).
	wakeAt int64
	// unflushed is true when the sink was written since its last flush.
	unflushed bool
	// A sink's counts: records received, records written since its last
	// flush (pre-commit for a sink that commits per checkpoint), and, of
	// such a sink, the records of each pre-committed checkpoint; written
	// counts them out (see flush).
	received, pending int64
	precommitted      map[int64]int64
	written           prometheus.Counter
	// sample keeps a sink's last records for the run's status.
	sample *sinkSampler
	// flushWrites is set once a sink that commits per checkpoint returned
	// an empty committable: it has nothing to commit (kafka without
	// transactions), so its flushes write out.
	flushWrites bool
	// txns is set once the sink pre-committed a transaction (a non-empty
	// committable): it writes transactionally.
	txns bool
	// state is the operator's keyed state, once it asked for it.
	state statestore.Backend
	// restore is the checkpoint the run starts from, or nil.
	restore       RestoredCheckpoint
	checkpointing bool
	spec          *Spec
	stateDir      string // JobOptions.StateDir
	sink          Sink
	src           Source
	// stdin and stdout are JobOptions.Stdin and Stdout.
	stdin  io.Reader
	stdout io.Writer
	// out is the node's main output: chained children, then writers.
	out   Emitter
	sides map[string]Emitter
	in    prometheus.Counter
	ctx   context.Context
}

// Emit processes a batch of input records on the task goroutine.
func (s *stage) Emit(b []Record) error {
	if s.sink != nil {
		if s.node.Sink.Changelog == ChangelogUpsert {
			if b = upsertOnly(b); len(b) == 0 {
				return nil
			}
		}
		s.in.Add(float64(len(b)))
		s.sample.offer(b)
		s.unflushed = true
		s.received += int64(len(b))
		if err := s.sink.Write(s.ctx, b); err != nil {
			return s.writeFailed(b, err)
		}
		s.pending += int64(len(b))
		return nil
	}
	s.in.Add(float64(len(b)))
	return s.op.Process(b, s.out)
}

// emitInput processes a batch of records that came from input i of the
// node: an operator that tells its inputs apart gets i.
func (s *stage) emitInput(i int, b []Record) error {
	if s.mio == nil {
		return s.Emit(b)
	}
	s.in.Add(float64(len(b)))
	return s.mio.ProcessInput(i, b, s.out)
}

// writeFailed handles the error of the sink's Write of b. When the sink
// cannot write one record (SinkRecordError), the records before it are
// flushed and counted before the task fails, and the error names the
// record and its position in the subtask's input.
func (s *stage) writeFailed(b []Record, err error) error {
	var re *SinkRecordError
	if !errors.As(err, &re) || re.Index < 0 || re.Index >= len(b) {
		return err
	}
	s.pending += int64(re.Index)
	pos := s.received - int64(len(b)) + int64(re.Index) + 1
	err = fmt.Errorf("sink %q cannot write its record %d, %s: %w", s.node.ID, pos, previewRecord(b[re.Index]), err)
	if ferr := s.flush(s.ctx); ferr != nil {
		return errors.Join(err, fmt.Errorf("flush sink %q: %w", s.node.ID, ferr))
	}
	return err
}

// previewRecord renders a record's fields for an error message, cut short.
func previewRecord(r Record) string {
	const max = 200
	p := fmt.Sprint(r.Fields)
	if len(p) > max {
		return p[:max] + "..."
	}
	return p
}

// commits tells whether the sink's output becomes visible per checkpoint
// (a TwoPhaseCommitSink in a checkpointing job): its records count as
// written when committed, not when flushed.
func (s *stage) commits() bool {
	_, ok := s.sink.(TwoPhaseCommitSink)
	return ok && s.checkpointing
}

// flush flushes the sink; once it succeeded, the records written since
// the last flush count as written (at commit, for a sink that commits).
func (s *stage) flush(ctx context.Context) error {
	s.unflushed = false
	if err := s.sink.Flush(ctx); err != nil {
		return err
	}
	if !s.commits() || s.flushWrites {
		s.written.Add(float64(s.pending))
		s.pending = 0
	}
	return nil
}

// preCommitted moves the records written since the last barrier into
// checkpoint id, whose committable is c; an empty committable is nothing
// left to commit (the flush wrote them out), so they count now.
func (s *stage) preCommitted(id int64, c []byte) {
	s.flushWrites = len(c) == 0
	s.txns = s.txns || len(c) > 0
	if len(c) == 0 {
		s.written.Add(float64(s.pending))
	} else if s.pending > 0 {
		if s.precommitted == nil {
			s.precommitted = map[int64]int64{}
		}
		s.precommitted[id] += s.pending
	}
	s.pending = 0
}

// committed counts the records of the checkpoints up to id as written.
func (s *stage) committed(id int64) {
	for cp, n := range s.precommitted {
		if cp <= id {
			s.written.Add(float64(n))
			delete(s.precommitted, cp)
		}
	}
}

// side returns the emitter of a side output (discard when nothing reads it).
func (s *stage) side(name string) Emitter {
	if e, ok := s.sides[name]; ok {
		return e
	}
	return discard{}
}

type counting struct {
	c    prometheus.Counter
	next Emitter
}

func (c counting) Emit(b []Record) error {
	c.c.Add(float64(len(b)))
	return c.next.Emit(b)
}

// newStage builds the runtime instance of node n on one subtask; a sink
// with write_ahead is wrapped, its commit markers under stateDir.
func newStage(n *Node, info SubtaskInfo, stateDir string) (*stage, error) {
	s := &stage{node: n, info: info, in: info.Metrics.RecordsIn(info), stateDir: stateDir}
	var err error
	switch n.Kind {
	case SourceNode:
		s.src, err = n.Source.Config.NewSource()
	case StepNode:
		s.op, err = n.Step.Config.NewOperator()
		s.wmh, _ = s.op.(WatermarkHandler)
		s.fin, _ = s.op.(Finisher)
		s.pth, _ = s.op.(ProcessingTimeHandler)
		s.mio, _ = s.op.(MultiInputOperator)
	case SinkNode:
		s.written = info.Metrics.RecordsWritten(info)
		s.sample = info.Metrics.sinkSampler(info)
		s.sink, err = n.Sink.Config.NewSink()
		// A sink that acts on event time (group mode's exchange writer
		// sends the watermark on) gets the task's watermark as a step does.
		s.wmh, _ = s.sink.(WatermarkHandler)
		if err == nil && n.Sink.WriteAhead {
			if n.Sink.wrap == nil {
				err = errors.New("write_ahead: the spec was not loaded with an Env that registers a write-ahead sink wrapper")
			} else {
				s.sink, err = n.Sink.wrap(s.sink, stateDir)
			}
		}
	}
	if err != nil {
		return nil, fmt.Errorf("create %s %q subtask %d: %w", n.Kind, n.ID, info.Subtask, err)
	}
	return s, nil
}

// open opens the stage's operator or sink (sources open in the task).
func (s *stage) open(ctx context.Context, wakeAt func(int64)) error {
	s.ctx = ctx
	switch {
	case s.op != nil:
		oc := &OperatorContext{
			SubtaskInfo: s.info,
			Errors:      NewErrorHandler(s.info, s.node.Step.OnError, s.side(ErrorsStream)),
			Side:        s.side,
			Now:         nowMillis,
			WakeAt:      wakeAt,
			KeyedState:  s.keyedState,
		}
		if err := s.op.Open(ctx, oc); err != nil {
			return fmt.Errorf("open step %q: %w", s.node.ID, err)
		}
	case s.sink != nil:
		cs, err := s.committables()
		if err != nil {
			return err
		}
		sc := &SinkContext{SubtaskInfo: s.info, Committables: cs, Checkpointing: s.checkpointing, Stdout: s.stdout}
		if s.spec != nil {
			sc.Checkpoint, sc.RestartDelay = s.spec.Checkpoint, s.spec.Restart.MaxDelay()
		}
		sc.Changelog = s.node.Sink.Changelog
		if err := s.sink.Open(ctx, sc); err != nil {
			return fmt.Errorf("open sink %q: %w", s.node.ID, err)
		}
	}
	return nil
}

// keyedState creates the stage's state backend on first use, as
// state.backend says: memory, or bbolt with its live file in
// <state dir>/live/<step>-<subtask> (a temporary directory when the job
// has no state dir).
func (s *stage) keyedState() (statestore.Backend, error) {
	if s.state != nil {
		return s.state, nil
	}
	maxPar := s.info.MaxParallelism
	start, end := KeyGroupRange(s.info.Subtask, s.info.Parallelism, maxPar)
	opts := statestore.Options{
		KeyGroup:  func(key string) int { return KeyGroup(key, maxPar) },
		KeyGroups: [2]int{start, end},
		Clock:     nowMillis,

		Incremental: s.spec.Checkpoint != nil && s.spec.Checkpoint.Incremental,
		Changelog:   s.spec.Checkpoint != nil && s.spec.Checkpoint.changelog,
	}
	var (
		b   statestore.Backend
		err error
	)
	if st := s.spec.State; st.Backend == "bbolt" {
		const liveDir = "live"
		dir := ""
		if s.stateDir != "" {
			dir = filepath.Join(s.stateDir, liveDir, fmt.Sprintf("%s-%d", s.node.ID, s.info.Subtask))
		}
		b, err = statestore.NewBolt(statestore.BoltOptions{Options: opts, Dir: dir, CacheEntries: st.CacheEntries})
	} else {
		b, err = statestore.NewMemory(opts)
	}
	if err != nil {
		return nil, fmt.Errorf("keyed state of step %q: %w", s.node.ID, err)
	}
	if s.restore != nil {
		if err := restoreState(s.restore, s.node.ID, b); err != nil {
			_ = b.Close()
			return nil, err
		}
	}
	s.state = b
	return b, nil
}

// sourceContext returns what the source opens with: its position in the
// restored checkpoint. Source positions are per subtask, so a source
// restores only at the parallelism it was checkpointed with, unless its
// config is Rescalable.
func (s *stage) sourceContext() (*SourceContext, error) {
	sc := &SourceContext{SubtaskInfo: s.info, Stdin: s.stdin}
	parts, err := restoredParts(s.restore, "src", s.node.ID)
	if err != nil || len(parts) == 0 {
		return sc, err
	}
	// A subtask checkpointed before it had a position (it had read nothing
	// yet) stored an empty one: the source gets nil, a fresh start.
	for sub, b := range parts {
		if len(b) == 0 {
			parts[sub] = nil
		}
	}
	if len(parts) != s.info.Parallelism {
		if r, ok := s.node.Source.Config.(Rescalable); ok && r.Rescalable() {
			sc.RestoredAll = make([][]byte, 0, len(parts))
			for _, sub := range slices.Sorted(maps.Keys(parts)) {
				sc.RestoredAll = append(sc.RestoredAll, parts[sub])
			}
			return sc, nil
		}
		return nil, fmt.Errorf("source %q was checkpointed with parallelism %d and runs with %d: sources restore at the same parallelism (keyed state rescales)",
			s.node.ID, len(parts), s.info.Parallelism)
	}
	sc.Restored = parts[s.info.Subtask]
	return sc, nil
}

// restoredWatermark returns the source's watermark in the restored
// checkpoint: its subtask's, or, when the parallelism changed, the smallest
// of all (a subtask may now read what a slower one read before).
func (s *stage) restoredWatermark() (wm int64, ok bool, err error) {
	parts, err := restoredParts(s.restore, "wm", s.node.ID)
	if err != nil || len(parts) == 0 {
		return 0, false, err
	}
	decode := func(sub int, b []byte) (int64, error) {
		if len(b) != 8 {
			return 0, fmt.Errorf("watermark of source %q subtask %d in checkpoint %d: %d bytes, not 8", s.node.ID, sub, s.restore.ID(), len(b))
		}
		return int64(binary.BigEndian.Uint64(b)), nil
	}
	srcParts, err := restoredParts(s.restore, "src", s.node.ID)
	if err != nil {
		return 0, false, err
	}
	if len(srcParts) == s.info.Parallelism {
		b, have := parts[s.info.Subtask]
		if !have {
			return 0, false, nil
		}
		wm, err := decode(s.info.Subtask, b)
		return wm, err == nil, err
	}
	if len(parts) < len(srcParts) {
		return 0, false, nil // a subtask had no watermark yet: no lower bound
	}
	wm = MaxWatermark
	for sub, b := range parts {
		w, err := decode(sub, b)
		if err != nil {
			return 0, false, err
		}
		wm = min(wm, w)
	}
	return wm, true, nil
}

// committables returns the restored committables this sink subtask commits:
// those of the old subtasks i with i mod parallelism == this subtask.
func (s *stage) committables() ([][]byte, error) {
	parts, err := restoredParts(s.restore, "sink", s.node.ID)
	if err != nil {
		return nil, err
	}
	var out [][]byte
	for _, sub := range slices.Sorted(maps.Keys(parts)) {
		if sub%s.info.Parallelism != s.info.Subtask {
			continue
		}
		cs, err := decodeCommittables(parts[sub])
		if err != nil {
			return nil, fmt.Errorf("committables of sink %q subtask %d in checkpoint %d: %w", s.node.ID, sub, s.restore.ID(), err)
		}
		out = append(out, cs...)
	}
	return out, nil
}

// encodeCommittables frames a list of committables: a uvarint count, then
// each as a uvarint length and its bytes.
func encodeCommittables(cs [][]byte) []byte {
	out := binary.AppendUvarint(nil, uint64(len(cs)))
	for _, c := range cs {
		out = binary.AppendUvarint(out, uint64(len(c)))
		out = append(out, c...)
	}
	return out
}

var errCommittables = errors.New("malformed committables")

func decodeCommittables(b []byte) ([][]byte, error) {
	n, w := binary.Uvarint(b)
	if w <= 0 || n > uint64(len(b)) {
		return nil, errCommittables
	}
	b = b[w:]
	out := make([][]byte, 0, n)
	for range n {
		l, w := binary.Uvarint(b)
		if w <= 0 || l > uint64(len(b)-w) {
			return nil, errCommittables
		}
		out = append(out, b[w:w+int(l)])
		b = b[w+int(l):]
	}
	if len(b) != 0 {
		return nil, errCommittables
	}
	return out, nil
}

func (s *stage) close(ctx context.Context) error {
	switch {
	case s.op != nil:
		err := s.op.Close()
		if s.state != nil {
			err = errors.Join(err, s.state.Close())
		}
		return err
	case s.sink != nil:
		// After a failure, what the sink took before it goes out (and
		// counts) before it closes; a sink that commits per checkpoint
		// keeps it uncommitted, for the restore to replace.
		var err error
		if s.pending > 0 && (!s.commits() || s.flushWrites) {
			err = s.flush(ctx)
		} else if s.pending > 0 && s.txns {
			// The open transaction's records are dropped: the sink aborts it.
			s.info.Metrics.txnAborts.Add(1)
		}
		s.sample.publish(time.Now(), true)
		return errors.Join(err, s.sink.Close(ctx))
	case s.src != nil:
		return s.src.Close(ctx)
	}
	return nil
}
