package kafka

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"reflect"
	"time"

	"github.com/IBM/sarama"
	"github.com/fxamacker/cbor/v2"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/eddy-stream/eddy/expr"
	"github.com/eddy-stream/eddy/pipeline"
)

// The exchanges of group mode: a record goes into a repartition topic as
// CBOR (its fields, event time and source metadata; the key is computed
// again on the receiving side), with its event time as the record
// timestamp. A watermark marker is a record with the markerHeader header
// whose value is the sending task and its watermark; the reader of a
// partition keeps the last watermark of each upstream task, and its
// watermark is the minimum over all of them: a window downstream fires
// only when every upstream task passed it.
//
// A record whose key failed, when the keyed step has on_error:
// dead_letter (its edge has DeadLetters), goes to partition 0 with the
// keyErrorHeader header, whose value is the key's error: the reader of
// partition 0 hands it to the runtime as a key failure
// (ReadBatch.KeyFailed), which applies the step's policy and sends the
// dead letter to the step's errors stream, as the step's subtask 0 does
// with the dead letters of its senders in one process.

// markerHeader marks a watermark marker in a repartition topic.
const markerHeader = "eddy-wm"

// keyErrorHeader marks a record whose key failed in a repartition topic;
// its value is the error text.
const keyErrorHeader = "eddy-key-error"

// marker is a watermark marker: upstream task task is at watermark wm,
// or idle (then wm is its last watermark).
type marker struct {
	task int32
	wm   int64
	idle bool
}

// encodeMarker encodes m: the task (int32), the watermark (int64), and a
// byte that is 1 for an idle task.
func encodeMarker(m marker) []byte {
	b := binary.BigEndian.AppendUint32(make([]byte, 0, 13), uint32(m.task))
	b = binary.BigEndian.AppendUint64(b, uint64(m.wm))
	if m.idle {
		return append(b, 1)
	}
	return append(b, 0)
}

func decodeMarker(b []byte) (marker, error) {
	if len(b) != 13 || b[12] > 1 {
		return marker{}, fmt.Errorf("a watermark marker of %d bytes", len(b))
	}
	return marker{task: int32(binary.BigEndian.Uint32(b)), wm: int64(binary.BigEndian.Uint64(b[4:])), idle: b[12] == 1}, nil
}

// isMarker tells a watermark marker from a record.
func isMarker(m *sarama.ConsumerMessage) bool {
	_, ok := header(m, markerHeader)
	return ok
}

// keyError returns the key's error of a record whose key failed (the
// keyErrorHeader header), or ok false for any other record.
func keyError(m *sarama.ConsumerMessage) (text string, ok bool) {
	v, ok := header(m, keyErrorHeader)
	return string(v), ok
}

// header returns the value of m's header key, and whether it has one.
func header(m *sarama.ConsumerMessage, key string) ([]byte, bool) {
	for _, h := range m.Headers {
		if h != nil && string(h.Key) == key {
			return h.Value, true
		}
	}
	return nil, false
}

func timeOfMillis(ms int64) time.Time { return time.UnixMilli(ms) }

// exchangeRecord is a record as an exchange carries it.
type exchangeRecord struct {
	_      struct{} `cbor:",toarray"`
	Fields map[string]any
	Time   int64
	Meta   *exchangeMeta
}

type exchangeMeta struct {
	_         struct{} `cbor:",toarray"`
	Key       []byte
	Headers   map[string]string
	Partition int32
	Offset    int64
	Timestamp int64
}

var (
	exchangeEnc = func() cbor.EncMode {
		em, err := cbor.EncOptions{Time: cbor.TimeRFC3339Nano, TimeTag: cbor.EncTagRequired}.EncMode()
		if err != nil {
			panic(err)
		}
		return em
	}()
	exchangeDec = func() cbor.DecMode {
		dm, err := cbor.DecOptions{
			DefaultMapType:   reflect.TypeFor[map[string]any](),
			UTF8:             cbor.UTF8DecodeInvalid,
			MaxNestedLevels:  256,
			MaxArrayElements: math.MaxInt32,
			MaxMapPairs:      math.MaxInt32,
		}.DecMode()
		if err != nil {
			panic(err)
		}
		return dm
	}()
)

// appendExchangeRecord appends r's encoding to b.
func appendExchangeRecord(b []byte, r *pipeline.Record) ([]byte, error) {
	er := exchangeRecord{Fields: r.Fields, Time: r.Time}
	if m := r.Meta; m != nil {
		er.Meta = &exchangeMeta{Key: m.Key, Headers: m.Headers, Partition: m.Partition, Offset: m.Offset, Timestamp: m.Timestamp}
	}
	enc, err := exchangeEnc.Marshal(er)
	if err != nil {
		return b, err
	}
	return append(b, enc...), nil
}

// decodeExchangeRecord decodes what appendExchangeRecord encoded.
func decodeExchangeRecord(b []byte) (pipeline.Record, error) {
	var er exchangeRecord
	if err := exchangeDec.Unmarshal(b, &er); err != nil {
		return pipeline.Record{}, err
	}
	for k, v := range er.Fields {
		er.Fields[k] = pipeline.NormalizeDecoded(v)
	}
	r := pipeline.Record{Fields: er.Fields, Time: er.Time}
	if m := er.Meta; m != nil {
		r.Meta = &expr.Meta{Key: m.Key, Headers: m.Headers, Partition: m.Partition, Offset: m.Offset, Timestamp: m.Timestamp}
	}
	return r, nil
}

// keyer computes a record's key as the runtime's hash partitioning does.
type keyer struct {
	exprs []*expr.Expr
	vm    expr.VM
	buf   []byte
	vals  []any
}

func (k *keyer) key(r *pipeline.Record) (string, error) {
	var err error
	k.buf = k.buf[:0]
	if len(k.exprs) == 1 {
		v, err := k.vm.EvalRecord(k.exprs[0], r.Fields, r.Meta)
		if err != nil {
			return "", err
		}
		if k.buf, err = pipeline.EncodeKey(k.buf, v); err != nil {
			return "", err
		}
		return string(k.buf), nil
	}
	if k.vals == nil {
		k.vals = make([]any, len(k.exprs))
	}
	for i, e := range k.exprs {
		if k.vals[i], err = k.vm.EvalRecord(e, r.Fields, r.Meta); err != nil {
			return "", err
		}
	}
	if k.buf, err = pipeline.EncodeKey(k.buf, k.vals); err != nil {
		return "", err
	}
	return string(k.buf), nil
}

// exchangeReaderConfig is the receiving end of an exchange in a
// generation: a source that reads the assigned partitions of its topic.
type exchangeReaderConfig struct {
	gen *generation
	x   *pipeline.GroupExchange
	// upstream is the number of tasks of the sending stage: a partition's
	// watermark waits for a marker from each.
	upstream int
}

func (c *exchangeReaderConfig) Validate() error { return nil }

func (c *exchangeReaderConfig) NewSource() (pipeline.Source, error) {
	return &exchangeReader{cfg: c}, nil
}

func (c *exchangeReaderConfig) Guarantee() pipeline.Guarantee { return pipeline.ExactlyOnce }

// exchangeReader reads an exchange's partitions. Its records keep the
// event time they were sent with; its watermark comes from the markers.
type exchangeReader struct {
	cfg   *exchangeReaderConfig
	parts []*exchangePartition
	// batches carries the messages of each partition's goroutine to Read;
	// cur is the batch Read is in the middle of.
	batches chan *exchangeBatch
	cur     *exchangeBatch
	stop    chan struct{}
	wms     watermarks
	// emitted is the last watermark Read returned; idle is set while it
	// last said idle.
	emitted int64
	idle    bool
	// restored is set while the watermark restored at Open has not been
	// returned by Read yet.
	restored bool
	// pending is the reader's lag: the records of its partitions up to
	// their high watermarks that it has not read (nil without metrics).
	pending prometheus.Gauge
}

// exchangePartition is one partition the reader reads.
type exchangePartition struct {
	index int
	topic string
	part  int32
	next  int64
	claim sarama.ConsumerGroupClaim
}

// exchangeBatch is a run of messages of one partition.
type exchangeBatch struct {
	p    *exchangePartition
	msgs []*sarama.ConsumerMessage
	at   int
}

func (r *exchangeReader) Open(ctx context.Context, sc *pipeline.SourceContext) error {
	topic := r.cfg.x.Topic.Name
	claims, err := r.cfg.gen.awaitClaims(ctx, []string{topic})
	if err != nil {
		return fmt.Errorf("exchange %s: %w", topic, err)
	}
	if sc.Metrics != nil {
		r.pending = sc.Metrics.SourcePending(sc.SubtaskInfo)
	}
	r.batches = make(chan *exchangeBatch, 16)
	r.stop = make(chan struct{})
	r.emitted = pipeline.MinWatermark
	r.wms = newWatermarks(len(claims), r.cfg.upstream)
	for i, c := range claims {
		r.parts = append(r.parts, &exchangePartition{index: i, topic: topic, part: c.Partition(), next: max(c.InitialOffset(), 0), claim: c})
	}
	if err := r.restoreWatermarks(); err != nil {
		return fmt.Errorf("exchange %s: %w", topic, err)
	}
	sc.Position = r.position()
	for i, c := range claims {
		go r.pump(r.parts[i], c)
	}
	return nil
}

// pump hands the claim's messages to Read in batches until the claim or
// the reader ends.
func (r *exchangeReader) pump(p *exchangePartition, c sarama.ConsumerGroupClaim) {
	for {
		var m *sarama.ConsumerMessage
		var ok bool
		select {
		case m, ok = <-c.Messages():
			if !ok {
				return
			}
		case <-r.stop:
			return
		}
		b := &exchangeBatch{p: p, msgs: []*sarama.ConsumerMessage{m}}
	drain:
		for len(b.msgs) < maxBatch {
			select {
			case m, ok := <-c.Messages():
				if !ok {
					break drain
				}
				b.msgs = append(b.msgs, m)
			default:
				break drain
			}
		}
		select {
		case r.batches <- b:
		case <-r.stop:
			return
		}
	}
}

// Read returns the records of one partition up to a marker that raises
// the reader's watermark (then b.Watermark), or to the end of the batch;
// the records whose key failed upstream go to b.KeyFailed.
func (r *exchangeReader) Read(ctx context.Context, b *pipeline.ReadBatch) error {
	if r.restored {
		// Before any record: what was late before the restore is late.
		r.restored = false
		b.Watermark, b.HasWatermark = r.emitted, true
		b.Position = r.position()
		return nil
	}
	if r.cur == nil {
		select {
		case r.cur = <-r.batches:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	cur := r.cur
	p := cur.p
	b.Split = p.index
	for cur.at < len(cur.msgs) {
		m := cur.msgs[cur.at]
		cur.at++
		p.next = m.Offset + 1
		if isMarker(m) {
			mk, err := decodeMarker(m.Value)
			if err != nil {
				return fmt.Errorf("exchange %s[%d] offset %d: %w", p.topic, p.part, m.Offset, err)
			}
			r.wms.observe(p.index, int(mk.task), mk.wm, mk.idle)
			wm, idle := r.wms.current()
			switch {
			case idle && (!r.idle || wm > r.emitted):
				// Every upstream task is idle: the watermark advances
				// to the highest of theirs, and the reader goes idle.
				r.idle = true
				r.emitted = max(r.emitted, wm)
				b.Watermark, b.HasWatermark, b.Idle = r.emitted, true, true
			case !idle && (wm > r.emitted || r.idle):
				r.idle = false
				r.emitted = max(r.emitted, wm)
				b.Watermark, b.HasWatermark = r.emitted, true
			default:
				continue
			}
			break
		}
		rec, err := decodeExchangeRecord(m.Value)
		if err != nil {
			return fmt.Errorf("exchange %s[%d] offset %d: %w", p.topic, p.part, m.Offset, err)
		}
		if text, ok := keyError(m); ok {
			b.KeyFailed = append(b.KeyFailed, pipeline.KeyFailure{Record: rec, Err: errors.New(text)})
			continue
		}
		b.Records = append(b.Records, rec)
	}
	if cur.at == len(cur.msgs) {
		r.cur = nil
	}
	b.Position = r.position()
	if r.pending != nil {
		var lag int64
		for _, p := range r.parts {
			lag += max(0, p.claim.HighWaterMarkOffset()-p.next)
		}
		r.pending.Set(float64(lag))
	}
	return nil
}

// position encodes the next offset of every partition and the last
// watermark of each upstream task in it.
func (r *exchangeReader) position() []byte {
	entries := make([]PositionEntry, len(r.parts))
	for i, p := range r.parts {
		entries[i] = PositionEntry{Topic: p.topic, Partition: p.part, Next: p.next, Stop: noStop}
	}
	return encodeExchangePosition(EncodePosition(entries), r.wms.wm)
}

// restoreWatermarks seeds the upstream tasks' watermarks of each
// partition from the metadata of its committed offset: the reader goes
// on where the previous reader of the partition was.
func (r *exchangeReader) restoreWatermarks() error {
	g := r.cfg.gen.g
	tps := make([]topicPartition, len(r.parts))
	for i, p := range r.parts {
		tps[i] = topicPartition{p.topic, p.part}
	}
	if len(tps) == 0 {
		return nil
	}
	blocks, err := fetchCommittedBlocks(g.client, g.run.Plan.Group.ID, tps)
	if err != nil {
		return fmt.Errorf("the watermarks of the committed offsets: %w", err)
	}
	for i, tp := range tps {
		blk := blocks[tp]
		if blk == nil {
			continue
		}
		if wms, ok := parseWMListMetadata(blk.Metadata, r.cfg.upstream); ok {
			for task, wm := range wms {
				r.wms.observe(i, task, wm, false)
			}
		}
	}
	if wm, idle := r.wms.current(); !idle && wm != pipeline.MinWatermark {
		r.emitted, r.restored = wm, true
	}
	return nil
}

func (r *exchangeReader) Close(context.Context) error {
	if r.stop != nil {
		close(r.stop)
	}
	return nil
}

// watermarks is the reader's view of its upstream tasks: the last
// watermark of each upstream task in each partition, and whether it said
// it is idle.
type watermarks struct {
	// wm[partition][task], idle[partition][task]
	wm   [][]int64
	idle [][]bool
}

func newWatermarks(partitions, upstream int) watermarks {
	w := watermarks{wm: make([][]int64, partitions), idle: make([][]bool, partitions)}
	for i := range w.wm {
		w.wm[i] = make([]int64, upstream)
		w.idle[i] = make([]bool, upstream)
		for j := range w.wm[i] {
			w.wm[i][j] = pipeline.MinWatermark
		}
	}
	return w
}

// observe records that upstream task is at wm in partition p, or idle; a
// marker never moves a task's watermark back.
func (w *watermarks) observe(p, task int, wm int64, idle bool) {
	if task < 0 || task >= len(w.wm[p]) {
		return
	}
	w.wm[p][task] = max(w.wm[p][task], wm)
	w.idle[p][task] = idle
}

// current is the minimum over the partitions of the minimum over the
// upstream tasks that are not idle: MinWatermark until every task
// reported in every partition. idle is true when every task is idle in
// every partition; wm is then the highest of their watermarks, which no
// task holds back any more (an idle marker carries the watermark its task
// reached before it went idle, which counts only so).
func (w *watermarks) current() (wm int64, idle bool) {
	wm, active, highest := pipeline.MaxWatermark, false, pipeline.MinWatermark
	for p := range w.wm {
		for task, t := range w.wm[p] {
			highest = max(highest, t)
			if w.idle[p][task] {
				continue
			}
			active = true
			wm = min(wm, t)
		}
	}
	if !active {
		return highest, len(w.wm) > 0
	}
	return wm, false
}
