package pipeline_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/eddy-stream/eddy/expr"
	"github.com/eddy-stream/eddy/pipeline"
)

// Test components of group mode: a source of topics (a GroupSource), a
// keyed step without state, a group client and an in-memory GroupAdmin.

// topicSourceConfig reads topics; it is a GroupSource.
type topicSourceConfig struct {
	Topics  pipeline.StringList `yaml:"topics"`
	Pattern string              `yaml:"pattern"`
	GroupID string              `yaml:"group_id"`
}

func (c *topicSourceConfig) Validate() error { return nil }
func (c *topicSourceConfig) NewSource() (pipeline.Source, error) {
	return nil, errors.New("the topic source of the tests does not run")
}
func (c *topicSourceConfig) GroupInput(groupID string) (pipeline.GroupInput, error) {
	if c.GroupID != "" && c.GroupID != groupID {
		return pipeline.GroupInput{}, pipeline.FieldErr("group_id", "must be the group's, %q", groupID)
	}
	return pipeline.GroupInput{Topics: c.Topics, Pattern: c.Pattern}, nil
}

// topicSinkConfig writes a topic; it is a GroupSink.
type topicSinkConfig struct {
	Expr bool `yaml:"expr"`
}

func (c *topicSinkConfig) Validate() error { return nil }
func (c *topicSinkConfig) NewSink() (pipeline.Sink, error) {
	return nil, errors.New("the topic sink of the tests does not run")
}
func (c *topicSinkConfig) GroupOutput() error {
	if c.Expr {
		return pipeline.FieldErr("expr", "one topic only in group mode")
	}
	return nil
}

// bareKeyConfig is a keyed step that keeps no state (a bare key_by).
type bareKeyConfig struct {
	Key expr.Expr `yaml:"bare"`
}

func (c *bareKeyConfig) Validate() error                         { return nil }
func (c *bareKeyConfig) KeyExprs(int) []*expr.Expr               { return []*expr.Expr{&c.Key} }
func (c *bareKeyConfig) NewOperator() (pipeline.Operator, error) { return &tagOp{}, nil }
func (c *bareKeyConfig) Stateful() bool                          { return false }

// testGroupClient is a group client with brokers; its admin is Admin.
type testGroupClient struct {
	Brokers pipeline.StringList `yaml:"brokers" eddy:"required"`
	Admin   *fakeAdmin          `yaml:"-"`
}

func (c *testGroupClient) Validate() error {
	if len(c.Brokers) == 0 {
		return pipeline.FieldErr("brokers", "must list at least one broker")
	}
	return nil
}
func (c *testGroupClient) NewGroupAdmin() (pipeline.GroupAdmin, error) { return c.Admin, nil }

// groupEnv is testEnv with the group components.
func groupEnv() *pipeline.Env {
	env := testEnv()
	env.RegisterSource(pipeline.SourcePlugin{Type: "topic", New: func() pipeline.SourceConfig { return &topicSourceConfig{} }})
	env.RegisterSink(pipeline.SinkPlugin{Type: "topicsink", New: func() pipeline.SinkConfig { return &topicSinkConfig{} }})
	env.RegisterStep(pipeline.StepPlugin{Kind: "bare", New: func() pipeline.StepConfig { return &bareKeyConfig{} }})
	env.RegisterStep(pipeline.StepPlugin{Kind: "pair", New: func() pipeline.StepConfig { return &pairConfig{} }})
	env.RegisterGroupClient(func() pipeline.GroupClientConfig { return &testGroupClient{} })
	return env
}

// loadGroup loads a pipeline in group mode and returns its group plan.
func loadGroup(t *testing.T, text string) *pipeline.GroupPlan {
	t.Helper()
	spec, err := pipeline.Load(groupEnv(), "g.yaml", []byte(text))
	require.NoError(t, err)
	plan, err := pipeline.Compile(spec)
	require.NoError(t, err)
	gp, err := pipeline.NewGroupPlan(plan)
	require.NoError(t, err)
	return gp
}

// TestGroupBlockDefaults: id defaults to the name, commit_interval to 1s,
// replication_factor to 3, transaction_timeout to ten commit intervals
// (at least 10s, at most 15m), purge_interval to 30s; brokers take ${VAR}
// and go to the client.
func TestGroupBlockDefaults(t *testing.T) {
	t.Setenv("GROUP_TEST_BROKERS", "k1:9092")
	spec, err := pipeline.Load(groupEnv(), "g.yaml", []byte(`version: 1
name: orders
group:
  brokers: [${GROUP_TEST_BROKERS}, k2:9092]
sources: [{type: topic, topics: [in]}]
sinks: [{type: topicsink}]
`))
	require.NoError(t, err)
	g := spec.Group
	require.NotNil(t, g)
	require.Equal(t, "orders", g.ID)
	require.Equal(t, time.Second, g.CommitInterval.D())
	require.Equal(t, 3, g.ReplicationFactor)
	require.Equal(t, 10*time.Second, g.TransactionTimeout.D())
	require.Equal(t, 30*time.Second, g.PurgeInterval.D())
	require.Equal(t, pipeline.StringList{"k1:9092", "k2:9092"}, g.Client.(*testGroupClient).Brokers)
	require.Equal(t, 3, g.Pos.Line)

	spec, err = pipeline.Load(groupEnv(), "g.yaml", []byte(`version: 1
name: orders
group: {brokers: [k:1], id: shop, commit_interval: 250ms, replication_factor: 1}
sources: [{type: topic, topics: [in]}]
sinks: [{type: topicsink}]
`))
	require.NoError(t, err)
	require.Equal(t, "shop", spec.Group.ID)
	require.Equal(t, 250*time.Millisecond, spec.Group.CommitInterval.D())
	require.Equal(t, 1, spec.Group.ReplicationFactor)
	require.Equal(t, 10*time.Second, spec.Group.TransactionTimeout.D(), "ten commit intervals are less than 10s")

	for _, tc := range []struct {
		block        string
		txn, purgeIv time.Duration
	}{
		{"commit_interval: 3s", 30 * time.Second, 30 * time.Second},
		{"commit_interval: 5m", 15 * time.Minute, 30 * time.Second},
		{"commit_interval: 2s, transaction_timeout: 5s, purge_interval: 1m", 5 * time.Second, time.Minute},
	} {
		spec, err = pipeline.Load(groupEnv(), "g.yaml", []byte(`version: 1
name: orders
group: {brokers: [k:1], `+tc.block+`}
sources: [{type: topic, topics: [in]}]
sinks: [{type: topicsink}]
`))
		require.NoError(t, err, tc.block)
		require.Equal(t, tc.txn, spec.Group.TransactionTimeout.D(), tc.block)
		require.Equal(t, tc.purgeIv, spec.Group.PurgeInterval.D(), tc.block)
	}

	spec, err = pipeline.Load(groupEnv(), "g.yaml", []byte("version: 1\nname: one\nsources: [{type: topic, topics: [in]}]\nsinks: [{type: topicsink}]\n"))
	require.NoError(t, err)
	require.Nil(t, spec.Group, "no group block: one process")
}

// TestGroupBlockProblems: every mistake of a group block, and every source
// that cannot run in group mode, is reported at its key.
func TestGroupBlockProblems(t *testing.T) {
	long := strings.Repeat("s", 240)
	for _, tc := range []struct {
		name, group, sources, steps, want string
	}{
		{"bad id", "{brokers: [k:1], id: a.b}", "[{type: topic, topics: [in]}]", "",
			`g.yaml:3:29: group.id "a.b": use letters, digits, '_' and '-' (it names the consumer group and prefixes the internal topics)`},
		{"commit interval", "{brokers: [k:1], commit_interval: 0}", "[{type: topic, topics: [in]}]", "",
			"g.yaml:3:42: group.commit_interval must be positive"},
		{"replication", "{brokers: [k:1], replication_factor: 0}", "[{type: topic, topics: [in]}]", "",
			"g.yaml:3:45: group.replication_factor must be between 1 and 32767 (the replicas of each internal topic partition)"},
		{"transaction timeout not above the commit interval", "{brokers: [k:1], commit_interval: 2s, transaction_timeout: 2s}", "[{type: topic, topics: [in]}]", "",
			"g.yaml:3:67: group.transaction_timeout 2s must be longer than group.commit_interval (2s): a transaction spans a commit interval, and the brokers abort one open longer than the timeout"},
		{"transaction timeout zero", "{brokers: [k:1], transaction_timeout: 0}", "[{type: topic, topics: [in]}]", "",
			"g.yaml:3:46: group.transaction_timeout 0s must be longer than group.commit_interval (1s): a transaction spans a commit interval, and the brokers abort one open longer than the timeout"},
		{"transaction timeout above the brokers' limit", "{brokers: [k:1], transaction_timeout: 16m}", "[{type: topic, topics: [in]}]", "",
			"g.yaml:3:46: group.transaction_timeout 16m0s is longer than brokers allow by default (transaction.max.timeout.ms, 15m0s): lower it, or raise that setting on the brokers first"},
		{"commit interval without room for a transaction", "{brokers: [k:1], commit_interval: 20m}", "[{type: topic, topics: [in]}]", "",
			"g.yaml:3:42: group.commit_interval 20m0s is too long: a transaction spans a commit interval, and brokers abort one open longer than 15m0s (transaction.max.timeout.ms): lower commit_interval"},
		{"purge interval", "{brokers: [k:1], purge_interval: 0}", "[{type: topic, topics: [in]}]", "",
			"g.yaml:3:41: group.purge_interval must be positive"},
		{"no brokers", "{id: x}", "[{type: topic, topics: [in]}]", "",
			`g.yaml:3:8: group: missing required key "brokers"`},
		{"empty", "", "[{type: topic, topics: [in]}]", "",
			`g.yaml:3:7: group: missing required key "brokers"`},
		{"client validate", "{brokers: []}", "[{type: topic, topics: [in]}]", "",
			"g.yaml:3:18: brokers: must list at least one broker"},
		{"unknown key", "{brokers: [k:1], comit_interval: 1s}", "[{type: topic, topics: [in]}]", "",
			`g.yaml:3:25: unknown key "comit_interval" in group (did you mean "commit_interval"?)`},
		{"not a mapping", "[k:1]", "[{type: topic, topics: [in]}]", "",
			"g.yaml:3:8: group must be a mapping with at least brokers (see docs/group.md)"},
		{"source without partitions", "{brokers: [k:1]}", "[{id: nums, type: seq}]", "",
			`g.yaml:4:28: source "nums": a seq source has no partitions to share between the processes of a group: read its data from a Kafka topic in group mode (or remove the group block to run in one process)`},
		{"source setting", "{brokers: [k:1]}", "[{type: topic, topics: [in], group_id: other}]", "",
			`g.yaml:4:49: group_id: must be the group's, "grp"`},
		{"topic read twice", "{brokers: [k:1]}", "[{id: a, type: topic, topics: [in]}, {id: b, type: topic, topics: [x, in]}]", "[{from: [a, b], pass: null}]",
			`g.yaml:4:80: source "b": topic "in" is read by source "a" too: in group mode each partition of a topic goes to one process, so read it with one source and fan it out with steps`},
		{"pattern matches a listed topic", "{brokers: [k:1]}", "[{id: a, type: topic, topics: [in]}, {id: b, type: topic, pattern: 'i.*'}]", "[{from: [a, b], pass: null}]",
			`g.yaml:4:52: source "b": its topic pattern matches topic "in", which source "a" reads: in group mode each partition of a topic goes to one process, so a topic must be read by one source only: change the pattern so that it does not match "in"`},
		{"topic name too long", "{brokers: [k:1]}", "[{type: topic, topics: [in]}]", "[{id: " + long + ", keyed: k}]",
			fmt.Sprintf(`g.yaml:5:14: step %q: its internal topic grp-%s-changelog would have 254 characters, more than Kafka's 249: shorten the step id or group.id`, long, long)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			text := fmt.Sprintf("version: 1\nname: grp\ngroup: %s\nsources: %s\n", tc.group, tc.sources)
			if tc.steps != "" {
				text += "steps: " + tc.steps + "\n"
			}
			text += "sinks: [{type: topicsink}]\n"
			_, err := pipeline.Load(groupEnv(), "g.yaml", []byte(text))
			var ps pipeline.Problems
			require.ErrorAs(t, err, &ps)
			require.ErrorIs(t, err, pipeline.ErrInvalid)
			require.Equal(t, tc.want, ps[0].String(), "all: %v", err)
		})
	}
}

// TestGroupSinks: in group mode a sink must write in the group's
// transactions (a GroupSink), with settings that hold there.
func TestGroupSinks(t *testing.T) {
	for _, tc := range []struct{ sinks, want string }{
		{"[{id: c, type: collect}]", `g.yaml:5:23: sink "c": a collect sink cannot write in the transactions of a group: in group mode write to a Kafka topic of the group's cluster (or remove the group block to run in one process)`},
		{"[{type: topicsink, expr: true}]", `g.yaml:5:33: expr: one topic only in group mode`},
	} {
		text := "version: 1\nname: grp\ngroup: {brokers: [k:1]}\nsources: [{type: topic, topics: [in]}]\nsinks: " + tc.sinks + "\n"
		_, err := pipeline.Load(groupEnv(), "g.yaml", []byte(text))
		var ps pipeline.Problems
		require.ErrorAs(t, err, &ps)
		require.Equal(t, tc.want, ps[0].String(), "all: %v", err)
	}
}

// TestGroupBlockWithoutClient: an Env without a group client cannot load
// a group block, and says what to import.
func TestGroupBlockWithoutClient(t *testing.T) {
	text := "version: 1\nname: g\ngroup: {brokers: [k:1]}\nsources: [{type: seq}]\nsinks: [{type: topicsink}]\n"
	_, err := pipeline.Load(testEnv(), "g.yaml", []byte(text))
	require.ErrorContains(t, err, "g.yaml:3:8: group mode needs a Kafka client, and this build registers none (import github.com/eddy-stream/eddy/connectors/kafka)")
}

// stageNodes returns the node ids of each stage.
func stageNodes(gp *pipeline.GroupPlan) [][]string {
	var out [][]string
	for _, s := range gp.Stages {
		var ids []string
		for _, n := range s.Nodes {
			ids = append(ids, n.ID)
		}
		out = append(out, ids)
	}
	return out
}

// TestGroupPlanStages: the plan is cut at each hash edge; each hash edge
// is an exchange through a repartition topic of max_parallelism
// partitions, each stateful keyed step has a changelog, and a stage
// without sources has one task per partition.
func TestGroupPlanStages(t *testing.T) {
	gp := loadGroup(t, `version: 1
name: shop
max_parallelism: 16
group: {brokers: [k:1], replication_factor: 2}
sources:
  - {id: orders, type: topic, topics: [orders, returns]}
  - {id: users, type: topic, pattern: 'users-.*'}
steps:
  - {id: clean, from: orders, pass: null}
  - {id: by_user, from: clean, bare: user}
  - {id: enrich, pair: {a: by_user, b: users, key_a: user, key_b: id}}
  - {id: tidy, pass: null}
  - {id: totals, keyed: user}
sinks:
  - {id: out, type: topicsink}
`)
	require.Equal(t, 16, gp.Partitions)
	require.Equal(t, [][]string{{"orders", "clean"}, {"users"}, {"by_user"}, {"enrich", "tidy"}, {"totals", "out"}}, stageNodes(gp))

	var topics []string
	for _, tp := range gp.Topics {
		topics = append(topics, fmt.Sprintf("%s %s step=%s input=%d p=%d rf=%d %s", tp.Name, tp.Kind, tp.Step, tp.Input, tp.Partitions, tp.ReplicationFactor, tp.CleanupPolicy()))
	}
	require.Equal(t, []string{
		"shop-by_user-repartition repartition step=by_user input=0 p=16 rf=2 delete",
		"shop-enrich-repartition-0 repartition step=enrich input=0 p=16 rf=2 delete",
		"shop-enrich-repartition-1 repartition step=enrich input=1 p=16 rf=2 delete",
		"shop-enrich-changelog changelog step=enrich input=0 p=16 rf=2 compact",
		"shop-totals-repartition repartition step=totals input=0 p=16 rf=2 delete",
		"shop-totals-changelog changelog step=totals input=0 p=16 rf=2 compact",
	}, topics, "a bare keyed step (Stateful false) has no changelog")
	require.Equal(t, "-1", gp.Topic("shop-totals-repartition").Configs["retention.ms"])
	require.Equal(t, "CreateTime", gp.Topic("shop-totals-changelog").Configs["message.timestamp.type"])
	require.Nil(t, gp.Topic("shop-by_user-changelog"))

	var exchanges []string
	for _, x := range gp.Exchanges {
		exchanges = append(exchanges, fmt.Sprintf("%d -> %d via %s (%s -> %s)", x.From.Index, x.To.Index, x.Topic.Name, x.Edge.From.ID, x.Edge.To.ID))
	}
	require.Equal(t, []string{
		"0 -> 2 via shop-by_user-repartition (clean -> by_user)",
		"2 -> 3 via shop-enrich-repartition-0 (by_user -> enrich)",
		"1 -> 3 via shop-enrich-repartition-1 (users -> enrich)",
		"3 -> 4 via shop-totals-repartition (tidy -> totals)",
	}, exchanges)

	resolved, err := gp.ResolveTopics(map[string]int{"users-eu": 4})
	require.NoError(t, err)
	var view []string
	for _, s := range gp.Stages {
		var changelogs []string
		for _, c := range s.Changelogs {
			changelogs = append(changelogs, c.Name)
		}
		view = append(view, fmt.Sprintf("%d %q reads %v, %d outputs, changelogs %v, tasks %d", s.Index, s.Name(), s.Topics(resolved), len(s.Outputs), changelogs, s.Tasks))
	}
	require.Equal(t, []string{
		`0 "orders, clean" reads [orders returns], 1 outputs, changelogs [], tasks 0`,
		`1 "users" reads [users-eu], 1 outputs, changelogs [], tasks 0`,
		`2 "by_user" reads [shop-by_user-repartition], 1 outputs, changelogs [], tasks 16`,
		`3 "enrich, tidy" reads [shop-enrich-repartition-0 shop-enrich-repartition-1], 1 outputs, changelogs [shop-enrich-changelog], tasks 16`,
		`4 "totals, out" reads [shop-totals-repartition], 0 outputs, changelogs [shop-totals-changelog], tasks 16`,
	}, view)
	require.Same(t, gp.Stages[3], gp.StageOf(gp.Plan.Node("tidy")))
	require.Equal(t, []string{"orders", "returns"}, gp.SourceTopics())

	// Tasks of a stage with sources: the most partitions of its topics,
	// those of a pattern as it resolves against the cluster's topics.
	resolved, err = gp.ResolveTopics(map[string]int{"orders": 6, "returns": 3, "users-eu": 4, "users-us": 8, "other": 12})
	require.NoError(t, err)
	n, err := gp.Stages[0].TasksFor(resolved)
	require.NoError(t, err)
	require.Equal(t, 6, n)
	n, err = gp.Stages[1].TasksFor(resolved)
	require.NoError(t, err)
	require.Equal(t, 8, n, "the pattern's topics only")
	require.Equal(t, []string{"users-eu", "users-us"}, gp.Stages[1].Topics(resolved))
	n, err = gp.Stages[2].TasksFor(resolved)
	require.NoError(t, err)
	require.Equal(t, 16, n)
	resolved, err = gp.ResolveTopics(map[string]int{"orders": 6})
	require.NoError(t, err)
	_, err = gp.Stages[0].TasksFor(resolved)
	require.ErrorContains(t, err, `stage 0: the partitions of topic "returns" of source "orders" are not known`)
	n, err = gp.Stages[1].TasksFor(resolved)
	require.NoError(t, err)
	require.Zero(t, n, "a pattern that matches nothing: no task")
}

// TestGroupResolveTopics: a pattern matches whole topic names of the
// cluster, never Kafka's internal topics nor the group's (of any step);
// two sources that read one topic are an error that names both.
func TestGroupResolveTopics(t *testing.T) {
	gp := loadGroup(t, `version: 1
name: shop
max_parallelism: 4
group: {brokers: [k:1]}
sources:
  - {id: orders, type: topic, topics: [orders]}
  - {id: logs, type: topic, pattern: '.*logs.*'}
  - {id: all, type: topic, pattern: 'shop.*|__.*|.*-repartition'}
steps:
  - {id: k, from: [orders, logs, all], keyed: x}
sinks: [{type: topicsink}]
`)
	require.True(t, gp.HasPatterns())
	cluster := map[string]int{"orders": 3, "app-logs": 2, "logs": 1, "logs-2": 5, "__consumer_offsets": 50, "__logs": 1,
		"shop-k-repartition": 4, "shop-k-changelog": 4, "shop-old-repartition-1": 4, "shop-old-changelog": 4, "shopping": 2, "x-repartition": 1}
	got, err := gp.ResolveTopics(cluster)
	require.NoError(t, err)
	require.Equal(t, map[string][]string{"orders": {"orders"}, "logs": {"app-logs", "logs", "logs-2"}, "all": {"shopping", "x-repartition"}}, got.Of)
	require.Equal(t, map[string]int{"orders": 3, "app-logs": 2, "logs": 1, "logs-2": 5, "shopping": 2, "x-repartition": 1}, got.Partitions)
	require.Equal(t, []string{"app-logs", "logs", "logs-2", "orders", "shopping", "x-repartition"}, got.All())
	require.Equal(t, map[string][]string{"logs": {"app-logs", "logs", "logs-2"}, "all": {"shopping", "x-repartition"}}, gp.Matched(got))
	n, err := gp.StageOf(gp.Plan.Node("logs")).TasksFor(got)
	require.NoError(t, err)
	require.Equal(t, 5, n, "the stage's largest topic, logs-2")

	same, err := gp.ResolveTopics(cluster)
	require.NoError(t, err)
	require.True(t, got.Equal(same))
	cluster["new-logs"] = 1
	more, err := gp.ResolveTopics(cluster)
	require.NoError(t, err)
	require.False(t, got.Equal(more), "a topic created that a pattern matches")
	delete(cluster, "new-logs")
	cluster["logs"] = 2
	grown, err := gp.ResolveTopics(cluster)
	require.NoError(t, err)
	require.False(t, got.Equal(grown), "a topic with more partitions")

	// Two patterns, and a pattern and a listed topic, that read one topic.
	cluster["shop-logs"] = 1
	cluster["orders-logs"] = 1
	_, err = gp.ResolveTopics(cluster)
	require.EqualError(t, err, `topic shop-logs is read by source "logs" (topic_pattern .*logs.*) and by source "all" (topic_pattern shop.*|__.*|.*-repartition): in group mode each partition of a topic goes to one process, so a topic must be read by one source only: change topic_pattern so that the sources' topics do not overlap`)

	gp = loadGroup(t, `version: 1
name: shop
group: {brokers: [k:1]}
sources:
  - {id: a, type: topic, pattern: 'o.*'}
  - {id: b, type: topic, topics: [x]}
steps: [{from: [a, b], pass: null}]
sinks: [{type: topicsink}]
`)
	_, err = gp.ResolveTopics(map[string]int{"x": 1, "o1": 1})
	require.NoError(t, err)
}

// TestGroupPlanStageReadsItsOwnExchange: a keyed step whose output meets,
// unkeyed, a stream of its input's stage puts both in one stage, which
// writes and reads the exchange.
func TestGroupPlanStageReadsItsOwnExchange(t *testing.T) {
	gp := loadGroup(t, `version: 1
name: loop
max_parallelism: 4
group: {brokers: [k:1]}
sources: [{id: in, type: topic, topics: [t]}]
steps:
  - {id: k, from: in, keyed: x}
  - {id: u, from: [in, k], pass: null}
sinks: [{id: out, from: u, type: topicsink}]
`)
	require.Equal(t, [][]string{{"in", "k", "u", "out"}}, stageNodes(gp))
	require.Len(t, gp.Exchanges, 1)
	x := gp.Exchanges[0]
	require.Same(t, x.From, x.To)
	resolved, err := gp.ResolveTopics(nil)
	require.NoError(t, err)
	require.Equal(t, []string{"t", "loop-k-repartition"}, gp.Stages[0].Topics(resolved))
	require.Equal(t, 0, gp.Stages[0].Tasks, "it reads a source topic: its tasks are known from the broker")
}

// TestGroupPlanNeedsGroup: NewGroupPlan of a plan without a group block.
func TestGroupPlanNeedsGroup(t *testing.T) {
	plan, _ := load(t, "version: 1\nname: one\nsources: [{type: seq}]\nsinks: [{type: collect}]\n")
	_, err := pipeline.NewGroupPlan(plan)
	require.ErrorIs(t, err, pipeline.ErrNoGroup)
}

// TestKeyGroupPartition: each partition owns a contiguous, non-empty range
// of key groups, the ranges cover every key group once, the routing
// function sends a key group to the partition whose range holds it, and
// with as many partitions as key groups partition and key group are one.
func TestKeyGroupPartition(t *testing.T) {
	for _, tc := range []struct{ maxPar, partitions int }{{128, 128}, {128, 8}, {128, 3}, {128, 1}, {7, 5}, {32768, 100}} {
		next := 0
		for p := range tc.partitions {
			start, end := pipeline.PartitionKeyGroups(p, tc.maxPar, tc.partitions)
			require.Equal(t, next, start, "%+v: partition %d starts where %d ended", tc, p, p-1)
			require.Less(t, start, end, "%+v: partition %d owns key groups", tc, p)
			for kg := start; kg < end; kg++ {
				require.Equal(t, p, pipeline.KeyGroupPartition(kg, tc.maxPar, tc.partitions), "%+v: key group %d", tc, kg)
				if tc.partitions == tc.maxPar {
					require.Equal(t, kg, p)
				}
			}
			next = end
		}
		require.Equal(t, tc.maxPar, next, "%+v: every key group has a partition", tc)
	}
	gp := loadGroup(t, "version: 1\nname: r\nmax_parallelism: 32\ngroup: {brokers: [k:1]}\nsources: [{type: topic, topics: [t]}]\nsteps: [{keyed: x}]\nsinks: [{type: topicsink}]\n")
	for kg := range 32 {
		require.Equal(t, kg, gp.Partition(kg))
	}
	// A record's partition is its key's key group.
	key := "user-42"
	require.Equal(t, pipeline.KeyGroup(key, 32), gp.Partition(pipeline.KeyGroup(key, 32)))
}

// TestCheckTopic: an existing topic serves when partitions and cleanup
// policy (as a set) are the plan's; otherwise the error says what it has
// and what it needs, and how to get out.
func TestCheckTopic(t *testing.T) {
	gp := loadGroup(t, "version: 1\nname: c\nmax_parallelism: 8\ngroup: {brokers: [k:1]}\nsources: [{type: topic, topics: [t]}]\nsteps: [{id: s, keyed: x}]\nsinks: [{type: topicsink}]\n")
	rep, cl := gp.Topic("c-s-repartition"), gp.Topic("c-s-changelog")
	require.NoError(t, pipeline.CheckTopic(rep, pipeline.TopicState{Name: rep.Name, Exists: true, Partitions: 8, ReplicationFactor: 1, CleanupPolicy: "delete"}),
		"another replication factor is the operator's business")
	require.NoError(t, pipeline.CheckTopic(cl, pipeline.TopicState{Name: cl.Name, Exists: true, Partitions: 8, CleanupPolicy: " compact"}))

	err := pipeline.CheckTopic(cl, pipeline.TopicState{Name: cl.Name, Exists: true, Partitions: 8, CleanupPolicy: "delete,compact"})
	require.ErrorIs(t, err, pipeline.ErrTopicMismatch)
	require.EqualError(t, err, "internal topic does not match the pipeline: changelog topic c-s-changelog: its cleanup.policy is delete,compact and must be compact: delete the topic, or start over with eddy group reset, which deletes the internal topics and the group's offsets")
	err = pipeline.CheckTopic(rep, pipeline.TopicState{Name: rep.Name, Exists: true, Partitions: 1, CleanupPolicy: "delete"})
	require.EqualError(t, err, "internal topic does not match the pipeline: repartition topic c-s-repartition: it has 1 partition and needs 8 (max_parallelism, fixed for the pipeline's life): set max_parallelism back, or start over with eddy group reset, which deletes the internal topics and the group's offsets")
}

// fakeAdmin is a GroupAdmin on a map of topics; it records its calls.
type fakeAdmin struct {
	topics map[string]pipeline.TopicState
	group  pipeline.ConsumerGroupState
	calls  []string
	// raceCreate makes CreateTopic find the topic created meanwhile, with
	// this state.
	raceCreate *pipeline.TopicState
	failTopics error
	// lag hides a topic created or deleted from the next lag descriptions,
	// as a broker whose metadata has not caught up.
	lag     int
	lagging map[string]int
}

// changed notes that name changed, for lag.
func (a *fakeAdmin) changed(name string) {
	if a.lag > 0 {
		if a.lagging == nil {
			a.lagging = map[string]int{}
		}
		a.lagging[name] = a.lag
	}
}

func (a *fakeAdmin) Topics(names []string) ([]pipeline.TopicState, error) {
	a.calls = append(a.calls, "topics")
	if a.failTopics != nil {
		return nil, a.failTopics
	}
	out := make([]pipeline.TopicState, len(names))
	for i, n := range names {
		out[i] = pipeline.TopicState{Name: n}
		s, ok := a.topics[n]
		if a.lagging[n] > 0 {
			a.lagging[n]--
			ok = !ok // the old state
			s = pipeline.TopicState{Name: n, Exists: true, Partitions: 4, CleanupPolicy: "delete"}
		}
		if ok {
			out[i] = s
		}
	}
	return out, nil
}

func (a *fakeAdmin) ListTopics() (map[string]int, error) {
	a.calls = append(a.calls, "list")
	out := map[string]int{}
	for n, s := range a.topics {
		out[n] = s.Partitions
	}
	return out, nil
}

func (a *fakeAdmin) CreateTopic(t *pipeline.InternalTopic) error {
	a.calls = append(a.calls, "create "+t.Name)
	if a.raceCreate != nil {
		a.topics[t.Name] = *a.raceCreate
		return fmt.Errorf("%w: by another process", pipeline.ErrTopicExists)
	}
	a.topics[t.Name] = pipeline.TopicState{Name: t.Name, Exists: true, Partitions: t.Partitions, ReplicationFactor: t.ReplicationFactor, CleanupPolicy: t.CleanupPolicy()}
	a.changed(t.Name)
	return nil
}

func (a *fakeAdmin) DeleteTopic(name string) error {
	a.calls = append(a.calls, "delete "+name)
	delete(a.topics, name)
	a.changed(name)
	return nil
}

func (a *fakeAdmin) ConsumerGroup(string) (pipeline.ConsumerGroupState, error) {
	a.calls = append(a.calls, "group")
	return a.group, nil
}

func (a *fakeAdmin) DeleteConsumerGroup(id string) error {
	a.calls = append(a.calls, "delete group "+id)
	a.group = pipeline.ConsumerGroupState{}
	return nil
}

func (a *fakeAdmin) Close() error { return nil }

const ensureText = "version: 1\nname: e\nmax_parallelism: 4\ngroup: {brokers: [k:1]}\nsources: [{type: topic, topics: [t]}]\nsteps: [{id: s, keyed: x}]\nsinks: [{type: topicsink}]\n"

// TestEnsureGroupTopics: missing topics are created, existing ones
// checked and never changed, one created meanwhile by another process is
// checked as if it had existed.
func TestEnsureGroupTopics(t *testing.T) {
	gp := loadGroup(t, ensureText)
	a := &fakeAdmin{topics: map[string]pipeline.TopicState{
		"e-s-changelog": {Name: "e-s-changelog", Exists: true, Partitions: 4, CleanupPolicy: "compact"},
	}}
	created, err := pipeline.EnsureGroupTopics(a, gp)
	require.NoError(t, err)
	require.Equal(t, []string{"e-s-repartition"}, created)
	require.Equal(t, []string{"topics", "create e-s-repartition", "topics"}, a.calls, "it looks until the topic it created is there")
	require.Equal(t, 4, a.topics["e-s-repartition"].Partitions)

	// Both exist now, one with the wrong policy: an error, no change.
	a.topics["e-s-changelog"] = pipeline.TopicState{Name: "e-s-changelog", Exists: true, Partitions: 4, CleanupPolicy: "delete"}
	a.calls = nil
	created, err = pipeline.EnsureGroupTopics(a, gp)
	require.ErrorIs(t, err, pipeline.ErrTopicMismatch)
	require.ErrorContains(t, err, "e-s-changelog")
	require.NotContains(t, err.Error(), "e-s-repartition")
	require.Empty(t, created)
	require.Equal(t, []string{"topics"}, a.calls)

	// Another process creates the topic between the look and the create.
	a = &fakeAdmin{topics: map[string]pipeline.TopicState{}, raceCreate: &pipeline.TopicState{Exists: true, Partitions: 2, CleanupPolicy: "delete"}}
	created, err = pipeline.EnsureGroupTopics(a, gp)
	require.ErrorIs(t, err, pipeline.ErrTopicMismatch)
	require.ErrorContains(t, err, "repartition topic e-s-repartition: it has 2 partitions and needs 4")
	require.Empty(t, created)
	require.Equal(t, []string{"topics", "create e-s-repartition", "topics", "create e-s-changelog", "topics"}, a.calls)

	a = &fakeAdmin{failTopics: errors.New("broker down")}
	_, err = pipeline.EnsureGroupTopics(a, gp)
	require.EqualError(t, err, "describe internal topics: broker down")

	// The metadata shows created topics two descriptions late: it waits,
	// and checks what it finally sees.
	a = &fakeAdmin{topics: map[string]pipeline.TopicState{}, lag: 2}
	created, err = pipeline.EnsureGroupTopics(a, gp)
	require.NoError(t, err)
	require.Equal(t, []string{"e-s-repartition", "e-s-changelog"}, created)
	require.Equal(t, []string{"topics", "create e-s-repartition", "create e-s-changelog", "topics", "topics", "topics", "topics", "topics", "topics"}, a.calls)
}

// TestResetGroup: a reset refuses while the group has members, and deletes
// nothing; otherwise it deletes the group first, then the topics that
// exist.
func TestResetGroup(t *testing.T) {
	gp := loadGroup(t, ensureText)
	a := &fakeAdmin{
		topics: map[string]pipeline.TopicState{"e-s-changelog": {Name: "e-s-changelog", Exists: true, Partitions: 4}},
		group:  pipeline.ConsumerGroupState{Exists: true, State: "Stable", Members: []string{"eddy@10.0.0.1", "eddy@10.0.0.2"}},
	}
	deleted, err := pipeline.ResetGroup(a, gp)
	require.ErrorIs(t, err, pipeline.ErrGroupActive)
	require.EqualError(t, err, "the consumer group has members: consumer group e is Stable with 2 member(s) (eddy@10.0.0.1, eddy@10.0.0.2): stop every process of the pipeline first")
	require.Empty(t, deleted)
	require.Equal(t, []string{"group"}, a.calls)

	a.group = pipeline.ConsumerGroupState{Exists: true, State: "Empty"}
	a.calls = nil
	deleted, err = pipeline.ResetGroup(a, gp)
	require.NoError(t, err)
	require.Equal(t, []string{"e-s-changelog"}, deleted)
	require.Equal(t, []string{"group", "delete group e", "topics", "delete e-s-changelog", "topics"}, a.calls)

	a.calls = nil
	deleted, err = pipeline.ResetGroup(a, gp)
	require.NoError(t, err)
	require.Empty(t, deleted)
	require.False(t, slices.Contains(a.calls, "delete group e"), "a group that does not exist is not deleted")

	// The metadata shows a deleted topic for a while: it waits.
	a = &fakeAdmin{topics: map[string]pipeline.TopicState{"e-s-changelog": {Name: "e-s-changelog", Exists: true, Partitions: 4}}, lag: 1}
	deleted, err = pipeline.ResetGroup(a, gp)
	require.NoError(t, err)
	require.Equal(t, []string{"e-s-changelog"}, deleted)
	require.Equal(t, []string{"group", "topics", "delete e-s-changelog", "topics", "topics"}, a.calls)
}

// TestGroupRunNeedsStateDir: a runner of a pipeline with a group block
// needs a state directory, where the process keeps its id.
func TestGroupRunNeedsStateDir(t *testing.T) {
	spec, err := pipeline.Load(groupEnv(), "g.yaml", []byte(ensureText))
	require.NoError(t, err)
	_, err = pipeline.NewRunner(spec, pipeline.RunnerOptions{})
	require.ErrorContains(t, err, "group mode needs a state directory")
}

// TestGroupSchema: the schema of the group block has its own keys and the
// client's, brokers required.
func TestGroupSchema(t *testing.T) {
	obj := groupEnv().Schema()["properties"].(map[string]any)["group"].(map[string]any)
	props := obj["properties"].(map[string]any)
	for _, k := range []string{"id", "commit_interval", "replication_factor", "transaction_timeout", "purge_interval", "brokers"} {
		require.Contains(t, props, k)
	}
	require.Equal(t, "30s", props["purge_interval"].(map[string]any)["default"])
	require.NotContains(t, props["transaction_timeout"], "default", "its default follows commit_interval")
	require.Contains(t, props["transaction_timeout"].(map[string]any)["description"], "10 commit intervals")
	require.Equal(t, []string{"brokers"}, obj["required"])
}
