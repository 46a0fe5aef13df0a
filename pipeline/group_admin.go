package pipeline

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The broker side of group mode: the internal topics and the consumer
// group, managed through a GroupAdmin that the group's client config
// connects (a Kafka connector implements it).

// GroupAdmin manages the internal topics and the consumer group of a group
// on its Kafka cluster.
type GroupAdmin interface {
	// Topics returns what the cluster has of each named topic, in the
	// order of names; a topic it does not have is TopicState{Name: name}.
	Topics(names []string) ([]TopicState, error)
	// ListTopics returns every topic of the cluster with its partition
	// count: what the sources' topic patterns are resolved against.
	ListTopics() (map[string]int, error)
	// CreateTopic creates a topic with t's partitions, replication factor
	// and configs; it fails with an error wrapping ErrTopicExists when the
	// topic exists.
	CreateTopic(t *InternalTopic) error
	// DeleteTopic deletes a topic; a topic that does not exist is no error.
	DeleteTopic(name string) error
	// ConsumerGroup describes consumer group id.
	ConsumerGroup(id string) (ConsumerGroupState, error)
	// DeleteConsumerGroup deletes consumer group id with its committed
	// offsets; a group that does not exist is no error, one with members
	// fails with an error wrapping ErrGroupActive.
	DeleteConsumerGroup(id string) error
	Close() error
}

// TopicState is a topic as the cluster has it.
type TopicState struct {
	Name   string
	Exists bool
	// Partitions, ReplicationFactor (of its first partition) and
	// CleanupPolicy are set when it exists.
	Partitions        int
	ReplicationFactor int
	CleanupPolicy     string
}

// ConsumerGroupState is a consumer group as the cluster has it.
type ConsumerGroupState struct {
	// Exists is false for a group the cluster does not know (or that is
	// dead: no members and no committed offsets).
	Exists bool
	// State is Kafka's: Empty, Stable, PreparingRebalance, ...
	State string
	// Members are its members, "client-id@host".
	Members []string
}

// Sentinel errors of group administration; test with errors.Is.
var (
	// ErrTopicExists is returned by GroupAdmin.CreateTopic for a topic
	// that exists.
	ErrTopicExists = errors.New("topic exists")
	// ErrTopicMismatch marks an internal topic that exists with other
	// partitions or another cleanup policy than the plan needs.
	ErrTopicMismatch = errors.New("internal topic does not match the pipeline")
	// ErrGroupActive is returned for a reset of a consumer group that has
	// members.
	ErrGroupActive = errors.New("the consumer group has members")
)

// CheckTopic returns nil when have, an existing topic, can serve as want,
// else an error wrapping ErrTopicMismatch that names the topic, what it
// has and what it needs. Partitions and cleanup policy must be equal: a
// partition is a fixed range of key groups (or a task's changelog), and a
// changelog that deletes by time, or a repartition topic that compacts,
// loses records. The replication factor is the operator's to change.
func CheckTopic(want *InternalTopic, have TopicState) error {
	var diffs []string
	if have.Partitions != want.Partitions {
		diffs = append(diffs, fmt.Sprintf("it has %s and needs %d (max_parallelism, fixed for the pipeline's life)", partitionsText(have.Partitions), want.Partitions))
	}
	if !samePolicy(have.CleanupPolicy, want.CleanupPolicy()) {
		diffs = append(diffs, fmt.Sprintf("its cleanup.policy is %s and must be %s", policyText(have.CleanupPolicy), want.CleanupPolicy()))
	}
	if len(diffs) == 0 {
		return nil
	}
	fix := "delete the topic"
	if have.Partitions != want.Partitions {
		fix = "set max_parallelism back"
	}
	return fmt.Errorf("%w: %s topic %s: %s: %s, or start over with eddy group reset, which deletes the internal topics and the group's offsets",
		ErrTopicMismatch, want.Kind, want.Name, strings.Join(diffs, ", and "), fix)
}

// samePolicy compares cleanup policies as sets: "compact,delete" is
// "delete,compact".
func samePolicy(a, b string) bool {
	split := func(s string) []string {
		var out []string
		for p := range strings.SplitSeq(s, ",") {
			if p = strings.TrimSpace(p); p != "" {
				out = append(out, p)
			}
		}
		slices.Sort(out)
		return slices.Compact(out)
	}
	return slices.Equal(split(a), split(b))
}

// policyText is a cleanup policy for messages.
func policyText(p string) string {
	if p == "" {
		return "unknown"
	}
	return p
}

// EnsureGroupTopics creates the plan's internal topics that the cluster
// lacks and checks those it has (CheckTopic). It returns the names of the
// topics it created, and an error joining every mismatch; it never changes
// an existing topic. A topic another process creates meanwhile is checked
// like one that existed. It returns once the cluster's metadata shows the
// topics it created (a broker answers a creation before every broker
// knows the topic), checked as well.
func EnsureGroupTopics(admin GroupAdmin, plan *GroupPlan) (created []string, err error) {
	states, err := admin.Topics(topicNames(plan.Topics))
	if err != nil {
		return nil, fmt.Errorf("describe internal topics: %w", err)
	}
	var errs []error
	var createdTopics []*InternalTopic
	for i, t := range plan.Topics {
		have := states[i]
		if !have.Exists {
			err := admin.CreateTopic(t)
			if err == nil {
				createdTopics = append(createdTopics, t)
				continue
			}
			if !errors.Is(err, ErrTopicExists) {
				errs = append(errs, fmt.Errorf("create %s topic %s: %w", t.Kind, t.Name, err))
				continue
			}
			if have, err = awaitTopic(admin, t.Name, true); err != nil {
				errs = append(errs, err)
				continue
			}
		}
		if err := CheckTopic(t, have); err != nil {
			errs = append(errs, err)
		}
	}
	for _, t := range createdTopics {
		created = append(created, t.Name)
		have, err := awaitTopic(admin, t.Name, true)
		if err == nil {
			err = CheckTopic(t, have)
		}
		if err != nil {
			errs = append(errs, err)
		}
	}
	return created, errors.Join(errs...)
}

// How long EnsureGroupTopics and ResetGroup wait for the cluster's
// metadata to show a topic they created or deleted: the attempts and the
// pause between two.
const (
	topicWaitAttempts = 100
	topicWaitPause    = 100 * time.Millisecond
)

// awaitTopic describes topic name until the cluster has it (exists) or
// no longer has it (!exists), and returns its last state.
func awaitTopic(admin GroupAdmin, name string, exists bool) (TopicState, error) {
	for attempt := 1; ; attempt++ {
		states, err := admin.Topics([]string{name})
		if err != nil {
			return TopicState{}, fmt.Errorf("describe topic %s: %w", name, err)
		}
		if states[0].Exists == exists {
			return states[0], nil
		}
		if attempt == topicWaitAttempts {
			state := "created"
			if !exists {
				state = "deleted"
			}
			return states[0], fmt.Errorf("topic %s: the cluster's metadata does not show it %s after %s", name, state, topicWaitAttempts*topicWaitPause)
		}
		time.Sleep(topicWaitPause)
	}
}

// ResetGroup deletes the consumer group of the plan, with its committed
// offsets, and every internal topic the cluster has. It refuses, with an
// error wrapping ErrGroupActive, while the group has members: a running
// process would go on from state that is gone. The group goes first, so
// that a member that joins meanwhile makes the broker refuse before a
// topic is gone. It returns the names of the topics it deleted, once the
// cluster's metadata no longer shows them (so that a run right after
// creates them anew).
func ResetGroup(admin GroupAdmin, plan *GroupPlan) (deleted []string, err error) {
	id := plan.Group.ID
	g, err := admin.ConsumerGroup(id)
	if err != nil {
		return nil, fmt.Errorf("describe consumer group %s: %w", id, err)
	}
	if len(g.Members) > 0 {
		return nil, fmt.Errorf("%w: consumer group %s is %s with %d member(s) (%s): stop every process of the pipeline first",
			ErrGroupActive, id, g.State, len(g.Members), strings.Join(g.Members, ", "))
	}
	if g.Exists {
		if err := admin.DeleteConsumerGroup(id); err != nil {
			return nil, fmt.Errorf("delete consumer group %s: %w", id, err)
		}
	}
	states, err := admin.Topics(topicNames(plan.Topics))
	if err != nil {
		return nil, fmt.Errorf("describe internal topics: %w", err)
	}
	for _, s := range states {
		if !s.Exists {
			continue
		}
		if err := admin.DeleteTopic(s.Name); err != nil {
			return deleted, fmt.Errorf("delete topic %s: %w", s.Name, err)
		}
		deleted = append(deleted, s.Name)
	}
	for _, name := range deleted {
		if _, err := awaitTopic(admin, name, false); err != nil {
			return deleted, err
		}
	}
	return deleted, nil
}

// topicNames returns the names of topics.
func topicNames(topics []*InternalTopic) []string {
	names := make([]string, len(topics))
	for i, t := range topics {
		names[i] = t.Name
	}
	return names
}

// partitionsText is a partition count for messages: "12 partitions".
func partitionsText(n int) string {
	if n == 1 {
		return "1 partition"
	}
	return strconv.Itoa(n) + " partitions"
}
