//go:build !windows

package e2e_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/eddy-stream/eddy/internal/testkit"
)

// Kafka chaos test: a keyed-window pipeline Kafka -> Kafka
// (testdata/crash/kafka_window.yaml), the built binary SIGKILLed at random
// moments (the kill moments of crash_test.go) and restarted with the same
// command until a run ends; then a read_committed consumer checks the output
// topic record by record against the expected windows: exactly_once,
// nothing lost and nothing duplicated; at_least_once, nothing lost.
//
// The broker is a real one when KAFKA_BROKERS is set (scripts/kafka-it.sh),
// and then Debian's kcat, a client that is not ours, reads the output too;
// otherwise an in-process kfake broker that lives in the test process, so
// it outlives every killed eddy.

// kafkaChaosRecords is the input size.
var kafkaChaosRecords = map[bool]int{false: 400_000, true: 150_000}[raceEnabled]

func kafkaBrokers(t *testing.T) (brokers string, real bool) {
	t.Helper()
	if env := os.Getenv("KAFKA_BROKERS"); env != "" {
		return env, true
	}
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	require.NoError(t, err)
	t.Cleanup(c.Close)
	return strings.Join(c.ListenAddrs(), ","), false
}

func saramaConfig() *sarama.Config {
	cfg := sarama.NewConfig()
	cfg.Version = sarama.V3_6_0_0
	return cfg
}

func createTopic(t *testing.T, brokers, name string, partitions int32) {
	t.Helper()
	admin, err := sarama.NewClusterAdmin(strings.Split(brokers, ","), saramaConfig())
	require.NoError(t, err)
	defer admin.Close()
	require.NoError(t, admin.CreateTopic(name, &sarama.TopicDetail{NumPartitions: partitions, ReplicationFactor: 1}, false))
	awaitTopicLeaders(t, brokers, name, partitions)
}

// awaitTopicLeaders waits until the leader of every partition of a topic
// just created answers for it. A real broker acknowledges CreateTopics
// before each partition's leader has taken the partition on, and a
// client that asks it then is told it is not the leader.
func awaitTopicLeaders(t *testing.T, brokers, name string, partitions int32) {
	t.Helper()
	client, err := sarama.NewClient(strings.Split(brokers, ","), saramaConfig())
	require.NoError(t, err)
	defer client.Close()
	deadline := time.Now().Add(time.Minute)
	for p := range partitions {
		for {
			_, err := client.GetOffset(name, p, sarama.OffsetNewest)
			if err == nil {
				break
			}
			require.True(t, time.Now().Before(deadline), "partition %d of %s has no leader that answers: %v", p, name, err)
			require.NoError(t, client.RefreshMetadata(name))
			time.Sleep(20 * time.Millisecond) // poll interval, not a wait for an event
		}
	}
}

// produceWindowInput writes record i of n to partition i%3 of topic, keyed
// by its window key: the records of the file crash test's window scenario,
// from event time base on.
func produceWindowInput(t *testing.T, brokers, topic string, base int64, n int) {
	t.Helper()
	cfg := saramaConfig()
	cfg.Producer.Partitioner = sarama.NewManualPartitioner
	cfg.Producer.RequiredAcks = sarama.WaitForAll
	cfg.Producer.Return.Successes = true
	cfg.Producer.Flush.Frequency = 5 * time.Millisecond
	cfg.Producer.Flush.Bytes = 1 << 20
	p, err := sarama.NewAsyncProducer(strings.Split(brokers, ","), cfg)
	require.NoError(t, err)
	acked := make(chan error, 1)
	go func() {
		var first error
		for range n {
			select {
			case <-p.Successes():
			case e := <-p.Errors():
				if first == nil {
					first = e
				}
			}
		}
		acked <- first
	}()
	for i := range n {
		key := "k" + strconv.Itoa(i%26)
		p.Input() <- &sarama.ProducerMessage{
			Topic: topic, Partition: int32(i % 3), Key: sarama.StringEncoder(key),
			Value: sarama.StringEncoder(fmt.Sprintf(`{"i":%d,"key":%q,"v":%d,"ts":%d}`, i, key, i%100, eventTimeFrom(base, i))),
		}
	}
	require.NoError(t, testkit.WaitFor(t, acked, "the broker to acknowledge the records"))
	require.NoError(t, p.Close())
}

// readCommitted returns the values of every record of topic that a
// read_committed consumer sees. It first appends a sentinel record to each
// partition (outside any transaction) and reads each partition up to its
// sentinel, so "everything" is a signal, not a timeout.
func readCommitted(t *testing.T, brokers, topic string) []string {
	t.Helper()
	bs := strings.Split(brokers, ",")
	cfg := saramaConfig()
	cfg.Producer.Partitioner = sarama.NewManualPartitioner
	cfg.Producer.RequiredAcks = sarama.WaitForAll
	cfg.Producer.Return.Successes = true
	client, err := sarama.NewClient(bs, cfg)
	require.NoError(t, err)
	defer client.Close()
	parts, err := client.Partitions(topic)
	require.NoError(t, err)
	prod, err := sarama.NewSyncProducerFromClient(client)
	require.NoError(t, err)
	sentinel := fmt.Sprintf("sentinel-%d", time.Now().UnixNano())
	for _, p := range parts {
		_, _, err := prod.SendMessage(&sarama.ProducerMessage{Topic: topic, Partition: p, Value: sarama.StringEncoder(sentinel)})
		require.NoError(t, err)
	}
	require.NoError(t, prod.Close())

	ccfg := saramaConfig()
	ccfg.Consumer.IsolationLevel = sarama.ReadCommitted
	consumer, err := sarama.NewConsumer(bs, ccfg)
	require.NoError(t, err)
	defer consumer.Close()
	var out []string
	for _, p := range parts {
		pc, err := consumer.ConsumePartition(topic, p, sarama.OffsetOldest)
		require.NoError(t, err)
		for {
			var m *sarama.ConsumerMessage
			select {
			case m = <-pc.Messages():
			case e := <-pc.Errors():
				require.NoError(t, e)
			case <-time.After(runTimeout):
				require.FailNow(t, "the sentinel of partition never arrived", "partition %d of %s", p, topic)
			}
			if string(m.Value) == sentinel {
				break
			}
			out = append(out, string(m.Value))
		}
		require.NoError(t, pc.Close())
	}
	return out
}

// kcatRead reads topic with kcat in read_committed mode to the end of every
// partition and returns the values, sentinels of readCommitted excluded.
func kcatRead(t *testing.T, brokers, topic string) []string {
	t.Helper()
	path, err := exec.LookPath("kcat")
	require.NoError(t, err, "kcat is needed to check the output with a client that is not ours (scripts/kafka-it.sh installs it)")
	ctx, cancel := context.WithTimeout(context.Background(), runTimeout)
	defer cancel()
	c := exec.CommandContext(ctx, path, "-C", "-b", brokers, "-t", topic, "-o", "beginning", "-e", "-q",
		"-X", "isolation.level=read_committed", "-f", "%s\n")
	b, err := c.Output()
	require.NoError(t, err, "kcat: %s", b)
	var out []string
	for line := range strings.Lines(string(b)) {
		line = strings.TrimSuffix(line, "\n")
		if !strings.HasPrefix(line, "sentinel-") {
			out = append(out, line)
		}
	}
	return out
}

func TestKafkaChaos(t *testing.T) {
	kills := 6
	if testing.Short() {
		kills = 3
	}
	if *crashKills > 0 {
		kills = *crashKills
	}
	seed := *crashSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("kill moments from seed %d (-crash.seed to reuse)", seed)
	for _, mode := range []string{"exactly_once", "at_least_once"} {
		t.Run(mode, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, uint64(len(mode))))
			runKafkaChaos(t, mode, kills, rng)
		})
	}
}

func runKafkaChaos(t *testing.T, mode string, kills int, rng *rand.Rand) {
	brokers, real := kafkaBrokers(t)
	n := kafkaChaosRecords
	if testing.Short() {
		n /= 3
	}
	run := fmt.Sprintf("%d", time.Now().UnixNano())
	in, out := "chaos-in-"+mode+"-"+run, "chaos-out-"+mode+"-"+run
	createTopic(t, brokers, in, 3)
	createTopic(t, brokers, out, 3)
	// Event times from an hour ago: the sink's records carry them as
	// Kafka timestamps, and a real broker's time retention (7 days) would
	// delete older ones.
	base := time.Now().Add(-time.Hour).Truncate(time.Second).UnixMilli()
	produceWindowInput(t, brokers, in, base, n)

	work := crashWorkDir(t)
	// crashLoop checks the file sink's committed parts of CRASH_OUT after
	// each kill; this pipeline has none, the directory stays empty.
	require.NoError(t, os.MkdirAll(filepath.Join(work, "unused"), 0o755))
	delivery := map[string]string{"exactly_once": "exactly_once", "at_least_once": "at_least_once"}[mode]
	env := map[string]string{
		"EDDY_LOG_FORMAT": "json", "EDDY_STATE_DIR": filepath.Join(work, "state"),
		"CRASH_MODE": mode, "CRASH_OUT": filepath.Join(work, "unused"),
		"KAFKA_BROKERS": brokers, "KAFKA_IN": in, "KAFKA_OUT": out,
		"KAFKA_DELIVERY": delivery, "KAFKA_TXN_PREFIX": "chaos-" + mode + "-" + run,
	}
	cr := crashLoopAt(t, work, env, mustAbs(t, "testdata/crash/kafka_window.yaml"), kills, func() (int, time.Duration, string) {
		// The file scenarios' moments, but up to a dozen checkpoints in:
		// the first ones of an incarnation come before the consumers
		// fetch, and the kills must land while results flow.
		wait, delay, what := killMoment(rng)
		if wait > 0 {
			wait += rng.IntN(10)
		}
		return wait, delay, what
	})
	t.Logf("kafka/%s: %d records, %d kills, %d incarnations, last completed checkpoint before the final run: %d; kill moments: %s",
		mode, n, cr.kills, cr.incarnations, cr.lastCompleted, strings.Join(cr.moments, ", "))
	require.Positive(t, cr.kills, "the run ended before any kill")
	require.GreaterOrEqual(t, cr.lastCompleted, int64(cr.kills), "most kills must come after a checkpoint completed")

	want := canonicalLines(t, expectedWindowsFrom(base, n))
	got := readCommitted(t, brokers, out)
	if mode == "exactly_once" {
		requireSameLines(t, want, got, "committed output of the crashed runs vs the expected windows")
		checkWindowsExact(t, want, got)
	} else {
		checkWindowsAtLeastOnce(t, n, want, got)
	}
	if real {
		requireSameLines(t, got, kcatRead(t, brokers, out), "what kcat reads (read_committed) vs what our consumer reads")
	}
}
