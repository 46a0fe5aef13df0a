package pipeline

import (
	"time"
)

// The status snapshot of a run: what GET /api/status of the admin endpoint
// serves as JSON and the web dashboard renders (docs/running.md, "Status
// API"). Runner.Status builds it from the plan, the run's metrics, the
// task time accounting and the sampler's rates; it is safe from any
// goroutine and cheap enough to call every second.

// Status is where a run stands, with the plan and its live numbers.
type Status struct {
	// Pipeline is the pipeline's name.
	Pipeline string `json:"pipeline"`
	// State is one of starting, restoring, running, stopping, restarting,
	// finished, stopped, cancelled, failed, aborted (see RunState;
	// restoring is a job that starts from a checkpoint and has not opened
	// every task yet).
	State string `json:"state"`
	// Started is when Run was called; nil before.
	Started *time.Time `json:"started"`
	// UptimeMS is the time since Started, until Run returned.
	UptimeMS int64 `json:"uptime_ms"`
	// Restarts counts the restarts of the job by the restart strategy.
	Restarts int `json:"restarts"`
	// LastError is the error the last failed job (or the run) ended with;
	// "" when none failed.
	LastError string `json:"last_error"`
	// Guarantee is the end-to-end delivery guarantee (exactly-once,
	// at-least-once, at-most-once); GuaranteeReasons name what limits it.
	Guarantee        string   `json:"guarantee"`
	GuaranteeReasons []string `json:"guarantee_reasons"`
	// Now is when the snapshot was taken.
	Now time.Time `json:"now"`
	// SampledAt is the newest sample of the rates and time ratios, and
	// WindowMS the span they are measured over (ending at SampledAt); nil
	// and 0 until two samples were taken.
	SampledAt *time.Time `json:"sampled_at"`
	WindowMS  int64      `json:"window_ms"`
	// Nodes are the sources, steps and sinks in plan order (every node
	// after its inputs), each with its subtasks' numbers.
	Nodes []NodeStatus `json:"nodes"`
	// Edges connect the nodes' streams.
	Edges []EdgeStatus `json:"edges"`
	// Tasks are the chains: nodes that run together, one goroutine per
	// subtask.
	Tasks []TaskStatus `json:"tasks"`
	// Checkpoints are the recent checkpoints (GET /checkpoints).
	Checkpoints CheckpointStats `json:"checkpoints"`
	// Transactions counts the transactions of the sinks that commit per
	// checkpoint (kafka with transactions).
	Transactions TransactionStatus `json:"transactions"`
	// Samples hold the last records of each sink, one entry per sink.
	Samples []SinkSample `json:"samples"`
}

// NodeStatus is a source, step or sink with its subtasks.
type NodeStatus struct {
	ID string `json:"id"`
	// Kind is source, step or sink; Type its type (step: its kind).
	Kind string `json:"kind"`
	Type string `json:"type"`
	// Detail says what it does beyond its type, where its config tells
	// (Describer): e.g. a join's kind and bounds.
	Detail      string `json:"detail,omitempty"`
	Parallelism int    `json:"parallelism"`
	// Task is the index of the task (chain) it runs in.
	Task     int             `json:"task"`
	Subtasks []SubtaskStatus `json:"subtasks"`
}

// Backpressure levels of a subtask, by the share of the window its task was
// blocked on a full output channel (Flink's thresholds).
const (
	BackpressureOK   = "ok"   // at most 10%
	BackpressureLow  = "low"  // at most 50%
	BackpressureHigh = "high" // above 50%
)

// SubtaskStatus is one parallel instance of a node.
type SubtaskStatus struct {
	Subtask int `json:"subtask"`
	// RecordsIn and RecordsOut are the totals of the run
	// (eddy_records_in_total, eddy_records_out_total); a sink has no
	// records out, and RecordsWritten counts what it wrote out.
	RecordsIn      int64  `json:"records_in"`
	RecordsOut     int64  `json:"records_out"`
	RecordsWritten *int64 `json:"records_written,omitempty"`
	// The rates over the window (Status.WindowMS).
	RecordsInPerSecond  float64 `json:"records_in_per_second"`
	RecordsOutPerSecond float64 `json:"records_out_per_second"`
	// BusyRatio, BackpressuredRatio and IdleRatio are the shares of the
	// window the subtask's task spent processing, blocked on a full
	// output channel, and waiting for input (they add up to 1; all 0
	// before the first window). Every node of a task shows its task's.
	BusyRatio          float64 `json:"busy_ratio"`
	BackpressuredRatio float64 `json:"backpressured_ratio"`
	IdleRatio          float64 `json:"idle_ratio"`
	// Backpressure is ok, low or high (BackpressureOK, ...).
	Backpressure string `json:"backpressure"`
	// Phase is what the task does now: busy, backpressured, idle, or
	// ended (its job ended).
	Phase string `json:"phase"`
	// Watermark is the task's current watermark, epoch ms: nil before the
	// first and once the input ended (the final watermark is +inf).
	// WatermarkLagMS is the wall clock less it.
	Watermark      *int64 `json:"watermark"`
	WatermarkLagMS *int64 `json:"watermark_lag_ms"`
	// LateDropped counts the late records a window or join dropped;
	// RecordErrors the records that failed, whatever on_error did.
	LateDropped  int64 `json:"late_dropped"`
	RecordErrors int64 `json:"record_errors"`
	// StateBytes is this subtask's keyed state in the newest completed
	// checkpoint (of an incremental one: its delta); nil when unknown.
	StateBytes *int64 `json:"state_bytes"`
	// Pending is what a source subtask has yet to read, where the source
	// knows (eddy_source_pending_records); nil otherwise.
	Pending *int64 `json:"pending,omitempty"`
	// Splits are a source subtask's splits (Kafka: its partitions), where
	// the source tells (SplitStatuser).
	Splits []SplitStatus `json:"splits,omitempty"`
}

// EdgeStatus connects a stream of one node to an input of another.
type EdgeStatus struct {
	From string `json:"from"`
	// Side is "" for the main stream, else the side output (errors, ...).
	Side string `json:"side"`
	To   string `json:"to"`
	// Partition is forward, hash, rebalance, broadcast or global.
	Partition string `json:"partition"`
	// Key holds the key expressions of a hash edge.
	Key []string `json:"key"`
	// Chained edges are calls inside one task, without a channel.
	Chained bool `json:"chained"`
	// DeadLetters marks the edge that carries the records whose key
	// failed to the key_by step's subtask 0 (on_error: dead_letter).
	DeadLetters bool `json:"dead_letters,omitempty"`
}

// TaskStatus is a chain: nodes that run as one task per subtask.
type TaskStatus struct {
	Index       int    `json:"index"`
	Name        string `json:"name"`
	Parallelism int    `json:"parallelism"`
	// Nodes are the chain's node ids, head first.
	Nodes []string `json:"nodes"`
}

// TransactionStatus counts the transactions of the sinks that commit per
// checkpoint, over the run.
type TransactionStatus struct {
	// Commits counts the pre-committed transactions the runtime committed
	// once their checkpoint completed.
	Commits int64 `json:"commits"`
	// Aborts counts the open transactions a failed or cancelled job
	// dropped (the sink aborts them; their records are read again).
	Aborts int64 `json:"aborts"`
}

// SinkSample is a sample of the records a sink received lately.
type SinkSample struct {
	Sink string `json:"sink"`
	// Records are the newest records of the sink (at most
	// sinkSampleSize), oldest first, each as its fields.
	Records []map[string]any `json:"records"`
	// DeadLetters is set when the sink reads an errors stream.
	DeadLetters bool `json:"dead_letters"`
}

// Status returns the run's status snapshot. Safe from any goroutine.
func (r *Runner) Status() Status {
	now := time.Now()
	r.mu.Lock()
	plan, started, ended, lastErr, attempts := r.plan, r.startedAt, r.endedAt, r.lastErr, r.attempts
	r.mu.Unlock()
	s := Status{
		Pipeline:         r.spec.Name,
		State:            r.statusState(),
		LastError:        lastErr,
		Restarts:         max(attempts-1, 0),
		Guarantee:        plan.Guarantee.String(),
		GuaranteeReasons: append([]string{}, plan.GuaranteeWhy...),
		Now:              now,
		Checkpoints:      r.metrics.CheckpointStats(),
		Nodes:            []NodeStatus{},
		Edges:            []EdgeStatus{},
		Tasks:            []TaskStatus{},
		Samples:          []SinkSample{},
	}
	if !started.IsZero() {
		s.Started = &started
		end := now
		if !ended.IsZero() {
			end = ended
		}
		s.UptimeMS = end.Sub(started).Milliseconds()
	}
	s.Edges, s.Tasks = planEdges(plan), planTasks(plan)
	for _, n := range plan.Nodes {
		s.Nodes = append(s.Nodes, nodeStatus(n))
	}
	return s
}

// statusState is State with restoring told apart from running.
func (r *Runner) statusState() string {
	return r.State().String()
}

// nodeStatus returns n's status with its subtasks numbered.
func nodeStatus(n *Node) NodeStatus {
	ns := NodeStatus{ID: n.ID, Kind: n.Kind.String(), Type: n.Type, Parallelism: n.Parallelism, Task: n.Chain.Index,
		Subtasks: make([]SubtaskStatus, n.Parallelism)}
	if d, ok := nodeConfig(n).(Describer); ok {
		ns.Detail = d.Describe()
	}
	for i := range ns.Subtasks {
		ns.Subtasks[i] = SubtaskStatus{Subtask: i, Backpressure: BackpressureOK, Phase: "ended"}
	}
	return ns
}

// nodeConfig returns the config of a source, step or sink node.
func nodeConfig(n *Node) any {
	switch n.Kind {
	case SourceNode:
		return n.Source.Config
	case StepNode:
		return n.Step.Config
	}
	return n.Sink.Config
}

// planEdges lists the plan's edges, by receiving node in plan order, with
// the dead-letter edges beside their hash edges.
func planEdges(p *Plan) []EdgeStatus {
	out := []EdgeStatus{}
	for _, n := range p.Nodes {
		for _, e := range n.Inputs {
			out = append(out, edgeStatus(e, false))
			if e.DeadLetters != nil {
				out = append(out, edgeStatus(e.DeadLetters, true))
			}
		}
	}
	return out
}

func edgeStatus(e *Edge, deadLetters bool) EdgeStatus {
	es := EdgeStatus{From: e.From.ID, Side: e.Side, To: e.To.ID, Partition: e.Partition.String(),
		Key: []string{}, Chained: e.Chained, DeadLetters: deadLetters}
	if e.Partition == Hash {
		for _, k := range e.KeyExprs {
			es.Key = append(es.Key, k.Source)
		}
	}
	return es
}

// planTasks lists the plan's chains.
func planTasks(p *Plan) []TaskStatus {
	out := make([]TaskStatus, 0, len(p.Chains))
	for _, c := range p.Chains {
		ts := TaskStatus{Index: c.Index, Name: c.Name(), Parallelism: c.Parallelism, Nodes: make([]string, 0, len(c.Nodes))}
		for _, n := range c.Nodes {
			ts.Nodes = append(ts.Nodes, n.ID)
		}
		out = append(out, ts)
	}
	return out
}

// SplitStatus is one split of a source subtask (a Kafka partition).
type SplitStatus struct {
	// Split is the split's index (ReadBatch.Split); Name names it, e.g.
	// "orders/3" for partition 3 of topic orders.
	Split int    `json:"split"`
	Name  string `json:"name"`
	// Offset is the position of the next record to read (Kafka: the next
	// offset); -1 when not known yet.
	Offset int64 `json:"offset"`
	// Lag is what the split has yet to read (Kafka: the high watermark
	// less the next offset); nil when not known yet.
	Lag *int64 `json:"lag"`
	// Idle is set when the split delivered nothing for a while (Kafka: it
	// has no records to read).
	Idle bool `json:"idle"`
}
