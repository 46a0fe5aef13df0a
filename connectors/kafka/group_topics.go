package kafka

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/IBM/sarama"

	"github.com/eddy-stream/eddy/pipeline"
)

// The sources' topics in group mode (docs/group.md, "Topic patterns"):
// before each join the process resolves the sources' topic patterns
// against the cluster's topics (pipeline.GroupPlan.ResolveTopics) and
// subscribes to what they match. While a generation runs, a watcher reads
// the cluster's topics every discovery_interval; when what the sources
// read changed (a topic that a pattern matches was created or deleted, a
// source topic got partitions), it ends the generation as a rebalance
// does: the job is cancelled, its open transaction aborted, and the
// process joins again with the new subscription, which makes the group
// rebalance. Every member resolves the patterns when it joins, so the
// members subscribe to the same topics. A partition without a committed
// offset, as a new topic's, is read from its earliest offset.

// watchInterval is how often a generation checks the sources' topics: the
// shortest positive discovery_interval of the sources with a topic
// pattern; 0 (never) when none has one.
func watchInterval(gp *pipeline.GroupPlan) time.Duration {
	var d time.Duration
	for _, s := range gp.Stages {
		for _, src := range s.Sources {
			cfg, ok := src.Node.Source.Config.(*SourceConfig)
			if !ok || cfg.TopicPattern == "" || cfg.DiscoveryInterval <= 0 {
				continue
			}
			if d == 0 || cfg.DiscoveryInterval.D() < d {
				d = cfg.DiscoveryInterval.D()
			}
		}
	}
	return d
}

// noMatchPause is how often a process whose topic patterns match nothing,
// and which has no other topic to read, checks the cluster's topics when
// discovery is off.
const noMatchPause = 30 * time.Second

// subscribe resolves the sources' topics, sets the stages' tasks from
// them and returns the topics to subscribe to: the sources' topics and
// the repartition topics. While there are none (the only input is a topic
// pattern that matches nothing yet) it waits, checking the cluster at the
// watch interval; it returns nil, nil when ctx ends meanwhile.
func (g *groupRun) subscribe(ctx context.Context) ([]string, error) {
	gp := g.run.Plan
	warned := false
	for {
		topics, err := g.resolve()
		if err != nil {
			return nil, err
		}
		if gp.HasPatterns() && (g.topics == nil || !topics.Equal(g.topics)) {
			g.logger.Info("the sources' topic patterns match", "topics", gp.Matched(topics))
		}
		tasks := map[*pipeline.GroupStage]int{}
		for _, s := range gp.Stages {
			if tasks[s], err = s.TasksFor(topics); err != nil {
				return nil, err
			}
		}
		g.topics, g.tasks = topics, tasks
		subscription := topics.All()
		for _, x := range gp.Exchanges {
			if !slices.Contains(subscription, x.Topic.Name) {
				subscription = append(subscription, x.Topic.Name)
			}
		}
		if len(subscription) > 0 {
			return subscription, nil
		}
		if !warned {
			g.logger.Warn("no topic matches the sources' topic patterns yet: the process joins the group once one does")
			warned = true
		}
		pause := g.interval
		if pause <= 0 {
			pause = noMatchPause
		}
		select {
		case <-time.After(pause):
		case <-ctx.Done():
			return nil, nil
		}
	}
}

// resolve reads the cluster's topics and resolves the sources' topics.
func (g *groupRun) resolve() (*pipeline.GroupTopics, error) {
	cluster, err := clusterTopics(g.client, g.run.Plan)
	if err != nil {
		return nil, err
	}
	return g.run.Plan.ResolveTopics(cluster)
}

// clusterTopics returns the partition counts of the topics the sources
// may read, from fresh metadata: every topic of the cluster when a source
// has a topic pattern, else the listed topics. A listed topic the cluster
// lacks is an error.
func clusterTopics(client sarama.Client, gp *pipeline.GroupPlan) (map[string]int, error) {
	out := map[string]int{}
	listed := gp.SourceTopics()
	if gp.HasPatterns() {
		var err error
		if out, err = listTopics(client); err != nil {
			return nil, err
		}
	} else if len(listed) > 0 {
		if err := client.RefreshMetadata(listed...); err != nil {
			return nil, fmt.Errorf("read the metadata of source topics %s: %w (they must be in the group's cluster)", strings.Join(listed, ", "), err)
		}
	}
	for _, t := range listed {
		if _, ok := out[t]; ok {
			continue
		}
		ps, err := client.Partitions(t)
		if err != nil {
			return nil, fmt.Errorf("partitions of source topic %s: %w", t, err)
		}
		out[t] = len(ps)
	}
	return out, nil
}

// listTopics returns every topic of the cluster with its partition count,
// from one metadata request for all topics.
func listTopics(client sarama.Client) (map[string]int, error) {
	if err := client.RefreshMetadata(); err != nil {
		return nil, fmt.Errorf("read the cluster's topics: %w", err)
	}
	names, err := client.Topics()
	if err != nil {
		return nil, fmt.Errorf("read the cluster's topics: %w", err)
	}
	out := make(map[string]int, len(names))
	for _, t := range names {
		if ps, err := client.Partitions(t); err == nil {
			out[t] = len(ps)
		}
	}
	return out, nil
}

// watcher checks, while a generation runs, whether the sources' topics
// changed, and ends the generation when they did.
type watcher struct {
	done chan struct{}
	// changed is set when the watcher ended the generation.
	changed atomic.Bool
}

// watch starts the watcher of the generation that ctx is the context of
// and end ends; without a watch interval it does nothing.
func (g *groupRun) watch(ctx context.Context, end context.CancelFunc) *watcher {
	w := &watcher{done: make(chan struct{})}
	if g.interval <= 0 {
		close(w.done)
		return w
	}
	gp, was := g.run.Plan, g.topics
	go func() {
		defer close(w.done)
		tick := time.NewTicker(g.interval)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			cluster, err := clusterTopics(g.client, gp)
			if err != nil {
				g.logger.Warn("cannot read the cluster's topics to check the sources' topic patterns; trying again at the next interval", "err", err.Error())
				continue
			}
			now, err := gp.ResolveTopics(cluster)
			switch {
			case err == nil && now.Equal(was):
				continue
			case err != nil:
				// The next join resolves them again and fails the run.
				g.logger.Error("the sources' topics no longer resolve: ending the generation", "err", err.Error())
			default:
				g.logger.Info("the sources' topics changed: ending the generation to join the group with them",
					"was", gp.Matched(was), "now", gp.Matched(now))
			}
			w.changed.Store(true)
			end()
			return
		}
	}()
	return w
}

// wait waits for the watcher to end and tells whether it ended the
// generation.
func (w *watcher) wait() bool {
	<-w.done
	return w.changed.Load()
}

// topicsGone tells whether a topic that a pattern matched in the last
// generation is gone from the cluster (deleted while the generation ran).
func (g *groupRun) topicsGone() bool {
	gp := g.run.Plan
	if !gp.HasPatterns() || g.topics == nil {
		return false
	}
	cluster, err := clusterTopics(g.client, gp)
	if err != nil {
		return false
	}
	for _, ts := range gp.Matched(g.topics) {
		for _, t := range ts {
			if _, ok := cluster[t]; !ok {
				return true
			}
		}
	}
	return false
}
