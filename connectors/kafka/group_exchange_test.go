package kafka

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"testing"

	"github.com/IBM/sarama"
	"github.com/stretchr/testify/require"

	"github.com/eddy-stream/eddy/expr"
	"github.com/eddy-stream/eddy/pipeline"
)

// TestExchangeWatermarks: a reader's watermark is the minimum over its
// partitions and every upstream task: nothing until each task reported in
// each partition, held by the slowest one; an idle task is left out until
// it reports a watermark again, and when all are idle the reader is idle.
func TestExchangeWatermarks(t *testing.T) {
	w := newWatermarks(2, 3)
	current := func() int64 {
		wm, idle := w.current()
		require.False(t, idle)
		return wm
	}
	require.Equal(t, pipeline.MinWatermark, current())
	for task := range 3 {
		w.observe(0, task, 100, false)
	}
	require.Equal(t, pipeline.MinWatermark, current(), "partition 1 has heard from no task")
	w.observe(1, 0, 200, false)
	w.observe(1, 1, 300, false)
	require.Equal(t, pipeline.MinWatermark, current(), "task 2 has not reported in partition 1: a window after the exchange must not fire")
	w.observe(1, 2, 150, false)
	require.Equal(t, int64(100), current())
	for task := range 3 {
		w.observe(0, task, 400, false)
	}
	require.Equal(t, int64(150), current(), "task 2 in partition 1 holds the watermark")
	w.observe(1, 2, 120, false)
	require.Equal(t, int64(150), current(), "a marker never moves a task back")

	// Task 2 goes idle (its partitions have nothing to read): it no
	// longer holds the watermark.
	w.observe(1, 2, 150, true)
	w.observe(0, 2, 400, true)
	require.Equal(t, int64(200), current())
	// It is active again: it counts again.
	w.observe(1, 2, 160, false)
	require.Equal(t, int64(160), current())

	all := newWatermarks(1, 2)
	// Task 0 reached 30 and went idle before its marker went out (one
	// marker says both), while task 1 had not reported: 30 never was the
	// minimum of the tasks that are not idle.
	all.observe(0, 0, 30, true)
	wm, idle := all.current()
	require.False(t, idle)
	require.Equal(t, pipeline.MinWatermark, wm, "task 1 has not reported")
	all.observe(0, 1, 20, true)
	wm, idle = all.current()
	require.True(t, idle, "every upstream task is idle: the reader is idle")
	require.Equal(t, int64(30), wm, "and no task holds the watermark back: it is the highest of theirs")
	// A task of another pipeline's numbering (out of range) is ignored.
	all.observe(0, 7, 99, false)
	wm, idle = all.current()
	require.True(t, idle)
	require.Equal(t, int64(30), wm)
}

// TestExchangeMarker: markers round-trip; a value of another size is an
// error.
func TestExchangeMarker(t *testing.T) {
	for _, m := range []marker{{task: 2, wm: 1234}, {task: 0, wm: pipeline.MinWatermark, idle: true}} {
		got, err := decodeMarker(encodeMarker(m))
		require.NoError(t, err)
		require.Equal(t, m, got)
	}
	_, err := decodeMarker([]byte{1, 2, 3})
	require.Error(t, err)
	require.True(t, isMarker(&sarama.ConsumerMessage{Headers: []*sarama.RecordHeader{{Key: []byte(markerHeader)}}}))
	require.False(t, isMarker(&sarama.ConsumerMessage{}))
}

// TestExchangeRecord: a record crosses an exchange with its fields (ints
// as the expressions make them), event time and source metadata.
func TestExchangeRecord(t *testing.T) {
	r := pipeline.Record{Fields: map[string]any{"n": 3, "s": "x", "f": 1.5, "l": []any{1, "a"}, "m": map[string]any{"k": 2}},
		Time: 42, Meta: &expr.Meta{Key: []byte("k"), Headers: map[string]string{"h": "v"}, Partition: 2, Offset: 7, Timestamp: 9}}
	b, err := appendExchangeRecord(nil, &r)
	require.NoError(t, err)
	got, err := decodeExchangeRecord(b)
	require.NoError(t, err)
	require.Equal(t, r, got)
	_, err = decodeExchangeRecord([]byte{0xff})
	require.Error(t, err)
}

// fakeProducer is an AsyncProducer that acknowledges every message and
// records the order they came in.
type fakeProducer struct {
	sarama.AsyncProducer
	in        chan *sarama.ProducerMessage
	successes chan *sarama.ProducerMessage
	errors    chan *sarama.ProducerError
	sent      chan string
	// msgs are the messages as they came in (msgs is left unread by
	// tests that read sent alone: it drops what does not fit).
	msgs chan sarama.ConsumerMessage
}

func newFakeProducer() *fakeProducer {
	p := &fakeProducer{in: make(chan *sarama.ProducerMessage), successes: make(chan *sarama.ProducerMessage, 64),
		errors: make(chan *sarama.ProducerError), sent: make(chan string, 64), msgs: make(chan sarama.ConsumerMessage, 64)}
	go func() {
		for m := range p.in {
			v, _ := m.Value.Encode()
			p.sent <- string(v)
			cm := sarama.ConsumerMessage{Topic: m.Topic, Partition: m.Partition, Value: v}
			for _, h := range m.Headers {
				cm.Headers = append(cm.Headers, &sarama.RecordHeader{Key: slices.Clone(h.Key), Value: slices.Clone(h.Value)})
			}
			select {
			case p.msgs <- cm:
			default:
			}
			p.successes <- m
		}
		close(p.successes)
		close(p.errors)
	}()
	return p
}

func (p *fakeProducer) Input() chan<- *sarama.ProducerMessage     { return p.in }
func (p *fakeProducer) Successes() <-chan *sarama.ProducerMessage { return p.successes }
func (p *fakeProducer) Errors() <-chan *sarama.ProducerError      { return p.errors }
func (p *fakeProducer) AsyncClose()                               { close(p.in) }

// TestTxnGate: what a writer writes after barrier N is held until N's
// transaction committed; at barrier N+1 what is still held from after N
// goes out first (N committed, or N+1 would not have come).
func TestTxnGate(t *testing.T) {
	p := newFakeProducer()
	o := newOutput(p)
	defer func() { require.NoError(t, o.close()) }()
	g := txnGate{out: o}
	ctx := context.Background()
	send := func(v string) {
		require.NoError(t, g.send(ctx, &sarama.ProducerMessage{Value: sarama.StringEncoder(v)}))
	}
	sent := func() []string {
		require.NoError(t, o.flush(ctx))
		var out []string
		for {
			select {
			case v := <-p.sent:
				out = append(out, v)
			default:
				return out
			}
		}
	}
	send("a")
	require.Equal(t, []string{"a"}, sent(), "no barrier yet: sent at once")
	c1, err := g.preCommit(ctx, 1)
	require.NoError(t, err)
	send("b")
	require.Empty(t, sent(), "after barrier 1: held until its transaction committed")
	require.NoError(t, g.commit(ctx, [][]byte{c1}))
	require.Equal(t, []string{"b"}, sent())
	send("c")
	require.Equal(t, []string{"c"}, sent())

	_, err = g.preCommit(ctx, 2)
	require.NoError(t, err)
	send("d")
	c3, err := g.preCommit(ctx, 3) // complete(2) not seen yet: 2 completed before 3 was triggered
	require.NoError(t, err)
	send("e")
	require.Equal(t, []string{"d"}, sent(), "what followed barrier 2 belongs to checkpoint 3")
	require.NoError(t, g.commit(ctx, [][]byte{c3}))
	require.Equal(t, []string{"e"}, sent())
}

// TestGroupPositions: the positions of group sources and exchange readers
// give the offsets to commit and the metadata that carries event time to
// the partition's next reader.
func TestGroupPositions(t *testing.T) {
	entries := []PositionEntry{{Topic: "t", Partition: 0, Next: 5, Stop: noStop}, {Topic: "t", Partition: 3, Next: 9, Stop: noStop}}
	pos := EncodePosition(entries)

	got, meta, err := decodeGroupPosition(encodeGroupPosition(pos, []int64{1234, pipeline.MinWatermark}))
	require.NoError(t, err)
	require.Equal(t, entries, got)
	require.Equal(t, []string{"eddy-ts:1234", ""}, meta)
	ts, ok := parseTimeMetadata(meta[0])
	require.True(t, ok)
	require.Equal(t, int64(1234), ts)

	wms := [][]int64{{10, pipeline.MinWatermark, 30}, {40, 50, 60}}
	got, meta, err = decodeGroupPosition(encodeExchangePosition(pos, wms))
	require.NoError(t, err)
	require.Equal(t, entries, got)
	require.Equal(t, []string{"eddy-wm:10,,30", "eddy-wm:40,50,60"}, meta)
	for i := range wms {
		back, ok := parseWMListMetadata(meta[i], 3)
		require.True(t, ok)
		require.Equal(t, wms[i], back)
	}
	_, ok = parseWMListMetadata(meta[0], 2)
	require.False(t, ok, "another number of upstream tasks: no watermarks to restore")

	got, meta, err = decodeGroupPosition(pos)
	require.NoError(t, err, "a kafka source position")
	require.Equal(t, entries, got)
	require.Equal(t, []string{"", ""}, meta)
	_, _, err = decodeGroupPosition(encodeExchangePosition(pos, wms)[:len(pos)+4])
	require.Error(t, err)
}

// TestExchangeKeyFailed: a record whose key fails, when the keyed step
// has on_error: dead_letter, goes to partition 0 marked with the key's
// error, and the reader hands it to the runtime as a key failure, not
// as a record; with skip it is dropped and counted as the step's, with
// fail the write fails as in one process.
func TestExchangeKeyFailed(t *testing.T) {
	const text = `
version: 1
name: keyfailed
max_parallelism: 8
group: {brokers: [localhost:9092], id: g, replication_factor: 1}
sources:
  - {id: in, type: kafka, brokers: [localhost:9092], topics: [in]}
steps:
  - id: k
    key_by: 'v == 7 ? {"bad": v} : v'
    on_error: %s
    aggregate: {n: count()}
sinks:
  - {id: out, type: kafka, brokers: [localhost:9092], topic: out}
%s`
	// write writes v 1 and 7 through a writer of the exchange, and returns
	// what it sent and the step's error counts.
	write := func(t *testing.T, policy, errSink string) ([]sarama.ConsumerMessage, map[string]pipeline.ErrorCounts, error) {
		t.Helper()
		spec, err := pipeline.Load(pipeline.Default, "k.yaml", []byte(fmt.Sprintf(text, policy, errSink)))
		require.NoError(t, err)
		plan, err := pipeline.Compile(spec)
		require.NoError(t, err)
		gp, err := pipeline.NewGroupPlan(plan)
		require.NoError(t, err)
		p := newFakeProducer()
		o := newOutput(p)
		defer func() { require.NoError(t, o.close()) }()
		gen := &generation{g: &groupRun{out: o}}
		cfg := &exchangeWriterConfig{gen: gen, x: gp.Exchanges[0], tasks: []int32{0}, maxPar: 8, partitions: 8}
		sink, err := cfg.NewSink()
		require.NoError(t, err)
		m := pipeline.NewMetrics()
		ctx := context.Background()
		require.NoError(t, sink.Open(ctx, &pipeline.SinkContext{SubtaskInfo: pipeline.SubtaskInfo{ID: "to:" + gp.Exchanges[0].Topic.Name,
			Parallelism: 1, MaxParallelism: 8, Metrics: m, Logger: slog.New(slog.DiscardHandler)}}))
		werr := sink.Write(ctx, []pipeline.Record{{Fields: map[string]any{"v": 1}, Time: 10}, {Fields: map[string]any{"v": 7}, Time: 20}})
		require.NoError(t, o.flush(ctx))
		var sent []sarama.ConsumerMessage
		for {
			select {
			case cm := <-p.msgs:
				sent = append(sent, cm)
			default:
				return sent, m.RecordErrorCounts(), werr
			}
		}
	}

	t.Run("dead_letter", func(t *testing.T) {
		sent, counts, err := write(t, "dead_letter", "  - {id: dead, from: k.errors, type: kafka, brokers: [localhost:9092], topic: dead}\n")
		require.NoError(t, err)
		require.Len(t, sent, 2)
		require.Empty(t, counts, "counted where the step applies its policy: by the reader's process")
		good, bad := sent[0], sent[1]
		_, ok := keyError(&good)
		require.False(t, ok)
		text, ok := keyError(&bad)
		require.True(t, ok, "the record whose key failed is marked")
		require.Equal(t, int32(0), bad.Partition, "as dead letters go to subtask 0")
		require.Contains(t, text, "key_by: ")
		require.False(t, isMarker(&bad))

		// The reader of partition 0 hands the marked record to the runtime
		// as a key failure, with its fields, event time and error.
		parts := []*exchangePartition{{topic: bad.Topic}}
		r := &exchangeReader{parts: parts, wms: newWatermarks(1, 1), emitted: pipeline.MinWatermark}
		good.Offset, bad.Offset = 0, 1
		r.cur = &exchangeBatch{p: parts[0], msgs: []*sarama.ConsumerMessage{&good, &bad}}
		var b pipeline.ReadBatch
		require.NoError(t, r.Read(context.Background(), &b))
		require.Equal(t, []pipeline.Record{{Fields: map[string]any{"v": 1}, Time: 10}}, b.Records)
		require.Len(t, b.KeyFailed, 1)
		require.Equal(t, pipeline.Record{Fields: map[string]any{"v": 7}, Time: 20}, b.KeyFailed[0].Record)
		require.EqualError(t, b.KeyFailed[0].Err, text)
		require.Equal(t, int64(2), parts[0].next, "both are read")
	})
	t.Run("skip", func(t *testing.T) {
		sent, counts, err := write(t, "skip", "")
		require.NoError(t, err)
		require.Len(t, sent, 1)
		_, ok := keyError(&sent[0])
		require.False(t, ok)
		require.Equal(t, map[string]pipeline.ErrorCounts{"k": {Skipped: 1}}, counts)
	})
	t.Run("fail", func(t *testing.T) {
		sent, counts, err := write(t, "fail", "")
		require.ErrorIs(t, err, pipeline.ErrRecordFailed)
		require.ErrorContains(t, err, `record failed in "k": key_by: `)
		require.Len(t, sent, 1, "the record before it")
		require.Equal(t, map[string]pipeline.ErrorCounts{"k": {Failed: 1}}, counts)
	})
}
