package kafka

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/IBM/sarama"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/eddy-stream/eddy/connectors/codec"
	"github.com/eddy-stream/eddy/expr"
	"github.com/eddy-stream/eddy/pipeline"
)

// maxBatch is the most records one partition hands to Read at once.
const maxBatch = 1024

// source is one subtask of the kafka source. Open and Close run on the
// task goroutine, Read on the reader goroutine, CheckpointComplete on the
// task goroutine concurrently with Read. Every partition the subtask owns
// has a goroutine that drains its sarama PartitionConsumer, decodes the
// values and sends batches to Read over events; a discovery goroutine adds
// partitions created later.
type source struct {
	cfg    *SourceConfig
	id     string
	sub    int
	par    int
	logger *slog.Logger

	client   sarama.Client
	consumer sarama.Consumer

	// events carries batches from the partition goroutines and partitions
	// added by discovery (in that order for a new partition) to Read.
	events chan *event
	// fatal carries the first error that ends the source.
	fatal chan error
	stop  chan struct{}
	wg    sync.WaitGroup
	free  chan *event

	// Read goroutine (and Open before it): the partitions in split order,
	// how many have not reached their stop offset, and the encoded position
	// with the index of each partition's next offset in it.
	parts     []*partition
	remaining int
	posTmpl   []byte
	posAt     []int

	// readErr is the error that ended the source (Read goroutine).
	readErr error
	// pending is the records the subtask has yet to read, over its
	// partitions (Read goroutine; nil without metrics).
	pending prometheus.Gauge
	// invalidUTF8 counts the json values whose strings held invalid UTF-8
	// (replaced with U+FFFD); warnedUTF8 is set once the first was logged.
	// Partition goroutines decode concurrently.
	invalidUTF8 prometheus.Counter
	warnedUTF8  atomic.Bool

	// Task goroutine: the offsets committed to group_id last.
	committed map[topicPartition]int64

	// splits is what SplitStatus reports, by split: the Read goroutine (and
	// Open) write it once per batch, the run's status reads it from other
	// goroutines. now is the clock of its idleness (time.Now; tests set
	// it), idleAfter how long a partition that delivers nothing takes to
	// count as idle.
	splitsMu  sync.Mutex
	splits    []splitState
	now       func() time.Time
	idleAfter time.Duration
}

// splitIdleAfter is how long a partition delivers nothing before its
// status says idle.
const splitIdleAfter = 10 * time.Second

// splitState is where a partition stands, as SplitStatus reports it.
type splitState struct {
	name      string
	next, hwm int64
	done      bool
	// last is when the partition last delivered records, or when the
	// subtask started reading it.
	last time.Time
}

// partition is one partition the subtask reads: a split.
type partition struct {
	topicPartition
	split int
	// next is the offset after the last record handed out by Read; stop is
	// the stopping offset (bounded) or noStop. Read goroutine only.
	next, stop int64
	done       bool
	// hwm is the partition's high watermark at its newest batch (0: none
	// yet).
	hwm int64
}

// event is what a partition goroutine or discovery hands to Read.
type event struct {
	part   *partition
	recs   []pipeline.Record
	failed []pipeline.FailedRecord
	// next is the partition's offset after recs and failed.
	next int64
	// hwm is the partition's high watermark when the batch was fetched
	// (0: unknown).
	hwm int64
	// done says that the partition reached its stop offset.
	done bool
	// added are partitions that discovery starts reading.
	added []*partition
}

// Open connects, finds the partitions this subtask owns, resolves where
// each starts (the restored position, else start_from) and where a bounded
// source stops, starts reading them and sets sc.Position to that start.
// The runtime calls it on the source task goroutine before the first Read.
func (s *source) Open(ctx context.Context, sc *pipeline.SourceContext) (err error) {
	s.id, s.sub, s.par, s.logger = sc.ID, sc.Subtask, max(sc.Parallelism, 1), sc.Logger
	if s.logger == nil {
		s.logger = slog.Default()
	}
	s.events = make(chan *event, 16)
	if s.now == nil {
		s.now = time.Now
	}
	if s.idleAfter == 0 {
		s.idleAfter = splitIdleAfter
	}
	s.fatal = make(chan error, 1)
	s.stop = make(chan struct{})
	s.free = make(chan *event, 16)
	if sc.Metrics != nil {
		s.pending = sc.Metrics.SourcePending(sc.SubtaskInfo)
		s.invalidUTF8 = sc.Metrics.InvalidUTF8(sc.SubtaskInfo)
	}
	conf, err := s.cfg.consumerConfig()
	if err != nil {
		return fmt.Errorf("kafka source %q: %w", s.id, err)
	}
	if s.client, err = s.cfg.newClient(conf); err != nil {
		return fmt.Errorf("kafka source %q: %w", s.id, err)
	}
	defer func() {
		if err != nil {
			_ = s.Close(context.WithoutCancel(ctx))
			err = fmt.Errorf("kafka source %q: %w", s.id, err)
		}
	}()
	owned, err := s.ownedPartitions(nil)
	if err != nil {
		return err
	}
	restored, isRestore, err := restoredEntries(sc)
	if err != nil {
		return err
	}
	parts := make([]*partition, 0, len(owned))
	var fresh, needStop []topicPartition
	for _, tp := range owned {
		p := &partition{topicPartition: tp, next: -1, stop: noStop}
		if e, ok := restored[tp]; ok {
			p.next, p.stop = e.Next, e.Stop
		} else if isRestore {
			// Created after the checkpoint: read from the earliest offset.
			p.next = sarama.OffsetOldest
		} else {
			fresh = append(fresh, tp)
		}
		if !s.cfg.Bounded() {
			p.stop = noStop
		} else if p.stop == noStop {
			needStop = append(needStop, tp)
		}
		parts = append(parts, p)
	}
	for tp := range restored {
		if owner(tp.topic, tp.partition, s.par) == s.sub && !slices.Contains(owned, tp) {
			s.logger.Warn("partition of the restored position no longer matches the topics or no longer exists; it is not read",
				"source", s.id, "partition", tp.String())
		}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := s.resolveStarts(parts, fresh); err != nil {
		return err
	}
	if err := s.resolveStops(parts, needStop); err != nil {
		return err
	}
	if s.consumer, err = sarama.NewConsumerFromClient(s.client); err != nil {
		return fmt.Errorf("create consumer: %w", err)
	}
	for _, p := range parts {
		s.register(p)
	}
	s.encodeTemplate()
	sc.Position = slices.Clone(s.posTmpl)
	// Every partition to read holds the watermark back from the start, as
	// in Flink, until it delivers, ends or goes idle: its first records are
	// not late because another partition ran ahead.
	for _, p := range parts {
		if !p.done {
			sc.Splits = append(sc.Splits, p.split)
		}
	}
	for _, p := range parts {
		if p.done {
			continue
		}
		if err := s.start(p); err != nil {
			return err
		}
	}
	if s.cfg.DiscoveryInterval > 0 && !s.cfg.Bounded() {
		known := map[topicPartition]bool{}
		for _, p := range parts {
			known[p.topicPartition] = true
		}
		s.wg.Add(1)
		go s.discover(known)
	}
	return nil
}

// restoredEntries merges the restored position(s) by partition; isRestore
// is true when the run restores a checkpoint.
func restoredEntries(sc *pipeline.SourceContext) (map[topicPartition]PositionEntry, bool, error) {
	out := map[topicPartition]PositionEntry{}
	all := sc.RestoredAll
	if sc.Restored != nil {
		all = [][]byte{sc.Restored}
	}
	for i, b := range all {
		if b == nil {
			continue
		}
		entries, err := DecodePosition(b)
		if err != nil {
			return nil, false, fmt.Errorf("restore position %d: %w", i, err)
		}
		for _, e := range entries {
			out[topicPartition{e.Topic, e.Partition}] = e
		}
	}
	return out, sc.Restored != nil || sc.RestoredAll != nil, nil
}

// ownedPartitions refreshes the metadata and returns the partitions of the
// subscribed topics that this subtask owns, sorted. At the first call
// (known == nil) a listed topic that does not exist is an error.
func (s *source) ownedPartitions(known map[topicPartition]bool) ([]topicPartition, error) {
	var topics []string
	if s.cfg.pattern != nil {
		if err := s.client.RefreshMetadata(); err != nil {
			return nil, fmt.Errorf("read the cluster's topics: %w", err)
		}
		all, err := s.client.Topics()
		if err != nil {
			return nil, fmt.Errorf("read the cluster's topics: %w", err)
		}
		for _, t := range all {
			if !strings.HasPrefix(t, "__") && s.cfg.pattern.MatchString(t) {
				topics = append(topics, t)
			}
		}
		if len(topics) == 0 && known == nil {
			s.logger.Warn("no topic matches topic_pattern yet", "source", s.id, "topic_pattern", s.cfg.TopicPattern)
		}
	} else {
		topics = s.cfg.Topics
		if err := s.client.RefreshMetadata(topics...); err != nil {
			if known == nil {
				return nil, fmt.Errorf("read the metadata of topics %s: %w (check that the topics exist: the source does not create them)",
					strings.Join(topics, ", "), err)
			}
			return nil, fmt.Errorf("refresh the metadata of topics %s: %w", strings.Join(topics, ", "), err)
		}
	}
	var out []topicPartition
	for _, t := range topics {
		ps, err := s.client.Partitions(t)
		if err != nil {
			if errors.Is(err, sarama.ErrUnknownTopicOrPartition) {
				err = fmt.Errorf("topic %q does not exist: create it or fix `topics`", t)
			}
			return nil, err
		}
		for _, p := range ps {
			if owner(t, p, s.par) == s.sub {
				out = append(out, topicPartition{t, p})
			}
		}
	}
	slices.SortFunc(out, func(a, b topicPartition) int {
		if c := strings.Compare(a.topic, b.topic); c != 0 {
			return c
		}
		return int(a.partition - b.partition)
	})
	return out, nil
}

// resolveStarts sets the start offset of the partitions fresh (those of a
// start without a checkpoint) from start_from, and turns the
// sarama.OffsetOldest of partitions new since a checkpoint into offsets.
func (s *source) resolveStarts(parts []*partition, fresh []topicPartition) error {
	starts := map[topicPartition]int64{}
	var earliest []topicPartition
	for _, p := range parts {
		if p.next == sarama.OffsetOldest {
			earliest = append(earliest, p.topicPartition)
		}
	}
	iso := s.cfg.isolation()
	if len(fresh) > 0 {
		switch s.cfg.StartFrom {
		case StartEarliest:
			earliest = append(earliest, fresh...)
		case StartLatest:
			m, err := listOffsets(s.client, iso, fresh, func(topicPartition) int64 { return sarama.OffsetNewest })
			if err != nil {
				return fmt.Errorf("find the latest offsets: %w", err)
			}
			maps.Copy(starts, m)
		case StartTimestamp:
			if err := s.offsetsForTime(fresh, s.cfg.startTS, starts); err != nil {
				return fmt.Errorf("find the offsets of start_timestamp: %w", err)
			}
		case StartCommitted:
			m, err := fetchCommitted(s.client, s.cfg.GroupID, fresh)
			if err != nil {
				return err
			}
			oldest, err := listOffsets(s.client, iso, fresh, func(topicPartition) int64 { return sarama.OffsetOldest })
			if err != nil {
				return fmt.Errorf("find the earliest offsets: %w", err)
			}
			for _, tp := range fresh {
				off, ok := m[tp]
				switch {
				case !ok:
					s.logger.Info("no committed offset; starting at the earliest", "source", s.id, "group_id", s.cfg.GroupID, "partition", tp.String())
					off = oldest[tp]
				case off < oldest[tp]:
					s.logger.Warn("the committed offset was deleted by retention; starting at the earliest", "source", s.id,
						"group_id", s.cfg.GroupID, "partition", tp.String(), "committed", off, "earliest", oldest[tp])
					off = oldest[tp]
				}
				starts[tp] = off
			}
		}
	}
	if len(earliest) > 0 {
		m, err := listOffsets(s.client, iso, earliest, func(topicPartition) int64 { return sarama.OffsetOldest })
		if err != nil {
			return fmt.Errorf("find the earliest offsets: %w", err)
		}
		maps.Copy(starts, m)
	}
	for _, p := range parts {
		if off, ok := starts[p.topicPartition]; ok {
			p.next = off
		}
	}
	return nil
}

// offsetsForTime puts into out the first offset of each partition whose
// record timestamp is at or after ts, or the latest offset where none is.
func (s *source) offsetsForTime(parts []topicPartition, ts int64, out map[topicPartition]int64) error {
	iso := s.cfg.isolation()
	byTime, err := listOffsets(s.client, iso, parts, func(topicPartition) int64 { return ts })
	if err != nil {
		return err
	}
	latest, err := listOffsets(s.client, iso, parts, func(topicPartition) int64 { return sarama.OffsetNewest })
	if err != nil {
		return err
	}
	for _, tp := range parts {
		off := latest[tp]
		if t := byTime[tp]; t >= 0 && t < off {
			off = t
		}
		out[tp] = off
	}
	return nil
}

// resolveStops sets the stop offsets of a bounded source's partitions
// that have none yet (the first start): the latest offset (the last
// stable offset under read_committed) or the first offset at stop_at.
func (s *source) resolveStops(parts []*partition, need []topicPartition) error {
	if len(need) == 0 {
		return nil
	}
	stops := map[topicPartition]int64{}
	if s.cfg.stopAtTime {
		if err := s.offsetsForTime(need, s.cfg.stopTS, stops); err != nil {
			return fmt.Errorf("find the offsets of stop_at: %w", err)
		}
	} else {
		m, err := listOffsets(s.client, s.cfg.isolation(), need, func(topicPartition) int64 { return sarama.OffsetNewest })
		if err != nil {
			return fmt.Errorf("find the latest offsets for stop_at: %w", err)
		}
		stops = m
	}
	for _, p := range parts {
		if off, ok := stops[p.topicPartition]; ok {
			p.stop = off
		}
	}
	return nil
}

// register adds p to the subtask's partitions (Read goroutine, or Open).
func (s *source) register(p *partition) {
	p.split = len(s.parts)
	s.parts = append(s.parts, p)
	s.splitsMu.Lock()
	s.splits = append(s.splits, splitState{name: p.topic + "/" + strconv.Itoa(int(p.partition)), last: s.now()})
	s.splitsMu.Unlock()
	defer s.noteSplit(p, false)
	if p.stop != noStop && p.next >= p.stop {
		p.done = true
		return
	}
	s.remaining++
}

// noteSplit copies where p stands for SplitStatus; delivered says that it
// just handed out records (Read goroutine, or Open).
func (s *source) noteSplit(p *partition, delivered bool) {
	s.splitsMu.Lock()
	defer s.splitsMu.Unlock()
	st := &s.splits[p.split]
	st.next, st.hwm, st.done = p.next, p.hwm, p.done
	if delivered {
		st.last = s.now()
	}
}

// SplitStatus reports each partition of the subtask, in split order: the
// next offset to read, the lag (the high watermark of its newest batch
// less the next offset; unknown until a batch came, 0 once a bounded
// partition is done) and whether it is idle: done, or it delivered nothing
// for splitIdleAfter. Under read_committed the high watermark counts
// transaction markers too (see updatePending). Safe from any goroutine
// (pipeline.SplitStatuser).
func (s *source) SplitStatus() []pipeline.SplitStatus {
	s.splitsMu.Lock()
	defer s.splitsMu.Unlock()
	now := s.now()
	out := make([]pipeline.SplitStatus, len(s.splits))
	for i, st := range s.splits {
		out[i] = pipeline.SplitStatus{Split: i, Name: st.name, Offset: st.next,
			Idle: st.done || now.Sub(st.last) >= s.idleAfter}
		switch {
		case st.done:
			out[i].Lag = new(int64)
		case st.hwm > 0:
			lag := max(st.hwm-st.next, 0)
			out[i].Lag = &lag
		}
	}
	return out
}

// encodeTemplate encodes the position of every partition and where each
// next offset sits in it.
func (s *source) encodeTemplate() {
	entries := make([]PositionEntry, len(s.parts))
	for i, p := range s.parts {
		entries[i] = PositionEntry{Topic: p.topic, Partition: p.partition, Next: p.next, Stop: p.stop}
	}
	s.posTmpl, s.posAt = appendPosition(s.posTmpl[:0], entries, make([]int, 0, len(entries)))
}

// start starts reading p at p.next.
func (s *source) start(p *partition) error {
	pc, err := s.consumer.ConsumePartition(p.topic, p.partition, p.next)
	if err != nil {
		if errors.Is(err, sarama.ErrOffsetOutOfRange) {
			return fmt.Errorf("start reading %s at offset %d: the offset no longer exists (deleted by retention, or the topic was recreated): "+
				"restore an earlier checkpoint, or start the pipeline without its checkpoints to use start_from", p, p.next)
		}
		return fmt.Errorf("start reading %s at offset %d: %w", p, p.next, err)
	}
	s.wg.Add(1)
	go s.consume(p, pc, p.next, p.stop)
	return nil
}

// Read returns the next batch of one partition: its records and the values
// that did not decode, b.Split the partition's split index, b.Position the
// subtask's offsets after them, b.SplitDone when the partition reached its
// stop offset. It returns io.EOF once every partition of a bounded source
// is done, and the first error that ended a partition.
func (s *source) Read(ctx context.Context, b *pipeline.ReadBatch) error {
	for {
		if s.readErr != nil {
			return s.readErr
		}
		if s.cfg.Bounded() && s.remaining == 0 {
			return io.EOF
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case s.readErr = <-s.fatal:
			continue
		case ev := <-s.events:
			if ev.added != nil {
				for _, p := range ev.added {
					s.register(p)
				}
				s.encodeTemplate()
				continue
			}
			p := ev.part
			for _, f := range ev.failed {
				f.At += len(b.Records)
				b.Failed = append(b.Failed, f)
			}
			b.Records = append(b.Records, ev.recs...)
			b.Split = p.split
			p.next = ev.next
			if ev.hwm > 0 {
				p.hwm = ev.hwm
			}
			binary.BigEndian.PutUint64(s.posTmpl[s.posAt[p.split]:], uint64(p.next))
			if ev.done && !p.done {
				p.done = true
				s.remaining--
				b.SplitDone = true
			}
			s.noteSplit(p, len(ev.recs)+len(ev.failed) > 0)
			b.Position = slices.Clone(s.posTmpl)
			s.recycle(ev)
			s.updatePending()
			return nil
		}
	}
}

// updatePending sets the pending gauge: what each partition not done has
// between its next offset and its high watermark. Under read_committed
// the high watermark also counts open transactions' records and the
// markers that end transactions, so a partition written transactionally
// shows a record or so pending when it is read to the end.
func (s *source) updatePending() {
	if s.pending == nil {
		return
	}
	var n int64
	for _, p := range s.parts {
		if !p.done && p.hwm > p.next {
			n += p.hwm - p.next
		}
	}
	s.pending.Set(float64(n))
}

func (s *source) recycle(ev *event) {
	clear(ev.recs)
	clear(ev.failed)
	*ev = event{recs: ev.recs[:0], failed: ev.failed[:0]}
	select {
	case s.free <- ev:
	default:
	}
}

func (s *source) newEvent(p *partition) *event {
	select {
	case ev := <-s.free:
		ev.part = p
		return ev
	default:
		return &event{part: p, recs: make([]pipeline.Record, 0, 64)}
	}
}

// send hands ev to Read; false when the source is closing.
func (s *source) send(ev *event) bool {
	select {
	case s.events <- ev:
		return true
	case <-s.stop:
		return false
	}
}

// fail reports err as the error that ends the source (the first one wins).
func (s *source) fail(err error) {
	select {
	case s.fatal <- err:
	default:
	}
}

// consume runs on p's goroutine: it drains pc into batches of decoded
// records and sends them to Read, until the source closes, p reaches
// stop (bounded), or a fatal error. next is the offset it starts at; p's
// fields belong to the Read goroutine and are not used here.
func (s *source) consume(p *partition, pc sarama.PartitionConsumer, next, stop int64) {
	defer s.wg.Done()
	defer func() {
		pc.AsyncClose()
		for range pc.Messages() {
		}
		for range pc.Errors() {
		}
	}()
	dec := s.cfg.newValueDecoder()
	msgs := make([]*sarama.ConsumerMessage, 0, maxBatch)
	// A bounded partition that stays quiet before its stop offset may be
	// at transaction markers or aborted records only, which the consumer
	// never hands out: probe the broker then.
	var quiet *time.Timer
	var quietC <-chan time.Time
	probeAfter := 2 * s.cfg.FetchMaxWait.D()
	if stop != noStop {
		quiet = time.NewTimer(probeAfter)
		defer quiet.Stop()
		quietC = quiet.C
	}
	for {
		msgs = msgs[:0]
		select {
		case <-s.stop:
			return
		case m, ok := <-pc.Messages():
			if !ok {
				return
			}
			msgs = append(msgs, m)
		case cerr, ok := <-pc.Errors():
			if !ok {
				return
			}
			if s.partitionError(p, cerr.Err) {
				return
			}
			continue
		case <-quietC:
			visible, err := visibleBefore(s.client, s.cfg.isolation(), p.topicPartition, next, stop)
			if err != nil {
				s.logger.Warn("cannot check whether records remain before the stop offset; retrying", "source", s.id,
					"partition", p.String(), "err", err)
			}
			if err == nil && !visible {
				ev := s.newEvent(p)
				ev.next, ev.done = stop, true
				s.send(ev)
				return
			}
			quiet.Reset(probeAfter)
			continue
		}
	drain:
		for len(msgs) < maxBatch {
			select {
			case m, ok := <-pc.Messages():
				if !ok {
					break drain
				}
				msgs = append(msgs, m)
			default:
				break drain
			}
		}
		ev := s.newEvent(p)
		ev.next = next
		ev.hwm = pc.HighWaterMarkOffset()
		s.decode(dec, msgs, stop, ev)
		done := ev.done
		next = ev.next
		clear(msgs)
		if !s.send(ev) || done { // ev belongs to Read once sent
			return
		}
		if quiet != nil {
			quiet.Reset(probeAfter)
		}
	}
}

// partitionError handles an error of p's consumer: a fatal one ends the
// source (true), others are logged (sarama retries them).
func (s *source) partitionError(p *partition, err error) bool {
	switch {
	case errors.Is(err, sarama.ErrOffsetOutOfRange):
		s.fail(fmt.Errorf("kafka source %q: read %s: the next offset no longer exists (deleted by retention while the source was behind, "+
			"or the topic was recreated): %w", s.id, p, err))
		return true
	case errors.Is(err, sarama.ErrTopicAuthorizationFailed), errors.Is(err, sarama.ErrClusterAuthorizationFailed),
		errors.Is(err, sarama.ErrSASLAuthenticationFailed):
		s.fail(fmt.Errorf("kafka source %q: read %s: %w (check the ACLs and the sasl settings)", s.id, p, err))
		return true
	}
	s.logger.Warn("kafka consumer error; retrying", "source", s.id, "partition", p.String(), "err", err)
	return false
}

// decode appends the records of msgs to ev (the metadata of a batch in one
// slice), and values that do not decode to ev.failed. A message at or past
// stop is not read and ends the partition.
func (s *source) decode(dec valueDecoder, msgs []*sarama.ConsumerMessage, stop int64, ev *event) {
	metas := make([]expr.Meta, len(msgs))
	for i, m := range msgs {
		if stop != noStop && m.Offset >= stop {
			ev.next, ev.done = stop, true
			return
		}
		ev.next = m.Offset + 1
		fields, invalidUTF8, err := dec(m.Value)
		if invalidUTF8 && err == nil {
			s.replacedUTF8(m)
		}
		if err != nil {
			ev.failed = append(ev.failed, pipeline.FailedRecord{
				Fields: map[string]any{"raw": string(m.Value)},
				Err:    fmt.Errorf("kafka %s offset %d: %w", topicPartition{m.Topic, m.Partition}, m.Offset, err),
				At:     len(ev.recs),
			})
			continue
		}
		meta := &metas[i]
		meta.Key, meta.Partition, meta.Offset = m.Key, m.Partition, m.Offset
		meta.Timestamp = -1
		if !m.Timestamp.IsZero() {
			meta.Timestamp = m.Timestamp.UnixMilli()
		}
		if len(m.Headers) > 0 {
			meta.Headers = make(map[string]string, len(m.Headers))
			for _, h := range m.Headers {
				if h != nil {
					meta.Headers[string(h.Key)] = string(h.Value)
				}
			}
		}
		ev.recs = append(ev.recs, pipeline.Record{Fields: fields, Time: pipeline.NoTime, Meta: meta})
	}
	if stop != noStop && ev.next >= stop {
		ev.done = true
	}
}

// replacedUTF8 counts a message whose json strings held invalid UTF-8 and
// logs the first of the subtask's at warn level. Called from partition
// goroutines.
func (s *source) replacedUTF8(m *sarama.ConsumerMessage) {
	if s.invalidUTF8 != nil {
		s.invalidUTF8.Inc()
	}
	if s.warnedUTF8.CompareAndSwap(false, true) {
		s.logger.Warn("invalid UTF-8 in a json string was replaced with U+FFFD; later ones are counted in eddy_source_invalid_utf8_total",
			"source", s.id, "partition", topicPartition{m.Topic, m.Partition}.String(), "offset", m.Offset)
	}
}

// discover runs on its own goroutine: every discovery_interval it looks
// for partitions this subtask owns that it does not read yet (new
// partitions, new topics matching topic_pattern) and starts them at their
// earliest offset, as Flink does.
func (s *source) discover(known map[topicPartition]bool) {
	defer s.wg.Done()
	t := time.NewTicker(s.cfg.DiscoveryInterval.D())
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
		}
		owned, err := s.ownedPartitions(known)
		if err != nil {
			s.logger.Warn("partition discovery failed; trying again at the next interval", "source", s.id, "err", err)
			continue
		}
		var added []topicPartition
		for _, tp := range owned {
			if !known[tp] {
				added = append(added, tp)
			}
		}
		if len(added) == 0 {
			continue
		}
		starts, err := listOffsets(s.client, s.cfg.isolation(), added, func(topicPartition) int64 { return sarama.OffsetOldest })
		if err != nil {
			s.logger.Warn("cannot find the earliest offsets of new partitions; trying again at the next interval", "source", s.id, "err", err)
			continue
		}
		parts := make([]*partition, len(added))
		for i, tp := range added {
			parts[i] = &partition{topicPartition: tp, next: starts[tp], stop: noStop}
			known[tp] = true
			s.logger.Info("reading a new partition from its earliest offset", "source", s.id, "partition", tp.String(), "offset", starts[tp])
		}
		// Read learns of the partitions before their first batch.
		if !s.send(&event{added: parts}) {
			return
		}
		for _, p := range parts {
			if err := s.start(p); err != nil {
				s.fail(fmt.Errorf("kafka source %q: %w", s.id, err))
				return
			}
		}
	}
}

// Close stops the partition goroutines and discovery and closes the
// consumer and the connections. It is called on the task goroutine after
// Read returned for the last time (or when Open fails).
func (s *source) Close(context.Context) error {
	if s.stop != nil {
		select {
		case <-s.stop:
		default:
			close(s.stop)
		}
	}
	s.wg.Wait()
	var errs []error
	if s.consumer != nil {
		errs = append(errs, s.consumer.Close())
		s.consumer = nil
	}
	if s.client != nil {
		errs = append(errs, s.client.Close())
		s.client = nil
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("close kafka source %q: %w", s.id, err)
	}
	return nil
}

// CheckpointComplete commits the offsets of position to group_id, for lag
// monitoring only: eddy restores from its checkpoints, never from the
// group. Called on the task goroutine, concurrently with Read; only
// offsets that changed since the last commit are sent.
func (s *source) CheckpointComplete(_ context.Context, _ int64, position []byte) error {
	if s.cfg.GroupID == "" || position == nil || s.client == nil {
		return nil
	}
	entries, err := DecodePosition(position)
	if err != nil {
		return err
	}
	offsets := map[topicPartition]int64{}
	for _, e := range entries {
		tp := topicPartition{e.Topic, e.Partition}
		if off, ok := s.committed[tp]; !ok || off != e.Next {
			offsets[tp] = e.Next
		}
	}
	if len(offsets) == 0 {
		return nil
	}
	if err := commitOffsets(s.client, s.cfg.GroupID, offsets); err != nil {
		return err
	}
	if s.committed == nil {
		s.committed = map[topicPartition]int64{}
	}
	maps.Copy(s.committed, offsets)
	return nil
}

// valueDecoder turns a message value into a record's fields; invalidUTF8
// reports a json value whose strings held invalid UTF-8, replaced with
// U+FFFD.
type valueDecoder func(value []byte) (fields map[string]any, invalidUTF8 bool, err error)

// newValueDecoder returns a decoder of the configured format; a csv one
// belongs to one goroutine.
func (c *SourceConfig) newValueDecoder() valueDecoder {
	switch c.Format {
	case FormatRaw:
		return func(v []byte) (map[string]any, bool, error) {
			if v == nil {
				return map[string]any{"value": nil}, false, nil
			}
			return map[string]any{"value": string(v)}, false, nil
		}
	case codec.Text:
		return func(v []byte) (map[string]any, bool, error) { return map[string]any{"line": string(v)}, false, nil }
	case codec.CSV:
		d := &codec.CSVDecoder{Comma: delimiter(c.CSVDelimiter)}
		_, _ = d.Decode(csvHeader(c.Columns, d.Comma))
		return func(v []byte) (map[string]any, bool, error) {
			v = bytes.TrimSuffix(bytes.TrimSuffix(v, []byte("\n")), []byte("\r"))
			m, err := d.Decode(v)
			if m == nil && err == nil {
				m = map[string]any{} // an empty value (a tombstone)
			}
			return m, false, err
		}
	}
	return func(v []byte) (map[string]any, bool, error) {
		m, invalid, err := codec.JSONDecoder{}.DecodeReporting(v)
		if m == nil && err == nil {
			m = map[string]any{} // an empty value (a tombstone)
		}
		return m, invalid, err
	}
}

func delimiter(d string) byte {
	if len(d) == 1 {
		return d[0]
	}
	return ','
}

// csvHeader encodes the column names as the csv header line.
func csvHeader(cols []string, comma byte) []byte {
	var b []byte
	for i, c := range cols {
		if i > 0 {
			b = append(b, comma)
		}
		if strings.ContainsAny(c, "\"\r\n"+string(comma)) {
			b = append(b, '"')
			b = append(b, strings.ReplaceAll(c, `"`, `""`)...)
			b = append(b, '"')
			continue
		}
		b = append(b, c...)
	}
	return b
}
