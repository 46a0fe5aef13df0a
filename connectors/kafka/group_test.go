package kafka

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/IBM/sarama"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/eddy-stream/eddy/pipeline"
)

// groupPipeline is a pipeline in group mode that reads topic and keeps a
// window per user: one repartition topic and one changelog, of maxPar
// partitions each.
func groupPipeline(t testing.TB, brokers []string, id, topic string, maxPar int) *pipeline.GroupPlan {
	t.Helper()
	spec, err := pipeline.Load(pipeline.Default, "group.yaml", []byte(groupPipelineText(brokers, id, topic, maxPar, "")))
	require.NoError(t, err)
	plan, err := pipeline.Compile(spec)
	require.NoError(t, err)
	gp, err := pipeline.NewGroupPlan(plan)
	require.NoError(t, err)
	return gp
}

// groupPipelineText is the file of groupPipeline, whose group block has
// the keys of groupKeys too (lines indented by two): it reads topic with
// event time ts, counts each user's records per 10s window and writes
// the counts to <topic>-out, keyed by user.
func groupPipelineText(brokers []string, id, topic string, maxPar int, groupKeys string) string {
	return fmt.Sprintf(`
version: 1
name: groupy
max_parallelism: %[1]d
group:
  brokers: [%[2]s]
  id: %[3]s
  replication_factor: 1
%[5]s
sources:
  - id: in
    type: kafka
    brokers: [%[2]s]
    topics: [%[4]s]
    event_time: ts
    watermark: {max_out_of_orderness: 0}
steps:
  - id: per_user
    key_by: user
    window: {type: tumbling, size: 10s}
    aggregate: {n: count()}
sinks:
  - id: out
    type: kafka
    brokers: [%[2]s]
    topic: %[4]s-out
    key: user
`, maxPar, strings.Join(brokers, ", "), id, topic, groupKeys)
}

// groupAdminOf connects the admin of a group plan's client, closed at the
// end of the test.
func groupAdminOf(t testing.TB, gp *pipeline.GroupPlan) pipeline.GroupAdmin {
	t.Helper()
	admin, err := gp.Group.Client.NewGroupAdmin()
	require.NoError(t, err)
	t.Cleanup(func() { _ = admin.Close() })
	return admin
}

// TestKafkaGroupEnsureTopics: the internal topics are created with the
// plan's partitions, replication and configs; a second run creates
// nothing and finds them right; the source topic is described as it is.
func TestKafkaGroupEnsureTopics(t *testing.T) {
	brokers := testBrokers(t)
	src := testTopic(t, brokers, 3)
	gp := groupPipeline(t, brokers, src+"-g", src, 4)
	admin := groupAdminOf(t, gp)
	names := []string{src + "-g-per_user-repartition", src + "-g-per_user-changelog"}

	created, err := pipeline.EnsureGroupTopics(admin, gp)
	require.NoError(t, err)
	require.Equal(t, names, created)

	states, err := admin.Topics(append(names, src, src+"-missing"))
	require.NoError(t, err)
	require.Equal(t, []pipeline.TopicState{
		{Name: names[0], Exists: true, Partitions: 4, ReplicationFactor: 1, CleanupPolicy: "delete"},
		{Name: names[1], Exists: true, Partitions: 4, ReplicationFactor: 1, CleanupPolicy: "compact"},
		{Name: src, Exists: true, Partitions: 3, ReplicationFactor: 1, CleanupPolicy: "delete"},
		{Name: src + "-missing"},
	}, states)

	// The configs a repartition topic needs, as the broker has them.
	entries, err := testAdmin(t, brokers).DescribeConfig(sarama.ConfigResource{Type: sarama.TopicResource, Name: names[0],
		ConfigNames: []string{"retention.ms", "message.timestamp.type"}})
	require.NoError(t, err)
	got := map[string]string{}
	for _, e := range entries {
		got[e.Name] = e.Value
	}
	require.Equal(t, map[string]string{"retention.ms": "-1", "message.timestamp.type": "CreateTime"}, got)

	created, err = pipeline.EnsureGroupTopics(admin, gp)
	require.NoError(t, err)
	require.Empty(t, created)
}

// TestKafkaGroupTopicMismatch: an internal topic with other partitions
// (max_parallelism changed) or another cleanup policy is an error that
// names it, what it has and what it needs; nothing is changed.
func TestKafkaGroupTopicMismatch(t *testing.T) {
	brokers := testBrokers(t)
	src := testTopic(t, brokers, 1)
	id := src + "-g"
	// The changelog exists, made by someone else, with deletion by time.
	require.NoError(t, testAdmin(t, brokers).CreateTopic(id+"-per_user-changelog", &sarama.TopicDetail{NumPartitions: 4, ReplicationFactor: 1}, false))

	gp := groupPipeline(t, brokers, id, src, 4)
	admin := groupAdminOf(t, gp)
	created, err := pipeline.EnsureGroupTopics(admin, gp)
	require.ErrorIs(t, err, pipeline.ErrTopicMismatch)
	require.ErrorContains(t, err, "changelog topic "+id+"-per_user-changelog: its cleanup.policy is delete and must be compact")
	require.Equal(t, []string{id + "-per_user-repartition"}, created, "the topic it lacked is created all the same")

	// The same pipeline with another max_parallelism finds every topic
	// with the wrong partition count.
	gp8 := groupPipeline(t, brokers, id, src, 8)
	created, err = pipeline.EnsureGroupTopics(groupAdminOf(t, gp8), gp8)
	require.ErrorIs(t, err, pipeline.ErrTopicMismatch)
	require.ErrorContains(t, err, "repartition topic "+id+"-per_user-repartition: it has 4 partitions and needs 8 (max_parallelism")
	require.ErrorContains(t, err, "changelog topic "+id+"-per_user-changelog: it has 4 partitions and needs 8 (max_parallelism, fixed for the pipeline's life), and its cleanup.policy is delete and must be compact")
	require.Empty(t, created)

	states, err := admin.Topics([]string{id + "-per_user-changelog"})
	require.NoError(t, err)
	require.Equal(t, 4, states[0].Partitions)
	require.Equal(t, "delete", states[0].CleanupPolicy, "an existing topic is never changed")
}

// setupSignal is a consumer group handler that says when its session set
// up (the member joined) and then waits for the session's end.
type setupSignal chan struct{}

func (s setupSignal) Setup(sarama.ConsumerGroupSession) error {
	close(s)
	return nil
}
func (setupSignal) Cleanup(sarama.ConsumerGroupSession) error { return nil }
func (setupSignal) ConsumeClaim(sess sarama.ConsumerGroupSession, _ sarama.ConsumerGroupClaim) error {
	<-sess.Context().Done()
	return nil
}

// TestKafkaGroupReset: a reset refuses while the consumer group has a
// member and changes nothing; once the member left, it deletes the group's
// committed offsets and the internal topics.
func TestKafkaGroupReset(t *testing.T) {
	brokers := testBrokers(t)
	src := testTopic(t, brokers, 2)
	id := src + "-g"
	gp := groupPipeline(t, brokers, id, src, 2)
	admin := groupAdminOf(t, gp)
	_, err := pipeline.EnsureGroupTopics(admin, gp)
	require.NoError(t, err)

	g, err := admin.ConsumerGroup(id)
	require.NoError(t, err)
	require.False(t, g.Exists, "a group nobody joined nor committed to: %+v", g)

	cfg := testSaramaConfig()
	cfg.ClientID = "member-one"
	cg, err := sarama.NewConsumerGroup(brokers, id, cfg)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(t.Context())
	joined := make(setupSignal)
	consumed := make(chan error, 1)
	go func() { consumed <- cg.Consume(ctx, []string{src}, joined) }()
	select {
	case <-joined:
	case err := <-consumed:
		t.Fatalf("the member did not join: %v", err)
	}

	_, err = pipeline.ResetGroup(admin, gp)
	require.ErrorIs(t, err, pipeline.ErrGroupActive)
	require.ErrorContains(t, err, "member-one@")
	states, err := admin.Topics([]string{gp.Topics[0].Name})
	require.NoError(t, err)
	require.True(t, states[0].Exists, "a refused reset deletes nothing")

	cancel()
	require.NoError(t, <-consumed)
	require.NoError(t, cg.Close())
	// The group has committed offsets, so it outlives its members.
	_, err = testAdmin(t, brokers).AlterConsumerGroupOffsets(id, map[string]map[int32]sarama.OffsetAndMetadata{src: {0: {Offset: 1}}}, nil)
	require.NoError(t, err)
	g, err = admin.ConsumerGroup(id)
	require.NoError(t, err)
	require.True(t, g.Exists)
	require.Empty(t, g.Members)

	deleted, err := pipeline.ResetGroup(admin, gp)
	require.NoError(t, err)
	require.Equal(t, []string{id + "-per_user-repartition", id + "-per_user-changelog"}, deleted)
	g, err = admin.ConsumerGroup(id)
	require.NoError(t, err)
	require.False(t, g.Exists, "the group and its offsets are gone: %+v", g)
	// No committed offset is left: a broker answers the group is unknown
	// (kfake), or that it has none (-1).
	offsets, err := testAdmin(t, brokers).ListConsumerGroupOffsets(id, map[string][]int32{src: {0}})
	if !errors.Is(err, sarama.ErrGroupIDNotFound) {
		require.NoError(t, err)
		require.Equal(t, int64(-1), offsets.GetBlock(src, 0).Offset, "no committed offset left")
	}
	states, err = admin.Topics(topicNamesOf(gp))
	require.NoError(t, err)
	for _, s := range states {
		require.False(t, s.Exists, "%s is deleted", s.Name)
	}

	// A reset of nothing is no error.
	deleted, err = pipeline.ResetGroup(admin, gp)
	require.NoError(t, err)
	require.Empty(t, deleted)
}

// topicNamesOf returns the names of a group plan's internal topics.
func topicNamesOf(gp *pipeline.GroupPlan) []string {
	var names []string
	for _, t := range gp.Topics {
		names = append(names, t.Name)
	}
	return names
}

// TestGroupInput: the source gives its topics, and refuses a group_id
// other than the group's.
func TestGroupInput(t *testing.T) {
	cfg := loadKafkaSource(t, []string{"localhost:9092"}, "topics: [a, b]\n")
	in, err := cfg.GroupInput("g")
	require.NoError(t, err)
	require.Equal(t, pipeline.GroupInput{Topics: []string{"a", "b"}}, in)

	cfg = loadKafkaSource(t, []string{"localhost:9092"}, "topic_pattern: 'orders-.*'\ngroup_id: g\n")
	in, err = cfg.GroupInput("g")
	require.NoError(t, err)
	require.Equal(t, pipeline.GroupInput{Pattern: "orders-.*"}, in)
	_, err = cfg.GroupInput("other")
	var fe *pipeline.FieldError
	require.True(t, errors.As(err, &fe), "%v", err)
	require.Equal(t, "group_id", fe.Key)
}

// TestGroupPatternValidate: in group mode a topic_pattern that matches a
// topic another source lists is reported at the pattern (two sources
// would read the topic); without the group block it is allowed.
func TestGroupPatternValidate(t *testing.T) {
	text := `version: 1
name: logs
group: {brokers: [k:1]}
sources:
  - {id: app, type: kafka, brokers: [k:1], topics: [logs.app]}
  - {id: all, type: kafka, brokers: [k:1], topic_pattern: 'logs\..*'}
steps:
  - {id: both, from: [app, all], filter: 'true'}
sinks:
  - {id: out, type: kafka, brokers: [k:1], topic: out}
`
	_, err := pipeline.Load(pipeline.Default, "logs.yaml", []byte(text))
	var ps pipeline.Problems
	require.ErrorAs(t, err, &ps)
	require.Len(t, ps, 1)
	require.Equal(t, `logs.yaml:6:59: source "all": its topic pattern matches topic "logs.app", which source "app" reads: in group mode each partition of a topic goes to one process, so a topic must be read by one source only: change the pattern so that it does not match "logs.app"`, ps[0].String())

	_, err = pipeline.Load(pipeline.Default, "logs.yaml", []byte(strings.Replace(text, "group: {brokers: [k:1]}\n", "", 1)))
	require.NoError(t, err)
}

// TestGroupJoinUnsettledOffsets: while the group coordinator answers that
// the group's offsets are not settled (UNSTABLE_OFFSET_COMMIT: a
// transaction that committed offsets is still ending), the join fails;
// the process joins again until they are, and runs.
func TestGroupJoinUnsettledOffsets(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "in", "in-out"))
	require.NoError(t, err)
	t.Cleanup(c.Close)
	brokers := c.ListenAddrs()
	const refusals = 40 // more than the retries of one join's offset fetches
	var refused atomic.Int64
	c.ControlKey(int16(kmsg.OffsetFetch), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		if refused.Load() >= refusals {
			return nil, nil, false
		}
		c.KeepControl()
		refused.Add(1)
		req := kreq.(*kmsg.OffsetFetchRequest)
		resp := req.ResponseKind().(*kmsg.OffsetFetchResponse)
		const unstableOffsetCommit = 88
		if req.Version >= 8 {
			for _, g := range req.Groups {
				rg := kmsg.NewOffsetFetchResponseGroup()
				rg.Group, rg.ErrorCode = g.Group, unstableOffsetCommit
				resp.Groups = append(resp.Groups, rg)
			}
		} else {
			resp.ErrorCode = unstableOffsetCommit
		}
		return resp, nil, true
	})
	run := startGroupRun(t, groupPipelineText(brokers, "g", "in", 2, "  commit_interval: 100ms"))
	awaitGroup(t, run.ran, "a generation", func() bool {
		return assignedPartitions(t, run.metrics, "in") == 1
	})
	require.Equal(t, int64(refusals), refused.Load(), "every refusal was answered")
}
