package cmd

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/eddy-stream/eddy/pipeline"
)

// explainOptions are the flags of `eddy explain`.
type explainOptions struct {
	format string
}

// AddFlags adds --format.
func (o *explainOptions) AddFlags(fs *pflag.FlagSet) {
	fs.StringVarP(&o.format, "format", "f", "text", "output format: text, dot (Graphviz) or json")
}

func newExplainCommand() *cobra.Command {
	o := &explainOptions{}
	c := &cobra.Command{
		Use:   "explain FILE",
		Short: "Show the physical plan of a pipeline",
		Long: `Explain prints the physical plan of the pipeline in FILE without running it:
the sources, steps and sinks with their type (or step kind) and parallelism;
the tasks, each a chain of nodes that runs as one goroutine per subtask;
every edge with its partitioning (forward, hash with the key expression,
rebalance, broadcast), whether it is chained, and the side stream it reads
when it is not the main one; and the end-to-end delivery guarantee with
the components and settings that limit it. For a pipeline with a group
block it shows the group plan too: the stages (the plan cut at each keyed
exchange), the topics each reads and writes, its tasks, and the internal
topics with their partitions, replication and configs (docs/group.md).

--format text (default) is for people; dot is a Graphviz digraph with a
cluster per task (eddy explain -f dot p.yaml | dot -Tsvg > plan.svg); json
is a stable structure for tools:

  {
    "format_version": 1,            bumped on incompatible changes
    "pipeline": "name", "file": "path",
    "parallelism": 1, "max_parallelism": 128,
    "bounded": true,                every source ends
    "subtasks": 3,                  goroutines, summed over tasks
    "nodes": [                      in topological order
      {"id": "...", "kind": "source|step|sink", "type": "generator|filter|...",
       "parallelism": 1, "task": 0, "line": 5,
       "bounded": true,             sources only
       "event_time": "to_ms(ts)",   sources in event time only
       "max_out_of_orderness": "2s",
       "guarantee": "exactly-once"} sources and sinks only
    ],
    "tasks": [{"index": 0, "name": "a -> b", "parallelism": 1, "nodes": ["a", "b"]}],
    "edges": [                      by receiving node, then its input order
      {"from": "a", "side": "errors", "to": "b",
       "partition": "forward|hash|rebalance|broadcast",
       "key": ["expr", ...],        hash only: the key expressions' text
       "chained": true}
    ],
    "guarantee": {"level": "exactly-once|at-least-once|at-most-once",
                  "reasons": ["..."]},
    "group": {                      only with a group block
      "id": "orders", "commit_interval": "1s", "transaction_timeout": "10s",
      "purge_interval": "30s", "replication_factor": 3,
      "partitions": 128,            of every internal topic: max_parallelism
      "stages": [{"index": 0, "nodes": ["a", "b"],
                  "inputs": [{"kind": "source", "source": "a", "topic": "t"},
                             {"kind": "source", "source": "a", "pattern": "re"},
                             {"kind": "repartition", "topic": "...", "from_stage": 1}],
                  "outputs": ["<id>-<step>-repartition"],
                  "changelogs": ["<id>-<step>-changelog"],
                  "tasks": 128}],   null: one per partition of its source topics
      "topics": [{"name": "...", "kind": "repartition|changelog", "step": "s",
                  "stage": 1, "from_stage": 0, "partitions": 128,
                  "replication_factor": 3, "cleanup_policy": "delete|compact",
                  "configs": {"cleanup.policy": "delete", ...},
                  "dead_letters": true}]  its step's key errors go to partition 0
    }
  }

Every other key is always present; "side" and "key" of edges, "bounded",
"event_time", "max_out_of_orderness" and "guarantee" of nodes, "group",
and "topic", "pattern", "source", "from_stage" and "dead_letters" of the
group's inputs and topics are omitted when they do not apply. The dot format does not
show the group plan. Exit codes: 0 ok, 2 invalid file or flags.`,
		Args:              exactArgs(1, "one pipeline file"),
		ValidArgsFunction: pipelineFiles,
		RunE: func(c *cobra.Command, args []string) error {
			return o.run(c, args[0])
		},
	}
	o.AddFlags(c.Flags())
	_ = c.RegisterFlagCompletionFunc("format", cobra.FixedCompletions([]string{"text", "dot", "json"}, cobra.ShellCompDirectiveNoFileComp))
	return c
}

// planRenderers write a plan view in one format.
var planRenderers = map[string]func(io.Writer, *planView) error{
	"text": writePlanText,
	"dot":  writePlanDot,
	"json": writePlanJSON,
}

func (o *explainOptions) run(c *cobra.Command, file string) error {
	render, ok := planRenderers[o.format]
	if !ok {
		return usageError("--format %q: want text, dot or json", o.format)
	}
	plan, err := loadPlan(c.ErrOrStderr(), file)
	if err != nil {
		return err
	}
	v := newPlanView(file, plan)
	if v.Group, err = newGroupView(plan); err != nil {
		return invalidInput("%s: %w", file, err)
	}
	if err := render(c.OutOrStdout(), v); err != nil {
		return runtimeFailure(fmt.Errorf("write plan: %w", err))
	}
	return nil
}

// planViewVersion is format_version of the json output.
const planViewVersion = 1

// planView is what explain shows of a plan, in every format; the json
// format is this struct. Change it only compatibly, or bump planViewVersion.
type planView struct {
	FormatVersion  int           `json:"format_version"`
	Pipeline       string        `json:"pipeline"`
	File           string        `json:"file"`
	Parallelism    int           `json:"parallelism"`
	MaxParallelism int           `json:"max_parallelism"`
	Bounded        bool          `json:"bounded"`
	Subtasks       int           `json:"subtasks"`
	Nodes          []nodeView    `json:"nodes"`
	Tasks          []taskView    `json:"tasks"`
	Edges          []edgeView    `json:"edges"`
	Guarantee      guaranteeView `json:"guarantee"`
	// Group is the group plan of a pipeline with a group block.
	Group *groupView `json:"group,omitempty"`
}

type nodeView struct {
	ID          string `json:"id"`
	Kind        string `json:"kind"`
	Type        string `json:"type"`
	Parallelism int    `json:"parallelism"`
	Task        int    `json:"task"`
	Line        int    `json:"line"`
	Bounded     *bool  `json:"bounded,omitempty"`
	Guarantee   string `json:"guarantee,omitempty"`
	// EventTime is a source's event_time expression; absent: processing time.
	EventTime string `json:"event_time,omitempty"`
	// MaxOutOfOrderness is its watermark's bound, e.g. "2s", with EventTime.
	MaxOutOfOrderness string `json:"max_out_of_orderness,omitempty"`
	// Detail says what a step does beyond its kind, where it says
	// (pipeline.Describer), e.g. a join's kind and bounds.
	Detail string `json:"detail,omitempty"`
}

type taskView struct {
	Index       int      `json:"index"`
	Name        string   `json:"name"`
	Parallelism int      `json:"parallelism"`
	Nodes       []string `json:"nodes"`
}

type edgeView struct {
	From      string   `json:"from"`
	Side      string   `json:"side,omitempty"`
	To        string   `json:"to"`
	Partition string   `json:"partition"`
	Key       []string `json:"key,omitempty"`
	Chained   bool     `json:"chained"`
}

// stream is the id a `from:` names for the edge's input stream.
func (e edgeView) stream() string {
	if e.Side == "" {
		return e.From
	}
	return e.From + "." + e.Side
}

type guaranteeView struct {
	Level   string   `json:"level"`
	Reasons []string `json:"reasons"`
}

func newPlanView(file string, plan *pipeline.Plan) *planView {
	spec := plan.Spec
	v := &planView{
		FormatVersion: planViewVersion, Pipeline: spec.Name, File: file,
		Parallelism: spec.Parallelism, MaxParallelism: spec.MaxParallelism, Bounded: true,
		Nodes: []nodeView{}, Tasks: []taskView{}, Edges: []edgeView{},
		Guarantee: guaranteeView{Level: plan.Guarantee.String(), Reasons: append([]string{}, plan.GuaranteeWhy...)},
	}
	for _, n := range plan.Nodes {
		nv := nodeView{ID: n.ID, Kind: n.Kind.String(), Type: n.Type, Parallelism: n.Parallelism, Task: n.Chain.Index}
		var cfg any
		switch n.Kind {
		case pipeline.SourceNode:
			cfg, nv.Line = n.Source.Config, n.Source.Pos.Line
			bounded := false
			if b, ok := cfg.(pipeline.Bounded); ok {
				bounded = b.Bounded()
			}
			nv.Bounded = &bounded
			v.Bounded = v.Bounded && bounded
			if n.Source.EventTime.IsSet() {
				nv.EventTime = n.Source.EventTime.Source
				nv.MaxOutOfOrderness = n.Source.Watermark.MaxOutOfOrderness.D().String()
			}
		case pipeline.StepNode:
			nv.Line = n.Step.Pos.Line
			if d, ok := n.Step.Config.(pipeline.Describer); ok {
				nv.Detail = d.Describe()
			}
		case pipeline.SinkNode:
			cfg, nv.Line = n.Sink.Config, n.Sink.Pos.Line
		}
		if cfg != nil {
			// Without the capability a component is at-most-once, as for
			// the plan's guarantee.
			g := pipeline.AtMostOnce
			if gi, ok := cfg.(pipeline.GuaranteeOf); ok {
				g = gi.Guarantee()
			}
			nv.Guarantee = g.String()
		}
		v.Nodes = append(v.Nodes, nv)
		for _, e := range n.Inputs {
			ev := edgeView{From: e.From.ID, Side: e.Side, To: n.ID, Partition: e.Partition.String(), Chained: e.Chained}
			if e.Partition == pipeline.Hash {
				for _, k := range e.KeyExprs {
					ev.Key = append(ev.Key, k.Source)
				}
			}
			v.Edges = append(v.Edges, ev)
		}
	}
	for _, c := range plan.Chains {
		tv := taskView{Index: c.Index, Name: c.Name(), Parallelism: c.Parallelism, Nodes: []string{}}
		for _, n := range c.Nodes {
			tv.Nodes = append(tv.Nodes, n.ID)
		}
		v.Tasks = append(v.Tasks, tv)
		v.Subtasks += c.Parallelism
	}
	return v
}

func writePlanJSON(w io.Writer, v *planView) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

// oneLine collapses the whitespace of a (multi-line) expression.
func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// keyText is the key of a hash edge as written in key_by.
func keyText(key []string) string {
	parts := make([]string, len(key))
	for i, k := range key {
		parts[i] = oneLine(k)
	}
	if len(parts) == 1 {
		return parts[0]
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

// edgeDetails says what else there is to know about an edge than its
// partitioning: the key, the side stream, chaining.
func edgeDetails(e edgeView) []string {
	var d []string
	if e.Partition == pipeline.Hash.String() {
		d = append(d, "key "+keyText(e.Key))
	}
	if e.Side != "" {
		d = append(d, fmt.Sprintf("side stream %q", e.Side))
	}
	if e.Chained {
		d = append(d, "chained")
	}
	return d
}

func writePlanText(w io.Writer, v *planView) error {
	var b strings.Builder
	fmt.Fprintf(&b, "pipeline %s (%s)\n", v.Pipeline, v.File)
	bounded := "unbounded: runs until stopped"
	if v.Bounded {
		bounded = "bounded: ends when every source ends"
	}
	fmt.Fprintf(&b, "parallelism %d, max_parallelism %d, %s\n", v.Parallelism, v.MaxParallelism, bounded)

	// Nodes, by kind, in one table so that columns line up across sections.
	var rows [][]string
	var heads []string
	for _, kind := range []string{"source", "step", "sink"} {
		first := true
		for _, n := range v.Nodes {
			if n.Kind != kind {
				continue
			}
			head := ""
			if first {
				head = "\n" + kind + "s:"
				first = false
			}
			row := []string{n.ID, n.Type, fmt.Sprintf("x%d", n.Parallelism), fmt.Sprintf("task %d", n.Task)}
			var notes []string
			if n.Bounded != nil {
				if *n.Bounded {
					notes = append(notes, "bounded")
				} else {
					notes = append(notes, "unbounded")
				}
			}
			if n.Detail != "" {
				notes = append(notes, n.Detail)
			}
			if n.Guarantee != "" {
				notes = append(notes, n.Guarantee)
			}
			if n.EventTime != "" {
				notes = append(notes, fmt.Sprintf("event time %s, out of order <= %s", oneLine(n.EventTime), n.MaxOutOfOrderness))
			}
			rows = append(rows, append(row, strings.Join(notes, ", ")))
			heads = append(heads, head)
		}
	}
	for i, line := range table(rows) {
		if heads[i] != "" {
			b.WriteString(heads[i] + "\n")
		}
		b.WriteString("  " + line + "\n")
	}

	fmt.Fprintf(&b, "\ntasks: %d, subtasks: %d\n", len(v.Tasks), v.Subtasks)
	rows = rows[:0]
	for _, t := range v.Tasks {
		rows = append(rows, []string{fmt.Sprintf("task %d", t.Index), fmt.Sprintf("x%d", t.Parallelism), t.Name})
	}
	for _, line := range table(rows) {
		b.WriteString("  " + line + "\n")
	}

	b.WriteString("\nedges:\n")
	rows = rows[:0]
	for _, e := range v.Edges {
		rows = append(rows, []string{e.stream() + " -> " + e.To, e.Partition, strings.Join(edgeDetails(e), ", ")})
	}
	for _, line := range table(rows) {
		b.WriteString("  " + line + "\n")
	}
	if len(v.Edges) == 0 {
		b.WriteString("  (none)\n")
	}

	if v.Group != nil {
		writeGroupText(&b, v.Group)
	}
	fmt.Fprintf(&b, "\nend-to-end guarantee: %s\n", v.Guarantee.Level)
	for _, r := range v.Guarantee.Reasons {
		b.WriteString("  - " + r + "\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// table pads the columns of rows to equal width, two spaces apart, without
// trailing spaces.
func table(rows [][]string) []string {
	var width []int
	for _, r := range rows {
		for i, cell := range r {
			if i >= len(width) {
				width = append(width, 0)
			}
			width[i] = max(width[i], len([]rune(cell)))
		}
	}
	lines := make([]string, len(rows))
	for j, r := range rows {
		var b strings.Builder
		for i, cell := range r {
			b.WriteString(cell)
			if i < len(r)-1 {
				b.WriteString(strings.Repeat(" ", width[i]-len([]rune(cell))+2))
			}
		}
		lines[j] = strings.TrimRight(b.String(), " ")
	}
	return lines
}

// dotQuote quotes s as a DOT string; lines are joined with \n.
func dotQuote(lines ...string) string {
	r := strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`, "\r", "")
	for i, l := range lines {
		lines[i] = r.Replace(l)
	}
	return `"` + strings.Join(lines, `\n`) + `"`
}

var dotShapes = map[string]string{"source": "invhouse", "step": "box", "sink": "house"}

func writePlanDot(w io.Writer, v *planView) error {
	var b strings.Builder
	fmt.Fprintf(&b, "digraph %s {\n", dotQuote(v.Pipeline))
	fmt.Fprintf(&b, "  graph [rankdir=LR, labelloc=t, label=%s];\n",
		dotQuote(fmt.Sprintf("%s (%s): %s", v.Pipeline, v.File, v.Guarantee.Level)))
	b.WriteString("  node [shape=box, style=rounded];\n")
	for _, t := range v.Tasks {
		fmt.Fprintf(&b, "\n  subgraph %s {\n", dotQuote(fmt.Sprintf("cluster_task_%d", t.Index)))
		fmt.Fprintf(&b, "    label=%s;\n", dotQuote(fmt.Sprintf("task %d x%d", t.Index, t.Parallelism)))
		for _, n := range v.Nodes {
			if n.Task != t.Index {
				continue
			}
			fmt.Fprintf(&b, "    %s [shape=%s, label=%s];\n", dotQuote(n.ID), dotShapes[n.Kind],
				dotQuote(n.ID, fmt.Sprintf("%s %s x%d", n.Kind, n.Type, n.Parallelism)))
		}
		b.WriteString("  }\n")
	}
	if len(v.Edges) > 0 {
		b.WriteString("\n")
	}
	for _, e := range v.Edges {
		label := []string{e.Partition}
		label = append(label, edgeDetails(e)...)
		attrs := "label=" + dotQuote(label...)
		switch {
		case e.Chained:
			attrs += ", style=bold"
		case e.Side != "":
			attrs += ", style=dashed"
		}
		fmt.Fprintf(&b, "  %s -> %s [%s];\n", dotQuote(e.From), dotQuote(e.To), attrs)
	}
	b.WriteString("}\n")
	_, err := io.WriteString(w, b.String())
	return err
}
