package kafka

import (
	"fmt"
	"strings"
	"testing"

	"github.com/IBM/sarama"
	"github.com/stretchr/testify/require"

	"github.com/eddy-stream/eddy/pipeline"
)

// TestStageRange: the assignor keeps each task (a stage and a partition
// number) on one member, whatever the partition counts of the stage's
// topics; with equal counts it assigns what Kafka's range assigns; a topic
// whose subscribers differ from its stage's others is assigned by range.
func TestStageRange(t *testing.T) {
	text := groupPipelineText([]string{"k:1"}, "g", "unused", 4, "")
	require.Contains(t, text, "    topics: [unused]")
	text = strings.Replace(text, "    topics: [unused]", "    topic_pattern: 'in-.*'", 1)
	spec, err := pipeline.Load(pipeline.Default, "group.yaml", []byte(text))
	require.NoError(t, err)
	plan, err := pipeline.Compile(spec)
	require.NoError(t, err)
	gp, err := pipeline.NewGroupPlan(plan)
	require.NoError(t, err)
	s := &stageRange{plan: gp}

	all := []string{"in-a", "in-b", "g-per_user-repartition", "other"}
	members := map[string]sarama.ConsumerGroupMemberMetadata{"m1": {Topics: all}, "m2": {Topics: all}, "m3": {Topics: all}}
	topics := map[string][]int32{"in-a": {0, 1}, "in-b": {0, 1, 2, 3, 4}, "g-per_user-repartition": {0, 1, 2, 3}, "other": {0, 1, 2, 3, 4}}
	got, err := s.Plan(members, topics)
	require.NoError(t, err)
	require.Equal(t, sarama.BalanceStrategyPlan{
		// Stage 0 has 5 tasks: m1 0-1, m2 2-3, m3 4; in-a's partitions go
		// with in-b's of the same number.
		"m1": {"in-a": {0, 1}, "in-b": {0, 1}, "g-per_user-repartition": {0, 1}, "other": {0, 1}},
		"m2": {"in-b": {2, 3}, "g-per_user-repartition": {2}, "other": {2, 3}},
		"m3": {"in-b": {4}, "g-per_user-repartition": {3}, "other": {4}},
	}, got)

	// Equal counts: what range assigns.
	topics = map[string][]int32{"in-a": {0, 1, 2, 3}, "in-b": {0, 1, 2, 3}, "g-per_user-repartition": {0, 1, 2, 3}}
	got, err = s.Plan(members, topics)
	require.NoError(t, err)
	want, err := sarama.NewBalanceStrategyRange().Plan(members, topics)
	require.NoError(t, err)
	require.Equal(t, want, got)

	// m2 has not seen in-b yet: the stage's topics go by range, each.
	members["m2"] = sarama.ConsumerGroupMemberMetadata{Topics: []string{"in-a", "g-per_user-repartition"}}
	topics = map[string][]int32{"in-a": {0, 1}, "in-b": {0, 1, 2}, "g-per_user-repartition": {0, 1, 2, 3}}
	got, err = s.Plan(members, topics)
	require.NoError(t, err)
	require.Equal(t, sarama.BalanceStrategyPlan{
		"m1": {"in-a": {0}, "in-b": {0, 1}, "g-per_user-repartition": {0, 1}},
		"m2": {"in-a": {1}, "g-per_user-repartition": {2}},
		"m3": {"in-b": {2}, "g-per_user-repartition": {3}},
	}, got)
}

// TestRangeOwner: each member owns a contiguous run of items, the first
// n%members one more.
func TestRangeOwner(t *testing.T) {
	for _, tc := range []struct{ n, members int }{{5, 3}, {4, 4}, {2, 3}, {7, 2}, {1, 1}} {
		var got []int
		for i := range tc.n {
			got = append(got, rangeOwner(i, tc.n, tc.members))
		}
		var want []int
		per, extra := tc.n/tc.members, tc.n%tc.members
		for m := range tc.members {
			size := per
			if m < extra {
				size++
			}
			for range size {
				want = append(want, m)
			}
		}
		require.Equal(t, want, got, fmt.Sprintf("%d items, %d members", tc.n, tc.members))
	}
}
