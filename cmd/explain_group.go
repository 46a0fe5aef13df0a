package cmd

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/eddy-stream/eddy/pipeline"
)

// What `eddy explain` shows of a pipeline with a group block: its group
// plan (docs/group.md, "The plan").

// groupView is the "group" key of the json output.
type groupView struct {
	ID                 string `json:"id"`
	CommitInterval     string `json:"commit_interval"`
	TransactionTimeout string `json:"transaction_timeout"`
	PurgeInterval      string `json:"purge_interval"`
	ReplicationFactor  int    `json:"replication_factor"`
	// Partitions is P, the partitions of every internal topic.
	Partitions int              `json:"partitions"`
	Stages     []stageView      `json:"stages"`
	Topics     []groupTopicView `json:"topics"`
}

// stageView is a stage of the group plan.
type stageView struct {
	Index int      `json:"index"`
	Nodes []string `json:"nodes"`
	// Inputs are the topics it reads: its sources' topics, then the
	// repartition topics of its exchanges.
	Inputs []stageInputView `json:"inputs"`
	// Outputs are the repartition topics it writes.
	Outputs []string `json:"outputs"`
	// Changelogs are the changelog topics of its stateful steps.
	Changelogs []string `json:"changelogs"`
	// Tasks is its number of tasks; null when it reads source topics: one
	// task per partition of them, which only the broker knows.
	Tasks *int `json:"tasks"`
}

// stageInputView is a topic a stage reads: Kind "source" (Source reads
// Topic, or the topics matching Pattern) or "repartition" (written by
// stage FromStage).
type stageInputView struct {
	Kind      string `json:"kind"`
	Topic     string `json:"topic,omitempty"`
	Pattern   string `json:"pattern,omitempty"`
	Source    string `json:"source,omitempty"`
	FromStage *int   `json:"from_stage,omitempty"`
}

// groupTopicView is an internal topic.
type groupTopicView struct {
	Name string `json:"name"`
	Kind string `json:"kind"`
	// Step is the keyed step it feeds or whose state it holds; Stage that
	// step's stage; FromStage, for a repartition topic, the stage that
	// writes it.
	Step              string            `json:"step"`
	Stage             int               `json:"stage"`
	FromStage         *int              `json:"from_stage,omitempty"`
	Partitions        int               `json:"partitions"`
	ReplicationFactor int               `json:"replication_factor"`
	CleanupPolicy     string            `json:"cleanup_policy"`
	Configs           map[string]string `json:"configs"`
	// DeadLetters, on a repartition topic whose step has on_error:
	// dead_letter, says that the records whose key fails go to its
	// partition 0, whose reader sends them to the step's errors stream.
	DeadLetters bool `json:"dead_letters,omitempty"`
}

// newGroupView returns the view of a plan's group plan, nil when it has
// no group block.
func newGroupView(plan *pipeline.Plan) (*groupView, error) {
	g := plan.Spec.Group
	if g == nil {
		return nil, nil
	}
	gp, err := pipeline.NewGroupPlan(plan)
	if err != nil {
		return nil, err
	}
	v := &groupView{ID: g.ID, CommitInterval: g.CommitInterval.D().String(), TransactionTimeout: g.TransactionTimeout.D().String(),
		PurgeInterval: g.PurgeInterval.D().String(), ReplicationFactor: g.ReplicationFactor,
		Partitions: gp.Partitions, Stages: []stageView{}, Topics: []groupTopicView{}}
	for _, s := range gp.Stages {
		sv := stageView{Index: s.Index, Nodes: []string{}, Inputs: []stageInputView{}, Outputs: []string{}, Changelogs: []string{}}
		for _, n := range s.Nodes {
			sv.Nodes = append(sv.Nodes, n.ID)
		}
		for _, src := range s.Sources {
			for _, t := range src.Input.Topics {
				sv.Inputs = append(sv.Inputs, stageInputView{Kind: "source", Topic: t, Source: src.Node.ID})
			}
			if src.Input.Pattern != "" {
				sv.Inputs = append(sv.Inputs, stageInputView{Kind: "source", Pattern: src.Input.Pattern, Source: src.Node.ID})
			}
		}
		for _, x := range s.Inputs {
			sv.Inputs = append(sv.Inputs, stageInputView{Kind: "repartition", Topic: x.Topic.Name, FromStage: &x.From.Index})
		}
		for _, x := range s.Outputs {
			sv.Outputs = append(sv.Outputs, x.Topic.Name)
		}
		for _, t := range s.Changelogs {
			sv.Changelogs = append(sv.Changelogs, t.Name)
		}
		if len(s.Sources) == 0 {
			sv.Tasks = &s.Tasks
		}
		v.Stages = append(v.Stages, sv)
	}
	from := map[string]int{}
	dead := map[string]bool{}
	for _, x := range gp.Exchanges {
		from[x.Topic.Name] = x.From.Index
		dead[x.Topic.Name] = x.Edge.DeadLetters != nil
	}
	for _, t := range gp.Topics {
		tv := groupTopicView{Name: t.Name, Kind: t.Kind.String(), Step: t.Step, Stage: gp.StageOf(plan.Node(t.Step)).Index,
			Partitions: t.Partitions, ReplicationFactor: t.ReplicationFactor, CleanupPolicy: t.CleanupPolicy(), Configs: maps.Clone(t.Configs),
			DeadLetters: dead[t.Name]}
		if f, ok := from[t.Name]; ok {
			tv.FromStage = &f
		}
		v.Topics = append(v.Topics, tv)
	}
	return v, nil
}

// text is a stage's input for the text format.
func (in stageInputView) text() string {
	switch {
	case in.Kind == "repartition":
		return fmt.Sprintf("%s (from stage %d)", in.Topic, *in.FromStage)
	case in.Pattern != "":
		return fmt.Sprintf("topics matching /%s/ (source %s)", in.Pattern, in.Source)
	}
	return fmt.Sprintf("topic %s (source %s)", in.Topic, in.Source)
}

// writeGroupText writes the group section of the text format.
func writeGroupText(b *strings.Builder, v *groupView) {
	fmt.Fprintf(b, "\ngroup %s: %d stages, %d internal topics of %d partitions (max_parallelism), replication %d, a transaction every %s\n",
		v.ID, len(v.Stages), len(v.Topics), v.Partitions, v.ReplicationFactor, v.CommitInterval)
	for _, s := range v.Stages {
		fmt.Fprintf(b, "  stage %d: %s\n", s.Index, strings.Join(s.Nodes, ", "))
		var lines []string
		for i, in := range s.Inputs {
			lines = append(lines, stageLine(i, "reads:", in.text()))
		}
		for i, t := range s.Outputs {
			lines = append(lines, stageLine(i, "writes:", t))
		}
		for i, t := range s.Changelogs {
			lines = append(lines, stageLine(i, "state:", t))
		}
		tasks := "one per partition of its source topics (the broker knows how many)"
		if s.Tasks != nil {
			tasks = fmt.Sprint(*s.Tasks)
		}
		lines = append(lines, stageLine(0, "tasks:", tasks))
		for _, line := range lines {
			b.WriteString("    " + line + "\n")
		}
	}
	if len(v.Topics) == 0 {
		b.WriteString("\ninternal topics: none (no keyed step)\n")
		return
	}
	b.WriteString("\ninternal topics:\n")
	var rows [][]string
	configs := map[string]string{} // by kind, for the line after the table
	var kinds []string
	for _, t := range v.Topics {
		role := fmt.Sprintf("state of %s (stage %d)", t.Step, t.Stage)
		if t.FromStage != nil {
			role = fmt.Sprintf("stage %d -> stage %d", *t.FromStage, t.Stage)
		}
		if t.DeadLetters {
			role += ", key errors to partition 0 (dead letters)"
		}
		rows = append(rows, []string{t.Name, t.Kind, fmt.Sprintf("%d partitions", t.Partitions),
			fmt.Sprintf("replication %d", t.ReplicationFactor), "cleanup.policy " + t.CleanupPolicy, role})
		if _, seen := configs[t.Kind]; !seen {
			configs[t.Kind] = configsText(t.Configs)
			kinds = append(kinds, t.Kind)
		}
	}
	for _, line := range table(rows) {
		b.WriteString("  " + line + "\n")
	}
	for _, k := range kinds {
		fmt.Fprintf(b, "  %s topics are created with %s\n", k, configs[k])
	}
}

// stageLine is a line of a stage: head on the first line of a kind,
// blanks on the others, then text.
func stageLine(i int, head, text string) string {
	if i > 0 {
		head = ""
	}
	return fmt.Sprintf("%-8s%s", head, text)
}

// configsText lists topic configs, cleanup.policy first, the others sorted.
func configsText(c map[string]string) string {
	parts := []string{"cleanup.policy=" + c["cleanup.policy"]}
	for _, k := range slices.Sorted(maps.Keys(c)) {
		if k != "cleanup.policy" {
			parts = append(parts, k+"="+c[k])
		}
	}
	return strings.Join(parts, " ")
}
