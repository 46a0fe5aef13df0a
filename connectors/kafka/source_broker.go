package kafka

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/IBM/sarama"
)

// topicPartition names one partition.
type topicPartition struct {
	topic     string
	partition int32
}

func (t topicPartition) String() string { return fmt.Sprintf("%s[%d]", t.topic, t.partition) }

// offsetQuery is what listOffsets asks a partition's leader for:
// sarama.OffsetOldest, sarama.OffsetNewest or a timestamp (epoch ms).
type offsetQuery = int64

// brokerAttempts is how often a request to partition leaders or a group
// coordinator is tried, refreshing the metadata in between (a leader
// moved, or a topic just created has no leader yet).
const brokerAttempts = 6

// brokerBackoff waits before attempt (1, 2, ...) of a request to a
// broker: the client's metadata retry backoff, doubled each attempt, at
// most 2s, so the attempts span the few seconds a new topic's leader
// election or a coordinator's load can take.
func brokerBackoff(cl sarama.Client, attempt int) {
	d := cl.Config().Metadata.Retry.Backoff << (attempt - 1)
	time.Sleep(min(d, 2*time.Second))
}

// listOffsets asks the partitions' leaders for the offset q(partition)
// (ListOffsets, one request per leader). The newest offset is the last
// stable offset under read_committed and the high-water mark otherwise; a
// timestamp gives the first offset at or after it, or -1 when there is none.
func listOffsets(cl sarama.Client, iso sarama.IsolationLevel, parts []topicPartition, q func(topicPartition) offsetQuery) (map[topicPartition]int64, error) {
	out := make(map[topicPartition]int64, len(parts))
	todo := parts
	var lastErr error
	for attempt := 0; attempt < brokerAttempts && len(todo) > 0; attempt++ {
		if attempt > 0 {
			brokerBackoff(cl, attempt)
			if err := cl.RefreshMetadata(topicsOf(todo)...); err != nil {
				lastErr = err
			}
		}
		byLeader := map[*sarama.Broker][]topicPartition{}
		var retry []topicPartition
		for _, tp := range todo {
			b, err := cl.Leader(tp.topic, tp.partition)
			if err != nil {
				lastErr = fmt.Errorf("leader of %s: %w", tp, err)
				retry = append(retry, tp)
				continue
			}
			byLeader[b] = append(byLeader[b], tp)
		}
		for b, tps := range byLeader {
			req := sarama.NewOffsetRequest(cl.Config().Version)
			req.IsolationLevel = iso
			for _, tp := range tps {
				req.AddBlock(tp.topic, tp.partition, q(tp), 1)
			}
			resp, err := b.GetAvailableOffsets(req)
			if err != nil {
				lastErr = fmt.Errorf("list offsets on broker %s: %w", b.Addr(), err)
				retry = append(retry, tps...)
				continue
			}
			for _, tp := range tps {
				blk := resp.GetBlock(tp.topic, tp.partition)
				switch {
				case blk == nil:
					lastErr = fmt.Errorf("list offsets of %s: no answer", tp)
					retry = append(retry, tp)
				case !errors.Is(blk.Err, sarama.ErrNoError):
					lastErr = fmt.Errorf("list offsets of %s: %w", tp, blk.Err)
					retry = append(retry, tp)
				case req.Version == 0:
					if len(blk.Offsets) == 0 {
						out[tp] = -1
					} else {
						out[tp] = blk.Offsets[0]
					}
				default:
					out[tp] = blk.Offset
				}
			}
		}
		todo = retry
	}
	if len(todo) > 0 {
		return nil, lastErr
	}
	return out, nil
}

func topicsOf(parts []topicPartition) []string {
	var ts []string
	for _, tp := range parts {
		if !slices.Contains(ts, tp.topic) {
			ts = append(ts, tp.topic)
		}
	}
	return ts
}

// fetchCommitted returns the offsets committed to group for the partitions;
// partitions without a committed offset are missing from the map.
func fetchCommitted(cl sarama.Client, group string, parts []topicPartition) (map[topicPartition]int64, error) {
	blocks, err := fetchCommittedBlocks(cl, group, parts)
	if err != nil {
		return nil, err
	}
	out := map[topicPartition]int64{}
	for tp, blk := range blocks {
		out[tp] = blk.Offset
	}
	return out, nil
}

// fetchCommittedBlocks returns what group committed for the partitions
// (offset and metadata); partitions without a committed offset are
// missing from the map.
func fetchCommittedBlocks(cl sarama.Client, group string, parts []topicPartition) (map[topicPartition]*sarama.OffsetFetchResponseBlock, error) {
	req := map[string][]int32{}
	for _, tp := range parts {
		req[tp.topic] = append(req[tp.topic], tp.partition)
	}
	var lastErr error
	for attempt := 0; attempt < brokerAttempts; attempt++ {
		if attempt > 0 {
			brokerBackoff(cl, attempt)
			_ = cl.RefreshCoordinator(group)
		}
		coord, err := cl.Coordinator(group)
		if err != nil {
			lastErr = err
			continue
		}
		resp, err := coord.FetchOffset(sarama.NewOffsetFetchRequest(cl.Config().Version, group, req))
		if err != nil {
			lastErr = err
			continue
		}
		if kerr := resp.Err; !errors.Is(kerr, sarama.ErrNoError) {
			lastErr = kerr
			continue
		}
		if resp.Version >= 8 && len(resp.Groups) > 0 && !errors.Is(resp.Groups[0].Err, sarama.ErrNoError) {
			lastErr = resp.Groups[0].Err
			continue
		}
		out := map[topicPartition]*sarama.OffsetFetchResponseBlock{}
		for _, tp := range parts {
			blk := resp.GetBlock(tp.topic, tp.partition)
			if blk == nil {
				continue
			}
			if !errors.Is(blk.Err, sarama.ErrNoError) {
				return nil, fmt.Errorf("committed offset of %s: %w", tp, blk.Err)
			}
			if blk.Offset >= 0 {
				out[tp] = blk
			}
		}
		return out, nil
	}
	return nil, fmt.Errorf("fetch the offsets of consumer group %q: %w", group, lastErr)
}

// commitOffsets commits next offsets to group, as a consumer outside any
// group generation does (generation -1): eddy never joins the group.
func commitOffsets(cl sarama.Client, group string, offsets map[topicPartition]int64) error {
	var lastErr error
	for attempt := 0; attempt < brokerAttempts; attempt++ {
		if attempt > 0 {
			brokerBackoff(cl, attempt)
			_ = cl.RefreshCoordinator(group)
		}
		coord, err := cl.Coordinator(group)
		if err != nil {
			lastErr = err
			continue
		}
		req := sarama.NewOffsetCommitRequest(cl.Config(), group)
		for tp, off := range offsets {
			req.AddBlock(tp.topic, tp.partition, off, 0, "")
		}
		resp, err := coord.CommitOffset(req)
		if err != nil {
			lastErr = err
			continue
		}
		retry := false
		var errs []error
		for topic, ps := range resp.Errors {
			for p, kerr := range ps {
				switch {
				case errors.Is(kerr, sarama.ErrNoError):
				case errors.Is(kerr, sarama.ErrNotCoordinatorForConsumer), errors.Is(kerr, sarama.ErrConsumerCoordinatorNotAvailable),
					errors.Is(kerr, sarama.ErrOffsetsLoadInProgress), errors.Is(kerr, sarama.ErrRequestTimedOut):
					retry = true
					lastErr = fmt.Errorf("%s: %w", topicPartition{topic, p}, kerr)
				default:
					errs = append(errs, fmt.Errorf("%s: %w", topicPartition{topic, p}, kerr))
				}
			}
		}
		if len(errs) > 0 {
			return fmt.Errorf("commit offsets to consumer group %q: %w", group, errors.Join(errs...))
		}
		if !retry {
			return nil
		}
	}
	return fmt.Errorf("commit offsets to consumer group %q: %w", group, lastErr)
}

// fetchVersion returns the Fetch request version sarama's consumer uses
// for the negotiated Kafka version (at least 4, which has the isolation
// level, for every version that has transactions).
func fetchVersion(v sarama.KafkaVersion) int16 {
	switch {
	case v.IsAtLeast(sarama.V2_7_0_0):
		return 12
	case v.IsAtLeast(sarama.V2_3_0_0):
		return 11
	case v.IsAtLeast(sarama.V2_1_0_0):
		return 10
	case v.IsAtLeast(sarama.V2_0_0_0):
		return 8
	case v.IsAtLeast(sarama.V1_1_0_0):
		return 7
	case v.IsAtLeast(sarama.V1_0_0_0):
		return 6
	case v.IsAtLeast(sarama.V0_11_0_0):
		return 5
	}
	return 3
}

// probeBytes is the most data one probe fetch asks for.
const probeBytes = 1 << 20

// visibleBefore tells whether partition tp holds a record at an offset in
// [from, stop) that a consumer with isolation iso would be handed: not a
// control record (transaction marker) and, under read_committed, not part
// of an aborted transaction. It fetches from from on (raw Fetch requests,
// as the consumer does) until it finds one or passes stop. It answers
// false only when it saw every offset up to stop; a fetch that returns
// nothing (the broker has not got there yet) answers true, "wait".
func visibleBefore(cl sarama.Client, iso sarama.IsolationLevel, tp topicPartition, from, stop int64) (bool, error) {
	for from < stop {
		blk, err := fetchFrom(cl, iso, tp, from, probeBytes, 0)
		if err != nil {
			return true, err
		}
		visible, next := scanVisible(blk, iso, from, stop)
		if visible {
			return true, nil
		}
		if next <= from {
			return true, nil // nothing new: the broker has not got there yet
		}
		from = next
	}
	return false, nil
}

// fetchFrom fetches up to size bytes of partition tp from offset at, with
// isolation iso and without a fetch session, from its leader, waiting up
// to wait ms for a first byte; it tries brokerAttempts times, refreshing
// the metadata in between (a leader that moved).
func fetchFrom(cl sarama.Client, iso sarama.IsolationLevel, tp topicPartition, at int64, size, wait int32) (*sarama.FetchResponseBlock, error) {
	version := fetchVersion(cl.Config().Version)
	var lastErr error
	for attempt := range brokerAttempts {
		if attempt > 0 {
			brokerBackoff(cl, attempt)
			if err := cl.RefreshMetadata(tp.topic); err != nil {
				lastErr = err
			}
		}
		b, err := cl.Leader(tp.topic, tp.partition)
		if err != nil {
			lastErr = fmt.Errorf("leader of %s: %w", tp, err)
			continue
		}
		req := &sarama.FetchRequest{Version: version, MinBytes: 1, MaxWaitTime: wait, MaxBytes: size, Isolation: iso}
		if version >= 7 {
			req.SessionEpoch = -1 // no fetch session
		}
		req.AddBlock(tp.topic, tp.partition, at, size, -1)
		resp, err := b.Fetch(req)
		if err != nil {
			lastErr = fmt.Errorf("fetch %s at %d: %w", tp, at, err)
			continue
		}
		switch blk := resp.GetBlock(tp.topic, tp.partition); {
		case blk == nil:
			lastErr = fmt.Errorf("fetch %s at %d: no answer", tp, at)
		case !errors.Is(blk.Err, sarama.ErrNoError):
			lastErr = fmt.Errorf("fetch %s at %d: %w", tp, at, blk.Err)
		default:
			return blk, nil
		}
	}
	return nil, lastErr
}

// scanVisible looks at the record batches of a fetch answer for a visible
// record in [from, stop), filtering like sarama's consumer does. next is the
// offset after the last complete batch it looked at.
func scanVisible(blk *sarama.FetchResponseBlock, iso sarama.IsolationLevel, from, stop int64) (visible bool, next int64) {
	next, _ = eachVisible(blk, iso, from, stop, func(int64, []byte, []byte) bool {
		visible = true
		return false
	})
	return visible, next
}

// eachVisible calls fn, in order, with each record of the batches of a
// fetch answer at an offset in [from, stop) that a consumer with
// isolation iso is handed (filtering like sarama's consumer does: no
// transaction markers, under read_committed no aborted transactions),
// until fn returns false. next is the offset after the last complete batch
// it looked at, at least from (when fn stopped it, from that batch's
// start); partial tells it stopped at a batch the answer has only part
// of.
func eachVisible(blk *sarama.FetchResponseBlock, iso sarama.IsolationLevel, from, stop int64, fn func(offset int64, key, value []byte) bool) (next int64, partial bool) {
	next = from
	aborted := slices.Clone(blk.AbortedTransactions)
	slices.SortFunc(aborted, func(a, b *sarama.AbortedTransaction) int { return int(a.FirstOffset - b.FirstOffset) })
	abortedPIDs := map[int64]bool{}
	for _, rs := range blk.RecordsSet {
		if rs == nil {
			continue
		}
		if rs.MsgSet != nil {
			// Legacy message sets have no transactions: every message is visible.
			for _, mb := range rs.MsgSet.Messages {
				if mb.Offset >= next && mb.Offset < stop && !fn(mb.Offset, mb.Msg.Key, mb.Msg.Value) {
					return next, false
				}
				next = max(next, mb.Offset+1)
			}
			continue
		}
		rb := rs.RecordBatch
		if rb == nil || rb.PartialTrailingRecord {
			return next, rb != nil
		}
		for len(aborted) > 0 && aborted[0].FirstOffset <= rb.LastOffset() {
			abortedPIDs[aborted[0].ProducerID] = true
			aborted = aborted[1:]
		}
		switch {
		case rb.Control:
			if len(rb.Records) > 0 && isAbortMarker(rb.Records[0].Key) {
				delete(abortedPIDs, rb.ProducerID)
			}
		case iso == sarama.ReadCommitted && rb.IsTransactional && abortedPIDs[rb.ProducerID]:
		default:
			for _, r := range rb.Records {
				if off := rb.FirstOffset + r.OffsetDelta; off >= next && off < stop && !fn(off, r.Key, r.Value) {
					return next, false
				}
			}
		}
		next = max(next, rb.LastOffset()+1)
	}
	return next, false
}

// isAbortMarker tells whether the key of a control record is an abort
// marker: version int16, type int16 (0 abort, 1 commit).
func isAbortMarker(key []byte) bool {
	return len(key) >= 4 && binary.BigEndian.Uint16(key[2:4]) == 0
}
