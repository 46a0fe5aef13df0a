package kafka

import (
	"maps"
	"slices"

	"github.com/IBM/sarama"

	"github.com/eddy-stream/eddy/pipeline"
)

// The group's assignor (docs/group.md, "How it runs"). A task is a stage
// and a partition number: it reads partition p of each input topic of its
// stage, and a stage has as many tasks as the largest partition count of
// its input topics. Kafka's range assignment divides each topic on its
// own, so partition p of two topics of one stage goes to the same member
// only when the topics have the same partition count. With topics of
// other counts (a topic pattern over topics of 2 and 4 partitions, a
// stage that reads a source topic and a repartition topic), a task would
// be split between two processes, each of which would send watermark
// markers for it, and the readers downstream would take the larger one.
// stageRange divides the tasks of each stage in ranges instead, as range
// divides partitions, and gives partition p of each of the stage's topics
// to the member of task p: a task is never split. Where every topic of a
// stage has the same partition count, it assigns what range assigns.

// stageRangeName is the assignor's protocol name. A process offers it
// first and range second, so that a group whose members are not all of
// this version agrees on range.
const stageRangeName = "eddy-stage-range"

// stageRange is the group's assignor: range over the tasks of each stage.
type stageRange struct {
	plan *pipeline.GroupPlan
}

var _ sarama.BalanceStrategy = (*stageRange)(nil)

func (*stageRange) Name() string { return stageRangeName }

// Plan divides the partitions of topics among the members. The topics of
// a stage whose subscribers are the same members are assigned by task;
// any other topic (of no stage of this plan, or while the members'
// subscriptions differ during a change of the patterns' topics) by range.
func (s *stageRange) Plan(members map[string]sarama.ConsumerGroupMemberMetadata, topics map[string][]int32) (sarama.BalanceStrategyPlan, error) {
	subscribers := map[string][]string{}
	for id, m := range members {
		for _, t := range m.Topics {
			if !slices.Contains(subscribers[t], id) {
				subscribers[t] = append(subscribers[t], id)
			}
		}
	}
	for _, ids := range subscribers {
		slices.Sort(ids)
	}
	byStage := map[*pipeline.GroupStage][]string{}
	var alone []string
	for _, t := range slices.Sorted(maps.Keys(topics)) {
		if st := s.plan.StageOfTopic(t); st != nil {
			byStage[st] = append(byStage[st], t)
		} else {
			alone = append(alone, t)
		}
	}
	plan := sarama.BalanceStrategyPlan{}
	for _, ts := range byStage {
		ids := subscribers[ts[0]]
		if !slices.ContainsFunc(ts, func(t string) bool { return !slices.Equal(subscribers[t], ids) }) {
			tasks := 0
			for _, t := range ts {
				tasks = max(tasks, len(topics[t]))
			}
			for _, t := range ts {
				for _, p := range topics[t] {
					plan.Add(ids[rangeOwner(int(p), tasks, len(ids))], t, p)
				}
			}
			continue
		}
		alone = append(alone, ts...)
	}
	for _, t := range alone {
		ids, parts := subscribers[t], slices.Sorted(slices.Values(topics[t]))
		for i, p := range parts {
			plan.Add(ids[rangeOwner(i, len(parts), len(ids))], t, p)
		}
	}
	return plan, nil
}

// AssignmentData is empty: the assignment carries no user data.
func (*stageRange) AssignmentData(string, map[string][]int32, int32) ([]byte, error) { return nil, nil }

// rangeOwner returns the member, of members sorted ones, that range gives
// item i of n: each member a contiguous run, the first n%members members
// one more than the others.
func rangeOwner(i, n, members int) int {
	per, extra := n/members, n%members
	if i < extra*(per+1) {
		return i / (per + 1)
	}
	return extra + (i-extra*(per+1))/per
}
