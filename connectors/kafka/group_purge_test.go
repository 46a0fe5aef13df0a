package kafka

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/stretchr/testify/require"

	"github.com/eddy-stream/eddy/pipeline"
)

// purgeBase is the event time of the purge test's first record, at the
// start of a 10s window.
const purgeBase = 1_700_000_000_000

// TestKafkaGroupPurge: a process of a group run deletes the records of the
// repartition partitions it read before the offsets its transactions
// committed: each partition's log start offset moves up to an offset the
// group committed, never past the last one, and the purged-records counter
// says how many went. The output is what the pipeline computes without
// purging: each user's count of the first window.
func TestKafkaGroupPurge(t *testing.T) {
	brokers := testBrokers(t)
	src := testTopic(t, brokers, 2)
	out := src + "-out"
	require.NoError(t, testAdmin(t, brokers).CreateTopic(out, &sarama.TopicDetail{NumPartitions: 1, ReplicationFactor: 1}, false))
	id := src + "-g"
	exchange := id + "-per_user-repartition"
	text := groupPipelineText(brokers, id, src, 4, "  commit_interval: 50ms\n  purge_interval: 1ms")
	// 200 records of ten users in the window [base, base+10s), then in
	// each partition a record a minute later, which fires that window.
	var msgs []*sarama.ProducerMessage
	for i := range 200 {
		msgs = append(msgs, msg(src, int32(i%2), fmt.Sprintf(`{"user":"u%d","ts":%d}`, i%10, purgeBase+int64(i)*10)))
	}
	for p := range int32(2) {
		msgs = append(msgs, msg(src, p, fmt.Sprintf(`{"user":"flush","ts":%d}`, purgeBase+60_000)))
	}
	produce(t, brokers, msgs...)

	run := startGroupRun(t, text)
	ran, metrics := run.ran, run.metrics

	want := map[string]string{}
	for u := range 10 {
		want[fmt.Sprintf("u%d", u)] = fmt.Sprintf(`{"_firing":"on_time","n":20,"user":"u%d","window_end":%d,"window_start":%d}`, u, purgeBase+10_000, purgeBase)
	}
	got := map[string]string{}
	awaitGroup(t, ran, "the first window's output", func() bool {
		for _, m := range readCommittedAll(t, brokers, out) {
			got[m.Key] = string(m.Value)
		}
		return len(got) >= len(want)
	})
	require.Equal(t, want, got, "the output, with purges between the commits")

	// The group went on reading the exchange to the offsets it has
	// committed now: those partitions are purged up to there (or beyond)
	// after the next commits.
	parts := []int32{0, 1, 2, 3}
	admin := testAdmin(t, brokers)
	committed := committedOffsets(t, admin, id, exchange, parts)
	for _, p := range parts {
		require.Positive(t, committed[p], "partition %d of the exchange holds records and markers, read and committed", p)
	}
	awaitGroup(t, ran, "the purge of the committed offsets", func() bool {
		starts := logStarts(t, brokers, exchange, parts)
		for _, p := range parts {
			if starts[p] < committed[p] {
				return false
			}
		}
		return true
	})
	require.NoError(t, run.stop())

	// The process stopped, and with it its purges: nothing it has not
	// committed is gone, and the counter counts every record that is.
	final := committedOffsets(t, admin, id, exchange, parts)
	starts := logStarts(t, brokers, exchange, parts)
	var deleted int64
	for _, p := range parts {
		require.LessOrEqual(t, starts[p], final[p], "partition %d: only committed records are purged", p)
		deleted += starts[p]
	}
	require.Equal(t, float64(deleted), counterValue(t, metrics, "eddy_group_purged_records_total"))
	require.Zero(t, counterValue(t, metrics, "eddy_group_purge_errors_total"))
}

// groupRunning is a group run of a pipeline file in the test process.
type groupRunning struct {
	ran      chan error
	cancel   context.CancelFunc
	metrics  *pipeline.Metrics
	stateDir string
	runner   *pipeline.Runner
}

// startGroupRun starts a process of the group file text; the test's end
// stops it.
func startGroupRun(t *testing.T, text string) *groupRunning {
	t.Helper()
	spec, err := pipeline.Load(pipeline.Default, "group.yaml", []byte(text))
	require.NoError(t, err)
	g := &groupRunning{ran: make(chan error, 1), metrics: pipeline.NewMetrics(), stateDir: t.TempDir()}
	r, err := pipeline.NewRunner(spec, pipeline.RunnerOptions{StateDir: g.stateDir, Metrics: g.metrics})
	require.NoError(t, err)
	g.runner = r
	var ctx context.Context
	ctx, g.cancel = context.WithCancel(t.Context())
	go func() { g.ran <- r.Run(ctx) }()
	t.Cleanup(func() {
		if t.Failed() && g.cancel != nil {
			// What the process was doing when the test gave up on it.
			st, err := json.Marshal(r.Status())
			t.Logf("status of the group process of %s: %s %v", g.stateDir, st, err)
		}
		_ = g.stop()
	})
	return g
}

// stop leaves the group and returns what the run ended with.
func (g *groupRunning) stop() error {
	if g.cancel == nil {
		return nil
	}
	g.cancel()
	g.cancel = nil
	return <-g.ran
}

// TestKafkaGroupTransactionTimeout: the process's transactional producer
// gives the brokers group.transaction_timeout, which is how long the
// transaction of a process that dies holds the read_committed readers of
// what it wrote.
func TestKafkaGroupTransactionTimeout(t *testing.T) {
	brokers := testBrokers(t)
	src := testTopic(t, brokers, 1)
	id := src + "-g"
	run := startGroupRun(t, groupPipelineText(brokers, id, src, 2, "  transaction_timeout: 7s"))
	cl, err := sarama.NewClient(brokers, testSaramaConfig())
	require.NoError(t, err)
	defer cl.Close()
	var st sarama.TransactionState
	awaitGroup(t, run.ran, "the process's transactional id", func() bool {
		pid, err := os.ReadFile(filepath.Join(run.stateDir, "group-process-id"))
		if err != nil {
			return false // not written yet
		}
		txnID := id + "-" + strings.TrimSpace(string(pid))
		coord, err := cl.TransactionCoordinator(txnID)
		require.NoError(t, err)
		resp, err := coord.DescribeTransactions(&sarama.DescribeTransactionsRequest{TransactionalIDs: []string{txnID}})
		require.NoError(t, err)
		require.Len(t, resp.TransactionStates, 1)
		st = resp.TransactionStates[0]
		return st.ErrorCode == sarama.ErrNoError
	})
	require.Equal(t, 7*time.Second, st.TransactionTimeout)
	require.NoError(t, run.stop())
}

// awaitGroup polls done until it holds, failing the test if the run ends
// first or after a minute.
func awaitGroup(t *testing.T, ran chan error, what string, done func() bool) {
	t.Helper()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(time.Minute)
	for !done() {
		select {
		case err := <-ran:
			ran <- err // for the test's stop
			require.FailNow(t, "the group run ended", "waiting for %s: %v", what, err)
		case <-deadline:
			require.FailNow(t, "timed out", "waiting for %s", what)
		case <-tick.C:
		}
	}
}

// committedOffsets returns the offsets group committed for the partitions
// of topic.
func committedOffsets(t *testing.T, admin sarama.ClusterAdmin, group, topic string, parts []int32) map[int32]int64 {
	t.Helper()
	resp, err := admin.ListConsumerGroupOffsets(group, map[string][]int32{topic: parts})
	require.NoError(t, err)
	out := map[int32]int64{}
	for _, p := range parts {
		blk := resp.GetBlock(topic, p)
		require.NotNil(t, blk)
		out[p] = blk.Offset
	}
	return out
}

// logStarts returns the log start offset of the partitions of topic
// (ListOffsets, oldest).
func logStarts(t *testing.T, brokers []string, topic string, parts []int32) map[int32]int64 {
	t.Helper()
	cl, err := sarama.NewClient(brokers, testSaramaConfig())
	require.NoError(t, err)
	defer cl.Close()
	out := map[int32]int64{}
	for _, p := range parts {
		out[p], err = cl.GetOffset(topic, p, sarama.OffsetOldest)
		require.NoError(t, err)
	}
	return out
}

// counterValue returns the value of the counter name (without labels).
func counterValue(t *testing.T, m *pipeline.Metrics, name string) float64 {
	t.Helper()
	families, err := m.Registry.Gather()
	require.NoError(t, err)
	for _, f := range families {
		if f.GetName() == name {
			return f.GetMetric()[0].GetCounter().GetValue()
		}
	}
	require.FailNow(t, "no series "+name)
	return 0
}

// TestPurgerGenerations: a purge takes the committed offsets of the
// repartition partitions only, of the current generation only, and waits
// for the purge interval; a generation that ended adds nothing, and the
// next one starts from nothing committed.
func TestPurgerGenerations(t *testing.T) {
	p := &purger{interval: time.Hour, topics: map[string]bool{"x": true}, logged: map[string]bool{}}
	gen1, gen2 := &generation{}, &generation{}
	p.begin(gen1)
	p.last = time.Now() // a purge just started: the next waits an hour
	p.commit(gen1, map[topicPartition]int64{{"x", 0}: 5, {"x", 1}: 2, {"source", 0}: 9})
	require.Equal(t, map[topicPartition]int64{{"x", 0}: 5, {"x", 1}: 2}, p.committed)
	require.False(t, p.running, "within the purge interval")
	p.commit(gen1, map[topicPartition]int64{{"x", 0}: 4})
	require.Equal(t, int64(5), p.committed[topicPartition{"x", 0}], "an offset never goes back")

	p.end(gen1)
	p.commit(gen1, map[topicPartition]int64{{"x", 0}: 7})
	require.Equal(t, int64(5), p.committed[topicPartition{"x", 0}], "the generation ended: its commits are not this process's to purge")
	p.begin(gen2)
	require.Empty(t, p.committed)
	p.commit(gen1, map[topicPartition]int64{{"x", 0}: 8})
	require.Empty(t, p.committed, "a commit of an older generation")
	p.commit(gen2, map[topicPartition]int64{{"x", 3}: 1})
	require.Equal(t, map[topicPartition]int64{{"x", 3}: 1}, p.committed)
}

// TestPurgeFailureKind: a failure's kind is its Kafka error code, else
// what the innermost error it wraps says.
func TestPurgeFailureKind(t *testing.T) {
	require.Equal(t, sarama.ErrNotLeaderForPartition.Error(),
		failureKind(sarama.Wrap(sarama.ErrDeleteRecords, sarama.ErrNotLeaderForPartition)))
	require.Equal(t, "connection refused", failureKind(fmt.Errorf("list offsets on broker 10.0.0.1:9092: %w",
		&net.OpError{Op: "dial", Addr: &net.TCPAddr{IP: net.IPv4(10, 0, 0, 1), Port: 9092}, Err: errors.New("connection refused")})))
}
