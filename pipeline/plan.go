package pipeline

import (
	"fmt"
	"strings"

	"github.com/eddy-stream/eddy/expr"
)

// NodeKind tells sources, steps and sinks apart.
type NodeKind int

const (
	SourceNode NodeKind = iota
	StepNode
	SinkNode
)

func (k NodeKind) String() string {
	switch k {
	case SourceNode:
		return "source"
	case StepNode:
		return "step"
	}
	return "sink"
}

// Partitioning says how an edge spreads records over the receiving subtasks.
type Partitioning int

const (
	// Forward sends subtask i's records to subtask i (equal parallelism).
	Forward Partitioning = iota
	// Hash sends each record to the subtask that owns its key group.
	Hash
	// Rebalance spreads records round-robin over all receiving subtasks.
	Rebalance
	// Broadcast sends every record to every receiving subtask.
	Broadcast
	// Global sends every record to the first receiving subtask (Flink's
	// GlobalPartitioner): the dead letters of a key_by step go to the
	// subtask that owns its errors stream.
	Global
)

func (p Partitioning) String() string {
	switch p {
	case Forward:
		return "forward"
	case Hash:
		return "hash"
	case Rebalance:
		return "rebalance"
	case Global:
		return "global"
	}
	return "broadcast"
}

// Node is a source, step or sink of the plan.
type Node struct {
	ID          string
	Kind        NodeKind
	Type        string // source type, step kind or sink type
	Parallelism int
	Inputs      []*Edge
	Outputs     []*Edge
	Source      *SourceSpec
	Step        *StepSpec
	Sink        *SinkSpec
	// Chain is the task group the node runs in.
	Chain *Chain
}

// Edge connects a stream of one node to an input of another.
type Edge struct {
	From *Node
	// Side is "" for the main stream, else the side output's name.
	Side string
	To   *Node
	// Input is the index of this edge in To.Inputs.
	Input     int
	Partition Partitioning
	// KeyExprs computes the key of a Hash edge.
	KeyExprs []*expr.Expr
	// Chained edges are direct calls inside one task.
	Chained bool
	// DeadLetters, on a Hash edge into a key_by step with on_error:
	// dead_letter, is the edge of the dead letters the senders build for
	// records whose key failed: Global, to the step's subtask 0, which
	// emits them on its errors stream. It is not among the nodes' Inputs
	// and Outputs: it runs beside its hash edge.
	DeadLetters *Edge
}

// connects reports whether the edge has a channel from sender subtask s to
// receiver subtask r.
func (e *Edge) connects(s, r int) bool {
	switch e.Partition {
	case Forward:
		return s == r
	case Global:
		return r == 0
	}
	return true
}

// receivers returns the channels of sender subtask s among row, its
// channels to every receiver, in the order the writer addresses them.
func (e *Edge) receivers(s int, row []chan Batch) []chan Batch {
	switch e.Partition {
	case Forward:
		return row[s : s+1]
	case Global:
		return row[:1]
	}
	return row
}

// Chain is a group of nodes that runs as one task per subtask: the head and
// the nodes reached from it over chained edges, in topological order.
type Chain struct {
	Index       int
	Nodes       []*Node
	Parallelism int
}

// Head returns the chain's first node.
func (c *Chain) Head() *Node { return c.Nodes[0] }

// Name is the chain's display name: its nodes from the head, "a -> b", with
// a fan-out inside the chain in braces: "a -> {b -> c, d}".
func (c *Chain) Name() string {
	var name func(n *Node) string
	name = func(n *Node) string {
		var next []string
		for _, e := range n.Outputs {
			if e.Chained {
				next = append(next, name(e.To))
			}
		}
		switch len(next) {
		case 0:
			return n.ID
		case 1:
			return n.ID + " -> " + next[0]
		}
		return n.ID + " -> {" + strings.Join(next, ", ") + "}"
	}
	return name(c.Head())
}

// Plan is the physical plan of a spec.
type Plan struct {
	Spec *Spec
	// Nodes in topological order (every node after its inputs).
	Nodes  []*Node
	Chains []*Chain
	// Guarantee is the end-to-end delivery guarantee after a crash, the
	// weakest of the components.
	Guarantee Guarantee
	// GuaranteeWhy names the components that limit Guarantee.
	GuaranteeWhy []string
}

// Node returns the node with id, or nil.
func (p *Plan) Node(id string) *Node {
	for _, n := range p.Nodes {
		if n.ID == id {
			return n
		}
	}
	return nil
}

// Compile turns a validated spec into a physical plan.
func Compile(spec *Spec) (*Plan, error) {
	plan := &Plan{Spec: spec}
	byID := map[string]*Node{}
	var all []*Node
	add := func(n *Node) {
		byID[n.ID] = n
		all = append(all, n)
	}
	for _, s := range spec.Sources {
		add(&Node{ID: s.ID, Kind: SourceNode, Type: s.Type, Parallelism: s.Parallelism, Source: s})
	}
	for _, s := range spec.Steps {
		add(&Node{ID: s.ID, Kind: StepNode, Type: s.Kind, Parallelism: s.Parallelism, Step: s})
	}
	for _, s := range spec.Sinks {
		add(&Node{ID: s.ID, Kind: SinkNode, Type: s.Type, Parallelism: s.Parallelism, Sink: s})
	}
	for _, n := range all {
		var inputs []StreamRef
		switch n.Kind {
		case StepNode:
			inputs = n.Step.Inputs
		case SinkNode:
			inputs = n.Sink.Inputs
		}
		for _, in := range inputs {
			from, ok := byID[in.Node]
			if !ok {
				return nil, fmt.Errorf("compile plan: %s %q reads unknown stream %q", n.Kind, n.ID, in)
			}
			e := &Edge{From: from, Side: in.Side, To: n, Input: len(n.Inputs)}
			e.Partition, e.KeyExprs = partitioning(e)
			if e.Partition == Hash && n.Step.OnError == OnErrorDeadLetter {
				e.DeadLetters = &Edge{From: from, Side: in.Side, To: n, Input: e.Input, Partition: Global}
			}
			n.Inputs = append(n.Inputs, e)
			from.Outputs = append(from.Outputs, e)
		}
	}
	order, err := topoSort(all)
	if err != nil {
		return nil, err
	}
	plan.Nodes = order
	plan.buildChains(spec.Runtime.Chaining)
	plan.Guarantee, plan.GuaranteeWhy = guarantee(spec, order)
	return plan, nil
}

func partitioning(e *Edge) (Partitioning, []*expr.Expr) {
	if e.To.Kind == StepNode {
		if k, ok := e.To.Step.Config.(KeyedStep); ok {
			return Hash, k.KeyExprs(e.Input)
		}
		if e.To.Step.Rebalance {
			return Rebalance, nil
		}
	}
	if e.From.Parallelism != e.To.Parallelism {
		return Rebalance, nil
	}
	return Forward, nil
}

func topoSort(nodes []*Node) ([]*Node, error) {
	indeg := map[*Node]int{}
	for _, n := range nodes {
		indeg[n] = len(n.Inputs)
	}
	var queue, order []*Node
	for _, n := range nodes {
		if indeg[n] == 0 {
			queue = append(queue, n)
		}
	}
	for len(queue) > 0 {
		n := queue[0]
		queue = queue[1:]
		order = append(order, n)
		for _, e := range n.Outputs {
			if indeg[e.To]--; indeg[e.To] == 0 {
				queue = append(queue, e.To)
			}
		}
	}
	if len(order) != len(nodes) {
		return nil, fmt.Errorf("compile plan: the pipeline has a cycle")
	}
	return order, nil
}

// buildChains groups nodes into tasks: a node joins its input's chain when it
// has exactly one input, that input is a forward edge of the main stream, and
// chaining is on.
func (p *Plan) buildChains(chaining bool) {
	for _, n := range p.Nodes {
		if chaining && len(n.Inputs) == 1 {
			e := n.Inputs[0]
			if e.Partition == Forward && e.Side == "" && e.From.Parallelism == n.Parallelism {
				e.Chained = true
				n.Chain = e.From.Chain
				n.Chain.Nodes = append(n.Chain.Nodes, n)
				continue
			}
		}
		c := &Chain{Index: len(p.Chains), Nodes: []*Node{n}, Parallelism: n.Parallelism}
		n.Chain = c
		p.Chains = append(p.Chains, c)
	}
}

func guarantee(spec *Spec, nodes []*Node) (Guarantee, []string) {
	if spec.Group != nil {
		// Group mode: the sources read Kafka topics and the sinks write in
		// the group's transactions, with the offsets (docs/group.md).
		return ExactlyOnce, nil
	}
	g := ExactlyOnce
	var why []string
	for _, n := range nodes {
		var cfg any
		switch n.Kind {
		case SourceNode:
			cfg = n.Source.Config
		case SinkNode:
			cfg = n.Sink.Config
		default:
			continue
		}
		cg := AtMostOnce
		if gi, ok := cfg.(GuaranteeOf); ok {
			cg = gi.Guarantee()
		}
		if cg < ExactlyOnce {
			r := fmt.Sprintf("%s %q (%s) is %s", n.Kind, n.ID, n.Type, cg)
			if n.Kind == SinkNode && n.Sink.WriteAhead {
				// Write-ahead keeps the sink's own class: exactly-once but
				// for one window, which is at-least-once (connectors/writeahead).
				r += " with write_ahead: it writes each checkpoint's records once the checkpoint completes," +
					" and again only if eddy dies between the sink's flush and its commit marker"
			}
			why = append(why, r)
		}
		g = min(g, cg)
	}
	switch {
	case spec.Checkpoint == nil:
		why = append(why, "no checkpoint block: state and positions are not saved, so a crash loses in-flight results")
		g = AtMostOnce
	case spec.Checkpoint.Mode == AtLeastOnceMode && g == ExactlyOnce:
		why = append(why, "checkpoint.mode is at_least_once: barriers are not aligned, so a restore may repeat records")
		g = AtLeastOnce
	}
	return g, why
}
