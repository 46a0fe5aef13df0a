package kafka

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"reflect"
	"time"

	"github.com/IBM/sarama"
	"github.com/fxamacker/cbor/v2"

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

// markerHeader marks a watermark marker in a repartition topic.
const markerHeader = "eddy-wm"

// marker is a watermark marker: upstream task task is at watermark wm.
type marker struct {
	task int32
	wm   int64
}

func encodeMarker(m marker) []byte {
	b := binary.BigEndian.AppendUint32(make([]byte, 0, 12), uint32(m.task))
	return binary.BigEndian.AppendUint64(b, uint64(m.wm))
}

func decodeMarker(b []byte) (marker, error) {
	if len(b) != 12 {
		return marker{}, fmt.Errorf("a watermark marker of %d bytes", len(b))
	}
	return marker{task: int32(binary.BigEndian.Uint32(b)), wm: int64(binary.BigEndian.Uint64(b[4:]))}, nil
}

// isMarker tells a watermark marker from a record.
func isMarker(m *sarama.ConsumerMessage) bool {
	for _, h := range m.Headers {
		if h != nil && string(h.Key) == markerHeader {
			return true
		}
	}
	return false
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
	// emitted is the last watermark Read returned.
	emitted int64
}

// exchangePartition is one partition the reader reads.
type exchangePartition struct {
	index int
	topic string
	part  int32
	next  int64
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
	r.batches = make(chan *exchangeBatch, 16)
	r.stop = make(chan struct{})
	r.emitted = pipeline.MinWatermark
	r.wms = newWatermarks(len(claims), r.cfg.upstream)
	var entries []PositionEntry
	for i, c := range claims {
		p := &exchangePartition{index: i, topic: topic, part: c.Partition(), next: max(c.InitialOffset(), 0)}
		r.parts = append(r.parts, p)
		entries = append(entries, PositionEntry{Topic: topic, Partition: p.part, Next: p.next, Stop: noStop})
	}
	sc.Position = EncodePosition(entries)
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
// the reader's watermark (then b.Watermark), or to the end of the batch.
func (r *exchangeReader) Read(ctx context.Context, b *pipeline.ReadBatch) error {
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
			r.wms.observe(p.index, int(mk.task), mk.wm)
			if wm := r.wms.current(); wm > r.emitted {
				r.emitted = wm
				b.Watermark, b.HasWatermark = wm, true
				break
			}
			continue
		}
		rec, err := decodeExchangeRecord(m.Value)
		if err != nil {
			return fmt.Errorf("exchange %s[%d] offset %d: %w", p.topic, p.part, m.Offset, err)
		}
		b.Records = append(b.Records, rec)
	}
	if cur.at == len(cur.msgs) {
		r.cur = nil
	}
	b.Position = r.position()
	return nil
}

// position encodes the next offset of every partition.
func (r *exchangeReader) position() []byte {
	entries := make([]PositionEntry, len(r.parts))
	for i, p := range r.parts {
		entries[i] = PositionEntry{Topic: p.topic, Partition: p.part, Next: p.next, Stop: noStop}
	}
	return EncodePosition(entries)
}

func (r *exchangeReader) Close(context.Context) error {
	if r.stop != nil {
		close(r.stop)
	}
	return nil
}

// watermarks is the reader's view of its upstream tasks: the last
// watermark of each upstream task in each partition.
type watermarks struct {
	// wm[partition][task]
	wm [][]int64
}

func newWatermarks(partitions, upstream int) watermarks {
	w := watermarks{wm: make([][]int64, partitions)}
	for i := range w.wm {
		w.wm[i] = make([]int64, upstream)
		for j := range w.wm[i] {
			w.wm[i][j] = pipeline.MinWatermark
		}
	}
	return w
}

// observe records that upstream task is at wm in partition p; a marker
// never moves a task back.
func (w *watermarks) observe(p, task int, wm int64) {
	if task < 0 || task >= len(w.wm[p]) {
		return
	}
	w.wm[p][task] = max(w.wm[p][task], wm)
}

// current is the minimum over the partitions of the minimum over the
// upstream tasks: MinWatermark until every task reported in every
// partition.
func (w *watermarks) current() int64 {
	out := pipeline.MaxWatermark
	for _, p := range w.wm {
		for _, wm := range p {
			out = min(out, wm)
		}
	}
	if len(w.wm) == 0 {
		return pipeline.MinWatermark
	}
	return out
}
