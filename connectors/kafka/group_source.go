package kafka

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/IBM/sarama"

	"github.com/eddy-stream/eddy/expr"
	"github.com/eddy-stream/eddy/pipeline"
)

// groupSourceConfig is a kafka source in a generation of group mode: it
// reads the partitions of its topics that the generation assigned to this
// process, from the claims of the consumer group (which start at the
// group's committed offsets), with the kafka source's decoding.
type groupSourceConfig struct {
	SourceConfig
	gen    *generation
	topics []string
	// eventTime is the source's event_time (nil: none): the source keeps
	// the largest event time of each partition, which the committed
	// offsets carry.
	eventTime *expr.Expr
}

func (c *groupSourceConfig) NewSource() (pipeline.Source, error) {
	return &groupSource{source: source{cfg: &c.SourceConfig}, gen: c.gen, topics: c.topics, eventTime: c.eventTime}, nil
}

// Bounded is false: in group mode sources read until the process stops.
func (c *groupSourceConfig) Bounded() bool { return false }

// groupSource is the kafka source with its partitions from the claims.
type groupSource struct {
	source
	gen       *generation
	topics    []string
	eventTime *expr.Expr
	vm        expr.VM
	// times is the largest event time delivered from each split
	// (MinWatermark: none yet). Read goroutine (and Open).
	times []int64
}

// Open waits for the generation's claims and starts reading each.
func (s *groupSource) Open(ctx context.Context, sc *pipeline.SourceContext) error {
	s.id, s.sub, s.par, s.logger = sc.ID, 0, 1, sc.Logger
	if s.logger == nil {
		s.logger = slog.Default()
	}
	s.events = make(chan *event, 16)
	s.now = time.Now
	s.idleAfter = splitIdleAfter
	s.fatal = make(chan error, 1)
	s.stop = make(chan struct{})
	s.free = make(chan *event, 16)
	if sc.Metrics != nil {
		s.pending = sc.Metrics.SourcePending(sc.SubtaskInfo)
		s.invalidUTF8 = sc.Metrics.InvalidUTF8(sc.SubtaskInfo)
	}
	claims, err := s.gen.awaitClaims(ctx, s.topics)
	if err != nil {
		return fmt.Errorf("kafka source %q: %w", s.id, err)
	}
	for _, c := range claims {
		p := &partition{topicPartition: topicPartition{c.Topic(), c.Partition()}, next: c.InitialOffset(), stop: noStop}
		if p.next < 0 {
			p.next = 0
		}
		s.register(p)
	}
	s.encodeTemplate()
	if err := s.restoreTimes(sc); err != nil {
		return fmt.Errorf("kafka source %q: %w", s.id, err)
	}
	sc.Position = encodeGroupPosition(s.posTmpl, s.times)
	for i, c := range claims {
		p := s.parts[i]
		sc.Splits = append(sc.Splits, p.split)
		s.wg.Add(1)
		go s.consume(p, newClaimConsumer(c), p.next, noStop)
	}
	return nil
}

// restoreTimes reads the largest event time of each partition from the
// metadata of its committed offset, into s.times and sc.SplitTimes.
func (s *groupSource) restoreTimes(sc *pipeline.SourceContext) error {
	s.times = make([]int64, len(s.parts))
	for i := range s.times {
		s.times[i] = pipeline.MinWatermark
	}
	if s.eventTime == nil || len(s.parts) == 0 {
		return nil
	}
	tps := make([]topicPartition, len(s.parts))
	for i, p := range s.parts {
		tps[i] = p.topicPartition
	}
	g := s.gen.g
	blocks, err := fetchCommittedBlocks(g.client, g.run.Plan.Group.ID, tps)
	if err != nil {
		return fmt.Errorf("the event times of the committed offsets: %w", err)
	}
	for i, tp := range tps {
		if blk := blocks[tp]; blk != nil {
			if ts, ok := parseTimeMetadata(blk.Metadata); ok {
				s.times[i] = ts
				if sc.SplitTimes == nil {
					sc.SplitTimes = map[int]int64{}
				}
				sc.SplitTimes[s.parts[i].split] = ts
			}
		}
	}
	return nil
}

// Read is the kafka source's, and notes the largest event time of the
// split; the position carries them.
func (s *groupSource) Read(ctx context.Context, b *pipeline.ReadBatch) error {
	err := s.source.Read(ctx, b)
	if s.eventTime != nil && len(b.Records) > 0 {
		t := &s.times[b.Split]
		for i := range b.Records {
			r := &b.Records[i]
			v, verr := s.vm.EvalRecord(s.eventTime, r.Fields, r.Meta)
			if verr != nil {
				continue // the runtime applies on_error
			}
			if ts, terr := pipeline.EventTimeOf(v); terr == nil {
				*t = max(*t, ts)
			}
		}
	}
	if b.Position != nil {
		b.Position = encodeGroupPosition(b.Position, s.times)
	}
	return err
}

// groupPositionVersion starts the position of a group source: a kafka
// source position, then the largest event time of each of its entries.
const groupPositionVersion = 0x80 | positionVersion

// encodeGroupPosition appends times (one per entry of the kafka position
// pos) to pos.
func encodeGroupPosition(pos []byte, times []int64) []byte {
	b := make([]byte, 0, 1+binary.MaxVarintLen64+len(pos)+8*len(times))
	b = append(b, groupPositionVersion)
	b = binary.AppendUvarint(b, uint64(len(pos)))
	b = append(b, pos...)
	for _, t := range times {
		b = binary.BigEndian.AppendUint64(b, uint64(t))
	}
	return b
}

// exchangePositionVersion starts the position of an exchange reader: a
// kafka source position, the number of upstream tasks, then the last
// watermark of each upstream task in each of its entries.
const exchangePositionVersion = groupPositionVersion + 1

// encodeExchangePosition appends wms (per entry of the kafka position pos,
// per upstream task) to pos.
func encodeExchangePosition(pos []byte, wms [][]int64) []byte {
	tasks := 0
	if len(wms) > 0 {
		tasks = len(wms[0])
	}
	b := make([]byte, 0, 1+2*binary.MaxVarintLen64+len(pos)+8*len(wms)*tasks)
	b = append(b, exchangePositionVersion)
	b = binary.AppendUvarint(b, uint64(len(pos)))
	b = append(b, pos...)
	b = binary.AppendUvarint(b, uint64(tasks))
	for _, e := range wms {
		for _, wm := range e {
			b = binary.BigEndian.AppendUint64(b, uint64(wm))
		}
	}
	return b
}

// decodeGroupPosition decodes the position of a group source or of an
// exchange reader (or a kafka source's), and returns with its entries the
// metadata each entry's committed offset carries: the partition's
// largest event time (group source) or its upstream tasks' watermarks
// (exchange reader); "" for none.
func decodeGroupPosition(b []byte) (entries []PositionEntry, meta []string, err error) {
	if len(b) == 0 || (b[0] != groupPositionVersion && b[0] != exchangePositionVersion) {
		entries, err = DecodePosition(b)
		return entries, make([]string, len(entries)), err
	}
	corrupt := errors.New("group position is corrupt")
	n, k := binary.Uvarint(b[1:])
	if k <= 0 || n > uint64(len(b)-1-k) {
		return nil, nil, corrupt
	}
	rest := b[1+k:]
	if entries, err = DecodePosition(rest[:n]); err != nil {
		return nil, nil, err
	}
	rest = rest[n:]
	meta = make([]string, len(entries))
	if b[0] == groupPositionVersion {
		if len(rest) != 8*len(entries) {
			return nil, nil, corrupt
		}
		for i := range entries {
			if ts := int64(binary.BigEndian.Uint64(rest[8*i:])); ts != pipeline.MinWatermark {
				meta[i] = timeMetadataPrefix + strconv.FormatInt(ts, 10)
			}
		}
		return entries, meta, nil
	}
	tasks, k := binary.Uvarint(rest)
	if k <= 0 || uint64(len(rest)-k) != 8*tasks*uint64(len(entries)) {
		return nil, nil, corrupt
	}
	rest = rest[k:]
	for i := range entries {
		wms := make([]int64, tasks)
		for j := range wms {
			wms[j] = int64(binary.BigEndian.Uint64(rest[8*(i*int(tasks)+j):]))
		}
		meta[i] = wmListMetadata(wms)
	}
	return entries, meta, nil
}

// wmListMetadataPrefix starts the metadata of a committed offset of an
// exchange's partition: the last watermark of each upstream task, comma
// separated (empty: none yet), so that the next reader of the partition
// starts where this one was and decides lateness as one process would.
const wmListMetadataPrefix = "eddy-wm:"

func wmListMetadata(wms []int64) string {
	var sb strings.Builder
	sb.WriteString(wmListMetadataPrefix)
	for j, wm := range wms {
		if j > 0 {
			sb.WriteByte(',')
		}
		if wm != pipeline.MinWatermark {
			sb.WriteString(strconv.FormatInt(wm, 10))
		}
	}
	return sb.String()
}

// parseWMListMetadata returns the watermarks of tasks upstream tasks from
// a committed offset's metadata, or false.
func parseWMListMetadata(m string, tasks int) ([]int64, bool) {
	rest, ok := strings.CutPrefix(m, wmListMetadataPrefix)
	if !ok {
		return nil, false
	}
	parts := strings.Split(rest, ",")
	if len(parts) != tasks {
		return nil, false // the upstream stage has another number of tasks now
	}
	out := make([]int64, tasks)
	for j, p := range parts {
		out[j] = pipeline.MinWatermark
		if p == "" {
			continue
		}
		wm, err := strconv.ParseInt(p, 10, 64)
		if err != nil {
			return nil, false
		}
		out[j] = wm
	}
	return out, true
}

// CheckpointComplete does nothing: in group mode the transactions commit
// the offsets.
func (s *groupSource) CheckpointComplete(context.Context, int64, []byte) error { return nil }

// claimConsumer lets the kafka source's partition goroutine read a
// consumer group claim as it reads a partition consumer: the group's
// consumer reports errors on the group, and the claim ends with the
// session.
type claimConsumer struct {
	claim  sarama.ConsumerGroupClaim
	errs   chan *sarama.ConsumerError
	once   sync.Once
	closed chan struct{}
	msgs   chan *sarama.ConsumerMessage
}

var _ sarama.PartitionConsumer = (*claimConsumer)(nil)

func newClaimConsumer(c sarama.ConsumerGroupClaim) *claimConsumer {
	return &claimConsumer{claim: c, errs: make(chan *sarama.ConsumerError), closed: make(chan struct{}), msgs: make(chan *sarama.ConsumerMessage)}
}

// Messages is the claim's, until AsyncClose; then a closed channel.
func (c *claimConsumer) Messages() <-chan *sarama.ConsumerMessage {
	select {
	case <-c.closed:
		return c.msgs
	default:
		return c.claim.Messages()
	}
}

// Errors delivers nothing, and is closed by AsyncClose.
func (c *claimConsumer) Errors() <-chan *sarama.ConsumerError { return c.errs }

func (c *claimConsumer) AsyncClose() {
	c.once.Do(func() {
		close(c.closed)
		close(c.msgs)
		close(c.errs)
	})
}

func (c *claimConsumer) Close() error               { c.AsyncClose(); return nil }
func (c *claimConsumer) HighWaterMarkOffset() int64 { return c.claim.HighWaterMarkOffset() }
func (c *claimConsumer) Pause()                     {}
func (c *claimConsumer) Resume()                    {}
func (c *claimConsumer) IsPaused() bool             { return false }
