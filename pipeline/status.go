package pipeline

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
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
	// Group is the process's membership of its group, in group mode.
	Group *GroupStatus `json:"group,omitempty"`
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
	// Aborts counts the open transactions with records that a failed or
	// cancelled job dropped (the sink aborts them; their records are read
	// again), of sinks that pre-committed a transaction before.
	Aborts int64 `json:"aborts"`
}

// SinkSample is a sample of the records a sink received lately.
type SinkSample struct {
	Sink string `json:"sink"`
	// Records are the newest records of the sink (at most
	// sinkSampleSize), oldest first, each as its fields in JSON.
	Records []json.RawMessage `json:"records"`
	// DeadLetters is set when the sink reads an errors stream.
	DeadLetters bool `json:"dead_letters"`
}

// Status returns the run's status snapshot. Safe from any goroutine.
func (r *Runner) Status() Status {
	now := time.Now()
	r.mu.Lock()
	plan, job, started, ended, lastErr, attempts := r.plan, r.job, r.startedAt, r.endedAt, r.lastErr, r.attempts
	group := r.group
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
		Transactions: TransactionStatus{
			Commits: r.metrics.txnCommits.Load(),
			Aborts:  r.metrics.txnAborts.Load(),
		},
		Edges: planEdges(plan),
		Tasks: planTasks(plan),
		Nodes: make([]NodeStatus, 0, len(plan.Nodes)),
	}
	if !started.IsZero() {
		s.Started = &started
		end := now
		if !ended.IsZero() {
			end = ended
		}
		s.UptimeMS = end.Sub(started).Milliseconds()
	}
	v := r.readValues(now, job)
	prev, cur := r.sampler.window()
	if prev != nil {
		at := cur.at
		s.SampledAt, s.WindowMS = &at, cur.at.Sub(prev.at).Milliseconds()
	}
	for _, n := range plan.Nodes {
		ns := nodeStatus(n)
		for i := range ns.Subtasks {
			v.fill(&ns.Subtasks[i], n, prev, cur)
		}
		s.Nodes = append(s.Nodes, ns)
	}
	s.Samples = r.sinkSamples(plan)
	if group != nil {
		s.Group = group.status()
	}
	return s
}

// statusState is State with a job that has not opened every task told
// apart: restoring when it restores a checkpoint, else starting.
func (r *Runner) statusState() string {
	st := r.State()
	r.mu.Lock()
	job, restored := r.job, r.restored
	r.mu.Unlock()
	switch {
	case st == RunStarting && restored != 0:
		return "restoring" // the store is open, the job starts
	case st != RunRunning || job == nil || isClosed(job.Opened()):
		return st.String()
	case job.opts.Restore != nil:
		return "restoring"
	}
	return RunStarting.String()
}

// statusValues are the live values a Status reads, by series.
type statusValues struct {
	now                                   time.Time
	in, out, written, late, errs, pending map[seriesKey]float64
	// tasks are the task subtasks' live numbers, by head id and subtask.
	tasks map[seriesKey]*taskStats
	// stateSizes are of the newest completed checkpoint.
	stateSizes map[seriesKey]int64
	// splits are the source subtasks' splits (those of the running job's
	// sources that tell).
	splits map[seriesKey][]SplitStatus
}

// readValues reads the series and live numbers of the run as of now, and
// the splits of job's sources (job may be nil).
func (r *Runner) readValues(now time.Time, job *Job) statusValues {
	m := r.metrics
	v := statusValues{now: now,
		in: seriesValues(m.recordsIn), out: seriesValues(m.recordsOut), written: seriesValues(m.written),
		late: seriesValues(m.lateDropped), errs: seriesValues(m.recordErrors), pending: seriesValues(m.pending),
		tasks: m.taskStatsAll(), stateSizes: m.stateSizesAll(), splits: map[seriesKey][]SplitStatus{},
	}
	if job == nil {
		return v
	}
	for _, t := range job.tasks {
		if ss, ok := t.head.src.(SplitStatuser); ok && t.opened.Load() {
			v.splits[seriesKey{t.head.node.ID, t.subtask}] = ss.SplitStatus()
		}
	}
	return v
}

// fill sets the numbers of subtask st of node n; prev and cur are the
// sampler's window (nil before it has one).
func (v statusValues) fill(st *SubtaskStatus, n *Node, prev, cur *statusSample) {
	k := seriesKey{n.ID, st.Subtask}
	head := seriesKey{n.Chain.Head().ID, st.Subtask}
	st.RecordsIn, st.RecordsOut = int64(v.in[k]), int64(v.out[k])
	st.LateDropped, st.RecordErrors = int64(v.late[k]), int64(v.errs[k])
	if n.Kind == SinkNode {
		w := int64(v.written[k])
		st.RecordsWritten = &w
	}
	if p, ok := v.pending[k]; ok && n.Kind == SourceNode {
		pn := int64(p)
		st.Pending = &pn
	}
	if b, ok := v.stateSizes[k]; ok {
		st.StateBytes = &b
	}
	st.Splits = v.splits[k]
	if ts := v.tasks[head]; ts != nil {
		_, phase := ts.read(v.now)
		st.Phase = phase.String()
		if wm := ts.wm.Load(); wm != MinWatermark && wm != MaxWatermark {
			lag := v.now.UnixMilli() - wm
			st.Watermark, st.WatermarkLagMS = &wm, &lag
		}
	}
	secs := 0.0
	if prev != nil {
		secs = cur.at.Sub(prev.at).Seconds()
	}
	if secs <= 0 {
		return
	}
	st.RecordsInPerSecond = (cur.in[k] - prev.in[k]) / secs
	st.RecordsOutPerSecond = (cur.out[k] - prev.out[k]) / secs
	a, b := prev.spent[head], cur.spent[head]
	ratio := func(p taskPhase) float64 { return min(max((b[p]-a[p]).Seconds()/secs, 0), 1) }
	st.BusyRatio, st.BackpressuredRatio, st.IdleRatio = ratio(phaseBusy), ratio(phaseBackpressured), ratio(phaseIdle)
	st.Backpressure = backpressureLevel(st.BackpressuredRatio)
}

// backpressureLevel rates the share of time a task was backpressured with
// Flink's thresholds.
func backpressureLevel(ratio float64) string {
	switch {
	case ratio <= 0.10:
		return BackpressureOK
	case ratio <= 0.50:
		return BackpressureLow
	}
	return BackpressureHigh
}

// seriesValues returns the values of a counter or gauge vector labelled by
// id and subtask, summed over its other labels (eddy_record_errors_total's
// policy).
func seriesValues(c prometheus.Collector) map[seriesKey]float64 {
	ch := make(chan prometheus.Metric)
	go func() {
		c.Collect(ch)
		close(ch)
	}()
	out := map[seriesKey]float64{}
	for metric := range ch {
		var d dto.Metric
		if err := metric.Write(&d); err != nil {
			continue
		}
		var k seriesKey
		for _, l := range d.GetLabel() {
			switch l.GetName() {
			case "id":
				k.id = l.GetValue()
			case "subtask":
				k.subtask, _ = strconv.Atoi(l.GetValue())
			}
		}
		switch {
		case d.Counter != nil:
			out[k] += d.GetCounter().GetValue()
		case d.Gauge != nil:
			out[k] += d.GetGauge().GetValue()
		}
	}
	return out
}

// nodeStatus returns n's status with its subtasks numbered.
func nodeStatus(n *Node) NodeStatus {
	ns := NodeStatus{ID: n.ID, Kind: n.Kind.String(), Type: n.Type, Parallelism: n.Parallelism, Task: n.Chain.Index,
		Subtasks: make([]SubtaskStatus, n.Parallelism)}
	if d, ok := nodeConfig(n).(Describer); ok {
		ns.Detail = d.Describe()
	}
	for i := range ns.Subtasks {
		ns.Subtasks[i] = SubtaskStatus{Subtask: i, Backpressure: BackpressureOK, Phase: phaseEnded.String()}
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

// statusSampleInterval is how often the sampler takes the totals that the
// status's rates and time ratios are computed from.
const statusSampleInterval = time.Second

// statusSample is the run's totals at one time: records in and out by node
// subtask, and the time each task subtask spent by phase.
type statusSample struct {
	at      time.Time
	in, out map[seriesKey]float64
	spent   map[seriesKey][phaseCount]time.Duration
}

// statusSampler keeps the two newest samples: the rates and ratios of a
// Status are over the window between them, at most
// statusSampleInterval old.
type statusSampler struct {
	mu        sync.Mutex
	prev, cur *statusSample
}

// sample takes the run's totals as of now and makes them the window's end.
func (r *Runner) sample(now time.Time) {
	m := r.metrics
	s := &statusSample{at: now, in: seriesValues(m.recordsIn), out: seriesValues(m.recordsOut),
		spent: map[seriesKey][phaseCount]time.Duration{}}
	for k, ts := range m.taskStatsAll() {
		s.spent[k], _ = ts.read(now)
	}
	ss := &r.sampler
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.prev != nil && now.Sub(ss.cur.at) < statusSampleInterval/2 {
		// Too close to the last one (the run's end right after a tick):
		// the window grows instead of shrinking to a few noisy ms.
		ss.cur = s
		return
	}
	ss.prev, ss.cur = ss.cur, s
}

// window returns the two newest samples, or nils before there are two.
func (ss *statusSampler) window() (prev, cur *statusSample) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.prev == nil {
		return nil, nil
	}
	return ss.prev, ss.cur
}

// runSampler samples the run every statusSampleInterval until stop is
// closed, and once when it is.
func (r *Runner) runSampler(stop <-chan struct{}) {
	tick := time.NewTicker(statusSampleInterval)
	defer tick.Stop()
	r.sample(time.Now())
	for {
		select {
		case now := <-tick.C:
			r.sample(now)
		case <-stop:
			r.sample(time.Now())
			return
		}
	}
}

// sinkSamples returns the records sampled of each sink of plan.
func (r *Runner) sinkSamples(plan *Plan) []SinkSample {
	out := []SinkSample{}
	for _, n := range plan.Nodes {
		if n.Kind != SinkNode {
			continue
		}
		ss := SinkSample{Sink: n.ID, Records: []json.RawMessage{}}
		for _, in := range n.Sink.Inputs {
			ss.DeadLetters = ss.DeadLetters || in.Side == ErrorsStream
		}
		var recs []sampledRecord
		for _, s := range r.metrics.sinkSamplersOf(n.ID, n.Parallelism) {
			recs = append(recs, s.published()...)
		}
		slices.SortStableFunc(recs, func(a, b sampledRecord) int { return a.at.Compare(b.at) })
		for _, rec := range recs[max(len(recs)-sinkSampleSize, 0):] {
			ss.Records = append(ss.Records, rec.fields)
		}
		out = append(out, ss)
	}
	return out
}

// sinkSampleSize is how many records the sample of a sink holds.
const sinkSampleSize = 20

// sinkSamplePeriod is the least time between two publications of a sink
// subtask's sample (but the last, when the sink closes).
const sinkSamplePeriod = 200 * time.Millisecond

// sinkSampler keeps the last records one sink subtask received, for the
// run's status. On the task goroutine, offer keeps references to the last
// sinkSampleSize records of each batch (no copy of their fields), and
// publish encodes those not published yet as JSON, at most every
// sinkSamplePeriod (at the flush timer) and when the sink closes: the
// sink may change a record while it writes it, so the status never reads
// a record itself. A nil sampler (not a sink) does nothing.
type sinkSampler struct {
	// Task goroutine: the newest records, a ring whose next slot is next,
	// fresh of them not published; due is when publish may run again.
	ring  [sinkSampleSize]Record
	next  int
	fresh int
	due   time.Time

	mu  sync.Mutex
	pub []sampledRecord // oldest first, at most sinkSampleSize
}

// sampledRecord is a published record: its fields as JSON, and when it
// was published (the order of a sink's subtasks' records).
type sampledRecord struct {
	at     time.Time
	fields json.RawMessage
}

// offer keeps the last records of b. Task goroutine.
func (s *sinkSampler) offer(b []Record) {
	if s == nil {
		return
	}
	b = b[max(len(b)-sinkSampleSize, 0):]
	n := copy(s.ring[s.next:], b)
	copy(s.ring[:], b[n:])
	s.next = (s.next + len(b)) % sinkSampleSize
	s.fresh = min(s.fresh+len(b), sinkSampleSize)
}

// waiting reports whether records wait to be published. Task goroutine.
func (s *sinkSampler) waiting() bool { return s != nil && s.fresh > 0 }

// publish encodes the records not published yet for the status, when the
// period since the last publication passed or force. Task goroutine.
func (s *sinkSampler) publish(now time.Time, force bool) {
	if s == nil || s.fresh == 0 || (!force && now.Before(s.due)) {
		return
	}
	enc := make([]sampledRecord, 0, s.fresh)
	for i := s.fresh; i > 0; i-- {
		r := &s.ring[(s.next-i+sinkSampleSize)%sinkSampleSize]
		enc = append(enc, sampledRecord{at: now, fields: encodeSample(r.Fields)})
	}
	s.fresh, s.due = 0, now.Add(sinkSamplePeriod)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pub = append(s.pub, enc...)
	s.pub = slices.Delete(s.pub, 0, max(len(s.pub)-sinkSampleSize, 0))
}

// published returns a copy of the published records, oldest first.
func (s *sinkSampler) published() []sampledRecord {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.pub)
}

// encodeSample encodes a record's fields as JSON; fields JSON cannot hold
// (NaN, ...) are shown as their Go rendering, under "_unencodable".
func encodeSample(fields map[string]any) json.RawMessage {
	b, err := json.Marshal(fields)
	if err != nil {
		b, _ = json.Marshal(map[string]string{"_unencodable": fmt.Sprint(fields)})
	}
	return b
}

// isClosed reports whether c is closed, without blocking.
func isClosed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}
