package kafka

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"slices"

	"github.com/IBM/sarama"

	"github.com/eddy-stream/eddy/pipeline"
)

// The writers of group mode (the kafka sinks and the exchange writers)
// write through the process's one transactional producer, so every
// checkpoint's output is in its transaction. A task that passed barrier N
// may go on while another task has not reached it: what it writes after N
// belongs to the next transaction, so the writer holds it (txnGate) until
// N committed, and sends it into the next one then. The coordinator
// triggers N+1 only once N completed (max_concurrent 1), so at barrier N+1
// whatever a writer still holds from after N goes out before N+1's
// records.

// txnGate holds a writer's messages written after a barrier until that
// checkpoint's transaction committed. Used on the task goroutine only.
type txnGate struct {
	out *output
	// holding is the last barrier passed whose checkpoint has not
	// committed (0: none): messages are held.
	holding int64
	held    []heldMessages
}

// heldMessages are the messages written after barrier after.
type heldMessages struct {
	after int64
	msgs  []*sarama.ProducerMessage
}

// send sends msg, or holds it while a checkpoint is open.
func (g *txnGate) send(ctx context.Context, msg *sarama.ProducerMessage) error {
	if g.holding == 0 {
		return g.out.send(ctx, msg)
	}
	last := &g.held[len(g.held)-1]
	last.msgs = append(last.msgs, msg)
	return nil
}

// preCommit is barrier id: what is held from earlier barriers goes out
// (their checkpoints committed, or barrier id would not have come), and
// what follows is held. It returns the committable: id.
func (g *txnGate) preCommit(ctx context.Context, id int64) ([]byte, error) {
	if err := g.release(ctx, id-1); err != nil {
		return nil, err
	}
	g.holding = id
	g.held = append(g.held, heldMessages{after: id})
	return binary.BigEndian.AppendUint64(nil, uint64(id)), nil
}

// commit is the completion of the checkpoints of committables: what was
// held after their barriers goes out, into the next transaction.
func (g *txnGate) commit(ctx context.Context, committables [][]byte) error {
	var upTo int64
	for _, c := range committables {
		if len(c) == 8 {
			upTo = max(upTo, int64(binary.BigEndian.Uint64(c)))
		}
	}
	return g.release(ctx, upTo)
}

// release sends what was held after the barriers up to id.
func (g *txnGate) release(ctx context.Context, id int64) error {
	n := 0
	for _, h := range g.held {
		if h.after > id {
			break
		}
		for _, m := range h.msgs {
			if err := g.out.send(ctx, m); err != nil {
				return err
			}
		}
		n++
	}
	g.held = slices.Delete(g.held, 0, n)
	if g.holding <= id {
		g.holding = 0
	}
	return nil
}

// groupSinkConfig is a kafka sink in a generation of group mode.
type groupSinkConfig struct {
	*SinkConfig
	gen *generation
}

func (c *groupSinkConfig) NewSink() (pipeline.Sink, error) {
	return &groupSink{inner: &sink{cfg: c.SinkConfig}, gen: c.gen}, nil
}

// groupSink is a kafka sink that writes through the process's producer:
// the kafka sink's encoding, the group's transactions.
type groupSink struct {
	inner *sink
	gen   *generation
	gate  txnGate
	// part partitions the records the sink's partition expression does not
	// place: the process's producer partitions by hand.
	part       sarama.Partitioner
	partitions int32
}

var _ pipeline.TwoPhaseCommitSink = (*groupSink)(nil)

func (s *groupSink) Open(_ context.Context, sc *pipeline.SinkContext) error {
	in := s.inner
	in.id = sc.ID
	in.logger = sc.Logger
	if in.logger == nil {
		in.logger = slog.New(slog.DiscardHandler)
	}
	in.enc = in.cfg.NewEncoder()
	in.topics = map[string]bool{}
	for _, h := range in.cfg.Headers {
		in.hnames = append(in.hnames, []byte(h.Name))
	}
	in.upsert = sc.Changelog == pipeline.ChangelogUpsert
	if in.upsert && !in.cfg.Key.IsSet() {
		return in.errorf("changelog: upsert needs `key`, the expression of the row's key")
	}
	if in.cfg.TopicExpr.IsSet() {
		return in.errorf("topic_expr is not supported in group mode yet: set topic")
	}
	if in.cfg.CreateTopic != nil {
		if err := s.createTopic(); err != nil {
			return err
		}
	}
	parts, err := s.gen.g.client.Partitions(in.cfg.Topic)
	if err != nil {
		return in.errorf("partitions of topic %s (it must exist in the group's cluster, or give create_topic): %w", in.cfg.Topic, err)
	}
	s.partitions = int32(len(parts))
	in.last = in.cfg.Topic
	s.gate.out = s.gen.g.out
	s.part = in.cfg.partitioner()(in.cfg.Topic)
	return nil
}

// createTopic creates the sink's topic (create_topic) in the group's
// cluster when it does not exist, as the kafka sink does.
func (s *groupSink) createTopic() error {
	in := s.inner
	cl, err := s.gen.g.cfg.newClient(s.gen.g.client.Config())
	if err != nil {
		return in.errorf("%w", err)
	}
	admin, err := sarama.NewClusterAdminFromClient(cl)
	if err != nil {
		_ = cl.Close()
		return in.errorf("connect to the cluster's controller: %w", err)
	}
	in.client, in.admin = cl, admin
	defer func() {
		_ = admin.Close()
		in.client, in.admin = nil, nil
	}()
	return in.ensureTopic(in.cfg.Topic)
}

func (s *groupSink) Write(ctx context.Context, batch []pipeline.Record) error {
	if err := s.gate.out.failure(); err != nil {
		return s.inner.errorf("%w", err)
	}
	for i := range batch {
		msg, err := s.inner.message(s.gate.out, &batch[i])
		var fault *sinkFault
		switch {
		case errors.As(err, &fault):
			return fault.err
		case err != nil:
			return &pipeline.SinkRecordError{Index: i, Err: err}
		}
		if !s.inner.cfg.Partition.IsSet() {
			p, err := s.part.Partition(msg, s.partitions)
			if err != nil {
				return s.inner.errorf("partition: %w", err)
			}
			msg.Partition = p
		}
		if err := s.gate.send(ctx, msg); err != nil {
			return err
		}
	}
	return nil
}

// Flush does nothing: the transaction's commit flushes.
func (s *groupSink) Flush(context.Context) error { return s.gate.out.failure() }

func (s *groupSink) PreCommit(ctx context.Context, id int64) ([]byte, error) {
	return s.gate.preCommit(ctx, id)
}

func (s *groupSink) Commit(ctx context.Context, committables [][]byte) error {
	return s.gate.commit(ctx, committables)
}

func (s *groupSink) Close(context.Context) error { return nil }

// exchangeWriterConfig is the sending end of an exchange in a generation:
// a sink that writes each record to the partition of its key group.
type exchangeWriterConfig struct {
	gen *generation
	x   *pipeline.GroupExchange
	// tasks are the sending stage's tasks that run here (its assigned
	// partitions): the watermark markers name them.
	tasks              []int32
	maxPar, partitions int
}

func (c *exchangeWriterConfig) Validate() error { return nil }

func (c *exchangeWriterConfig) NewSink() (pipeline.Sink, error) {
	return &exchangeWriter{cfg: c}, nil
}

func (c *exchangeWriterConfig) Guarantee() pipeline.Guarantee { return pipeline.ExactlyOnce }

// exchangeWriter sends the records of an exchange, with their event time
// as the record timestamp, and at each barrier a watermark marker from
// each of its tasks into every partition.
type exchangeWriter struct {
	cfg  *exchangeWriterConfig
	gate txnGate
	keys keyer
	// errs applies the keyed step's on_error policy to a record whose key
	// fails, skip or fail, as the hash partitioning of one process does;
	// with dead_letter the record goes to partition 0 instead.
	errs *pipeline.ErrorHandler
	enc  []byte
	// wm is the task's watermark, as OnWatermark last said; idle is set
	// once the task went idle, until it writes or advances again.
	wm   int64
	idle bool
}

var (
	_ pipeline.TwoPhaseCommitSink = (*exchangeWriter)(nil)
	_ pipeline.WatermarkHandler   = (*exchangeWriter)(nil)
	_ pipeline.IdleHandler        = (*exchangeWriter)(nil)
)

func (w *exchangeWriter) Open(_ context.Context, sc *pipeline.SinkContext) error {
	w.gate.out = w.cfg.gen.g.out
	w.keys = keyer{exprs: w.cfg.x.Edge.KeyExprs}
	// Key failures count as the keyed step's, as in one process.
	info := sc.SubtaskInfo
	info.ID = w.cfg.x.Edge.To.ID
	w.errs = pipeline.NewErrorHandler(info, w.cfg.x.Edge.To.Step.OnError, nil)
	w.wm = pipeline.MinWatermark
	return nil
}

func (w *exchangeWriter) Write(ctx context.Context, batch []pipeline.Record) error {
	x := w.cfg.x
	w.idle = w.idle && len(batch) == 0
	for i := range batch {
		r := &batch[i]
		key, err := w.keys.key(r)
		if err != nil {
			err = fmt.Errorf("key_by: %w", err)
			if x.Edge.DeadLetters != nil {
				// The step's dead letters go to its subtask 0 in one
				// process: here to partition 0, whose reader's process
				// applies the policy (and counts the record).
				if err := w.sendKeyFailed(ctx, r, err); err != nil {
					return err
				}
				continue
			}
			if herr := w.errs.Handle(*r, err); herr != nil {
				return herr
			}
			continue
		}
		group := pipeline.KeyGroup(key, w.cfg.maxPar)
		msg := w.gate.out.newMessage()
		msg.Topic = x.Topic.Name
		msg.Partition = int32(pipeline.KeyGroupPartition(group, w.cfg.maxPar, w.cfg.partitions))
		msg.Key = sarama.ByteEncoder(key)
		if w.enc, err = appendExchangeRecord(w.enc[:0], r); err != nil {
			return fmt.Errorf("exchange %s: %w", x.Topic.Name, err)
		}
		msg.Value = sarama.ByteEncoder(slices.Clone(w.enc))
		if r.Time != pipeline.NoTime {
			msg.Timestamp = timeOfMillis(r.Time)
		}
		if err := w.gate.send(ctx, msg); err != nil {
			return err
		}
	}
	return nil
}

// sendKeyFailed sends r, whose key failed with keyErr, to partition 0,
// marked with the error (keyErrorHeader).
func (w *exchangeWriter) sendKeyFailed(ctx context.Context, r *pipeline.Record, keyErr error) error {
	x := w.cfg.x
	msg := w.gate.out.newMessage()
	msg.Topic = x.Topic.Name
	msg.Partition = 0
	msg.Headers = append(msg.Headers, sarama.RecordHeader{Key: []byte(keyErrorHeader), Value: []byte(keyErr.Error())})
	var err error
	if w.enc, err = appendExchangeRecord(w.enc[:0], r); err != nil {
		return fmt.Errorf("exchange %s: %w", x.Topic.Name, err)
	}
	msg.Value = sarama.ByteEncoder(slices.Clone(w.enc))
	if r.Time != pipeline.NoTime {
		msg.Timestamp = timeOfMillis(r.Time)
	}
	return w.gate.send(ctx, msg)
}

// OnWatermark keeps the task's watermark: the next barrier sends it.
func (w *exchangeWriter) OnWatermark(wm int64, _ pipeline.Emitter) error {
	w.wm, w.idle = wm, false
	return nil
}

// OnIdle marks the task idle: the next barrier's markers say so, and the
// readers leave it out of their watermark until it is active again.
func (w *exchangeWriter) OnIdle() error {
	w.idle = true
	return nil
}

func (w *exchangeWriter) Flush(context.Context) error { return w.gate.out.failure() }

// PreCommit sends the watermark markers of the writer's tasks into every
// partition (their watermark, or that they are idle), the last records of
// checkpoint id, and holds what follows.
func (w *exchangeWriter) PreCommit(ctx context.Context, id int64) ([]byte, error) {
	if w.wm != pipeline.MinWatermark || w.idle {
		for _, task := range w.cfg.tasks {
			for p := range w.cfg.partitions {
				msg := w.gate.out.newMessage()
				msg.Topic = w.cfg.x.Topic.Name
				msg.Partition = int32(p)
				msg.Headers = append(msg.Headers, sarama.RecordHeader{Key: []byte(markerHeader)})
				msg.Value = sarama.ByteEncoder(encodeMarker(marker{task: task, wm: w.wm, idle: w.idle}))
				if err := w.gate.send(ctx, msg); err != nil {
					return nil, err
				}
			}
		}
	}
	return w.gate.preCommit(ctx, id)
}

func (w *exchangeWriter) Commit(ctx context.Context, committables [][]byte) error {
	return w.gate.commit(ctx, committables)
}

func (w *exchangeWriter) Close(context.Context) error { return nil }
