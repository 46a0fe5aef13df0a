package cmd

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// executeIn runs eddy with args and stdin as its standard input.
func executeIn(t *testing.T, stdin string, args ...string) result {
	t.Helper()
	for _, k := range settings {
		t.Setenv(k, "")
	}
	root := NewRootCommand()
	var stdout, stderr bytes.Buffer
	root.SetArgs(args)
	root.SetIn(strings.NewReader(stdin))
	root.SetOut(&stdout)
	root.SetErr(&stderr)
	code := ExecuteCommand(root)
	return result{code: code, stdout: stdout.String(), stderr: stderr.String()}
}

// groupCluster starts an in-process Kafka cluster with topic "orders" of 3
// partitions; requests counts the requests it gets.
func groupCluster(t *testing.T) (brokers string, requests *atomic.Int64) {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, "orders"))
	require.NoError(t, err)
	t.Cleanup(c.Close)
	requests = &atomic.Int64{}
	c.Control(func(kmsg.Request) (kmsg.Response, error, bool) {
		requests.Add(1)
		return nil, nil, false
	})
	return strings.Join(c.ListenAddrs(), ","), requests
}

// groupFile writes a pipeline in group mode against brokers: orders keyed
// by user into a window, so one repartition topic and one changelog, of
// maxPar partitions.
func groupFile(t *testing.T, brokers string, maxPar int) string {
	t.Helper()
	text := fmt.Sprintf(`version: 1
name: shop
max_parallelism: %d
group:
  brokers: [%[2]s]
  replication_factor: 1
sources:
  - id: orders
    type: kafka
    brokers: [%[2]s]
    topics: [orders]
steps:
  - id: per_user
    key_by: user
    window: {type: tumbling, size: 1m}
    aggregate: {n: count()}
sinks:
  - id: out
    type: kafka
    brokers: [%[2]s]
    topic: totals
`, maxPar, brokers)
	path := filepath.Join(t.TempDir(), fmt.Sprintf("shop-%d.yaml", maxPar))
	require.NoError(t, os.WriteFile(path, []byte(text), 0o644))
	return path
}

// TestGroupTopicsAndReset: group topics lists the internal topics as the
// cluster has them, --create creates them, a pipeline whose partitions
// changed finds them unfit (exit 1), reset asks, and deletes them.
func TestGroupTopicsAndReset(t *testing.T) {
	brokers, _ := groupCluster(t)
	file := groupFile(t, brokers, 4)

	got := executeIn(t, "", "group", "topics", file)
	require.Equal(t, 0, got.code, got.stderr)
	require.Equal(t, `group shop
  TOPIC                      KIND         PARTITIONS  REPLICATION  CLEANUP  STATUS
  shop-per_user-repartition  repartition  -           -            -        missing: a run creates it
  shop-per_user-changelog    changelog    -           -            -        missing: a run creates it
  orders                     source       3           1            delete   ok
tasks: stage 0: 3; stage 1: 4
`, got.stdout)

	got = executeIn(t, "", "group", "topics", "--create", file)
	require.Equal(t, 0, got.code, got.stderr)
	require.Contains(t, got.stdout, "created shop-per_user-repartition\ncreated shop-per_user-changelog\n")
	require.Contains(t, got.stdout, "shop-per_user-changelog    changelog    4           1            compact  ok\n")

	got = executeIn(t, "", "group", "topics", "-f", "json", file)
	require.Equal(t, 0, got.code, got.stderr)
	dec := json.NewDecoder(strings.NewReader(got.stdout))
	dec.DisallowUnknownFields()
	var v groupTopicsView
	require.NoError(t, dec.Decode(&v))
	require.Equal(t, "shop", v.Group)
	require.Equal(t, groupTopicStateView{Name: "shop-per_user-repartition", Kind: "repartition", Step: "per_user", Exists: true,
		Partitions: 4, ReplicationFactor: 1, CleanupPolicy: "delete", WantPartitions: 4, WantCleanupPolicy: "delete"}, v.Topics[0])
	require.Len(t, v.Topics, 3)
	require.Equal(t, 3, *v.Stages[0].Tasks)
	require.Empty(t, v.Created)

	// max_parallelism changed: the topics no longer serve.
	got = executeIn(t, "", "group", "topics", groupFile(t, brokers, 8))
	require.Equal(t, 1, got.code)
	require.Contains(t, got.stdout, "shop-per_user-repartition  repartition  4           1            delete   DOES NOT SERVE (see below)")
	require.Contains(t, got.stderr, "2 topic(s) do not serve group shop:\n  repartition topic shop-per_user-repartition: it has 4 partitions and needs 8 (max_parallelism, fixed for the pipeline's life): set max_parallelism back, or start over with eddy group reset")

	got = executeIn(t, "n\n", "group", "reset", file)
	require.Equal(t, 2, got.code)
	require.Contains(t, got.stderr, "Reset deletes consumer group shop with its committed offsets, and the internal topics of "+file+":\n  shop-per_user-repartition\n  shop-per_user-changelog\n")
	require.Contains(t, got.stderr, "not confirmed: nothing was deleted")
	got = executeIn(t, "", "group", "topics", file)
	require.Equal(t, 0, got.code, got.stderr)
	require.NotContains(t, got.stdout, "missing", "a reset not confirmed deletes nothing")

	got = executeIn(t, "y\n", "group", "reset", file)
	require.Equal(t, 0, got.code, got.stderr)
	require.Equal(t, "deleted topic shop-per_user-repartition\ndeleted topic shop-per_user-changelog\nreset group shop: its offsets and 2 internal topic(s) are gone\n", got.stdout)
	got = executeIn(t, "", "group", "topics", file)
	require.Equal(t, 0, got.code, got.stderr)
	require.Equal(t, 2, strings.Count(got.stdout, "missing: a run creates it"))

	got = executeIn(t, "", "group", "reset", "--yes", file)
	require.Equal(t, 0, got.code, got.stderr)
	require.Equal(t, "reset group shop: its offsets and 0 internal topic(s) are gone\n", got.stdout)
}

// TestGroupTopicsSourceNotInCluster: a source topic the group's cluster
// lacks is an error: group mode reads the sources from that cluster.
func TestGroupTopicsSourceNotInCluster(t *testing.T) {
	brokers, _ := groupCluster(t)
	file := groupFile(t, brokers, 4)
	text, err := os.ReadFile(file)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(file, bytes.ReplaceAll(text, []byte("topics: [orders]"), []byte("topics: [orderz]")), 0o644))
	got := executeIn(t, "", "group", "topics", file)
	require.Equal(t, 1, got.code)
	require.Contains(t, got.stdout, "tasks: stage 0: unknown; stage 1: 4\n")
	require.Contains(t, got.stderr, "source topic orderz is not in the group's cluster")
}

// TestGroupCommandsNeedGroupBlock: the group commands refuse a pipeline
// without a group block (exit 2).
func TestGroupCommandsNeedGroupBlock(t *testing.T) {
	for _, sub := range []string{"topics", "reset"} {
		got := executeIn(t, "", "group", sub, "testdata/ok.yaml")
		require.Equal(t, 2, got.code)
		require.Contains(t, got.stderr, "testdata/ok.yaml has no group block: eddy group manages the Kafka topics of group mode (docs/group.md)")
	}
}

// TestExplainGroupJSON: the group plan in explain's json output is the
// documented groupView: no key more, none missing where it applies.
func TestExplainGroupJSON(t *testing.T) {
	got := execute(t, nil, "explain", "-f", "json", "testdata/explain/group.yaml")
	require.Equal(t, 0, got.code, got.stderr)
	dec := json.NewDecoder(strings.NewReader(got.stdout))
	dec.DisallowUnknownFields()
	var v planView
	require.NoError(t, dec.Decode(&v))
	g := v.Group
	require.NotNil(t, g)
	require.Equal(t, "shop", g.ID)
	require.Equal(t, 16, g.Partitions)
	require.Len(t, g.Stages, 5)
	require.Nil(t, g.Stages[0].Tasks, "a stage reading source topics")
	require.Equal(t, 16, *g.Stages[2].Tasks)
	require.Equal(t, []stageInputView{{Kind: "source", Topic: "orders", Source: "orders"}, {Kind: "source", Topic: "returns", Source: "orders"}}, g.Stages[0].Inputs)
	// A changelog for each stateful step; the bare key_by by_user keeps none.
	require.Len(t, g.Topics, 6)
	require.Equal(t, "shop-enrich-changelog", g.Topics[3].Name)
	require.Equal(t, "compact", g.Topics[3].CleanupPolicy)

	got = execute(t, nil, "explain", "-f", "json", "testdata/explain/simple.yaml")
	require.NotContains(t, got.stdout, `"group"`, "no group block, no group key")
}

// TestGroupTopicsPattern: group topics lists the topics a topic_pattern
// matches now, as source topics, and counts a stage's tasks from them;
// two sources that would read one topic are an error (exit 1).
func TestGroupTopicsPattern(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, "orders"), kfake.SeedTopics(2, "logs.a"), kfake.SeedTopics(4, "logs.b"),
		kfake.SeedTopics(1, "shop-old-repartition"))
	require.NoError(t, err)
	t.Cleanup(c.Close)
	brokers := strings.Join(c.ListenAddrs(), ",")
	file := func(pattern2 string) string {
		text := fmt.Sprintf(`version: 1
name: shop
max_parallelism: 4
group:
  brokers: [%[1]s]
  replication_factor: 1
sources:
  - {id: orders, type: kafka, brokers: [%[1]s], topics: [orders]}
  - {id: logs, type: kafka, brokers: [%[1]s], topic_pattern: 'logs\..*|shop-.*'}
  - {id: more, type: kafka, brokers: [%[1]s], topic_pattern: '%[2]s'}
steps:
  - {id: per_user, from: [orders, logs, more], key_by: user}
sinks:
  - {id: out, type: kafka, brokers: [%[1]s], topic: totals}
`, brokers, pattern2)
		path := filepath.Join(t.TempDir(), "shop.yaml")
		require.NoError(t, os.WriteFile(path, []byte(text), 0o644))
		return path
	}

	got := executeIn(t, "", "group", "topics", file("more-.*"))
	require.Equal(t, 0, got.code, got.stderr)
	require.Equal(t, `group shop
  TOPIC                        KIND         PARTITIONS  REPLICATION  CLEANUP  STATUS
  shop-per_user-repartition-0  repartition  -           -            -        missing: a run creates it
  shop-per_user-repartition-1  repartition  -           -            -        missing: a run creates it
  shop-per_user-repartition-2  repartition  -           -            -        missing: a run creates it
  orders                       source       3           1            delete   ok
  logs.a                       source       2           1            delete   ok
  logs.b                       source       4           1            delete   ok
source logs: topic_pattern logs\..*|shop-.* matches logs.a, logs.b
source more: topic_pattern more-.* matches no topic yet
tasks: stage 0: 3; stage 1: 4; stage 2: 0; stage 3: 4
`, got.stdout)

	got = executeIn(t, "", "group", "topics", "-f", "json", file("more-.*"))
	require.Equal(t, 0, got.code, got.stderr)
	dec := json.NewDecoder(strings.NewReader(got.stdout))
	dec.DisallowUnknownFields()
	var v groupTopicsView
	require.NoError(t, dec.Decode(&v))
	require.Equal(t, []groupPatternView{{Source: "logs", Pattern: `logs\..*|shop-.*`, Topics: []string{"logs.a", "logs.b"}},
		{Source: "more", Pattern: "more-.*", Topics: []string{}}}, v.Patterns)
	require.Equal(t, groupTopicStateView{Name: "logs.b", Kind: "source", Source: "logs", Exists: true, Partitions: 4, ReplicationFactor: 1,
		CleanupPolicy: "delete"}, v.Topics[5])

	got = executeIn(t, "", "group", "topics", file(`logs\.b`))
	require.Equal(t, 1, got.code)
	require.Contains(t, got.stdout, "tasks: stage 0: unknown; stage 1: unknown; stage 2: unknown; stage 3: 4\n")
	require.Contains(t, got.stderr, `topic logs.b is read by source "logs" (topic_pattern logs\..*|shop-.*) and by source "more" (topic_pattern logs\.b): in group mode each partition of a topic goes to one process`)
}
