package kafka

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/IBM/sarama"

	"github.com/eddy-stream/eddy/pipeline"
)

// Group mode (docs/group.md): the connection keys of a pipeline's group
// block, the source's side of group mode, and the administration of the
// group's internal topics and consumer group with sarama's ClusterAdmin.

func init() {
	pipeline.Default.RegisterGroupClient(func() pipeline.GroupClientConfig {
		return &GroupClientConfig{ClientConfig: defaultClientConfig()}
	})
}

// GroupClientConfig is the connection of a group block: the keys the
// source and the sink connect with (brokers, client_id, kafka_version,
// tls, sasl, dial_timeout), beside the block's own.
type GroupClientConfig struct {
	ClientConfig `yaml:",inline"`
}

// NewGroupAdmin connects a cluster admin to the group's cluster.
func (c *GroupClientConfig) NewGroupAdmin() (pipeline.GroupAdmin, error) {
	sc, err := c.saramaConfig()
	if err != nil {
		return nil, err
	}
	cl, err := c.newClient(sc)
	if err != nil {
		return nil, err
	}
	admin, err := sarama.NewClusterAdminFromClient(cl)
	if err != nil {
		_ = cl.Close()
		return nil, fmt.Errorf("kafka cluster admin: %w", err)
	}
	return &groupAdmin{admin: admin, client: cl}, nil
}

// GroupInput implements pipeline.GroupSource: the source's topics (or
// pattern) are shared by the processes of consumer group groupID. Its own
// group_id, if set, must be that group: in group mode the group's
// transactions commit the offsets, to that group only.
func (c *SourceConfig) GroupInput(groupID string) (pipeline.GroupInput, error) {
	if c.GroupID != "" && c.GroupID != groupID {
		return pipeline.GroupInput{}, pipeline.FieldErr("group_id",
			"in group mode the processes share this source's partitions as consumer group %q (group.id), which holds the offsets: remove group_id, or set it to %q", groupID, groupID)
	}
	return pipeline.GroupInput{Topics: slices.Clone([]string(c.Topics)), Pattern: c.TopicPattern}, nil
}

// GroupOutput implements pipeline.GroupSink: in group mode the sink
// writes through the process's transactional producer, to the group's
// cluster.
func (c *SinkConfig) GroupOutput() error {
	if c.TopicExpr.IsSet() {
		return pipeline.FieldErr("topic_expr", "group mode writes to one topic per sink for now: set topic")
	}
	return nil
}

// groupAdmin implements pipeline.GroupAdmin with a sarama ClusterAdmin.
type groupAdmin struct {
	admin sarama.ClusterAdmin
	// client is the admin's: its metadata lists the cluster's topics.
	client sarama.Client
}

// ListTopics lists the cluster's topics with one metadata request, as a
// group run does before it joins.
func (a *groupAdmin) ListTopics() (map[string]int, error) { return listTopics(a.client) }

// Topics describes topics with one metadata request (partitions and
// replicas; the request does not create a missing topic) and one
// DescribeConfigs request for the cleanup policies of those that exist.
func (a *groupAdmin) Topics(names []string) ([]pipeline.TopicState, error) {
	if len(names) == 0 {
		return nil, nil // a metadata request without topics asks for all
	}
	md, err := a.admin.DescribeTopics(names)
	if err != nil {
		return nil, err
	}
	byName := make(map[string]*sarama.TopicMetadata, len(md))
	for _, t := range md {
		byName[t.Name] = t
	}
	out := make([]pipeline.TopicState, len(names))
	var resources []*sarama.ConfigResource
	for i, name := range names {
		out[i].Name = name
		t := byName[name]
		switch {
		case t == nil || errors.Is(t.Err, sarama.ErrUnknownTopicOrPartition):
			continue
		case !errors.Is(t.Err, sarama.ErrNoError):
			return nil, fmt.Errorf("topic %s: %w", name, t.Err)
		}
		out[i].Exists = true
		out[i].Partitions = len(t.Partitions)
		if len(t.Partitions) > 0 {
			out[i].ReplicationFactor = len(t.Partitions[0].Replicas)
		}
		resources = append(resources, &sarama.ConfigResource{Type: sarama.TopicResource, Name: name, ConfigNames: []string{"cleanup.policy"}})
	}
	if len(resources) == 0 {
		return out, nil
	}
	results, err := a.admin.DescribeConfigs(resources, sarama.DescribeConfigsOptions{})
	if err != nil {
		return nil, fmt.Errorf("describe topic configs: %w", err)
	}
	policies := map[string]string{}
	gone := map[string]bool{}
	for _, r := range results {
		if r.ErrorCode == sarama.ErrUnknownTopicOrPartition {
			// The metadata and the configs disagree for a moment while
			// a topic is being created or deleted: it is not there yet,
			// or no longer.
			gone[r.Name] = true
			continue
		}
		if r.ErrorCode != 0 {
			return nil, fmt.Errorf("describe configs of topic %s: %w (%s)", r.Name, r.ErrorCode, r.ErrorMsg)
		}
		for _, e := range r.Configs {
			if e.Name == "cleanup.policy" {
				policies[r.Name] = e.Value
			}
		}
	}
	for i := range out {
		switch {
		case gone[out[i].Name]:
			out[i] = pipeline.TopicState{Name: out[i].Name}
		case out[i].Exists:
			out[i].CleanupPolicy = policies[out[i].Name]
		}
	}
	return out, nil
}

// CreateTopic creates an internal topic with its partitions, replication
// and configs.
func (a *groupAdmin) CreateTopic(t *pipeline.InternalTopic) error {
	entries := make(map[string]*string, len(t.Configs))
	for k, v := range t.Configs {
		entries[k] = &v
	}
	err := a.admin.CreateTopic(t.Name, &sarama.TopicDetail{
		NumPartitions: int32(t.Partitions), ReplicationFactor: int16(t.ReplicationFactor), ConfigEntries: entries,
	}, false)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, sarama.ErrTopicAlreadyExists):
		return fmt.Errorf("%w: %w", pipeline.ErrTopicExists, err)
	case errors.Is(err, sarama.ErrInvalidReplicationFactor):
		return fmt.Errorf("%w (group.replication_factor is %d: the cluster may have fewer brokers)", err, t.ReplicationFactor)
	}
	return err
}

// DeleteTopic deletes a topic; one the cluster does not have is no error.
func (a *groupAdmin) DeleteTopic(name string) error {
	err := a.admin.DeleteTopic(name)
	if errors.Is(err, sarama.ErrUnknownTopicOrPartition) {
		return nil
	}
	return err
}

// ConsumerGroup describes a consumer group. A group the cluster does not
// know is Dead (classic groups) or GROUP_ID_NOT_FOUND (newer brokers).
func (a *groupAdmin) ConsumerGroup(id string) (pipeline.ConsumerGroupState, error) {
	gs, err := a.admin.DescribeConsumerGroups([]string{id})
	if err != nil {
		return pipeline.ConsumerGroupState{}, err
	}
	if len(gs) != 1 {
		return pipeline.ConsumerGroupState{}, fmt.Errorf("describe consumer group %s: %d answers", id, len(gs))
	}
	g := gs[0]
	switch {
	case errors.Is(g.Err, sarama.ErrGroupIDNotFound):
		return pipeline.ConsumerGroupState{}, nil
	case !errors.Is(g.Err, sarama.ErrNoError):
		return pipeline.ConsumerGroupState{}, g.Err
	}
	out := pipeline.ConsumerGroupState{Exists: g.State != "Dead", State: g.State}
	for _, m := range g.Members {
		out.Members = append(out.Members, m.ClientId+"@"+strings.TrimPrefix(m.ClientHost, "/"))
	}
	slices.Sort(out.Members)
	return out, nil
}

// DeleteConsumerGroup deletes a consumer group and its offsets.
func (a *groupAdmin) DeleteConsumerGroup(id string) error {
	err := a.admin.DeleteConsumerGroup(id)
	switch {
	case errors.Is(err, sarama.ErrGroupIDNotFound):
		return nil
	case errors.Is(err, sarama.ErrNonEmptyGroup):
		return fmt.Errorf("%w: %w", pipeline.ErrGroupActive, err)
	}
	return err
}

// Close closes the admin and its client.
func (a *groupAdmin) Close() error { return a.admin.Close() }
