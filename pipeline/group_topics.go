package pipeline

import (
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
)

// The topics the sources of a group plan read (docs/group.md, "Topic
// patterns"). A source lists its topics or matches them with a pattern;
// a pattern is resolved against the cluster's topics whenever a
// generation starts, so what the group reads is a GroupTopics of that
// moment. Every process resolves from the cluster's metadata, so they all
// subscribe to the same topics, and each topic is read by one source only.

// GroupTopics is what the sources of a group plan read at one time: each
// source's topics, listed or matched by its pattern among the cluster's
// topics, with their partition counts (GroupPlan.ResolveTopics).
type GroupTopics struct {
	// Of is the topics of each source, by source id: its listed topics,
	// or the topics its pattern matches, sorted.
	Of map[string][]string
	// Partitions is the partition count of each topic of Of that the
	// cluster has.
	Partitions map[string]int
}

// All returns every topic of t, each once, sorted.
func (t *GroupTopics) All() []string {
	var out []string
	for _, ts := range t.Of {
		out = append(out, ts...)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// Equal tells whether t and o read the same topics with the same
// partition counts.
func (t *GroupTopics) Equal(o *GroupTopics) bool {
	return maps.EqualFunc(t.Of, o.Of, slices.Equal[[]string]) && maps.Equal(t.Partitions, o.Partitions)
}

// Matched returns the topics of t that each source with a pattern reads,
// by source id.
func (g *GroupPlan) Matched(t *GroupTopics) map[string][]string {
	out := map[string][]string{}
	for _, src := range g.sources() {
		if src.match != nil {
			out[src.Node.ID] = t.Of[src.Node.ID]
		}
	}
	return out
}

// HasPatterns tells whether a source of the plan reads by pattern.
func (g *GroupPlan) HasPatterns() bool {
	return slices.ContainsFunc(g.sources(), func(s GroupSourceInput) bool { return s.match != nil })
}

// sources returns the sources of every stage, in stage order.
func (g *GroupPlan) sources() []GroupSourceInput {
	var out []GroupSourceInput
	for _, s := range g.Stages {
		out = append(out, s.Sources...)
	}
	return out
}

// ResolveTopics returns what the sources read given the cluster's topics
// and their partition counts (all of them when a source has a pattern):
// a source with a pattern reads every topic it matches except Kafka's
// internal topics (named __...) and the group's internal topics (named
// <group.id>-<step>-repartition[-<input>] or -changelog, those of steps
// the file no longer has included). It fails when a topic is read by two
// sources, which the loader cannot tell for a pattern. A listed topic the
// cluster lacks has no partition count (TasksFor fails for it).
func (g *GroupPlan) ResolveTopics(cluster map[string]int) (*GroupTopics, error) {
	t := &GroupTopics{Of: map[string][]string{}, Partitions: map[string]int{}}
	names := slices.Sorted(maps.Keys(cluster))
	readBy := map[string]GroupSourceInput{}
	var errs []error
	for _, src := range g.sources() {
		id := src.Node.ID
		topics := src.Input.Topics
		if src.match != nil {
			topics = nil
			for _, name := range names {
				if !strings.HasPrefix(name, "__") && !g.internal.MatchString(name) && src.match.MatchString(name) {
					topics = append(topics, name)
				}
			}
		}
		t.Of[id] = slices.Clone(topics)
		for _, name := range topics {
			if p, ok := cluster[name]; ok {
				t.Partitions[name] = p
			}
			if other, dup := readBy[name]; dup {
				errs = append(errs, fmt.Errorf("topic %s is read by source %q (%s) and by source %q (%s): in group mode each partition of a topic goes to one process, so a topic must be read by one source only: change topic_pattern so that the sources' topics do not overlap",
					name, other.Node.ID, other.readsText(), id, src.readsText()))
				continue
			}
			readBy[name] = src
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return t, nil
}

// readsText says how a source names its topics, for messages.
func (s GroupSourceInput) readsText() string {
	if s.match != nil {
		return "topic_pattern " + s.Input.Pattern
	}
	return "topics"
}

// internalTopicName matches the names of the internal topics of group id,
// of any step: <id>-<step>-repartition, -repartition-<input> and
// -changelog.
func internalTopicName(id string) *regexp.Regexp {
	return regexp.MustCompile("^" + regexp.QuoteMeta(id) + "-.+-(changelog|repartition(-[0-9]+)?)$")
}

// StageOfTopic returns the stage that reads topic name: the receiving
// stage of a repartition topic, or the stage of the source that lists the
// topic or whose pattern matches it; nil for a topic no stage reads.
func (g *GroupPlan) StageOfTopic(name string) *GroupStage {
	for _, x := range g.Exchanges {
		if x.Topic.Name == name {
			return x.To
		}
	}
	patterned := !strings.HasPrefix(name, "__") && !g.internal.MatchString(name)
	for _, s := range g.Stages {
		for _, src := range s.Sources {
			if slices.Contains(src.Input.Topics, name) || (src.match != nil && patterned && src.match.MatchString(name)) {
				return s
			}
		}
	}
	return nil
}
