//go:build !windows

package e2e_test

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/stretchr/testify/require"

	"github.com/eddy-stream/eddy/internal/testkit"
)

// Group mode (docs/group.md): processes of testdata/group/window.yaml
// share a Kafka -> key_by + tumbling window -> Kafka pipeline through a
// consumer group; their committed output, read by a read_committed
// consumer, must equal the output of the same pipeline in one process
// (testdata/group/window_ref.yaml) over the same input, as a multiset.
//
// The broker is kfake in the test process unless KAFKA_BROKERS is set.

// groupRecords is the input size of the group tests.
const groupRecords = 3000

// groupFlushKey is the key of the records that end the input: one per
// partition, an hour of event time after the rest, so that every window
// of the other keys fires in group mode, which never ends its input. Its
// own windows are left out of the comparison.
const groupFlushKey = "flush"

// groupSetup creates the topics of a group test, writes its input and
// returns the reference result (the one-process run's committed output,
// without the flush key's windows) and the group run's environment.
func groupSetup(t *testing.T, name string) (want []string, env map[string]string, brokers string) {
	t.Helper()
	brokers, _ = kafkaBrokers(t)
	run := fmt.Sprintf("%s-%d", name, time.Now().UnixNano())
	in, refOut, out := "in-"+run, "ref-"+run, "out-"+run
	createTopic(t, brokers, in, 3)
	createTopic(t, brokers, refOut, 3)
	createTopic(t, brokers, out, 3)
	base := time.Now().Add(-time.Hour).Truncate(time.Second).UnixMilli()
	produceGroupInput(t, brokers, in, base, groupRecords)

	work := t.TempDir()
	ref := eddy(t, work, map[string]string{"EDDY_STATE_DIR": work + "/ref", "KAFKA_BROKERS": brokers, "KAFKA_IN": in, "KAFKA_OUT": refOut},
		"run", mustAbs(t, "testdata/group/window_ref.yaml"))
	require.Equal(t, 0, ref.code, "the one-process reference run: %s", ref.stderr)
	want = withoutKey(readCommitted(t, brokers, refOut), groupFlushKey)
	require.NotEmpty(t, want)
	env = map[string]string{"EDDY_LOG_FORMAT": "json", "KAFKA_BROKERS": brokers, "KAFKA_IN": in, "KAFKA_OUT": out, "GROUP_ID": "g-" + run}
	return want, env, brokers
}

// produceGroupInput writes record i of n to partition i%3 of topic, with
// event times from base on, then a flush record to each partition.
func produceGroupInput(t *testing.T, brokers, topic string, base int64, n int) {
	t.Helper()
	cfg := saramaConfig()
	cfg.Producer.Partitioner = sarama.NewManualPartitioner
	cfg.Producer.RequiredAcks = sarama.WaitForAll
	cfg.Producer.Return.Successes = true
	p, err := sarama.NewSyncProducer(strings.Split(brokers, ","), cfg)
	require.NoError(t, err)
	var msgs []*sarama.ProducerMessage
	for i := range n {
		key := "k" + strconv.Itoa(i%26)
		msgs = append(msgs, &sarama.ProducerMessage{Topic: topic, Partition: int32(i % 3), Key: sarama.StringEncoder(key),
			Value: sarama.StringEncoder(fmt.Sprintf(`{"i":%d,"key":%q,"v":%d,"ts":%d}`, i, key, i%100, eventTimeFrom(base, i)))})
	}
	for part := range int32(3) {
		msgs = append(msgs, &sarama.ProducerMessage{Topic: topic, Partition: part, Key: sarama.StringEncoder(groupFlushKey),
			Value: sarama.StringEncoder(fmt.Sprintf(`{"i":-1,"key":%q,"v":0,"ts":%d}`, groupFlushKey, eventTimeFrom(base, n)+3_600_000))})
	}
	require.NoError(t, p.SendMessages(msgs))
	require.NoError(t, p.Close())
}

// withoutKey drops the output lines of key.
func withoutKey(lines []string, key string) []string {
	var out []string
	for _, l := range lines {
		if !strings.Contains(l, fmt.Sprintf(`"key":%q`, key)) {
			out = append(out, l)
		}
	}
	return out
}

// groupProcess is a running `eddy run` of a group file.
type groupProcess struct {
	cmd    *exec.Cmd
	stderr *bytes.Buffer
	done   chan error
}

// startGroupProcess starts eddy run of file with env and its own state
// directory.
func startGroupProcess(t *testing.T, file, stateDir string, env map[string]string) *groupProcess {
	t.Helper()
	e := map[string]string{"EDDY_STATE_DIR": stateDir}
	for k, v := range env {
		e[k] = v
	}
	c := eddyCommand(context.Background(), t.TempDir(), e, "run", file)
	p := &groupProcess{cmd: c, stderr: &bytes.Buffer{}, done: make(chan error, 1)}
	c.Stderr = p.stderr
	require.NoError(t, c.Start())
	go func() { p.done <- c.Wait() }()
	t.Cleanup(func() {
		if c.ProcessState == nil {
			_ = c.Process.Kill()
			<-p.done
		}
	})
	return p
}

// stop sends sig and waits for the process to end; it returns the exit
// code.
func (p *groupProcess) stop(t *testing.T, sig syscall.Signal) int {
	t.Helper()
	require.NoError(t, p.cmd.Process.Signal(sig))
	err := testkit.WaitFor(t, p.done, "eddy to end after "+sig.String())
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode()
	}
	require.NoError(t, err)
	return 0
}

// awaitCommitted reads topic with a read_committed consumer until it
// holds at least n records without the flush key, or the process ends.
func awaitCommitted(t *testing.T, brokers, topic string, n int, procs ...*groupProcess) {
	t.Helper()
	ccfg := saramaConfig()
	ccfg.Consumer.IsolationLevel = sarama.ReadCommitted
	consumer, err := sarama.NewConsumer(strings.Split(brokers, ","), ccfg)
	require.NoError(t, err)
	defer consumer.Close()
	parts, err := consumer.Partitions(topic)
	require.NoError(t, err)
	msgs := make(chan *sarama.ConsumerMessage)
	stop := make(chan struct{})
	defer close(stop)
	for _, p := range parts {
		pc, err := consumer.ConsumePartition(topic, p, sarama.OffsetOldest)
		require.NoError(t, err)
		defer pc.Close()
		go func() {
			for m := range pc.Messages() {
				select {
				case msgs <- m:
				case <-stop:
					return
				}
			}
		}()
	}
	deadline := time.After(runTimeout)
	got := 0
	for got < n {
		select {
		case m := <-msgs:
			if len(withoutKey([]string{string(m.Value)}, groupFlushKey)) == 1 {
				got++
			}
		case <-deadline:
			require.FailNow(t, "the group's output is incomplete", "%d of %d records committed", got, n)
		}
		for _, p := range procs {
			select {
			case err := <-p.done:
				p.done <- err
				require.FailNow(t, "a group process ended", "%v; stderr:\n%s", err, p.stderr.String())
			default:
			}
		}
	}
}

// TestGroupOneProcess: one process of a group file commits exactly the
// one-process result; SIGTERM leaves the group and exits 0.
func TestGroupOneProcess(t *testing.T) {
	want, env, brokers := groupSetup(t, "one")
	p := startGroupProcess(t, mustAbs(t, "testdata/group/window.yaml"), t.TempDir(), env)
	awaitCommitted(t, brokers, env["KAFKA_OUT"], len(want), p)
	require.Equal(t, 0, p.stop(t, syscall.SIGTERM), p.stderr.String())
	got := withoutKey(readCommitted(t, brokers, env["KAFKA_OUT"]), groupFlushKey)
	t.Logf("%d windows; group process log:\n%s", len(want), lastLines(p.stderr.String(), 30))
	requireSameLines(t, want, got, "group output vs the one-process run")
}

// lastLines returns the last n lines of s.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
