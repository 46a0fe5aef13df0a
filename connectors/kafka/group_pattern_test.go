package kafka

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/IBM/sarama"
	"github.com/stretchr/testify/require"

	"github.com/eddy-stream/eddy/pipeline"
)

// patternBase is the event time of the pattern test's first record, at
// the start of a 10s window.
const patternBase = 1_700_000_000_000

// patternPipelineText is a pipeline that reads the topics matching
// pattern, keeps a count per user and 10s window, and writes the counts
// to out. With group keys it runs in group mode as group id; without, in
// one process to the end of the topics (stop_at: latest).
func patternPipelineText(brokers []string, id, pattern, out string, group bool) string {
	bs := strings.Join(brokers, ", ")
	head, bound := "", "    stop_at: latest\n"
	if group {
		head = fmt.Sprintf("group:\n  brokers: [%s]\n  id: %s\n  replication_factor: 1\n  commit_interval: 100ms\n", bs, id)
		bound = "    discovery_interval: 100ms\n"
	}
	return fmt.Sprintf(`
version: 1
name: pattern
max_parallelism: 4
%[1]s
sources:
  - id: in
    type: kafka
    brokers: [%[2]s]
    topic_pattern: '%[3]s'
    event_time: ts
    watermark: {max_out_of_orderness: 0}
%[4]s
steps:
  - id: per_user
    key_by: user
    window: {type: tumbling, size: 10s}
    aggregate: {n: count()}
sinks:
  - id: out
    type: kafka
    brokers: [%[2]s]
    topic: %[5]s
    key: user
`, head, bs, pattern, bound, out)
}

// patternInput is n records of ten users in each partition of topic,
// from event time from on, one a second, then a record of user flush
// at flush in each partition, which moves its watermark past them.
func patternInput(topic string, partitions int32, from int64, n int, flush int64) []*sarama.ProducerMessage {
	var msgs []*sarama.ProducerMessage
	for p := range partitions {
		for i := range n {
			msgs = append(msgs, msg(topic, p, fmt.Sprintf(`{"user":"u%d","ts":%d}`, i%10, from+int64(i)*1000)))
		}
	}
	return append(msgs, patternFlush(topic, partitions, flush)...)
}

// patternFlush is a record of user flush at ts in each partition of topic.
func patternFlush(topic string, partitions int32, ts int64) []*sarama.ProducerMessage {
	var msgs []*sarama.ProducerMessage
	for p := range partitions {
		msgs = append(msgs, msg(topic, p, fmt.Sprintf(`{"user":"flush","ts":%d}`, ts)))
	}
	return msgs
}

// windowCounts returns the committed window outputs of topic, without
// user flush's, sorted.
func windowCounts(t *testing.T, brokers []string, topic string) []string {
	t.Helper()
	var out []string
	for _, m := range readCommittedAll(t, brokers, topic) {
		if m.Key != "flush" {
			out = append(out, string(m.Value))
		}
	}
	slices.Sort(out)
	return out
}

// assignedPartitions returns eddy_group_assigned_partitions of topic (0
// when the process reads none of it).
func assignedPartitions(t *testing.T, m *pipeline.Metrics, topic string) float64 {
	t.Helper()
	families, err := m.Registry.Gather()
	require.NoError(t, err)
	for _, f := range families {
		if f.GetName() != "eddy_group_assigned_partitions" {
			continue
		}
		for _, s := range f.GetMetric() {
			for _, l := range s.GetLabel() {
				if l.GetName() == "topic" && l.GetValue() == topic {
					return s.GetGauge().GetValue()
				}
			}
		}
	}
	return 0
}

// TestKafkaGroupPattern: a group run whose source has a topic_pattern
// reads every topic that matches (and not the group's internal topics nor
// its output), and a topic created while it runs that matches is picked
// up: the generation ends, the process joins again with it, and reads it
// from its earliest offset. The output is exactly what the pipeline
// computes in one process over all the topics: every record counted once.
func TestKafkaGroupPattern(t *testing.T) {
	brokers := testBrokers(t)
	base := testTopic(t, brokers, 1) // a unique prefix; the topic itself does not match
	in := func(s string) string { return base + ".in." + s }
	pattern := regexp.QuoteMeta(base) + `\.in\..*`
	id, out, ref := base+"-g", base+".out", base+".ref"
	admin := testAdmin(t, brokers)
	for _, name := range []string{in("a"), in("b"), out, ref} {
		require.NoError(t, admin.CreateTopic(name, &sarama.TopicDetail{NumPartitions: 2, ReplicationFactor: 1}, false))
	}
	// The first topics' records and their flush: 50 windows of a's (5
	// windows of 10 users), and b's, 2s later, add 2 of a sixth window.
	produce(t, brokers, patternInput(in("a"), 2, patternBase, 50, patternBase+60_000)...)
	produce(t, brokers, patternInput(in("b"), 2, patternBase+2_000, 50, patternBase+60_000)...)

	run := startGroupRun(t, patternPipelineText(brokers, id, pattern, out, true))
	awaitGroup(t, run.ran, "the generation that reads both topics", func() bool {
		return assignedPartitions(t, run.metrics, in("a")) == 2 && assignedPartitions(t, run.metrics, in("b")) == 2
	})
	require.Zero(t, assignedPartitions(t, run.metrics, base), "a topic the pattern does not match")
	require.Zero(t, assignedPartitions(t, run.metrics, out))
	require.Equal(t, float64(4), assignedPartitions(t, run.metrics, id+"-per_user-repartition"))
	awaitGroup(t, run.ran, "the windows of the first topics", func() bool {
		return len(windowCounts(t, brokers, out)) >= 52
	})
	rebalances := counterValue(t, run.metrics, "eddy_group_rebalances_total")

	// A topic that matches is created while the group runs: the process
	// joins again with it.
	require.NoError(t, admin.CreateTopic(in("c"), &sarama.TopicDetail{NumPartitions: 2, ReplicationFactor: 1}, false))
	awaitGroup(t, run.ran, "the generation that reads the new topic", func() bool {
		return assignedPartitions(t, run.metrics, in("c")) == 2
	})
	require.Greater(t, counterValue(t, run.metrics, "eddy_group_rebalances_total"), rebalances)
	// Its records come after the first topics' flush; then every
	// partition gets a flush a minute after them.
	later := int64(patternBase + 120_000)
	produce(t, brokers, patternInput(in("c"), 2, later, 50, later+60_000)...)
	produce(t, brokers, patternFlush(in("a"), 2, later+60_000)...)
	produce(t, brokers, patternFlush(in("b"), 2, later+60_000)...)

	// The same pipeline in one process over all three topics.
	spec, err := pipeline.Load(pipeline.Default, "ref.yaml", []byte(patternPipelineText(brokers, "", pattern, ref, false)))
	require.NoError(t, err)
	r, err := pipeline.NewRunner(spec, pipeline.RunnerOptions{StateDir: t.TempDir()})
	require.NoError(t, err)
	require.NoError(t, r.Run(t.Context()))
	want := windowCounts(t, brokers, ref)
	require.Len(t, want, 102, "52 windows of the first topics, 50 of the new one")

	awaitGroup(t, run.ran, "the windows of the new topic", func() bool {
		return len(windowCounts(t, brokers, out)) >= len(want)
	})
	require.NoError(t, run.stop())
	require.Equal(t, want, windowCounts(t, brokers, out), "the group's output vs the one-process run's")
}

// TestKafkaGroupPatternTwoProcesses: two processes share a pattern
// source over topics of 2 and 4 partitions. The stage has 4 tasks, and a
// task stays whole: the process that reads partition p of one topic reads
// partition p of the others (Kafka's range assignment would give the
// 2-partition topic's partition 1 to the other process than the other
// topic's). A topic of 3 partitions created while they run is picked up
// by both, in one generation, on the same terms. The output is what one
// process computes over the topics.
func TestKafkaGroupPatternTwoProcesses(t *testing.T) {
	brokers := testBrokers(t)
	base := testTopic(t, brokers, 1)
	in := func(s string) string { return base + ".in." + s }
	pattern := regexp.QuoteMeta(base) + `\.in\..*`
	id, out, ref := base+"-g", base+".out", base+".ref"
	admin := testAdmin(t, brokers)
	for name, parts := range map[string]int32{in("a"): 2, in("b"): 4, out: 2, ref: 2} {
		require.NoError(t, admin.CreateTopic(name, &sarama.TopicDetail{NumPartitions: parts, ReplicationFactor: 1}, false))
	}
	// 3 windows of 10 users, and b's last record in a fourth.
	produce(t, brokers, patternInput(in("a"), 2, patternBase, 30, patternBase+60_000)...)
	produce(t, brokers, patternInput(in("b"), 4, patternBase+1_000, 30, patternBase+60_000)...)

	text := patternPipelineText(brokers, id, pattern, out, true)
	runs := []*groupRunning{startGroupRun(t, text), startGroupRun(t, text)}
	sharedTasks(t, runs, map[string]int{in("a"): 2, in("b"): 4})
	awaitGroup(t, runs[0].ran, "the windows of the first topics", func() bool {
		return len(windowCounts(t, brokers, out)) >= 31
	})

	require.NoError(t, admin.CreateTopic(in("c"), &sarama.TopicDetail{NumPartitions: 3, ReplicationFactor: 1}, false))
	sharedTasks(t, runs, map[string]int{in("a"): 2, in("b"): 4, in("c"): 3})
	later := int64(patternBase + 120_000)
	produce(t, brokers, patternInput(in("c"), 3, later, 30, later+60_000)...)
	produce(t, brokers, patternFlush(in("a"), 2, later+60_000)...)
	produce(t, brokers, patternFlush(in("b"), 4, later+60_000)...)

	spec, err := pipeline.Load(pipeline.Default, "ref.yaml", []byte(patternPipelineText(brokers, "", pattern, ref, false)))
	require.NoError(t, err)
	r, err := pipeline.NewRunner(spec, pipeline.RunnerOptions{StateDir: t.TempDir()})
	require.NoError(t, err)
	require.NoError(t, r.Run(t.Context()))
	want := windowCounts(t, brokers, ref)
	require.Len(t, want, 61, "31 windows of the first topics, 30 of the new one")

	awaitGroup(t, runs[1].ran, "the windows", func() bool {
		return len(windowCounts(t, brokers, out)) >= len(want)
	})
	for _, r := range runs {
		require.NoError(t, r.stop())
	}
	require.Equal(t, want, windowCounts(t, brokers, out), "the output of two processes vs the one-process run's")
}

// sharedTasks waits until the processes of runs take part in one
// generation that assigns every partition of topics (topic -> partition
// count) to one of them, and checks that each task of the source stage
// is whole: a process that reads partition p of one topic reads
// partition p of every topic that has one.
func sharedTasks(t *testing.T, runs []*groupRunning, topics map[string]int) {
	t.Helper()
	assigned := make([]map[string][]int32, len(runs))
	awaitGroup(t, runs[0].ran, fmt.Sprintf("a generation of every process that reads %v", topics), func() bool {
		var gen int32
		got := map[string]int{}
		for i, r := range runs {
			st := r.runner.Status().Group
			if st == nil || (i > 0 && st.Generation != gen) {
				return false
			}
			gen, assigned[i] = st.Generation, st.Assigned
			for topic := range topics {
				got[topic] += len(st.Assigned[topic])
			}
		}
		return maps.Equal(got, topics)
	})
	owner := map[int32]int{}
	for i := range runs {
		for topic := range topics {
			for _, p := range assigned[i][topic] {
				if o, ok := owner[p]; ok {
					require.Equal(t, o, i, "task %d is split: process %d reads partition %d of %s: %v", p, i, p, topic, assigned)
				}
				owner[p] = i
			}
		}
	}
}

// TestKafkaGroupPatternOverlap: two sources whose patterns match one
// topic cannot run in group mode: a run fails when it resolves them, at
// the start, or when such a topic is created while it runs.
func TestKafkaGroupPatternOverlap(t *testing.T) {
	brokers := testBrokers(t)
	base := testTopic(t, brokers, 1)
	admin := testAdmin(t, brokers)
	for _, name := range []string{base + ".x.1", base + ".y.1", base + ".out"} {
		require.NoError(t, admin.CreateTopic(name, &sarama.TopicDetail{NumPartitions: 1, ReplicationFactor: 1}, false))
	}
	text := func(second string) string {
		bs := strings.Join(brokers, ", ")
		return fmt.Sprintf(`
version: 1
name: overlap
group: {brokers: [%[1]s], id: %[2]s-g, replication_factor: 1, commit_interval: 100ms}
sources:
  - {id: x, type: kafka, brokers: [%[1]s], topic_pattern: '%[3]s\.x\..*', discovery_interval: 100ms}
  - {id: y, type: kafka, brokers: [%[1]s], topic_pattern: '%[4]s', discovery_interval: 100ms}
steps:
  - {id: both, from: [x, y], filter: 'true'}
sinks:
  - {id: out, type: kafka, brokers: [%[1]s], topic: %[2]s.out}
`, bs, base, regexp.QuoteMeta(base), second)
	}
	want := fmt.Sprintf(`topic %[1]s.x.1 is read by source "x" (topic_pattern %[2]s\.x\..*) and by source "y" (topic_pattern %[2]s\..\.1)`, base, regexp.QuoteMeta(base))
	run := startGroupRun(t, text(regexp.QuoteMeta(base)+`\..\.1`))
	err := <-run.ran
	run.cancel = nil
	require.ErrorContains(t, err, want)
	require.ErrorContains(t, err, "a topic must be read by one source only")

	// Disjoint patterns run, until a topic that both match is created.
	run = startGroupRun(t, text(regexp.QuoteMeta(base)+`\..\.2|`+regexp.QuoteMeta(base)+`\.y\..*`))
	awaitGroup(t, run.ran, "the generation", func() bool {
		return assignedPartitions(t, run.metrics, base+".x.1") == 1 && assignedPartitions(t, run.metrics, base+".y.1") == 1
	})
	require.NoError(t, admin.CreateTopic(base+".x.2", &sarama.TopicDetail{NumPartitions: 1, ReplicationFactor: 1}, false))
	err = <-run.ran
	run.cancel = nil
	require.ErrorContains(t, err, fmt.Sprintf(`topic %[1]s.x.2 is read by source "x"`, base))
}

// windowLines returns the output lines of a count per user of users
// u0..u9 in each 10s window of [from, to), of n records each.
func windowLines(from, to int64, n int) []string {
	var out []string
	for w := from; w < to; w += 10_000 {
		for u := range 10 {
			out = append(out, fmt.Sprintf(`{"_firing":"on_time","n":%d,"user":"u%d","window_end":%d,"window_start":%d}`, n, u, w+10_000, w))
		}
	}
	return out
}

// TestKafkaGroupPatternTopicDeleted: a topic that the pattern matched is
// deleted while the group runs: the process joins again without it and
// goes on reading the other topics; what it committed before stays.
func TestKafkaGroupPatternTopicDeleted(t *testing.T) {
	brokers := testBrokers(t)
	base := testTopic(t, brokers, 1)
	in := func(s string) string { return base + ".in." + s }
	pattern := regexp.QuoteMeta(base) + `\.in\..*`
	id, out := base+"-g", base+".out"
	admin := testAdmin(t, brokers)
	for _, name := range []string{in("a"), in("b"), out} {
		require.NoError(t, admin.CreateTopic(name, &sarama.TopicDetail{NumPartitions: 1, ReplicationFactor: 1}, false))
	}
	produce(t, brokers, patternInput(in("a"), 1, patternBase, 20, patternBase+60_000)...)
	produce(t, brokers, patternInput(in("b"), 1, patternBase, 20, patternBase+60_000)...)
	run := startGroupRun(t, patternPipelineText(brokers, id, pattern, out, true))
	first := windowLines(patternBase, patternBase+20_000, 2) // a's and b's records
	awaitGroup(t, run.ran, "the windows of both topics", func() bool {
		return len(windowCounts(t, brokers, out)) >= len(first)
	})

	require.NoError(t, admin.DeleteTopic(in("b")))
	awaitGroup(t, run.ran, "a generation without the deleted topic", func() bool {
		return assignedPartitions(t, run.metrics, in("b")) == 0 && assignedPartitions(t, run.metrics, in("a")) == 1
	})
	later := int64(patternBase + 120_000)
	produce(t, brokers, patternInput(in("a"), 1, later, 20, later+60_000)...)
	want := append(slices.Clone(first), windowLines(later, later+20_000, 1)...)
	slices.Sort(want)
	awaitGroup(t, run.ran, "the windows of the topic left", func() bool {
		return len(windowCounts(t, brokers, out)) >= len(want)
	})
	require.NoError(t, run.stop())
	require.Equal(t, want, windowCounts(t, brokers, out))
}

// TestKafkaGroupPatternTopicDeletedBeforeCheck: a topic that the pattern
// matched is deleted before the process checks the topics again (a long
// discovery_interval): the commit with its offsets fails, which ends the
// generation, and since the topic is gone that is no failure of the run
// (restart: none): the process joins again without it.
func TestKafkaGroupPatternTopicDeletedBeforeCheck(t *testing.T) {
	brokers := testBrokers(t)
	base := testTopic(t, brokers, 1)
	in := func(s string) string { return base + ".in." + s }
	pattern := regexp.QuoteMeta(base) + `\.in\..*`
	id, out := base+"-g", base+".out"
	admin := testAdmin(t, brokers)
	for _, name := range []string{in("a"), in("b"), out} {
		require.NoError(t, admin.CreateTopic(name, &sarama.TopicDetail{NumPartitions: 1, ReplicationFactor: 1}, false))
	}
	produce(t, brokers, patternInput(in("a"), 1, patternBase, 20, patternBase+60_000)...)
	produce(t, brokers, patternInput(in("b"), 1, patternBase, 20, patternBase+60_000)...)
	text := patternPipelineText(brokers, id, pattern, out, true)
	require.Contains(t, text, "discovery_interval: 100ms")
	run := startGroupRun(t, strings.Replace(text, "discovery_interval: 100ms", "discovery_interval: 1h", 1))
	first := windowLines(patternBase, patternBase+20_000, 2)
	awaitGroup(t, run.ran, "the windows of both topics", func() bool {
		return len(windowCounts(t, brokers, out)) >= len(first)
	})

	require.NoError(t, admin.DeleteTopic(in("b")))
	awaitGroup(t, run.ran, "a generation without the deleted topic", func() bool {
		return assignedPartitions(t, run.metrics, in("b")) == 0 && assignedPartitions(t, run.metrics, in("a")) == 1
	})
	later := int64(patternBase + 120_000)
	produce(t, brokers, patternInput(in("a"), 1, later, 20, later+60_000)...)
	want := append(slices.Clone(first), windowLines(later, later+20_000, 1)...)
	slices.Sort(want)
	awaitGroup(t, run.ran, "the windows of the topic left", func() bool {
		return len(windowCounts(t, brokers, out)) >= len(want)
	})
	require.NoError(t, run.stop())
	require.Equal(t, want, windowCounts(t, brokers, out))
}
