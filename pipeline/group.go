package pipeline

import (
	"fmt"
	"maps"
	"reflect"
	"regexp"
	"slices"
	"time"

	"go.yaml.in/yaml/v3"
)

// Group mode (docs/group.md): many processes of one pipeline share its work
// through Kafka, as the members of one consumer group. This file is the
// `group:` block of a pipeline file and the checks that a pipeline can run
// so; group_plan.go cuts its plan into stages and internal topics;
// group_admin.go manages those topics on the broker.

// GroupSpec is the `group:` block: nil in a Spec without one, which runs in
// one process.
type GroupSpec struct {
	// ID is the consumer group the processes join and the prefix of the
	// internal topics; default: the pipeline's name.
	ID string
	// CommitInterval is how often a process commits: one Kafka transaction
	// per interval.
	CommitInterval Duration
	// ReplicationFactor is the replication of the internal topics.
	ReplicationFactor int
	// TransactionTimeout is how long the brokers let a process's
	// transaction stay open before they abort it: a commit slower than it
	// fails, and the transaction of a process that died holds the
	// read_committed readers of what it wrote for up to that long.
	TransactionTimeout Duration
	// PurgeInterval is how often, at most, a process deletes the records
	// of the repartition partitions it reads that precede their committed
	// offsets.
	PurgeInterval Duration
	// Client is the connection to the group's Kafka cluster: the block's
	// other keys (brokers, tls, sasl, ...), decoded and validated by the
	// group client the Env has registered.
	Client GroupClientConfig
	// Pos is where the block's key stands.
	Pos Pos
}

// groupCommon holds the keys of the group block that are the group's own;
// the others are the client's.
type groupCommon struct {
	ID                 string   `yaml:"id"`
	CommitInterval     Duration `yaml:"commit_interval"`
	ReplicationFactor  int      `yaml:"replication_factor"`
	TransactionTimeout Duration `yaml:"transaction_timeout"`
	PurgeInterval      Duration `yaml:"purge_interval"`
}

// The defaults of the group block.
const (
	DefaultGroupCommitInterval    = time.Second
	DefaultGroupReplicationFactor = 3
	DefaultGroupPurgeInterval     = 30 * time.Second
	// MaxGroupTransactionTimeout is the longest transaction_timeout:
	// brokers refuse a longer one by default (transaction.max.timeout.ms).
	MaxGroupTransactionTimeout = 15 * time.Minute
	// maxTopicName is the longest topic name Kafka accepts.
	maxTopicName = 249
	// maxReplicationFactor is the largest replication factor Kafka's
	// protocol carries (an int16).
	maxReplicationFactor = 32767
)

// DefaultGroupTransactionTimeout is the transaction_timeout of a group
// block without one: ten commit intervals, at least 10s (what Kafka
// Streams uses under exactly-once) and at most MaxGroupTransactionTimeout.
func DefaultGroupTransactionTimeout(commitInterval time.Duration) time.Duration {
	return min(MaxGroupTransactionTimeout, max(10*time.Second, 10*commitInterval))
}

// GroupClientConfig is the Kafka connection of a group block: the keys of
// the block besides id, commit_interval and replication_factor. A Kafka
// connector provides it (Env.RegisterGroupClient), so that package
// pipeline knows no Kafka client and the block takes the connector's own
// connection keys.
type GroupClientConfig interface {
	Config
	// NewGroupAdmin connects to the cluster to manage the group's internal
	// topics and its consumer group.
	NewGroupAdmin() (GroupAdmin, error)
}

// GroupInput is what a source reads in group mode: the topics whose
// partitions the processes share.
type GroupInput struct {
	// Topics are the topics read by name.
	Topics []string
	// Pattern, when set instead of Topics, is a regular expression that the
	// whole name of each topic read matches.
	Pattern string
}

// GroupSource is implemented by source configs that can run in group mode:
// their input is Kafka topics, whose partitions the members of a consumer
// group divide among themselves. GroupInput returns what the source reads
// when the group's consumer group is groupID, or an error (FieldErr at the
// key) for a setting that cannot hold in group mode. A source config without
// it cannot run in group mode.
type GroupSource interface {
	GroupInput(groupID string) (GroupInput, error)
}

// GroupSink is implemented by sink configs that can write in group mode:
// their output goes into the group's transactions (a kafka sink in the
// group's cluster). GroupOutput returns an error (FieldErr at the key) for
// a setting that cannot hold in group mode. A sink config without it
// cannot run in group mode.
type GroupSink interface {
	GroupOutput() error
}

// StatefulStep is implemented by keyed step configs (KeyedStep) to say
// whether the step keeps keyed state: a bare key_by does not, a window
// does. In group mode a stateful step gets a changelog topic. A keyed step
// config without it is taken to be stateful: an unused changelog topic
// costs little, a missing one would lose state.
type StatefulStep interface{ Stateful() bool }

// RegisterGroupClient sets what decodes the connection keys of a group
// block; it panics when one is set already (a programming error).
func (e *Env) RegisterGroupClient(newConfig func() GroupClientConfig) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.groupClient != nil {
		panic("group client registered twice")
	}
	e.groupClient = newConfig
}

// GroupClient returns what decodes the connection keys of a group block,
// or nil when none is registered.
func (e *Env) GroupClient() func() GroupClientConfig {
	e.mu.RLock()
	defer e.mu.RUnlock()
	return e.groupClient
}

// loadGroup decodes and validates the group block of root, if it has one,
// into spec.Group. It runs once name is decoded: the id defaults to it.
func (p *problems) loadGroup(env *Env, root *yaml.Node, spec *Spec) {
	key, n := mappingValue(root, "group")
	if n = resolve(n); n == nil {
		return
	}
	if n.Tag == "!!null" { // `group:` alone: group mode with every key missing
		n = &yaml.Node{Kind: yaml.MappingNode, Line: n.Line, Column: n.Column}
	}
	if n.Kind != yaml.MappingNode {
		p.at(n, "group must be a mapping with at least brokers (see docs/group.md)")
		return
	}
	ownNode, rest := split(n, Keys(groupCommon{}))
	c := groupCommon{ID: spec.Name, CommitInterval: Duration(DefaultGroupCommitInterval), ReplicationFactor: DefaultGroupReplicationFactor,
		PurgeInterval: Duration(DefaultGroupPurgeInterval)}
	p.decode(ownNode, reflect.ValueOf(&c).Elem(), "group")
	g := &GroupSpec{ID: c.ID, CommitInterval: c.CommitInterval, ReplicationFactor: c.ReplicationFactor,
		TransactionTimeout: c.TransactionTimeout, PurgeInterval: c.PurgeInterval,
		Pos: Pos{File: p.file, Line: key.Line, Col: key.Column}}
	at := func(key string) *yaml.Node {
		if _, v := mappingValue(n, key); v != nil {
			return v
		}
		return n
	}
	if g.ID != "" && !idPattern.MatchString(g.ID) {
		p.at(at("id"), "group.id %q: use letters, digits, '_' and '-' (it names the consumer group and prefixes the internal topics)", g.ID)
	}
	if g.CommitInterval <= 0 {
		p.at(at("commit_interval"), "group.commit_interval must be positive")
	}
	if g.ReplicationFactor < 1 || g.ReplicationFactor > maxReplicationFactor {
		p.at(at("replication_factor"), "group.replication_factor must be between 1 and %d (the replicas of each internal topic partition)", maxReplicationFactor)
	}
	p.checkTransactionTimeout(g, n, at)
	if g.PurgeInterval <= 0 {
		p.at(at("purge_interval"), "group.purge_interval must be positive")
	}
	newClient := env.GroupClient()
	if newClient == nil {
		p.at(n, "group mode needs a Kafka client, and this build registers none (import github.com/eddy-stream/eddy/connectors/kafka)")
	} else {
		g.Client = newClient()
		rest = p.unknownGroupKeys(rest, append(Keys(groupCommon{}), Keys(g.Client)...))
		p.loadConfig(rest, g.Client, "group")
	}
	spec.Group = g
}

// checkTransactionTimeout sets the group's transaction timeout to its
// default when the block n has none, and reports one that is not longer
// than the commit interval (each transaction spans a commit interval) or
// longer than brokers allow by default.
func (p *problems) checkTransactionTimeout(g *GroupSpec, n *yaml.Node, at func(string) *yaml.Node) {
	if g.CommitInterval <= 0 {
		return
	}
	ci := g.CommitInterval.D()
	if _, v := mappingValue(n, "transaction_timeout"); v == nil {
		g.TransactionTimeout = Duration(DefaultGroupTransactionTimeout(ci))
		if g.TransactionTimeout.D() <= ci {
			p.at(at("commit_interval"), "group.commit_interval %s is too long: a transaction spans a commit interval, and brokers abort one open longer than %s (transaction.max.timeout.ms): lower commit_interval", ci, MaxGroupTransactionTimeout)
		}
		return
	}
	switch tt := g.TransactionTimeout.D(); {
	case tt <= ci:
		p.at(at("transaction_timeout"), "group.transaction_timeout %s must be longer than group.commit_interval (%s): a transaction spans a commit interval, and the brokers abort one open longer than the timeout", tt, ci)
	case tt > MaxGroupTransactionTimeout:
		p.at(at("transaction_timeout"), "group.transaction_timeout %s is longer than brokers allow by default (transaction.max.timeout.ms, %s): lower it, or raise that setting on the brokers first", tt, MaxGroupTransactionTimeout)
	}
}

// unknownGroupKeys reports the keys of rest, the group block less its own
// keys, that neither the block nor its client has, with the closest of
// known as "did you mean" (the client's decoding knows only its own), and
// returns rest without them.
func (p *problems) unknownGroupKeys(rest *yaml.Node, known []string) *yaml.Node {
	out := &yaml.Node{Kind: yaml.MappingNode, Line: rest.Line, Column: rest.Column}
	for i := 0; i+1 < len(rest.Content); i += 2 {
		k := rest.Content[i]
		if !slices.Contains(known, k.Value) {
			hint := ""
			if best := Closest(k.Value, known); best != "" {
				hint = fmt.Sprintf(" (did you mean %q?)", best)
			}
			p.at(k, "unknown key %q in group%s", k.Value, hint)
			continue
		}
		out.Content = append(out.Content, k, rest.Content[i+1])
	}
	return out
}

// checkGroup reports what keeps a pipeline with a group block from running
// in group mode: a source that is not a GroupSource (or whose settings
// cannot hold in group mode), a topic read by two sources, an internal
// topic name longer than Kafka takes. It runs once the pipeline is wired.
func (p *problems) checkGroup(spec *Spec) {
	g := spec.Group
	if g == nil {
		return
	}
	readBy := map[string]string{} // topic -> the source that reads it
	type patternSource struct {
		s  *SourceSpec
		re *regexp.Regexp
	}
	var patterns []patternSource
	for _, s := range spec.Sources {
		gs, ok := s.Config.(GroupSource)
		if !ok {
			_, tv := mappingValue(s.node, "type")
			p.at(tv, "source %q: a %s source has no partitions to share between the processes of a group: read its data from a Kafka topic in group mode (or remove the group block to run in one process)", s.ID, s.Type)
			continue
		}
		in, err := gs.GroupInput(g.ID)
		if err != nil {
			p.reportValidate(s.node, err)
			continue
		}
		if in.Pattern != "" {
			if re, err := regexp.Compile("^(?:" + in.Pattern + ")$"); err == nil { // the source reports a bad one
				patterns = append(patterns, patternSource{s, re})
			}
		}
		for i, t := range in.Topics {
			if other, dup := readBy[t]; dup {
				p.at(listItem(pathValue(s.node, "topics"), i), "source %q: topic %q is read by source %q too: in group mode each partition of a topic goes to one process, so read it with one source and fan it out with steps", s.ID, t, other)
				continue
			}
			readBy[t] = s.ID
		}
	}
	// A pattern that matches a topic another source lists would have two
	// sources read it; two patterns that overlap are found when they are
	// resolved against the cluster's topics (GroupPlan.ResolveTopics).
	for _, ps := range patterns {
		for _, t := range slices.Sorted(maps.Keys(readBy)) {
			if ps.re.MatchString(t) {
				_, pv := mappingValue(ps.s.node, "topic_pattern")
				if pv == nil {
					pv = idNode(ps.s.node)
				}
				p.at(pv, "source %q: its topic pattern matches topic %q, which source %q reads: in group mode each partition of a topic goes to one process, so a topic must be read by one source only: change the pattern so that it does not match %q", ps.s.ID, t, readBy[t], t)
			}
		}
	}
	for _, s := range spec.Sinks {
		gs, ok := s.Config.(GroupSink)
		if !ok || s.WriteAhead {
			_, tv := mappingValue(s.node, "type")
			p.at(tv, "sink %q: a %s sink cannot write in the transactions of a group: in group mode write to a Kafka topic of the group's cluster (or remove the group block to run in one process)", s.ID, s.Type)
			continue
		}
		if err := gs.GroupOutput(); err != nil {
			p.reportValidate(s.node, err)
		}
	}
	for _, s := range spec.Steps {
		if _, ok := s.Config.(KeyedStep); !ok {
			continue
		}
		for _, name := range groupTopicNames(g.ID, s) {
			if len(name) > maxTopicName {
				p.at(idNode(s.node), "step %q: its internal topic %s would have %d characters, more than Kafka's %d: shorten the step id or group.id", s.ID, name, len(name), maxTopicName)
				break
			}
		}
	}
}

// listItem returns item i of a sequence node, or n itself when it is not
// a sequence that long (a scalar list "a,b").
func listItem(n *yaml.Node, i int) *yaml.Node {
	if n != nil && n.Kind == yaml.SequenceNode && i < len(n.Content) {
		return n.Content[i]
	}
	return n
}

// groupTopicNames returns the names of the internal topics of keyed step
// s in group id: one repartition topic per input, and its changelog.
func groupTopicNames(id string, s *StepSpec) []string {
	names := []string{changelogTopic(id, s.ID)}
	for i := range s.Inputs {
		names = append(names, repartitionTopic(id, s.ID, i, len(s.Inputs)))
	}
	return names
}

// repartitionTopic names the repartition topic of input i of a keyed step
// with inputs inputs: <id>-<step>-repartition, or with several inputs
// <id>-<step>-repartition-<i>. Names cannot collide: step ids are unique,
// and the suffix says which kind of topic a name is.
func repartitionTopic(id, step string, i, inputs int) string {
	name := id + "-" + step + "-repartition"
	if inputs > 1 {
		name += fmt.Sprintf("-%d", i)
	}
	return name
}

// changelogTopic names the changelog topic of a stateful step.
func changelogTopic(id, step string) string { return id + "-" + step + "-changelog" }

// groupSchema is the JSON Schema of the group block: its own keys and the
// registered client's. An empty block is not allowed: it lacks brokers.
func (g *schemaGen) groupSchema(e *Env) map[string]any {
	s := g.object(reflect.TypeFor[groupCommon](), reflect.ValueOf(groupCommon{
		CommitInterval: Duration(DefaultGroupCommitInterval), ReplicationFactor: DefaultGroupReplicationFactor,
		PurgeInterval: Duration(DefaultGroupPurgeInterval)}))
	props := s["properties"].(map[string]any)
	props["id"] = withEnvRef(map[string]any{"type": "string", "pattern": idPattern.String(),
		"description": "the consumer group and the prefix of the internal topics; default: the pipeline's name"})
	props["transaction_timeout"] = withDescription(props["transaction_timeout"],
		"how long brokers let a process's transaction stay open: longer than commit_interval, at most 15m; default: 10 commit intervals, at least 10s")
	props["purge_interval"] = withDescription(props["purge_interval"],
		"how often, at most, a process deletes the consumed records of the repartition topics it reads")
	if newClient := e.GroupClient(); newClient != nil {
		cfg := newClient()
		client := g.object(reflect.TypeOf(cfg).Elem(), reflect.ValueOf(cfg).Elem())
		for k, v := range client["properties"].(map[string]any) {
			props[k] = v
		}
		if r, ok := client["required"]; ok {
			for _, k := range r.([]string) {
				s["required"] = appendUnique(s["required"], k)
			}
		}
	}
	s["description"] = "group mode: processes of this pipeline share its work through Kafka (docs/group.md)"
	return s
}
