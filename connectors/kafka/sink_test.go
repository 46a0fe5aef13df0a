package kafka

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	_ "github.com/eddy-stream/eddy/connectors/generator" // the source of the pipeline test
	"github.com/eddy-stream/eddy/connectors/internal/conntest"
	"github.com/eddy-stream/eddy/internal/testkit"
	"github.com/eddy-stream/eddy/pipeline"
)

// The sink tests drive the sink through its interface, as the runtime
// does at barriers and completed checkpoints, and read the topic back with
// a read_committed consumer.

// loadKafkaSink loads a kafka sink config from YAML keys. Every test gets
// its own transactional_id_prefix (a real broker outlives tests).
func loadKafkaSink(t testing.TB, brokers []string, body string) *SinkConfig {
	t.Helper()
	if !strings.Contains(body, "transactional_id_prefix") {
		body += fmt.Sprintf("\ntransactional_id_prefix: eddy-test-%d-%d", time.Now().UnixNano(), topicSeq.Add(1))
	}
	cfg, err := conntest.LoadSink(t, "kafka", fmt.Sprintf("brokers: [%s]\n%s", strings.Join(brokers, ", "), body))
	require.NoError(t, err)
	return cfg.(*SinkConfig)
}

// checkpointing returns the context of subtask k of p in a pipeline that
// checkpoints every second (pool of 1 + 0 + 2 = 3 ids).
func sinkCheckpointing(k, p int, committables ...[]byte) *pipeline.SinkContext {
	return &pipeline.SinkContext{
		SubtaskInfo:   conntest.Info("out", k, p),
		Committables:  committables,
		Checkpointing: true,
		Checkpoint: &pipeline.CheckpointSpec{
			Interval: pipeline.Duration(time.Second), Timeout: pipeline.Duration(10 * time.Second), MaxConcurrent: 1,
		},
		RestartDelay: time.Second,
	}
}

// openSink builds and opens a sink; it is closed at the end of the test
// unless the test killed it.
func openKafkaSink(t testing.TB, cfg *SinkConfig, sc *pipeline.SinkContext) *sink {
	t.Helper()
	s, err := cfg.NewSink()
	require.NoError(t, err)
	require.NoError(t, s.Open(context.Background(), sc))
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	return s.(*sink)
}

// kill stops the sink as a crash would: producers and connections go away,
// nothing is committed or aborted, except that commits already handed to
// their goroutine end first.
func killSink(s *sink) {
	if s.txn != nil {
		for _, slot := range s.txn.slots {
			if slot.state == slotCommitting && <-slot.outcome != nil {
				slot.out = nil // closed by the commit goroutine
			}
			slot.endDescribe()
			if slot.out != nil {
				_ = slot.out.close()
				slot.out = nil
			}
			if slot.client != nil {
				_ = slot.client.Close()
				slot.client = nil
			}
		}
		s.txn = nil
	}
	if s.out != nil {
		_ = s.out.close()
		s.out = nil
	}
	if s.admin != nil {
		_ = s.admin.Close()
		s.admin, s.client = nil, nil
	}
}

// records makes records {"n": i} for i in [from, to).
func sinkRecords(from, to int) []pipeline.Record {
	out := make([]pipeline.Record, 0, to-from)
	for i := from; i < to; i++ {
		out = append(out, pipeline.NewRecord(map[string]any{"n": i, "k": "key-" + strconv.Itoa(i%7)}))
	}
	return out
}

// sinkCommit commits the committables and waits until the commits of the
// transactions that the sink's own producers hold are done.
func sinkCommit(t testing.TB, s *sink, committables ...[]byte) {
	t.Helper()
	ctx := context.Background()
	require.NoError(t, s.Commit(ctx, committables))
	require.NoError(t, s.txn.settleAll(ctx, true))
}

func sinkWrite(t testing.TB, s *sink, from, to int) {
	t.Helper()
	require.NoError(t, s.Write(context.Background(), sinkRecords(from, to)))
}

func sinkPreCommit(t testing.TB, s *sink, id int64) []byte {
	t.Helper()
	require.NoError(t, s.Flush(context.Background()))
	c, err := s.PreCommit(context.Background(), id)
	require.NoError(t, err)
	return c
}

// sinkMsg is a record read back.
type sinkMsg struct {
	Partition int32
	Offset    int64
	Key       string
	Value     []byte
	Headers   map[string]string
}

func (m sinkMsg) n(t testing.TB) int {
	t.Helper()
	var v struct{ N int }
	require.NoError(t, json.Unmarshal(m.Value, &v), "value %q", m.Value)
	return v.N
}

const sinkEndKey = "eddy-test-end"

func sinkTestConfig() *sarama.Config {
	cfg := sarama.NewConfig()
	cfg.Version = sarama.V3_6_0_0
	cfg.Consumer.IsolationLevel = sarama.ReadCommitted
	cfg.Producer.Return.Successes = true
	cfg.Producer.RequiredAcks = sarama.WaitForAll
	cfg.Producer.Partitioner = sarama.NewManualPartitioner
	return cfg
}

// committedOffsets returns the last stable offset (what read_committed
// consumers may read up to) and the high watermark of each partition.
func stableOffsets(t testing.TB, brokers []string, topic string) (lso, hwm map[int32]int64) {
	t.Helper()
	cl, err := sarama.NewClient(brokers, sinkTestConfig())
	require.NoError(t, err)
	defer cl.Close()
	require.NoError(t, cl.RefreshMetadata(topic))
	parts, err := cl.Partitions(topic)
	require.NoError(t, err)
	lso, hwm = map[int32]int64{}, map[int32]int64{}
	for _, p := range parts {
		leader, err := cl.Leader(topic, p)
		require.NoError(t, err)
		for _, iso := range []sarama.IsolationLevel{sarama.ReadCommitted, sarama.ReadUncommitted} {
			req := sarama.NewOffsetRequest(sarama.V3_6_0_0)
			req.IsolationLevel = iso
			req.AddBlock(topic, p, sarama.OffsetNewest, 1)
			resp, err := leader.GetAvailableOffsets(req)
			require.NoError(t, err)
			blk := resp.GetBlock(topic, p)
			require.NotNil(t, blk)
			require.Equal(t, sarama.ErrNoError, blk.Err)
			if iso == sarama.ReadCommitted {
				lso[p] = blk.Offset
			} else {
				hwm[p] = blk.Offset
			}
		}
	}
	return lso, hwm
}

// blocked tells whether an open transaction holds back read_committed
// consumers of the topic.
func txnBlocked(t testing.TB, brokers []string, topic string) bool {
	lso, hwm := stableOffsets(t, brokers, topic)
	for p := range hwm {
		if lso[p] < hwm[p] {
			return true
		}
	}
	return false
}

// readCommitted returns every record of the topic a read_committed
// consumer sees, partition by partition in offset order. It appends an
// end marker to each partition (never returned), waits until no open
// transaction holds the marker back, and reads up to it.
func readCommittedAll(t testing.TB, brokers []string, topic string) []sinkMsg {
	t.Helper()
	cfg := sinkTestConfig()
	prod, err := sarama.NewSyncProducer(brokers, cfg)
	require.NoError(t, err)
	defer prod.Close()
	cl, err := sarama.NewClient(brokers, cfg)
	require.NoError(t, err)
	defer cl.Close()
	parts, err := cl.Partitions(topic)
	require.NoError(t, err)
	ends := map[int32]int64{}
	for _, p := range parts {
		_, off, err := prod.SendMessage(&sarama.ProducerMessage{Topic: topic, Partition: p, Key: sarama.StringEncoder(sinkEndKey)})
		require.NoError(t, err)
		ends[p] = off
	}
	require.Eventually(t, func() bool {
		lso, _ := stableOffsets(t, brokers, topic)
		for p, end := range ends {
			if lso[p] <= end {
				return false
			}
		}
		return true
	}, time.Minute, 10*time.Millisecond, "an open transaction holds read_committed consumers of %s back", topic)
	cons, err := sarama.NewConsumerFromClient(cl)
	require.NoError(t, err)
	defer cons.Close()
	var out []sinkMsg
	for _, p := range parts {
		pc, err := cons.ConsumePartition(topic, p, sarama.OffsetOldest)
		require.NoError(t, err)
		for m := range pc.Messages() {
			if m.Offset == ends[p] {
				break
			}
			if string(m.Key) == sinkEndKey {
				continue // the marker of an earlier read
			}
			km := sinkMsg{Partition: p, Offset: m.Offset, Key: string(m.Key), Value: m.Value}
			for _, h := range m.Headers {
				if km.Headers == nil {
					km.Headers = map[string]string{}
				}
				km.Headers[string(h.Key)] = string(h.Value)
			}
			out = append(out, km)
		}
		require.NoError(t, pc.Close())
	}
	return out
}

// ns returns the n of every record read, sorted by n, and checks that
// each partition holds its records in the order they were written.
func sinkNs(t testing.TB, msgs []sinkMsg) []int {
	t.Helper()
	last := map[int32]int{}
	var out []int
	for _, m := range msgs {
		n := m.n(t)
		if prev, ok := last[m.Partition]; ok {
			require.Greater(t, n, prev, "partition %d out of order", m.Partition)
		}
		last[m.Partition] = n
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

func intRange(from, to int) []int {
	out := make([]int, 0, to-from)
	for i := from; i < to; i++ {
		out = append(out, i)
	}
	return out
}

func intConcat(parts ...[]int) []int {
	var out []int
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

// TestKafkaSinkExactlyOnce: the records of a completed checkpoint become
// visible once, when it completes; those after the last barrier never do,
// and closing after a failure aborts them without blocking consumers.
func TestKafkaSinkExactlyOnce(t *testing.T) {
	brokers := testBrokers(t)
	topic := testTopic(t, brokers, 3)
	cfg := loadKafkaSink(t, brokers, "topic: "+topic+"\nkey: k")
	s := openKafkaSink(t, cfg, sinkCheckpointing(0, 1))
	ctx := context.Background()

	empty, err := s.PreCommit(ctx, 1)
	require.NoError(t, err)
	require.Empty(t, empty, "a checkpoint without records has an empty committable")
	require.NoError(t, s.Commit(ctx, [][]byte{empty}))

	sinkWrite(t, s, 0, 60)
	sinkWrite(t, s, 60, 100)
	c2 := sinkPreCommit(t, s, 2)
	require.NotEmpty(t, c2)
	require.True(t, txnBlocked(t, brokers, topic), "a pre-committed transaction is not visible before its checkpoint completes")

	sinkWrite(t, s, 100, 150) // after the barrier of checkpoint 2: the next transaction
	require.NoError(t, s.Flush(ctx))
	sinkCommit(t, s, c2)
	require.True(t, txnBlocked(t, brokers, topic), "the open transaction after the barrier stays invisible")

	require.NoError(t, s.Close(ctx)) // a failure: the open transaction is aborted
	require.Equal(t, intRange(0, 100), sinkNs(t, readCommittedAll(t, brokers, topic)))
}

// TestKafkaSinkCrashAbortsLingeringTransaction: a crashed run leaves its
// open transaction on the broker, holding read_committed consumers back;
// the next Open aborts it.
func TestKafkaSinkCrashAbortsLingeringTransaction(t *testing.T) {
	brokers := testBrokers(t)
	topic := testTopic(t, brokers, 2)
	cfg := loadKafkaSink(t, brokers, "topic: "+topic)
	s1 := openKafkaSink(t, cfg, sinkCheckpointing(0, 1))
	sinkWrite(t, s1, 0, 50)
	require.NoError(t, s1.Flush(context.Background()))
	killSink(s1)
	require.True(t, txnBlocked(t, brokers, topic), "the crashed run's open transaction holds consumers back")

	openKafkaSink(t, cfg, sinkCheckpointing(0, 1))
	require.Eventually(t, func() bool { return !txnBlocked(t, brokers, topic) }, time.Minute, 10*time.Millisecond,
		"Open must abort the open transaction of the crashed run")
	require.Empty(t, readCommittedAll(t, brokers, topic))
}

var errSimulatedCrash = errors.New("simulated crash before the commit")

// TestKafkaSinkRecoverAfterCrash: a crash between the completion of a
// checkpoint and the sink's commit; the restored committables are
// committed at the next Open, once, however often the restore repeats.
func TestKafkaSinkRecoverAfterCrash(t *testing.T) {
	brokers := testBrokers(t)
	topic := testTopic(t, brokers, 3)
	cfg := loadKafkaSink(t, brokers, "topic: "+topic+"\nkey: k")
	ctx := context.Background()

	s1 := openKafkaSink(t, cfg, sinkCheckpointing(0, 1))
	sinkWrite(t, s1, 0, 50)
	c1 := sinkPreCommit(t, s1, 1)
	sinkWrite(t, s1, 50, 70) // after the barrier: replayed after the restore
	require.NoError(t, s1.Flush(ctx))
	s1.hooks.beforeCommit = func(committable) error { return errSimulatedCrash }
	require.ErrorIs(t, s1.Commit(ctx, [][]byte{c1}), errSimulatedCrash)
	killSink(s1)
	require.True(t, txnBlocked(t, brokers, topic))

	s2 := openKafkaSink(t, cfg, sinkCheckpointing(0, 1, c1))
	require.Equal(t, intRange(0, 50), sinkNs(t, readCommittedAll(t, brokers, topic)), "the restore commits checkpoint 1 and aborts the rest")

	// A second crash before the restored run completed a checkpoint: the
	// next restore commits checkpoint 1 again, which must change nothing.
	sinkWrite(t, s2, 70, 80)
	require.NoError(t, s2.Flush(ctx))
	killSink(s2)
	openKafkaSink(t, cfg, sinkCheckpointing(0, 1, c1))
	require.Equal(t, intRange(0, 50), sinkNs(t, readCommittedAll(t, brokers, topic)))
}

// TestKafkaSinkRecoverDoesNotCommitLaterTransaction: a transaction
// committed before the crash, whose transactional id then carried a later
// transaction with the same producer (the slot keeps it): restoring the
// first one's checkpoint must neither commit the later one (an EndTxn with
// the producer id and epoch would, when it is open) nor call the first one
// lost, whether the later one was left open, aborted or committed.
func TestKafkaSinkRecoverDoesNotCommitLaterTransaction(t *testing.T) {
	brokers := testBrokers(t)
	for _, later := range []string{"open", "aborted", "committed"} {
		t.Run(later, func(t *testing.T) {
			topic := testTopic(t, brokers, 1)
			cfg := loadKafkaSink(t, brokers, "topic: "+topic)
			ctx := context.Background()

			s1 := openKafkaSink(t, cfg, sinkCheckpointing(0, 1))
			sinkWrite(t, s1, 0, 10)
			c1 := sinkPreCommit(t, s1, 1)
			sinkCommit(t, s1, c1)
			out := s1.txn.slots[0].out
			// Checkpoints 2 and 3 never complete; the pool comes round to
			// the id of checkpoint 1 again, with the same producer.
			sinkWrite(t, s1, 10, 20)
			sinkPreCommit(t, s1, 2)
			sinkWrite(t, s1, 20, 30)
			sinkPreCommit(t, s1, 3)
			sinkWrite(t, s1, 30, 40)
			require.Equal(t, s1.txn.slots[0], s1.txn.open, "the open transaction reuses the first id")
			require.Same(t, out, s1.txn.open.out, "and its producer")
			want := intRange(0, 10)
			switch later {
			case "open":
				require.NoError(t, s1.Flush(ctx))
				killSink(s1)
			case "aborted":
				require.NoError(t, s1.Close(ctx)) // aborts the open transaction
			case "committed":
				c4 := sinkPreCommit(t, s1, 4)
				c := decodeOne(t, c4)
				require.Equal(t, decodeOne(t, c1).ProducerID, c.ProducerID)
				require.Equal(t, decodeOne(t, c1).Epoch, c.Epoch, "one producer, one epoch for both transactions")
				sinkCommit(t, s1, c4)
				killSink(s1)
				want = intConcat(want, intRange(30, 40))
			}

			s2, err := cfg.NewSink()
			require.NoError(t, err)
			require.NoError(t, s2.Open(ctx, sinkCheckpointing(0, 1, c1)), "a committed transaction is not lost")
			require.NoError(t, s2.Close(ctx))
			require.Equal(t, want, sinkNs(t, readCommittedAll(t, brokers, topic)))
		})
	}
}

// decodeOne decodes a committable that names one transaction.
func decodeOne(t testing.TB, b []byte) committable {
	t.Helper()
	cs, err := decodeCommittables(b)
	require.NoError(t, err)
	require.Len(t, cs, 1)
	return cs[0]
}

// TestKafkaSinkTransactionPool: pre-committed transactions wait for their
// checkpoints on ids of their own and are committed in order; when every id
// holds one, the sink fails rather than reuse one.
func TestKafkaSinkTransactionPool(t *testing.T) {
	brokers := testBrokers(t)
	topic := testTopic(t, brokers, 2)
	cfg := loadKafkaSink(t, brokers, "topic: "+topic+"\nkey: k")
	ctx := context.Background()
	s := openKafkaSink(t, cfg, sinkCheckpointing(0, 1))
	require.Len(t, s.txn.slots, 3)

	sinkWrite(t, s, 0, 10)
	c1 := sinkPreCommit(t, s, 1)
	sinkWrite(t, s, 10, 20)
	c2 := sinkPreCommit(t, s, 2)
	sinkWrite(t, s, 20, 30)
	c3 := sinkPreCommit(t, s, 3)
	ids := map[string]bool{}
	for _, c := range [][]byte{c1, c2, c3} {
		d, err := decodeCommittable(c)
		require.NoError(t, err)
		ids[d.TxnID] = true
	}
	require.Len(t, ids, 3, "each outstanding transaction has its own transactional id")

	sinkCommit(t, s, c1, c2)
	sinkWrite(t, s, 30, 40) // reuses the id of checkpoint 1
	c4 := sinkPreCommit(t, s, 4)
	require.True(t, txnBlocked(t, brokers, topic))
	sinkCommit(t, s, c3, c4)
	require.Equal(t, intRange(0, 40), sinkNs(t, readCommittedAll(t, brokers, topic)))

	sinkWrite(t, s, 40, 41)
	sinkPreCommit(t, s, 5)
	sinkWrite(t, s, 41, 42)
	sinkPreCommit(t, s, 6)
	sinkWrite(t, s, 42, 43)
	sinkPreCommit(t, s, 7)
	err := s.Write(ctx, sinkRecords(43, 44))
	require.ErrorIs(t, err, ErrNoFreeTransactionalID)
	require.ErrorContains(t, err, "checkpoint 5")
}

// TestKafkaSinkCarriesCommitsInProgress: a transaction whose commit has
// not been confirmed at the next barrier rides along in that barrier's
// committable. Live, committing that committable does not commit it again;
// after a crash that came before the commit, restoring the later
// checkpoint alone commits both.
func TestKafkaSinkCarriesCommitsInProgress(t *testing.T) {
	brokers := testBrokers(t)
	for _, crash := range []bool{false, true} {
		t.Run(fmt.Sprintf("crash=%v", crash), func(t *testing.T) {
			topic := testTopic(t, brokers, 2)
			cfg := loadKafkaSink(t, brokers, "topic: "+topic+"\nkey: k")
			s := openKafkaSink(t, cfg, sinkCheckpointing(0, 1))
			started, release := make(chan committable, 1), make(chan error)
			t.Cleanup(func() { close(release) }) // before the sink's Close, which waits for the commit
			s.hooks.commitGoroutine = func(c committable) error {
				started <- c
				return <-release
			}

			sinkWrite(t, s, 0, 10)
			c1 := sinkPreCommit(t, s, 1)
			require.NoError(t, s.Commit(context.Background(), [][]byte{c1}))
			first := testkit.WaitFor(t, started, "the commit of checkpoint 1 to start") // it is in progress
			sinkWrite(t, s, 10, 20)
			c2 := sinkPreCommit(t, s, 2)
			cs, err := decodeCommittables(c2)
			require.NoError(t, err)
			require.Len(t, cs, 2, "checkpoint 2 carries the transaction of checkpoint 1")
			require.Equal(t, first, cs[0])
			require.Equal(t, int64(2), cs[1].Checkpoint)
			require.True(t, txnBlocked(t, brokers, topic))

			if !crash {
				release <- nil
				s.hooks.commitGoroutine = nil
				sinkCommit(t, s, c2)
				require.Equal(t, intRange(0, 20), sinkNs(t, readCommittedAll(t, brokers, topic)))
				return
			}
			release <- errSimulatedCrash // checkpoint 1's commit never happens
			killSink(s)
			require.True(t, txnBlocked(t, brokers, topic))
			openKafkaSink(t, cfg, sinkCheckpointing(0, 1, c2))
			require.Equal(t, intRange(0, 20), sinkNs(t, readCommittedAll(t, brokers, topic)),
				"restoring checkpoint 2 commits checkpoint 1's transaction as well")
		})
	}
}

// TestKafkaSinkRescaleAbortsLingering: after the parallelism went down,
// a subtask aborts the open transactions of the subtasks that no longer
// exist and whose ids map to it.
func TestKafkaSinkRescaleAbortsLingering(t *testing.T) {
	brokers := testBrokers(t)
	topic := testTopic(t, brokers, 1)
	cfg := loadKafkaSink(t, brokers, "topic: "+topic)
	old := openKafkaSink(t, cfg, sinkCheckpointing(1, 2))
	sinkWrite(t, old, 0, 5)
	require.NoError(t, old.Flush(context.Background()))
	killSink(old)
	require.True(t, txnBlocked(t, brokers, topic))

	openKafkaSink(t, cfg, sinkCheckpointing(0, 1))
	require.Eventually(t, func() bool { return !txnBlocked(t, brokers, topic) }, time.Minute, 10*time.Millisecond,
		"subtask 0 of 1 must abort the transaction left open on an id of subtask 1")
	require.Empty(t, readCommittedAll(t, brokers, topic))
}

// TestKafkaSinkUpsertTombstones: an upsert changelog becomes the key's
// latest row, and a tombstone for a delete, in a topic the sink creates
// compacted.
func TestKafkaSinkUpsertTombstones(t *testing.T) {
	brokers := testBrokers(t)
	topic := testTopic(t, brokers, 1) + "-created"
	cfg := loadKafkaSink(t, brokers, "topic: "+topic+"\nkey: sensor\ncreate_topic:\n  partitions: 2\n  configs:\n    cleanup.policy: compact")
	sc := sinkCheckpointing(0, 1)
	sc.Changelog = pipeline.ChangelogUpsert
	s := openKafkaSink(t, cfg, sc)
	rows := []map[string]any{
		{"sensor": "a", "n": 1, "_op": "+I"},
		{"sensor": "b", "n": 1, "_op": "+I"},
		{"sensor": "a", "n": 2, "_op": "+U"},
		{"sensor": "a", "n": 2, "_op": "-D"},
	}
	require.NoError(t, s.Write(context.Background(), conntest.Records(rows...)))
	sinkCommit(t, s, sinkPreCommit(t, s, 1))

	got := map[string][]string{}
	for _, m := range readCommittedAll(t, brokers, topic) {
		v := "<tombstone>"
		if m.Value != nil {
			v = string(m.Value)
		}
		got[m.Key] = append(got[m.Key], v)
	}
	require.Equal(t, map[string][]string{
		"a": {`{"n":1,"sensor":"a"}`, `{"n":2,"sensor":"a"}`, "<tombstone>"},
		"b": {`{"n":1,"sensor":"b"}`},
	}, got)

	noKey := loadKafkaSink(t, brokers, "topic: "+topic)
	s2, err := noKey.NewSink()
	require.NoError(t, err)
	err = s2.Open(context.Background(), sc)
	require.ErrorContains(t, err, "changelog: upsert needs `key`")
}

// TestKafkaSinkRetractWritesOp: without upsert, changelog rows are written
// as they are.
func TestKafkaSinkRetractWritesOp(t *testing.T) {
	brokers := testBrokers(t)
	topic := testTopic(t, brokers, 1)
	cfg := loadKafkaSink(t, brokers, "topic: "+topic+"\ndelivery: at_least_once")
	s := openKafkaSink(t, cfg, sinkCheckpointing(0, 1))
	require.NoError(t, s.Write(context.Background(), conntest.Records(
		map[string]any{"sensor": "a", "n": 1, "_op": "-U"},
		map[string]any{"sensor": "a", "n": 2, "_op": "+U"})))
	require.NoError(t, s.Flush(context.Background()))
	var got []string
	for _, m := range readCommittedAll(t, brokers, topic) {
		got = append(got, string(m.Value))
	}
	require.Equal(t, []string{`{"_op":"-U","n":1,"sensor":"a"}`, `{"_op":"+U","n":2,"sensor":"a"}`}, got)
}

// TestKafkaSinkKeyHeadersTopicPartition: topic_expr, key, headers and the
// manual partitioner, through exactly_once without checkpoints (which
// writes at-least-once).
func TestKafkaSinkKeyHeadersTopicPartition(t *testing.T) {
	brokers := testBrokers(t)
	even := testTopic(t, brokers, 3)
	odd := testTopic(t, brokers, 3)
	cfg := loadKafkaSink(t, brokers, fmt.Sprintf(`topic_expr: 'n %% 2 == 0 ? "%s" : "%s"'
key: '"id-" + string(n)'
headers:
  source: '"eddy"'
  n: n
  missing: nothing
partitioner: manual
partition: n %% 3
format: csv
columns: [n, name]`, even, odd))
	s := openKafkaSink(t, cfg, &pipeline.SinkContext{SubtaskInfo: conntest.Info("out", 0, 1)})
	require.Nil(t, s.txn, "exactly_once without checkpoints writes without transactions")
	var in []map[string]any
	for i := range 12 {
		in = append(in, map[string]any{"n": i, "name": "x" + strconv.Itoa(i)})
	}
	require.NoError(t, s.Write(context.Background(), conntest.Records(in...)))
	require.NoError(t, s.Flush(context.Background()))

	for _, topic := range []string{even, odd} {
		msgs := readCommittedAll(t, brokers, topic)
		require.Len(t, msgs, 6)
		for _, m := range msgs {
			n, err := strconv.Atoi(strings.TrimPrefix(m.Key, "id-"))
			require.NoError(t, err, m.Key)
			require.Equal(t, topic == even, n%2 == 0, "record %d in topic %s", n, topic)
			require.Equal(t, int32(n%3), m.Partition)
			require.Equal(t, fmt.Sprintf("%d,x%d", n, n), string(m.Value))
			require.Equal(t, map[string]string{"source": "eddy", "n": strconv.Itoa(n)}, m.Headers)
		}
	}

	// The same key goes to the same partition with the default murmur2.
	topic := testTopic(t, brokers, 4)
	s2 := openKafkaSink(t, loadKafkaSink(t, brokers, "topic: "+topic+"\nkey: k\ndelivery: none"), sinkCheckpointing(0, 1))
	sinkWrite(t, s2, 0, 70)
	require.NoError(t, s2.Close(context.Background()))
	byKey := map[string]int32{}
	msgs := readCommittedAll(t, brokers, topic)
	require.Equal(t, intRange(0, 70), sinkNs(t, msgs))
	for _, m := range msgs {
		if p, ok := byKey[m.Key]; ok {
			require.Equal(t, p, m.Partition, "key %s", m.Key)
		}
		byKey[m.Key] = m.Partition
	}
}

// TestKafkaSinkAtLeastOnceFlush: at_least_once records are acknowledged
// and visible when Flush returns; there is nothing to commit.
func TestKafkaSinkAtLeastOnceFlush(t *testing.T) {
	brokers := testBrokers(t)
	topic := testTopic(t, brokers, 2)
	cfg := loadKafkaSink(t, brokers, "topic: "+topic+"\nkey: k\ndelivery: at_least_once\ncompression: zstd")
	require.Equal(t, pipeline.AtLeastOnce, cfg.Guarantee())
	s := openKafkaSink(t, cfg, sinkCheckpointing(0, 1))
	require.Nil(t, s.txn)
	sinkWrite(t, s, 0, 30)
	c, err := s.PreCommit(context.Background(), 1) // flushes
	require.NoError(t, err)
	require.Empty(t, c)
	require.Equal(t, intRange(0, 30), sinkNs(t, readCommittedAll(t, brokers, topic)))
}

// TestKafkaSinkStartupErrors: what Open rejects, with what to do.
func TestKafkaSinkStartupErrors(t *testing.T) {
	brokers := testBrokers(t)
	topic := testTopic(t, brokers, 1)
	open := func(cfg *SinkConfig, sc *pipeline.SinkContext) error {
		s, err := cfg.NewSink()
		require.NoError(t, err)
		defer s.Close(context.Background())
		return s.Open(context.Background(), sc)
	}

	err := open(loadKafkaSink(t, brokers, "topic: "+topic+"-missing"), sinkCheckpointing(0, 1))
	require.ErrorContains(t, err, `topic "`+topic+`-missing" does not exist`)
	require.ErrorContains(t, err, "create_topic")

	sc := sinkCheckpointing(0, 1)
	sc.Checkpoint.Interval = pipeline.Duration(time.Minute)
	sc.Checkpoint.Timeout = pipeline.Duration(2 * time.Minute)
	sc.RestartDelay = 30 * time.Second
	err = open(loadKafkaSink(t, brokers, "topic: "+topic+"\ntransaction_timeout: 3m"), sc)
	require.ErrorContains(t, err, "transaction_timeout 3m0s must be longer than checkpoint.interval (1m0s) + checkpoint.timeout (2m0s) + the restart delay (30s) = 3m30s")
	// The same without checkpoints: no transactions, nothing to check.
	require.NoError(t, open(loadKafkaSink(t, brokers, "topic: "+topic+"\ntransaction_timeout: 3m"), &pipeline.SinkContext{SubtaskInfo: conntest.Info("out", 0, 1)}))

	limit := brokerTxnMaxTimeout(t, brokers)
	tooLong := limit + time.Minute
	err = open(loadKafkaSink(t, brokers, fmt.Sprintf("topic: %s\ntransaction_timeout: %s", topic, tooLong)), sinkCheckpointing(0, 1))
	require.ErrorContains(t, err, fmt.Sprintf("transaction_timeout %s is longer than the brokers' transaction.max.timeout.ms (%s)", tooLong, limit))

	err = open(loadKafkaSink(t, []string{"127.0.0.1:1"}, "topic: "+topic+"\ndial_timeout: 100ms"), sinkCheckpointing(0, 1))
	require.ErrorContains(t, err, "connect to kafka brokers 127.0.0.1:1")
}

func brokerTxnMaxTimeout(t testing.TB, brokers []string) time.Duration {
	t.Helper()
	admin, err := sarama.NewClusterAdmin(brokers, sinkTestConfig())
	require.NoError(t, err)
	defer admin.Close()
	_, ctrl, err := admin.DescribeCluster()
	require.NoError(t, err)
	entries, err := admin.DescribeConfig(sarama.ConfigResource{Type: sarama.BrokerResource, Name: strconv.Itoa(int(ctrl)), ConfigNames: []string{"transaction.max.timeout.ms"}})
	require.NoError(t, err)
	for _, e := range entries {
		if e.Name == "transaction.max.timeout.ms" {
			ms, err := strconv.ParseInt(e.Value, 10, 64)
			require.NoError(t, err)
			return time.Duration(ms) * time.Millisecond
		}
	}
	t.Fatal("the broker does not report transaction.max.timeout.ms")
	return 0
}

// TestKafkaSinkConfig: what the loader rejects.
func TestKafkaSinkConfig(t *testing.T) {
	tests := []struct{ body, want string }{
		{"key: k", "name the topic to write"},
		{"topic: a\ntopic_expr: b", "give either topic or topic_expr"},
		{"topic: a\npartitioner: manual", "partitioner manual needs the partition expression"},
		{"topic: a\npartition: n", "only applies to partitioner: manual"},
		{"topic: a\npartitioner: sticky", `must be murmur2, hash, round_robin, random or manual, not "sticky"`},
		{"topic: a\ncompression: brotli", `must be none, gzip, snappy, lz4 or zstd, not "brotli"`},
		{"topic: a\ndelivery: twice", `must be exactly_once, at_least_once or none, not "twice"`},
		{"topic: a\nformat: csv", "format csv needs the list of columns"},
		{"topic: a\ncreate_topic: {partitions: -1}", "partitions must be at least 1"},
	}
	for _, tt := range tests {
		_, err := conntest.LoadSink(t, "kafka", "brokers: [localhost:9092]\n"+tt.body)
		require.ErrorContains(t, err, tt.want, tt.body)
	}
	cfg, err := conntest.LoadSink(t, "kafka", "brokers: [localhost:9092]\ntopic: a")
	require.NoError(t, err)
	require.Equal(t, pipeline.ExactlyOnce, cfg.(pipeline.GuaranteeOf).Guarantee())
	cfg, err = conntest.LoadSink(t, "kafka", "brokers: [localhost:9092]\ntopic: a\ndelivery: none")
	require.NoError(t, err)
	require.Equal(t, pipeline.AtMostOnce, cfg.(pipeline.GuaranteeOf).Guarantee())
}

func TestKafkaSinkCommittableRoundTrip(t *testing.T) {
	c := committable{V: committableVersion, TxnID: "p-out-0-2", ProducerID: 0, Epoch: 7, Checkpoint: 42, Start: 1700000000123}
	b, err := c.encode()
	require.NoError(t, err)
	require.Less(t, len(b), 48, "a committable is small")
	got, err := decodeCommittable(b)
	require.NoError(t, err)
	require.Equal(t, c, got)
	_, err = decodeCommittable([]byte(`{"v":1}`))
	require.ErrorContains(t, err, "decode committable")
	require.Equal(t, 3, poolSize(&pipeline.CheckpointSpec{MaxConcurrent: 1}))
	require.Equal(t, 6, poolSize(&pipeline.CheckpointSpec{MaxConcurrent: 2, TolerableFailures: 2}))
	n, slot, ok := parseTxnID("a-b-out-3-1", "a-b-out-")
	require.True(t, ok)
	require.Equal(t, [2]int{3, 1}, [2]int{n, slot})
	_, _, ok = parseTxnID("a-b-out2-3-1", "a-b-out-")
	require.False(t, ok)
}

// BenchmarkKafkaSink compares exactly_once with at_least_once on the
// in-process broker (or KAFKA_BROKERS): 1 KB records in batches of 500, a
// checkpoint (flush, pre-commit, commit) every 10,000 records. An
// iteration writes 20,000 records with each. The in-process broker's
// numbers are not Kafka's.
func BenchmarkKafkaSink(b *testing.B) {
	brokers := testBrokers(b)
	const perIteration, perCheckpoint, batch = 20000, 10000, 500
	pad := strings.Repeat("x", 1000)
	modes := []string{DeliveryExactlyOnce, DeliveryAtLeastOnce}
	sinks := map[string]*sink{}
	for _, delivery := range modes {
		topic := testTopic(b, brokers, 3)
		cfg := loadKafkaSink(b, brokers, "topic: "+topic+"\nkey: k\ndelivery: "+delivery+"\nlinger: 5ms")
		sinks[delivery] = openKafkaSink(b, cfg, sinkCheckpointing(0, 1))
	}
	ctx := context.Background()
	elapsed := map[string]time.Duration{}
	cp := int64(0)
	in := make([]pipeline.Record, batch)
	b.ResetTimer()
	for range b.N {
		for _, delivery := range modes {
			s := sinks[delivery]
			start := time.Now()
			for written := 0; written < perIteration; written += batch {
				for i := range in {
					in[i] = pipeline.NewRecord(map[string]any{"n": written + i, "k": strconv.Itoa(i % 16), "pad": pad})
				}
				if err := s.Write(ctx, in); err != nil {
					b.Fatal(err)
				}
				if (written+batch)%perCheckpoint == 0 {
					cp++
					if err := s.Flush(ctx); err != nil {
						b.Fatal(err)
					}
					c, err := s.PreCommit(ctx, cp)
					if err != nil {
						b.Fatal(err)
					}
					if err := s.Commit(ctx, [][]byte{c}); err != nil {
						b.Fatal(err)
					}
				}
			}
			elapsed[delivery] += time.Since(start)
		}
	}
	total := float64(b.N * perIteration)
	eo := total / elapsed[DeliveryExactlyOnce].Seconds()
	alo := total / elapsed[DeliveryAtLeastOnce].Seconds()
	b.ReportMetric(eo, "eo_records/s")
	b.ReportMetric(alo, "alo_records/s")
	b.ReportMetric(eo/alo, "eo/alo")
}

// TestKafkaSinkTransactionTimeoutIsLoud: a pre-committed transaction that
// Kafka aborted after transaction_timeout fails the sink with
// ErrTransactionLost once its commit ran, and so does the restore where the coordinator still
// reports the abort (Apache Kafka does; the in-process broker keeps no
// completed transaction state, so there the restore cannot tell).
func TestKafkaSinkTransactionTimeoutIsLoud(t *testing.T) {
	brokers := testBrokers(t)
	topic := testTopic(t, brokers, 1)
	cfg := loadKafkaSink(t, brokers, "topic: "+topic+"\ntransaction_timeout: 1s")
	// No checkpoint spec: a 1s timeout would fail the startup check.
	sc := sinkCheckpointing(0, 1)
	sc.Checkpoint = nil
	s := openKafkaSink(t, cfg, sc)
	sinkWrite(t, s, 0, 5)
	c := sinkPreCommit(t, s, 1)
	d, err := decodeCommittable(c)
	require.NoError(t, err)
	var st sarama.TransactionState
	require.Eventually(t, func() bool {
		st, err = s.describeTxn(context.Background(), d.TxnID)
		require.NoError(t, err)
		return st.TransactionState != "Ongoing"
	}, time.Minute, 50*time.Millisecond, "Kafka aborts a transaction older than transaction_timeout")
	require.NoError(t, s.Commit(context.Background(), [][]byte{c}), "the commit runs on a goroutine")
	require.ErrorIs(t, s.Close(context.Background()), ErrTransactionLost, "Close reports the failed commit")

	restored := sinkCheckpointing(0, 1, c)
	restored.Checkpoint = nil
	s2, err := cfg.NewSink()
	require.NoError(t, err)
	defer s2.Close(context.Background())
	err = s2.Open(context.Background(), restored)
	if st.TransactionState == "CompleteAbort" || st.TransactionState == "PrepareAbort" {
		require.ErrorIs(t, err, ErrTransactionLost)
		require.ErrorContains(t, err, "transaction_timeout")
	} else {
		require.NoError(t, err)
	}
	require.Empty(t, readCommittedAll(t, brokers, topic))
}

// TestKafkaSinkPipeline runs a pipeline with checkpoints to its end: every
// record once in the exactly_once topic, and the latest count per key in
// the upsert topic of a continuous aggregate.
func TestKafkaSinkPipeline(t *testing.T) {
	brokers := testBrokers(t)
	raw := testTopic(t, brokers, 3)
	totals := testTopic(t, brokers, 2)
	yaml := fmt.Sprintf(`version: 1
name: %s
parallelism: 2
checkpoint:
  interval: 20ms
sources:
  - id: gen
    type: generator
    count: 600
    fields:
      n: i
      g: i %% 4
steps:
  - id: counts
    from: gen
    key_by: g
    aggregate:
      c: count()
sinks:
  - id: raw
    from: gen
    type: kafka
    brokers: [%s]
    topic: %s
    key: string(g)
  - id: totals
    from: counts
    type: kafka
    brokers: [%s]
    topic: %s
    key: string(g)
    changelog: upsert
`, raw, strings.Join(brokers, ", "), raw, strings.Join(brokers, ", "), totals)
	spec, err := pipeline.Load(pipeline.Default, "kafka.yaml", []byte(yaml))
	require.NoError(t, err)
	r, err := pipeline.NewRunner(spec, pipeline.RunnerOptions{StateDir: t.TempDir()})
	require.NoError(t, err)
	require.NoError(t, r.Run(t.Context()))

	var got []int
	for _, m := range readCommittedAll(t, brokers, raw) {
		got = append(got, m.n(t)) // two subtasks write each partition: no order to check
	}
	slices.Sort(got)
	require.Equal(t, intRange(0, 600), got)
	latest := map[string]string{}
	for _, m := range readCommittedAll(t, brokers, totals) {
		latest[m.Key] = string(m.Value)
	}
	require.Equal(t, map[string]string{
		"0": `{"c":150,"g":0}`, "1": `{"c":150,"g":1}`, "2": `{"c":150,"g":2}`, "3": `{"c":150,"g":3}`,
	}, latest)
}

// TestSinkCloseWaitsForRetriedRecords: Close returns only after the broker
// acknowledged every record, in every delivery mode. The broker drops the
// connection of the first Produce request, so the producer retries the
// batch on a new one; a Close that stopped the producer during that retry
// failed the batch with "producer in process of shutting down" (kfake
// only: a real broker cannot be told to drop one request).
func TestSinkCloseWaitsForRetriedRecords(t *testing.T) {
	for _, delivery := range []string{DeliveryNone, DeliveryAtLeastOnce} {
		t.Run(delivery, func(t *testing.T) {
			c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "t"))
			require.NoError(t, err)
			defer c.Close()
			var dropped atomic.Int32
			c.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
				dropped.Add(1)
				return nil, errors.New("connection dropped by the test"), true
			})
			brokers := c.ListenAddrs()
			s := openKafkaSink(t, loadKafkaSink(t, brokers, "topic: t\nkey: k\ndelivery: "+delivery), sinkCheckpointing(0, 1))
			sinkWrite(t, s, 0, 20)
			require.NoError(t, s.Close(context.Background()))
			require.Equal(t, int32(1), dropped.Load(), "the first Produce request was dropped")
			require.Equal(t, intRange(0, 20), sinkNs(t, readCommittedAll(t, brokers, "t")))
		})
	}
}

// A record the sink cannot encode (an infinite float in JSON) is a
// pipeline.SinkRecordError with its index: the records before it are sent
// and flush, and the sink stays usable for that flush.
func TestKafkaSinkUnencodableRecord(t *testing.T) {
	brokers := testBrokers(t)
	topic := testTopic(t, brokers, 1)
	cfg := loadKafkaSink(t, brokers, "topic: "+topic+"\ndelivery: at_least_once")
	s := openKafkaSink(t, cfg, sinkCheckpointing(0, 1))
	err := s.Write(context.Background(), conntest.Records(
		map[string]any{"n": 1}, map[string]any{"n": 2}, map[string]any{"n": math.Inf(1)}, map[string]any{"n": 4}))
	var re *pipeline.SinkRecordError
	require.ErrorAs(t, err, &re)
	require.Equal(t, 2, re.Index)
	require.ErrorContains(t, err, `field "n"`)
	require.NoError(t, s.Flush(context.Background()))
	var got []string
	for _, m := range readCommittedAll(t, brokers, topic) {
		got = append(got, string(m.Value))
	}
	require.Equal(t, []string{`{"n":1}`, `{"n":2}`}, got)
}
