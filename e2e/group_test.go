//go:build !windows

package e2e_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
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

// groupTest is the topics and input of a group test.
type groupTest struct {
	brokers, in, refOut, out string
	// real: a real broker (KAFKA_BROKERS), whose output kcat reads too.
	real bool
	env  map[string]string
	// input is the records to produce, the flush records last.
	input []*sarama.ProducerMessage
}

// newGroupTest creates the topics of a group test and the group run's
// environment; the input is produced by produce.
func newGroupTest(t *testing.T, name string) *groupTest {
	t.Helper()
	brokers, real := kafkaBrokers(t)
	run := fmt.Sprintf("%s-%d", name, time.Now().UnixNano())
	g := &groupTest{brokers: brokers, real: real, in: "in-" + run, refOut: "ref-" + run, out: "out-" + run}
	createTopic(t, brokers, g.in, 3)
	createTopic(t, brokers, g.refOut, 3)
	createTopic(t, brokers, g.out, 3)
	g.env = map[string]string{"EDDY_LOG_FORMAT": "json", "KAFKA_BROKERS": brokers, "KAFKA_IN": g.in, "KAFKA_OUT": g.out, "GROUP_ID": "g-" + run}
	g.input = groupInput(g.in, time.Now().Add(-time.Hour).Truncate(time.Second).UnixMilli(), groupRecords)
	return g
}

// groupInput is record i of n in partition i%3 of topic, with event times
// from base on, then a flush record in each partition.
func groupInput(topic string, base int64, n int) []*sarama.ProducerMessage {
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
	return msgs
}

// produce writes msgs.
func (g *groupTest) produce(t *testing.T, msgs []*sarama.ProducerMessage) {
	t.Helper()
	cfg := saramaConfig()
	cfg.Producer.Partitioner = sarama.NewManualPartitioner
	cfg.Producer.RequiredAcks = sarama.WaitForAll
	cfg.Producer.Return.Successes = true
	p, err := sarama.NewSyncProducer(strings.Split(g.brokers, ","), cfg)
	require.NoError(t, err)
	require.NoError(t, p.SendMessages(msgs))
	require.NoError(t, p.Close())
}

// reference runs window_ref.yaml, the pipeline in one process, over the
// whole input and returns its committed output without the flush key's
// windows.
func (g *groupTest) reference(t *testing.T) []string {
	t.Helper()
	work := t.TempDir()
	ref := eddy(t, work, map[string]string{"EDDY_STATE_DIR": work, "KAFKA_BROKERS": g.brokers, "KAFKA_IN": g.in, "KAFKA_OUT": g.refOut},
		"run", mustAbs(t, "testdata/group/window_ref.yaml"))
	require.Equal(t, 0, ref.code, "the one-process reference run: %s", ref.stderr)
	want := withoutKey(readCommitted(t, g.brokers, g.refOut), groupFlushKey)
	require.NotEmpty(t, want)
	return want
}

// committed returns the group's committed output without the flush key's
// windows once no process writes it; on a real broker it also requires
// kcat, a client that is not ours, to read the same at read_committed.
func (g *groupTest) committed(t *testing.T) []string {
	t.Helper()
	got := g.committedSoFar(t)
	if g.real {
		requireSameLines(t, got, withoutKey(kcatRead(t, g.brokers, g.out), groupFlushKey), "what kcat reads (read_committed) vs what our consumer reads")
	}
	return got
}

// committedSoFar returns what the group has committed so far without the
// flush key's windows, while its processes may still be writing (kcat,
// reading later, would see more).
func (g *groupTest) committedSoFar(t *testing.T) []string {
	t.Helper()
	return withoutKey(readCommitted(t, g.brokers, g.out), groupFlushKey)
}

// withoutKey drops the output lines of key, and the sentinels of earlier
// readCommitted calls.
func withoutKey(lines []string, key string) []string {
	var out []string
	for _, l := range lines {
		if !strings.Contains(l, fmt.Sprintf(`"key":%q`, key)) && !strings.HasPrefix(l, "sentinel-") {
			out = append(out, l)
		}
	}
	return out
}

// groupProcess is a running `eddy run` of a group file.
type groupProcess struct {
	cmd    *exec.Cmd
	stderr *lockedBuffer
	done   chan error
}

// lockedBuffer is a buffer the process writes while the test reads it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
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
	p := &groupProcess{cmd: c, stderr: &lockedBuffer{}, done: make(chan error, 1)}
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
	// A process that ended is noticed at the next record or tick.
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	got := 0
	for got < n {
		select {
		case m := <-msgs:
			if len(withoutKey([]string{string(m.Value)}, groupFlushKey)) == 1 {
				got++
			}
		case <-tick.C:
		case <-deadline:
			var logs []string
			for i, p := range procs {
				logs = append(logs, fmt.Sprintf("process %d:\n%s", i, lastLines(grepLines(p.stderr.String(), "WARN", "ERROR", "group generation", "restored"), 20)))
			}
			require.FailNow(t, "the group's output is incomplete", "%d of %d records committed\n%s", got, n, strings.Join(logs, "\n"))
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
	g := newGroupTest(t, "one")
	g.produce(t, g.input)
	want := g.reference(t)
	env := map[string]string{"EDDY_ADMIN_ADDR": "127.0.0.1:0"}
	maps.Copy(env, g.env)
	p := startGroupProcess(t, mustAbs(t, "testdata/group/window.yaml"), t.TempDir(), env)
	awaitCommitted(t, g.brokers, g.out, len(want), p)
	checkGroupStatus(t, p, g)
	require.Equal(t, 0, p.stop(t, syscall.SIGTERM), p.stderr.String())
	t.Logf("%d windows; group process log:\n%s", len(want), lastLines(p.stderr.String(), 12))
	requireSameLines(t, want, g.committed(t), "group output vs the one-process run")
}

// checkGroupStatus checks what the status API and /metrics of the only
// process of a group say: its generation, that it reads every partition
// of the input and of the exchange, and that its restore is done.
func checkGroupStatus(t *testing.T, p *groupProcess, g *groupTest) {
	t.Helper()
	var addr string
	for _, l := range strings.Split(p.stderr.String(), "\n") {
		var e struct{ Msg, Addr string }
		if json.Unmarshal([]byte(l), &e) == nil && e.Msg == "admin endpoint listening" {
			addr = e.Addr
		}
	}
	require.NotEmpty(t, addr, "the admin endpoint's address is logged")
	resp, err := http.Get("http://" + addr + "/api/status")
	require.NoError(t, err)
	defer resp.Body.Close()
	var st struct {
		Group struct {
			ID         string             `json:"id"`
			Process    string             `json:"process"`
			Generation int32              `json:"generation"`
			Assigned   map[string][]int32 `json:"assigned"`
			Restore    struct {
				Done       bool `json:"done"`
				Partitions int  `json:"partitions"`
				Waiting    int  `json:"waiting"`
			} `json:"restore"`
		} `json:"group"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&st))
	require.Equal(t, g.env["GROUP_ID"], st.Group.ID)
	require.NotEmpty(t, st.Group.Process)
	require.Positive(t, st.Group.Generation)
	require.Equal(t, []int32{0, 1, 2}, st.Group.Assigned[g.in], "the only member reads every input partition")
	require.Len(t, st.Group.Assigned[g.env["GROUP_ID"]+"-per_key-repartition"], 8, "and every partition of the exchange (max_parallelism)")
	require.True(t, st.Group.Restore.Done)
	require.Equal(t, 8, st.Group.Restore.Partitions, "the changelog partitions of its key groups")
	require.Zero(t, st.Group.Restore.Waiting, "no transaction holds a changelog partition")

	resp, err = http.Get("http://" + addr + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Contains(t, string(b), fmt.Sprintf("eddy_group_assigned_partitions{topic=%q} 3", g.in))
	require.Contains(t, string(b), fmt.Sprintf("eddy_group_generation %d", st.Group.Generation))
	require.Regexp(t, `eddy_source_pending_records\{id="events",subtask="0"\} \d`, string(b), "the lag of the process's source task")
	for _, series := range []string{"eddy_group_changelog_records_total", "eddy_group_changelog_bytes_total"} {
		m := regexp.MustCompile(`(?m)^` + series + ` (\S+)$`).FindSubmatch(b)
		require.NotNil(t, m, "%s is exported", series)
		n, err := strconv.ParseFloat(string(m[1]), 64)
		require.NoError(t, err)
		require.Positive(t, n, "%s: the windows' state went to the changelog", series)
	}
	require.Regexp(t, fmt.Sprintf(`eddy_source_pending_records\{id="from:%s-per_key-repartition",subtask="0"\} \d`, g.env["GROUP_ID"]), string(b),
		"the lag of the process's reader of the exchange")

	// The process deletes the exchange records it read and committed.
	purged := regexp.MustCompile(`(?m)^eddy_group_purged_records_total (\S+)$`)
	awaitProcess(t, p, "the process never purged the exchange", func() bool {
		resp, err := http.Get("http://" + addr + "/metrics")
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		require.Contains(t, string(b), "eddy_group_purge_errors_total 0")
		m := purged.FindSubmatch(b)
		require.NotNil(t, m, "the purged records are counted")
		return string(m[1]) != "0"
	})
}

// TestGroupRestart: a group process SIGKILLed mid-run, while part of
// the input is there and its windows are being committed, and started
// again with the same state directory (its transactional id fences what
// the killed one left open), twice, commits exactly the one-process
// result: nothing lost, nothing twice. The restarted processes restore
// the windows' state from their local copy of the changelog and the
// changelog's records after it.
func TestGroupRestart(t *testing.T) {
	g := newGroupTest(t, "restart")
	file, state := mustAbs(t, "testdata/group/window.yaml"), t.TempDir()
	third := len(g.input) / 3
	committed := 0
	for i, part := range [][]*sarama.ProducerMessage{g.input[:third], g.input[third : 2*third]} {
		g.produce(t, part)
		p := startGroupProcess(t, file, state, g.env)
		// Part of this input's windows are committed: the kill comes
		// before the rest, which waits for input that is not there yet.
		committed += 50
		awaitCommitted(t, g.brokers, g.out, committed, p)
		require.Equal(t, -1, p.stop(t, syscall.SIGKILL), "SIGKILL")
		if i > 0 {
			requireLocalRestore(t, p)
		}
		committed = len(g.committed(t))
	}
	g.produce(t, g.input[2*third:])
	want := g.reference(t)
	p := startGroupProcess(t, file, state, g.env)
	g.finish(t, want, "group output after SIGKILLs and restarts vs the one-process run", p)
	requireLocalRestore(t, p)
	t.Logf("%d windows; restarted process log:\n%s", len(want), grepLines(p.stderr.String(), "restored keyed state", "group generation"))
}

// requireLocalRestore requires that the first restore of a process
// started again with its state directory took every changelog partition
// (one per key group) from its local copy, which held state.
func requireLocalRestore(t *testing.T, p *groupProcess) {
	t.Helper()
	for _, l := range strings.Split(p.stderr.String(), "\n") {
		var e struct {
			Msg             string
			Partitions      int
			LocalPartitions int `json:"local_partitions"`
			LocalRecords    int `json:"local_records"`
		}
		if json.Unmarshal([]byte(l), &e) != nil || e.Msg != "restored keyed state from the changelogs" {
			continue
		}
		require.Equal(t, 8, e.Partitions, l)
		require.Equal(t, e.Partitions, e.LocalPartitions, "every partition restores from the local copy: %s", l)
		require.Positive(t, e.LocalRecords, "the copy holds the windows' state: %s", l)
		return
	}
	require.FailNow(t, "the process never restored", p.stderr.String())
}

// TestGroupThreeProcesses: three processes of the same file share the
// pipeline (each gets a partition of the input and a range of key
// groups) and commit exactly the one-process result.
func TestGroupThreeProcesses(t *testing.T) {
	g := newGroupTest(t, "three")
	g.produce(t, g.input)
	want := g.reference(t)
	file := mustAbs(t, "testdata/group/window.yaml")
	var procs []*groupProcess
	for range 3 {
		procs = append(procs, startGroupProcess(t, file, t.TempDir(), g.env))
	}
	g.finish(t, want, "output of three group processes vs the one-process run", procs...)
}

// TestGroupScale: the group grows from one process to three while the
// input comes, then shrinks to two (SIGTERM leaves the group): every
// rebalance aborts the open transactions and the members go on from the
// last commit, restoring the state of the key groups they take over. The
// output is exactly the one-process result.
func TestGroupScale(t *testing.T) {
	g := newGroupTest(t, "scale")
	file := mustAbs(t, "testdata/group/window.yaml")
	third := len(g.input) / 3
	g.produce(t, g.input[:third])
	first := startGroupProcess(t, file, t.TempDir(), g.env)
	awaitCommitted(t, g.brokers, g.out, 50, first)
	procs := []*groupProcess{first, startGroupProcess(t, file, t.TempDir(), g.env), startGroupProcess(t, file, t.TempDir(), g.env)}
	g.produce(t, g.input[third:2*third])
	committed := len(g.committedSoFar(t))
	awaitCommitted(t, g.brokers, g.out, committed+50, procs...)
	require.Equal(t, 0, first.stop(t, syscall.SIGTERM), first.stderr.String())
	procs = procs[1:]
	g.produce(t, g.input[2*third:])
	want := g.reference(t)
	g.finish(t, want, "output of a group scaled 1 -> 3 -> 2 vs the one-process run", procs...)
	t.Logf("%d windows; a remaining process's log:\n%s", len(want), grepLines(procs[0].stderr.String(), "restored keyed state", "group generation"))
}

// TestGroupKillOneOfThree: of three processes, one is SIGKILLed while
// its windows are mid-way and not started again: the other two take over
// its partitions once the group drops it, restore its key groups' state
// from the changelogs, and the output is exactly the one-process result.
// (Its open transaction holds read_committed readers of its partitions
// until the broker aborts it, at the transaction timeout.)
func TestGroupKillOneOfThree(t *testing.T) {
	g := newGroupTest(t, "killone")
	file := mustAbs(t, "testdata/group/window.yaml")
	half := len(g.input) / 2
	g.produce(t, g.input[:half])
	var procs []*groupProcess
	for range 3 {
		procs = append(procs, startGroupProcess(t, file, t.TempDir(), g.env))
	}
	awaitCommitted(t, g.brokers, g.out, 100, procs...)
	require.Equal(t, -1, procs[0].stop(t, syscall.SIGKILL), "SIGKILL")
	procs = procs[1:]
	g.produce(t, g.input[half:])
	want := g.reference(t)
	g.finish(t, want, "output of three group processes, one killed, vs the one-process run", procs...)
	t.Logf("a remaining process:\n%s", grepLines(procs[0].stderr.String(), "group generation", "restored keyed state"))
}

// TestGroupKillDuringRebalance: of two processes, one is SIGKILLed while
// the group rebalances for a third that joins (the coordinator waits for
// every member to join again, and the killed one never does until its
// session times out). The two left take its partitions and key groups
// over, and the output is exactly the one-process result.
func TestGroupKillDuringRebalance(t *testing.T) {
	g := newGroupTest(t, "killrebalance")
	file := mustAbs(t, "testdata/group/window.yaml")
	third := len(g.input) / 3
	g.produce(t, g.input[:third])
	victim := startGroupProcess(t, file, t.TempDir(), g.env)
	other := startGroupProcess(t, file, t.TempDir(), g.env)
	awaitCommitted(t, g.brokers, g.out, 50, victim, other)
	awaitGroupState(t, g, other, "the group of two never settled", func(state string, members int) bool {
		return state == "Stable" && members == 2
	})
	joining := startGroupProcess(t, file, t.TempDir(), g.env)
	state := awaitGroupState(t, g, joining, "the group never rebalanced", func(state string, _ int) bool {
		return state == "PreparingRebalance" || state == "CompletingRebalance"
	})
	require.Equal(t, -1, victim.stop(t, syscall.SIGKILL), "SIGKILL")
	t.Logf("killed while the group was %s", state)
	g.produce(t, g.input[third:])
	want := g.reference(t)
	g.finish(t, want, "output of a group with a process killed during a rebalance vs the one-process run", other, joining)
	t.Logf("a remaining process:\n%s", grepLines(other.stderr.String(), "group generation", "restored keyed state"))
}

// TestGroupKillDuringRestore: a process SIGKILLed mid-run is started
// again with its state directory and SIGKILLed again while it restores
// its key groups' state (a transaction left open on the changelog
// partitions holds the restore, which waits for it to end); started a
// third time, once that transaction is aborted, it restores from its
// local copy and the changelogs, and the group's output is exactly the
// one-process result.
func TestGroupKillDuringRestore(t *testing.T) {
	g := newGroupTest(t, "killrestore")
	file, state := mustAbs(t, "testdata/group/window.yaml"), t.TempDir()
	third := len(g.input) / 3
	g.produce(t, g.input[:third])
	other := startGroupProcess(t, file, t.TempDir(), g.env)
	victim := startGroupProcess(t, file, state, g.env)
	awaitCommitted(t, g.brokers, g.out, 50, other, victim)
	awaitLog(t, victim, func(log string) bool { return strings.Contains(log, `"msg":"checkpoint complete"`) })

	txn := beginChangelogTxn(t, g.brokers, g.env["GROUP_ID"]+"-per_key-changelog")
	require.Equal(t, -1, victim.stop(t, syscall.SIGKILL), "SIGKILL")
	restoring := startGroupProcess(t, file, state, g.env)
	awaitLog(t, restoring, func(log string) bool {
		return strings.Contains(log, `"msg":"restore waits for the transactions open on changelog partitions to end"`)
	})
	require.Equal(t, -1, restoring.stop(t, syscall.SIGKILL), "SIGKILL")
	require.NotContains(t, restoring.stderr.String(), `"msg":"restored keyed state from the changelogs"`,
		"the process was killed before its restore ended")
	require.NoError(t, txn.AbortTxn())

	g.produce(t, g.input[third:2*third])
	again := startGroupProcess(t, file, state, g.env)
	g.produce(t, g.input[2*third:])
	want := g.reference(t)
	g.finish(t, want, "output of a group with a process killed during its restore vs the one-process run", other, again)
	t.Logf("the process started again:\n%s", grepLines(again.stderr.String(), "group generation", "restored keyed state"))
}

// beginChangelogTxn opens a transaction that holds a record in every
// partition of topic and leaves it open: until it ends, the partitions'
// last stable offset stays before that record, as a process that died
// mid-transaction leaves it. Its records are never committed.
func beginChangelogTxn(t *testing.T, brokers, topic string) sarama.SyncProducer {
	t.Helper()
	cfg := saramaConfig()
	cfg.Producer.Partitioner = sarama.NewManualPartitioner
	cfg.Producer.RequiredAcks = sarama.WaitForAll
	cfg.Producer.Return.Successes = true
	cfg.Producer.Idempotent = true
	cfg.Net.MaxOpenRequests = 1
	cfg.Producer.Transaction.ID = "open-" + topic
	cfg.Producer.Transaction.Timeout = 5 * time.Minute
	p, err := sarama.NewSyncProducer(strings.Split(brokers, ","), cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })
	cl, err := sarama.NewClient(strings.Split(brokers, ","), saramaConfig())
	require.NoError(t, err)
	defer cl.Close()
	parts, err := cl.Partitions(topic)
	require.NoError(t, err)
	require.NotEmpty(t, parts)
	require.NoError(t, p.BeginTxn())
	var msgs []*sarama.ProducerMessage
	for _, part := range parts {
		msgs = append(msgs, &sarama.ProducerMessage{Topic: topic, Partition: part, Key: sarama.StringEncoder("never committed")})
	}
	require.NoError(t, p.SendMessages(msgs))
	return p
}

// awaitGroupState polls the group's coordinator until ok holds for the
// group's state (Kafka's name of it) and its number of members, failing
// the test if p ends first; it returns the state it saw.
func awaitGroupState(t *testing.T, g *groupTest, p *groupProcess, what string, ok func(state string, members int) bool) string {
	t.Helper()
	admin, err := sarama.NewClusterAdmin(strings.Split(g.brokers, ","), saramaConfig())
	require.NoError(t, err)
	defer admin.Close()
	var state string
	awaitProcess(t, p, what, func() bool {
		groups, err := admin.DescribeConsumerGroups([]string{g.env["GROUP_ID"]})
		require.NoError(t, err)
		require.Len(t, groups, 1)
		require.NoError(t, kafkaErr(groups[0].Err))
		state = groups[0].State
		return ok(state, len(groups[0].Members))
	})
	return state
}

// TestGroupIdlePartition: the whole input is in partition 0 of three,
// so the source tasks of partitions 1 and 2 never read a record. They go
// idle (watermark.idle_timeout) and send idle markers into the exchange,
// so the windows after it fire on partition 0's watermark alone, with
// one process and with two (the idle tasks then in another process than
// the one with the records): the output is the one-process result.
func TestGroupIdlePartition(t *testing.T) {
	for _, procs := range []int{1, 2} {
		t.Run(fmt.Sprintf("%d processes", procs), func(t *testing.T) {
			g := newGroupTest(t, fmt.Sprintf("idle%d", procs))
			g.env["IDLE_TIMEOUT"] = "1s"
			for _, m := range g.input {
				m.Partition = 0
			}
			g.produce(t, g.input)
			want := g.reference(t)
			file := mustAbs(t, "testdata/group/window.yaml")
			var ps []*groupProcess
			for range procs {
				ps = append(ps, startGroupProcess(t, file, t.TempDir(), g.env))
			}
			g.finish(t, want, "output of a group with two idle input partitions vs the one-process run", ps...)
		})
	}
}

// TestGroupZombie: a process paused (SIGSTOP) past its session timeout
// while its windows are mid-way is dropped from the group; the other
// takes its partitions over. Resumed (SIGCONT), the zombie's open
// transaction cannot commit: its offsets carry an old generation
// (KIP-447), so nothing it wrote becomes visible, and the output is
// exactly the one-process result.
func TestGroupZombie(t *testing.T) {
	g := newGroupTest(t, "zombie")
	file := mustAbs(t, "testdata/group/window.yaml")
	half := len(g.input) / 2
	g.produce(t, g.input[:half])
	zombie := startGroupProcess(t, file, t.TempDir(), g.env)
	other := startGroupProcess(t, file, t.TempDir(), g.env)
	awaitCommitted(t, g.brokers, g.out, 100, zombie, other)
	// The zombie must hold partitions when it stops: its job committed a
	// checkpoint. (Stopped while it joins, it stays a member of the
	// generation it joins, and the other can commit the whole output in
	// the generation before.)
	awaitLog(t, zombie, func(log string) bool { return strings.Contains(log, `"msg":"checkpoint complete"`) })
	require.NoError(t, zombie.cmd.Process.Signal(syscall.SIGSTOP))
	g.produce(t, g.input[half:])
	want := g.reference(t)
	awaitCommitted(t, g.brokers, g.out, len(want), other)
	require.NoError(t, zombie.cmd.Process.Signal(syscall.SIGCONT))
	// The zombie finds out that its commit is refused, and takes part in
	// a later generation as a new member (the rebalance ends its
	// generation, or its failed job does and the file's restart strategy
	// joins again).
	awaitLog(t, zombie, func(log string) bool {
		_, after, ok := strings.Cut(log, "The provided member is not known in the current generation")
		return ok && strings.Contains(after, `"msg":"group generation"`)
	})
	require.Equal(t, 0, zombie.stop(t, syscall.SIGTERM), zombie.stderr.String())
	require.Equal(t, 0, other.stop(t, syscall.SIGTERM), other.stderr.String())
	t.Logf("zombie's log:\n%s", grepLines(zombie.stderr.String(), "group generation", "ERROR", "WARN"))
	requireSameLines(t, want, g.committed(t), "output with a zombie vs the one-process run")
}

// finish waits until the group committed as many windows as want has,
// stops the processes with SIGTERM (each exits 0) and checks the
// committed output equals want.
func (g *groupTest) finish(t *testing.T, want []string, what string, procs ...*groupProcess) {
	t.Helper()
	awaitCommitted(t, g.brokers, g.out, len(want), procs...)
	for _, p := range procs {
		require.Equal(t, 0, p.stop(t, syscall.SIGTERM), p.stderr.String())
	}
	requireSameLines(t, want, g.committed(t), what)
}

// awaitLog waits until the process's log satisfies ok, failing the test
// if the process ends first.
func awaitLog(t *testing.T, p *groupProcess, ok func(string) bool) {
	t.Helper()
	awaitProcess(t, p, "the log never showed what the test waits for", func() bool { return ok(p.stderr.String()) })
}

// awaitProcess polls ok until it holds, failing the test with what if
// the process ends first.
func awaitProcess(t *testing.T, p *groupProcess, what string, ok func() bool) {
	t.Helper()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(runTimeout)
	for !ok() {
		select {
		case <-tick.C:
		case err := <-p.done:
			p.done <- err
			require.FailNow(t, "the process ended", "%v\n%s", err, p.stderr.String())
		case <-deadline:
			require.FailNow(t, what, p.stderr.String())
		}
	}
}

// lastLines returns the last n lines of s.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// grepLines returns the lines of s that contain one of subs.
func grepLines(s string, subs ...string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		for _, sub := range subs {
			if strings.Contains(l, sub) {
				out = append(out, l)
				break
			}
		}
	}
	return strings.Join(out, "\n")
}

// TestGroupUnstableOffsets: a transaction that committed offsets to the
// group and did not end (its process killed between the offset commit and
// the end of the transaction) leaves the group's offsets unstable
// (KIP-447) until the broker aborts it at its timeout. A process that
// joins meanwhile keeps trying to join, instead of failing when the
// client's few retries of the offset fetch are spent, and once the
// transaction ends commits exactly the one-process result.
func TestGroupUnstableOffsets(t *testing.T) {
	g := newGroupTest(t, "unstable")
	g.produce(t, g.input)
	want := g.reference(t)
	txn := beginOffsetTxn(t, g.brokers, g.env["GROUP_ID"], g.in)
	p := startGroupProcess(t, mustAbs(t, "testdata/group/window.yaml"), t.TempDir(), g.env)
	awaitLog(t, p, func(log string) bool { return strings.Contains(log, `"msg":"joining the group failed: trying again"`) })
	txn.abort(t)
	g.finish(t, want, "output of a group process that joined while the group's offsets were unstable vs the one-process run", p)
}

// offsetTxn is a transaction, sent request by request as a transactional
// producer does, that committed offsets to a group and is still open.
type offsetTxn struct {
	coord *sarama.Broker
	id    string
	pid   int64
	epoch int16
}

// beginOffsetTxn opens a transaction that commits offset 1 of partition 0
// of topic to group, and leaves it open.
func beginOffsetTxn(t *testing.T, brokers, group, topic string) *offsetTxn {
	t.Helper()
	cl, err := sarama.NewClient(strings.Split(brokers, ","), saramaConfig())
	require.NoError(t, err)
	t.Cleanup(func() { _ = cl.Close() })
	x := &offsetTxn{id: "pending-" + group}
	// The first transactional request of a cluster waits for its
	// transaction log to be created; the coordinators say "not available"
	// until then.
	retriable := func(err error) bool {
		return errors.Is(err, sarama.ErrConsumerCoordinatorNotAvailable) || errors.Is(err, sarama.ErrNotCoordinatorForConsumer) ||
			errors.Is(err, sarama.ErrConcurrentTransactions)
	}
	send := func(what string, req func() error) {
		t.Helper()
		for attempt := 0; ; attempt++ {
			err := req()
			if err == nil {
				return
			}
			require.True(t, retriable(err) && attempt < 100, "%s: %v", what, err)
			_ = cl.RefreshTransactionCoordinator(x.id)
			_ = cl.RefreshCoordinator(group)
			time.Sleep(100 * time.Millisecond) // the broker's backoff for these answers
		}
	}
	send("init the producer id", func() error {
		var err error
		if x.coord, err = cl.TransactionCoordinator(x.id); err != nil {
			return err
		}
		resp, err := x.coord.InitProducerID(&sarama.InitProducerIDRequest{Version: 3, TransactionalID: &x.id, TransactionTimeout: time.Minute, ProducerID: -1, ProducerEpoch: -1})
		if err != nil {
			return err
		}
		x.pid, x.epoch = resp.ProducerID, resp.ProducerEpoch
		return kafkaErr(resp.Err)
	})
	send("add the offsets to the transaction", func() error {
		resp, err := x.coord.AddOffsetsToTxn(&sarama.AddOffsetsToTxnRequest{Version: 2, TransactionalID: x.id, ProducerID: x.pid, ProducerEpoch: x.epoch, GroupID: group})
		if err != nil {
			return err
		}
		return kafkaErr(resp.Err)
	})
	send("commit the offsets in the transaction", func() error {
		gc, err := cl.Coordinator(group)
		if err != nil {
			return err
		}
		resp, err := gc.TxnOffsetCommit(&sarama.TxnOffsetCommitRequest{Version: 2, TransactionalID: x.id, GroupID: group, ProducerID: x.pid, ProducerEpoch: x.epoch,
			Topics: map[string][]*sarama.PartitionOffsetMetadata{topic: {{Partition: 0, Offset: 1}}}})
		if err != nil {
			return err
		}
		for _, errs := range resp.Topics {
			for _, pe := range errs {
				if err := kafkaErr(pe.Err); err != nil {
					return err
				}
			}
		}
		return nil
	})
	return x
}

// abort ends the transaction, aborted: the group's offsets are stable again.
func (x *offsetTxn) abort(t *testing.T) {
	t.Helper()
	resp, err := x.coord.EndTxn(&sarama.EndTxnRequest{Version: 2, TransactionalID: x.id, ProducerID: x.pid, ProducerEpoch: x.epoch, TransactionResult: false})
	require.NoError(t, err)
	require.NoError(t, kafkaErr(resp.Err))
}

// kafkaErr is nil for sarama.ErrNoError.
func kafkaErr(k sarama.KError) error {
	if k == sarama.ErrNoError {
		return nil
	}
	return k
}

// TestGroupDeadLetters: a key that fails on a tenth of the records, under
// on_error: dead_letter (testdata/group/deadletters.yaml). The senders
// put those records into partition 0 of the exchange, and the process
// that reads it sends them to the step's errors stream, as subtask 0 does
// in one process: with one process, and with three, the committed output
// and the committed dead letters (their record, error and step) equal
// those of the same pipeline in one process, record for record. The one
// process counts the dead letters as the step's, as one process does.
func TestGroupDeadLetters(t *testing.T) {
	for _, procs := range []int{1, 3} {
		t.Run(fmt.Sprintf("%d processes", procs), func(t *testing.T) {
			g := newGroupTest(t, fmt.Sprintf("dead%d", procs))
			refErrors, errorsTopic := "ref-errors-"+g.in, "errors-"+g.in
			createTopic(t, g.brokers, refErrors, 1)
			createTopic(t, g.brokers, errorsTopic, 3)
			g.env["KAFKA_ERRORS"] = errorsTopic
			g.produce(t, g.input)

			work := t.TempDir()
			ref := eddy(t, work, map[string]string{"EDDY_STATE_DIR": work, "KAFKA_BROKERS": g.brokers, "KAFKA_IN": g.in,
				"KAFKA_OUT": g.refOut, "KAFKA_ERRORS": refErrors}, "run", mustAbs(t, "testdata/group/deadletters_ref.yaml"))
			require.Equal(t, 0, ref.code, "the one-process reference run: %s", ref.stderr)
			want := withoutKey(readCommitted(t, g.brokers, g.refOut), groupFlushKey)
			wantDead := withoutKey(readCommitted(t, g.brokers, refErrors), groupFlushKey)
			require.NotEmpty(t, want)
			// v is i % 100 (the flush records' 0): the key fails for v 7,
			// 17, ..., 97, one record in ten.
			require.Len(t, wantDead, groupRecords/10)
			for _, l := range wantDead {
				d := decodeLine(t, l)
				require.Equal(t, "per_key", d["step"])
				require.Contains(t, d["error"], "key_by: ")
				require.Equal(t, int64(7), intField(t, d["record"].(map[string]any), "v")%10, l)
			}

			env := map[string]string{"EDDY_ADMIN_ADDR": "127.0.0.1:0"}
			maps.Copy(env, g.env)
			var ps []*groupProcess
			for range procs {
				ps = append(ps, startGroupProcess(t, mustAbs(t, "testdata/group/deadletters.yaml"), t.TempDir(), env))
			}
			awaitCommitted(t, g.brokers, g.out, len(want), ps...)
			awaitCommitted(t, g.brokers, errorsTopic, len(wantDead), ps...)
			if procs == 1 {
				// One generation reads each record once: each dead letter
				// is counted once, as the step's.
				require.Contains(t, processMetrics(t, ps[0]),
					fmt.Sprintf(`eddy_record_errors_total{id="per_key",policy="dead_letter",subtask="0"} %d`, len(wantDead)))
			}
			for _, p := range ps {
				require.Equal(t, 0, p.stop(t, syscall.SIGTERM), p.stderr.String())
			}
			requireSameLines(t, want, g.committed(t), "group output vs the one-process run")
			requireSameLines(t, wantDead, withoutKey(readCommitted(t, g.brokers, errorsTopic), groupFlushKey),
				"group dead letters vs the one-process run's")
		})
	}
}

// processMetrics returns what the /metrics endpoint of a group process
// started with EDDY_ADMIN_ADDR says.
func processMetrics(t *testing.T, p *groupProcess) string {
	t.Helper()
	var addr string
	for _, l := range strings.Split(p.stderr.String(), "\n") {
		var e struct{ Msg, Addr string }
		if json.Unmarshal([]byte(l), &e) == nil && e.Msg == "admin endpoint listening" {
			addr = e.Addr
		}
	}
	require.NotEmpty(t, addr, "the admin endpoint's address is logged")
	resp, err := http.Get("http://" + addr + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return string(b)
}
