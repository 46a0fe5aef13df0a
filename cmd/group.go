package cmd

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/eddy-stream/eddy/pipeline"
)

// groupTopicsOptions are the flags of `eddy group topics`.
type groupTopicsOptions struct {
	format string
	create bool
}

// AddFlags adds --format and --create.
func (o *groupTopicsOptions) AddFlags(fs *pflag.FlagSet) {
	fs.StringVarP(&o.format, "format", "f", "text", "output format: text or json")
	fs.BoolVar(&o.create, "create", false, "create the internal topics the cluster lacks first")
}

// groupResetOptions are the flags of `eddy group reset`.
type groupResetOptions struct {
	yes bool
}

// AddFlags adds --yes.
func (o *groupResetOptions) AddFlags(fs *pflag.FlagSet) {
	fs.BoolVar(&o.yes, "yes", false, "do not ask")
}

func newGroupCommand() *cobra.Command {
	c := &cobra.Command{
		Use:   "group",
		Short: "Manage the Kafka topics and consumer group of a pipeline in group mode",
		Long: `Group manages what a pipeline with a group block keeps on its Kafka
cluster (docs/group.md): the internal topics (a repartition topic per keyed
exchange, a changelog per stateful step) and the consumer group.

  eddy group topics pipeline.yaml          what the cluster has of them
  eddy group topics pipeline.yaml --create create the missing ones
  eddy group reset pipeline.yaml           delete them and the group's offsets`,
		Args: exactArgs(0, "a subcommand: topics or reset"),
		RunE: func(c *cobra.Command, _ []string) error { return c.Help() },
	}
	to := &groupTopicsOptions{}
	topics := &cobra.Command{
		Use:   "topics FILE",
		Short: "List the internal topics of a pipeline in group mode, as the cluster has them",
		Long: `Topics lists the internal topics of the pipeline in FILE, which must have a
group block, with what the cluster has of each: whether it exists, its
partitions, replication and cleanup.policy, and whether it serves the
pipeline. It lists the topics the sources read as well, which must be in
the group's cluster (for a topic_pattern, the topics it matches now, as a
run resolves it when it joins the group), and the tasks of each stage
(eddy explain shows the stages). Two sources that would read one topic
are an error.

An internal topic serves when its partitions and cleanup.policy are the
plan's: max_parallelism partitions (a partition is a fixed range of key
groups), delete for a repartition topic, compact for a changelog. A
topic that does not serve is never changed: delete it, or start over
with eddy group reset. --create first creates the internal topics the
cluster lacks, with their partitions, replication factor and configs.

--format json writes {"group": "id", "topics": [{"name", "kind":
"repartition|changelog|source", "step", "source", "exists", "partitions",
"replication_factor", "cleanup_policy", "want_partitions",
"want_cleanup_policy", "problem"}], "patterns": [{"source", "pattern",
"topics"}], "stages": [{"index", "tasks"}], "created": ["..."]}; "step",
"source", the "want_" keys, "problem" and "tasks" are omitted where they
do not apply or are not known.

Exit codes: 0 every topic serves or is missing (a run creates it), 1 a
topic does not serve, a source topic is not in the cluster, two sources
read one topic, or the cluster cannot be reached, 2 invalid file or
flags.`,
		Args:              exactArgs(1, "one pipeline file"),
		ValidArgsFunction: pipelineFiles,
		RunE:              func(c *cobra.Command, args []string) error { return to.run(c, args[0]) },
	}
	to.AddFlags(topics.Flags())
	_ = topics.RegisterFlagCompletionFunc("format", cobra.FixedCompletions([]string{"text", "json"}, cobra.ShellCompDirectiveNoFileComp))
	ro := &groupResetOptions{}
	reset := &cobra.Command{
		Use:   "reset FILE",
		Short: "Delete the internal topics and the consumer group of a pipeline in group mode",
		Long: `Reset deletes what the pipeline in FILE, which must have a group block,
keeps on its Kafka cluster: its consumer group with the offsets committed
to it, and its internal topics, with the state in the changelogs. The
next run starts over: its sources read from start_from.

It asks first, unless --yes is given. It refuses while the consumer group
has members: stop every process of the pipeline first.

Exit codes: 0 done, 1 the group has members or the cluster failed, 2
invalid file or flags, or not confirmed.`,
		Args:              exactArgs(1, "one pipeline file"),
		ValidArgsFunction: pipelineFiles,
		RunE:              func(c *cobra.Command, args []string) error { return ro.run(c, args[0]) },
	}
	ro.AddFlags(reset.Flags())
	c.AddCommand(topics, reset)
	return c
}

// loadGroupPlan loads the group plan of a pipeline file that must have a
// group block, and connects the admin of its cluster.
func loadGroupPlan(c *cobra.Command, file string) (*pipeline.GroupPlan, pipeline.GroupAdmin, error) {
	plan, err := loadPlan(c.ErrOrStderr(), file)
	if err != nil {
		return nil, nil, err
	}
	if plan.Spec.Group == nil {
		return nil, nil, invalidInput("%s has no group block: eddy group manages the Kafka topics of group mode (docs/group.md)", file)
	}
	gp, err := pipeline.NewGroupPlan(plan)
	if err != nil {
		return nil, nil, invalidInput("%s: %w", file, err)
	}
	admin, err := plan.Spec.Group.Client.NewGroupAdmin()
	if err != nil {
		return nil, nil, runtimeFailure(err)
	}
	return gp, admin, nil
}

// groupTopicsView is the json output of `eddy group topics`.
type groupTopicsView struct {
	Group  string                `json:"group"`
	Topics []groupTopicStateView `json:"topics"`
	// Patterns are the sources with a topic pattern and the topics it
	// matches now.
	Patterns []groupPatternView    `json:"patterns"`
	Stages   []groupStageTasksView `json:"stages"`
	Created  []string              `json:"created"`
}

// groupPatternView is a source with a topic pattern and the topics of
// the cluster it matches.
type groupPatternView struct {
	Source  string   `json:"source"`
	Pattern string   `json:"pattern"`
	Topics  []string `json:"topics"`
}

// groupTopicStateView is a topic as the cluster has it, and what the plan
// wants of it.
type groupTopicStateView struct {
	Name string `json:"name"`
	Kind string `json:"kind"`
	Step string `json:"step,omitempty"`
	// Source is the source that reads a source topic.
	Source            string `json:"source,omitempty"`
	Exists            bool   `json:"exists"`
	Partitions        int    `json:"partitions"`
	ReplicationFactor int    `json:"replication_factor"`
	CleanupPolicy     string `json:"cleanup_policy"`
	WantPartitions    int    `json:"want_partitions,omitempty"`
	WantCleanupPolicy string `json:"want_cleanup_policy,omitempty"`
	// Problem says why the topic does not serve the pipeline.
	Problem string `json:"problem,omitempty"`
}

// groupStageTasksView is the number of tasks of a stage; Tasks is nil
// when a source topic's partitions are not known (a topic the cluster
// lacks, or topic patterns whose topics overlap).
type groupStageTasksView struct {
	Index int  `json:"index"`
	Tasks *int `json:"tasks,omitempty"`
}

func (o *groupTopicsOptions) run(c *cobra.Command, file string) error {
	if o.format != "text" && o.format != "json" {
		return usageError("--format %q: want text or json", o.format)
	}
	gp, admin, err := loadGroupPlan(c, file)
	if err != nil {
		return err
	}
	defer admin.Close()
	v := &groupTopicsView{Group: gp.Group.ID, Topics: []groupTopicStateView{}, Patterns: []groupPatternView{}, Stages: []groupStageTasksView{}, Created: []string{}}
	if o.create {
		created, err := pipeline.EnsureGroupTopics(admin, gp)
		v.Created = append(v.Created, created...)
		if err != nil && !errors.Is(err, pipeline.ErrTopicMismatch) {
			return runtimeFailure(err) // a mismatch is listed below
		}
	}
	// The sources' topics: those listed and those the topic patterns
	// match now, resolved as a run resolves them before it joins.
	var cluster map[string]int
	if gp.HasPatterns() {
		if cluster, err = admin.ListTopics(); err != nil {
			return runtimeFailure(fmt.Errorf("list the cluster's topics: %w", err))
		}
	}
	var problems []string
	resolved, err := gp.ResolveTopics(cluster)
	if err != nil {
		problems = append(problems, strings.Split(err.Error(), "\n")...)
		resolved = nil
	}
	sources, sourceOf := gp.SourceTopics(), map[string]string{}
	if resolved != nil {
		sources = nil
		for _, s := range gp.Stages {
			for _, src := range s.Sources {
				for _, t := range resolved.Of[src.Node.ID] {
					sources, sourceOf[t] = append(sources, t), src.Node.ID
				}
			}
		}
		for id, ts := range gp.Matched(resolved) {
			v.Patterns = append(v.Patterns, groupPatternView{Source: id, Pattern: patternOf(gp, id), Topics: append([]string{}, ts...)})
		}
		slices.SortFunc(v.Patterns, func(a, b groupPatternView) int { return strings.Compare(a.Source, b.Source) })
	}
	var names []string
	for _, t := range gp.Topics {
		names = append(names, t.Name)
	}
	states, err := admin.Topics(append(names, sources...))
	if err != nil {
		return runtimeFailure(fmt.Errorf("describe topics: %w", err))
	}
	partitions := map[string]int{}
	for i, s := range states {
		tv := groupTopicStateView{Name: s.Name, Kind: "source", Source: sourceOf[s.Name], Exists: s.Exists, Partitions: s.Partitions,
			ReplicationFactor: s.ReplicationFactor, CleanupPolicy: s.CleanupPolicy}
		if i < len(gp.Topics) {
			t := gp.Topics[i]
			tv.Kind, tv.Step, tv.WantPartitions, tv.WantCleanupPolicy = t.Kind.String(), t.Step, t.Partitions, t.CleanupPolicy()
			if s.Exists {
				if err := pipeline.CheckTopic(t, s); err != nil {
					tv.Problem = strings.TrimPrefix(err.Error(), pipeline.ErrTopicMismatch.Error()+": ")
				}
			}
		} else if s.Exists {
			partitions[s.Name] = s.Partitions
		} else {
			tv.Problem = fmt.Sprintf("source topic %s is not in the group's cluster: group mode reads its sources' topics from the cluster of group.brokers", s.Name)
		}
		if tv.Problem != "" {
			problems = append(problems, tv.Problem)
		}
		v.Topics = append(v.Topics, tv)
	}
	for _, s := range gp.Stages {
		sv := groupStageTasksView{Index: s.Index}
		in := &pipeline.GroupTopics{Partitions: partitions}
		if resolved != nil {
			in.Of = resolved.Of
		}
		if resolved != nil || len(s.Sources) == 0 {
			if n, err := s.TasksFor(in); err == nil {
				sv.Tasks = &n
			}
		}
		v.Stages = append(v.Stages, sv)
	}
	if o.format == "json" {
		enc := json.NewEncoder(c.OutOrStdout())
		enc.SetIndent("", "  ")
		enc.SetEscapeHTML(false)
		err = enc.Encode(v)
	} else {
		_, err = io.WriteString(c.OutOrStdout(), groupTopicsText(v))
	}
	if err != nil {
		return runtimeFailure(fmt.Errorf("write topics: %w", err))
	}
	if len(problems) > 0 {
		return runtimeFailure(fmt.Errorf("%d topic(s) do not serve group %s:\n  %s", len(problems), gp.Group.ID, strings.Join(problems, "\n  ")))
	}
	return nil
}

// patternOf returns the topic pattern of source id.
func patternOf(gp *pipeline.GroupPlan, id string) string {
	for _, s := range gp.Stages {
		for _, src := range s.Sources {
			if src.Node.ID == id {
				return src.Input.Pattern
			}
		}
	}
	return ""
}

// groupTopicsText is the text output of `eddy group topics`.
func groupTopicsText(v *groupTopicsView) string {
	var b strings.Builder
	for _, name := range v.Created {
		fmt.Fprintf(&b, "created %s\n", name)
	}
	fmt.Fprintf(&b, "group %s\n", v.Group)
	rows := [][]string{{"TOPIC", "KIND", "PARTITIONS", "REPLICATION", "CLEANUP", "STATUS"}}
	for _, t := range v.Topics {
		row := []string{t.Name, t.Kind, "-", "-", "-", "missing: a run creates it"}
		if t.Kind == "source" {
			row[5] = "missing"
		}
		if t.Exists {
			row[2], row[3], row[4], row[5] = fmt.Sprint(t.Partitions), fmt.Sprint(t.ReplicationFactor), t.CleanupPolicy, "ok"
		}
		if t.Problem != "" {
			row[5] = "DOES NOT SERVE (see below)"
		}
		rows = append(rows, row)
	}
	for _, line := range table(rows) {
		b.WriteString("  " + line + "\n")
	}
	for _, p := range v.Patterns {
		matches := "no topic yet"
		if len(p.Topics) > 0 {
			matches = strings.Join(p.Topics, ", ")
		}
		fmt.Fprintf(&b, "source %s: topic_pattern %s matches %s\n", p.Source, p.Pattern, matches)
	}
	b.WriteString("tasks:")
	for _, s := range v.Stages {
		tasks := "unknown"
		if s.Tasks != nil {
			tasks = fmt.Sprint(*s.Tasks)
		}
		fmt.Fprintf(&b, " stage %d: %s;", s.Index, tasks)
	}
	return strings.TrimSuffix(b.String(), ";") + "\n"
}

func (o *groupResetOptions) run(c *cobra.Command, file string) error {
	gp, admin, err := loadGroupPlan(c, file)
	if err != nil {
		return err
	}
	defer admin.Close()
	if !o.yes {
		fmt.Fprintf(c.ErrOrStderr(), "Reset deletes consumer group %s with its committed offsets, and the internal topics of %s:\n", gp.Group.ID, file)
		for _, t := range gp.Topics {
			fmt.Fprintf(c.ErrOrStderr(), "  %s\n", t.Name)
		}
		fmt.Fprint(c.ErrOrStderr(), "The next run starts over. Continue? [y/N] ")
		answer, _ := bufio.NewReader(c.InOrStdin()).ReadString('\n')
		if a := strings.ToLower(strings.TrimSpace(answer)); a != "y" && a != "yes" {
			return invalidInput("not confirmed: nothing was deleted (add --yes to skip the question)")
		}
	}
	deleted, err := pipeline.ResetGroup(admin, gp)
	for _, name := range deleted {
		fmt.Fprintf(c.OutOrStdout(), "deleted topic %s\n", name)
	}
	if err != nil {
		return runtimeFailure(err)
	}
	fmt.Fprintf(c.OutOrStdout(), "reset group %s: its offsets and %d internal topic(s) are gone\n", gp.Group.ID, len(deleted))
	return nil
}
