package pipeline

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// The group plan: how a pipeline with a group block runs across processes
// (docs/group.md, "The plan").
//
// The compiled plan is cut into stages at each hash edge, the keyed
// exchange in front of key_by, dedupe and join: a stage is a connected
// part of the plan once its hash edges are removed. Each hash edge becomes
// an exchange through an internal repartition topic of P partitions, P the
// pipeline's max_parallelism (fixed for the pipeline's life): the sending
// stage writes each record to the partition that owns its key group, the
// receiving stage reads the topic. Each stateful keyed step appends its
// state changes to a compacted changelog topic of P partitions. A task is
// a stage and an input partition: the stage runs once per partition of its
// input topics.
//
// Every stage reads at least one topic: its first node in topological
// order reads nothing from inside the stage, so it is a source (its Kafka
// topics) or a keyed step (its repartition topics). A stage may write an
// exchange that it also reads (a key_by whose output joins, unkeyed, a
// stream of its own input's stage): the data still flows one way, through
// the topic.

// InternalTopicKind tells repartition topics from changelog topics.
type InternalTopicKind int

const (
	// RepartitionTopic carries the records of a keyed exchange from one
	// stage to the next; cleanup.policy delete.
	RepartitionTopic InternalTopicKind = iota
	// ChangelogTopic holds the state changes of a stateful step, one
	// partition per task; cleanup.policy compact.
	ChangelogTopic
)

func (k InternalTopicKind) String() string {
	if k == ChangelogTopic {
		return "changelog"
	}
	return "repartition"
}

// The cleanup policies of internal topics.
const (
	CleanupDelete  = "delete"
	CleanupCompact = "compact"
)

// InternalTopic is a topic that group mode creates and owns.
type InternalTopic struct {
	Name string
	Kind InternalTopicKind
	// Step is the keyed step it feeds (repartition) or whose state it
	// holds (changelog).
	Step string
	// Input is the index of the step's input a repartition topic carries
	// (StepSpec.Inputs); 0 for a changelog.
	Input             int
	Partitions        int
	ReplicationFactor int
	// Configs are the topic configs it is created with, cleanup.policy
	// among them.
	Configs map[string]string
}

// CleanupPolicy returns the topic's cleanup.policy.
func (t *InternalTopic) CleanupPolicy() string { return t.Configs["cleanup.policy"] }

// The topic configs of internal topics, after Kafka Streams' (which has the
// same needs). Event time rides in the record timestamp, so the timestamp
// must be the producer's (CreateTime, never the broker's append time) and
// a repartition topic must not delete by time: a record of an old event
// time would be gone before it is read. The runtime instead deletes what
// every reader committed (DeleteRecords); small segments let that free
// the disk soon.
var (
	repartitionConfigs = map[string]string{
		"cleanup.policy":         CleanupDelete,
		"retention.ms":           "-1",
		"segment.ms":             "600000",   // 10 minutes
		"segment.bytes":          "52428800", // 50 MiB
		"message.timestamp.type": "CreateTime",
	}
	changelogConfigs = map[string]string{
		"cleanup.policy":         CleanupCompact,
		"message.timestamp.type": "CreateTime",
	}
)

// GroupExchange is a hash edge of the plan in group mode: its records go
// through Topic from stage From to stage To (From may be To). Records
// whose key fails on an edge with dead letters (Edge.DeadLetters) go, as
// dead letters, to partition 0, as they go to subtask 0 in one process.
type GroupExchange struct {
	Edge     *Edge
	Topic    *InternalTopic
	From, To *GroupStage
}

// GroupSourceInput is a source of a stage and the topics it reads.
type GroupSourceInput struct {
	Node  *Node
	Input GroupInput
	// match is Input.Pattern compiled to match whole topic names; nil
	// without a pattern.
	match *regexp.Regexp
}

// GroupStage is a part of the plan that runs as one task per input
// partition in group mode.
type GroupStage struct {
	Index int
	// Nodes are the stage's nodes in topological order.
	Nodes []*Node
	// Sources are its source nodes and their topics.
	Sources []GroupSourceInput
	// Inputs are the exchanges it reads; Outputs those it writes.
	Inputs, Outputs []*GroupExchange
	// Changelogs are the changelog topics of its stateful steps.
	Changelogs []*InternalTopic
	// Tasks is the number of tasks, the largest partition count of its
	// input topics: the partitions of its repartition topics when it has
	// no source; 0 when it reads source topics, whose partitions only the
	// broker knows (TasksFor).
	Tasks int
}

// TasksFor returns the number of tasks of the stage when its sources read
// the topics of in: the largest partition count of its input topics. It
// fails for a source topic whose partitions in lacks (a listed topic the
// cluster does not have).
func (s *GroupStage) TasksFor(in *GroupTopics) (int, error) {
	n := s.Tasks
	for _, src := range s.Sources {
		for _, t := range in.Of[src.Node.ID] {
			p, ok := in.Partitions[t]
			if !ok {
				return 0, fmt.Errorf("stage %d: the partitions of topic %q of source %q are not known", s.Index, t, src.Node.ID)
			}
			n = max(n, p)
		}
	}
	return n, nil
}

// Topics returns the names of the topics the stage reads when its
// sources read the topics of in: its sources' topics, then its
// repartition topics.
func (s *GroupStage) Topics(in *GroupTopics) []string {
	var out []string
	for _, src := range s.Sources {
		out = append(out, in.Of[src.Node.ID]...)
	}
	for _, x := range s.Inputs {
		out = append(out, x.Topic.Name)
	}
	return out
}

// Name is the stage's display name: its nodes, "a, b, c".
func (s *GroupStage) Name() string {
	ids := make([]string, len(s.Nodes))
	for i, n := range s.Nodes {
		ids[i] = n.ID
	}
	return strings.Join(ids, ", ")
}

// GroupPlan is how a plan runs in group mode.
type GroupPlan struct {
	Plan  *Plan
	Group *GroupSpec
	// Partitions is P, the partition count of every internal topic: the
	// pipeline's max_parallelism, so that a partition is a key group.
	Partitions int
	// MaxParallelism is the number of key groups.
	MaxParallelism int
	Stages         []*GroupStage
	// Exchanges are the hash edges, in the plan's order of edges (by
	// receiving node, then input).
	Exchanges []*GroupExchange
	// Topics are all internal topics: per keyed step in topological order,
	// its repartition topics, then its changelog.
	Topics  []*InternalTopic
	stageOf map[*Node]*GroupStage
	// internal matches the names of the group's internal topics, which
	// a topic pattern never matches.
	internal *regexp.Regexp
}

// StageOf returns the stage a node runs in.
func (g *GroupPlan) StageOf(n *Node) *GroupStage { return g.stageOf[n] }

// Partition returns the partition of an internal topic that owns key
// group keyGroup.
func (g *GroupPlan) Partition(keyGroup int) int {
	return KeyGroupPartition(keyGroup, g.MaxParallelism, g.Partitions)
}

// KeyGroupPartition returns the partition, of an internal topic with
// partitions partitions, that owns key group keyGroup of maxParallelism:
// each partition owns a fixed, contiguous range of key groups (the
// mapping of key groups to subtasks, SubtaskForKeyGroup), and with
// partitions == maxParallelism partition and key group are one.
func KeyGroupPartition(keyGroup, maxParallelism, partitions int) int {
	return SubtaskForKeyGroup(keyGroup, partitions, maxParallelism)
}

// PartitionKeyGroups returns the key groups [start, end) that partition
// of an internal topic with partitions partitions owns.
func PartitionKeyGroups(partition, maxParallelism, partitions int) (start, end int) {
	return KeyGroupRange(partition, partitions, maxParallelism)
}

// ErrNoGroup is returned by NewGroupPlan for a plan without a group block.
var ErrNoGroup = errors.New("the pipeline has no group block")

// NewGroupPlan cuts a compiled plan into stages and internal topics. The
// spec must have a group block whose sources are all GroupSources (the
// loader checks it).
func NewGroupPlan(plan *Plan) (*GroupPlan, error) {
	spec := plan.Spec
	if spec.Group == nil {
		return nil, ErrNoGroup
	}
	g := &GroupPlan{Plan: plan, Group: spec.Group, Partitions: spec.MaxParallelism,
		MaxParallelism: spec.MaxParallelism, stageOf: map[*Node]*GroupStage{}, internal: internalTopicName(spec.Group.ID)}
	if err := g.cutStages(); err != nil {
		return nil, err
	}
	g.addTopics()
	return g, nil
}

// cutStages groups the nodes into stages: the connected parts of the plan
// without its hash edges, numbered by their first node in topological
// order.
func (g *GroupPlan) cutStages() error {
	nodes := g.Plan.Nodes
	index := make(map[*Node]int, len(nodes))
	for i, n := range nodes {
		index[n] = i
	}
	// Union-find over the nodes' indexes; a root is its part's first node.
	parent := make([]int, len(nodes))
	for i := range parent {
		parent[i] = i
	}
	var find func(int) int
	find = func(i int) int {
		if parent[i] != i {
			parent[i] = find(parent[i])
		}
		return parent[i]
	}
	for i, n := range nodes {
		for _, e := range n.Inputs {
			if e.Partition == Hash {
				continue
			}
			a, b := find(index[e.From]), find(i)
			parent[max(a, b)] = min(a, b)
		}
	}
	byRoot := map[int]*GroupStage{}
	for i, n := range nodes {
		r := find(i)
		s, ok := byRoot[r]
		if !ok {
			s = &GroupStage{Index: len(g.Stages)}
			byRoot[r] = s
			g.Stages = append(g.Stages, s)
		}
		s.Nodes = append(s.Nodes, n)
		g.stageOf[n] = s
		if n.Kind != SourceNode {
			continue
		}
		gs, ok := n.Source.Config.(GroupSource)
		if !ok {
			return fmt.Errorf("group plan: source %q (%s) cannot run in group mode", n.ID, n.Type)
		}
		in, err := gs.GroupInput(g.Group.ID)
		if err != nil {
			return fmt.Errorf("group plan: source %q: %w", n.ID, err)
		}
		src := GroupSourceInput{Node: n, Input: in}
		if in.Pattern != "" {
			if src.match, err = regexp.Compile("^(?:" + in.Pattern + ")$"); err != nil {
				return fmt.Errorf("group plan: source %q: topic pattern: %w", n.ID, err)
			}
		}
		s.Sources = append(s.Sources, src)
	}
	return nil
}

// addTopics makes the exchanges and changelogs of the keyed steps, and
// sets the task counts of the stages without sources.
func (g *GroupPlan) addTopics() {
	id, rf := g.Group.ID, g.Group.ReplicationFactor
	for _, n := range g.Plan.Nodes {
		if n.Kind != StepNode {
			continue
		}
		to := g.stageOf[n]
		for _, e := range n.Inputs {
			if e.Partition != Hash {
				continue
			}
			t := &InternalTopic{Name: repartitionTopic(id, n.ID, e.Input, len(n.Inputs)), Kind: RepartitionTopic,
				Step: n.ID, Input: e.Input, Partitions: g.Partitions, ReplicationFactor: rf, Configs: repartitionConfigs}
			x := &GroupExchange{Edge: e, Topic: t, From: g.stageOf[e.From], To: to}
			x.From.Outputs = append(x.From.Outputs, x)
			to.Inputs = append(to.Inputs, x)
			g.Exchanges = append(g.Exchanges, x)
			g.Topics = append(g.Topics, t)
		}
		if stateful(n.Step.Config) {
			t := &InternalTopic{Name: changelogTopic(id, n.ID), Kind: ChangelogTopic, Step: n.ID,
				Partitions: g.Partitions, ReplicationFactor: rf, Configs: changelogConfigs}
			to.Changelogs = append(to.Changelogs, t)
			g.Topics = append(g.Topics, t)
		}
	}
	for _, s := range g.Stages {
		if len(s.Sources) == 0 {
			s.Tasks = g.Partitions
		}
	}
}

// stateful tells whether a step keeps keyed state (StatefulStep).
func stateful(cfg StepConfig) bool {
	if _, keyed := cfg.(KeyedStep); !keyed {
		return false
	}
	if s, ok := cfg.(StatefulStep); ok {
		return s.Stateful()
	}
	return true
}

// Topic returns the internal topic named name, or nil.
func (g *GroupPlan) Topic(name string) *InternalTopic {
	i := slices.IndexFunc(g.Topics, func(t *InternalTopic) bool { return t.Name == name })
	if i < 0 {
		return nil
	}
	return g.Topics[i]
}

// SourceTopics returns the topics the sources read by name, in source
// order, each once.
func (g *GroupPlan) SourceTopics() []string {
	var out []string
	for _, s := range g.Stages {
		for _, src := range s.Sources {
			for _, t := range src.Input.Topics {
				if !slices.Contains(out, t) {
					out = append(out, t)
				}
			}
		}
	}
	return out
}
