package pipeline_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/eddy-stream/eddy/internal/testkit"
	"github.com/eddy-stream/eddy/pipeline"
)

// Test components of the status tests: a sink that blocks in Write until
// its gate opens, and a source whose Open waits for a gate, that reads
// nothing, and that reports a split (pipeline.SplitStatuser).

// gateSinkConfig makes sinks whose Write signals entered (dropped when
// full) and then blocks until open is closed.
type gateSinkConfig struct {
	open, entered chan struct{}
}

func (c *gateSinkConfig) Validate() error                 { return nil }
func (c *gateSinkConfig) NewSink() (pipeline.Sink, error) { return &gateSink{cfg: c}, nil }

type gateSink struct{ cfg *gateSinkConfig }

func (s *gateSink) Open(context.Context, *pipeline.SinkContext) error { return nil }
func (s *gateSink) Write(ctx context.Context, _ []pipeline.Record) error {
	select {
	case s.cfg.entered <- struct{}{}:
	default:
	}
	select {
	case <-s.cfg.open:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
func (s *gateSink) Flush(context.Context) error { return nil }
func (s *gateSink) Close(context.Context) error { return nil }

// quietSourceConfig makes sources whose Open signals entered (dropped
// when full) and waits until opened is closed (nil: closed), and that then
// read a record {"n": i} for each i sent on feed, nothing else, until
// stopped; they report one split.
type quietSourceConfig struct {
	entered, opened chan struct{}
	feed            chan int
}

func (c *quietSourceConfig) Validate() error                     { return nil }
func (c *quietSourceConfig) NewSource() (pipeline.Source, error) { return &quietSource{cfg: c}, nil }

type quietSource struct{ cfg *quietSourceConfig }

func (s *quietSource) Open(ctx context.Context, _ *pipeline.SourceContext) error {
	select {
	case s.cfg.entered <- struct{}{}:
	default:
	}
	if s.cfg.opened == nil {
		return nil
	}
	select {
	case <-s.cfg.opened:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
func (s *quietSource) Read(ctx context.Context, b *pipeline.ReadBatch) error {
	select {
	case n := <-s.cfg.feed:
		b.Records = append(b.Records, pipeline.NewRecord(map[string]any{"n": n}))
		b.Position = []byte{byte(n)}
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
func (s *quietSource) Close(context.Context) error { return nil }

// quietSplit is the split a quiet source reports.
var quietSplit = pipeline.SplitStatus{Split: 0, Name: "quiet/0", Offset: 42, Lag: new(int64(7)), Idle: true}

func (s *quietSource) SplitStatus() []pipeline.SplitStatus {
	return []pipeline.SplitStatus{quietSplit}
}

// statusEnv is testEnv with the status tests' components.
func statusEnv(gate *gateSinkConfig, quiet *quietSourceConfig) *pipeline.Env {
	env := testEnv()
	env.RegisterSink(pipeline.SinkPlugin{Type: "gate", New: func() pipeline.SinkConfig { return gate }})
	env.RegisterSource(pipeline.SourcePlugin{Type: "quiet", New: func() pipeline.SourceConfig { return quiet }})
	return env
}

// node returns the status of node id.
func node(t *testing.T, s pipeline.Status, id string) pipeline.NodeStatus {
	t.Helper()
	for _, n := range s.Nodes {
		if n.ID == id {
			return n
		}
	}
	t.Fatalf("no node %q in the status", id)
	return pipeline.NodeStatus{}
}

// sum adds up f over the subtasks of n.
func sum(n pipeline.NodeStatus, f func(pipeline.SubtaskStatus) int64) int64 {
	total := int64(0)
	for _, st := range n.Subtasks {
		total += f(st)
	}
	return total
}

func recordsIn(st pipeline.SubtaskStatus) int64  { return st.RecordsIn }
func recordsOut(st pipeline.SubtaskStatus) int64 { return st.RecordsOut }
func written(st pipeline.SubtaskStatus) int64    { return *st.RecordsWritten }

// sampleNs returns the field n of a sink's sampled records, in order.
func sampleNs(t *testing.T, s pipeline.SinkSample) []int {
	t.Helper()
	var out []int
	for _, raw := range s.Records {
		var fields map[string]any
		require.NoError(t, json.Unmarshal(raw, &fields))
		out = append(out, int(fields["n"].(float64)))
	}
	return out
}

// sample returns the sample of sink id.
func sample(t *testing.T, s pipeline.Status, id string) pipeline.SinkSample {
	t.Helper()
	for _, ss := range s.Samples {
		if ss.Sink == id {
			return ss
		}
	}
	t.Fatalf("no sample of sink %q", id)
	return pipeline.SinkSample{}
}

const statusText = `
version: 1
name: status
checkpoint:
  interval: 5ms
sources:
  - id: nums
    type: seq
    count: 1000
    keys: 10
    pace: true
steps:
  - id: p
    pass: 500
    on_error: dead_letter
  - id: counts
    count_by: k
    parallelism: 2
sinks:
  - id: out
    type: txn
    parallelism: 2
  - id: all
    type: collect
    from: p
  - id: dead
    type: collect
    from: p.errors
`

// TestStatusAfterBoundedRun: once a checkpointed bounded run finished, its
// status has the plan, every node's totals (equal to what went through),
// the checkpoints, the transactions the runtime committed, the keyed
// state's size per subtask, and the last records of each sink.
func TestStatusAfterBoundedRun(t *testing.T) {
	spec, err := pipeline.Load(testEnv(), "status.yaml", []byte(statusText))
	require.NoError(t, err)
	log := newTxnLog()
	cols := map[string]*collector{"all": newCollector(), "dead": newCollector()}
	for _, s := range spec.Sinks {
		switch c := s.Config.(type) {
		case *txnConfig:
			c.log = log
		case *collectConfig:
			c.c = cols[s.ID]
		}
	}
	r, err := pipeline.NewRunner(spec, pipeline.RunnerOptions{StateDir: t.TempDir(), Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	before := r.Status()
	require.Equal(t, "starting", before.State)
	require.Nil(t, before.Started)
	require.NoError(t, r.Run(context.Background()))
	s := r.Status()

	require.Equal(t, "status", s.Pipeline)
	require.Equal(t, "finished", s.State)
	require.NotNil(t, s.Started)
	require.Positive(t, s.UptimeMS, "the source paces itself: the run takes milliseconds")
	require.Zero(t, s.Restarts)
	require.Empty(t, s.LastError)
	require.Equal(t, r.Plan().Guarantee.String(), s.Guarantee)
	require.Equal(t, r.Plan().GuaranteeWhy, s.GuaranteeReasons)

	// The plan.
	var ids []string
	for _, n := range s.Nodes {
		ids = append(ids, n.ID)
	}
	require.ElementsMatch(t, []string{"nums", "p", "counts", "out", "all", "dead"}, ids)
	require.Equal(t, "source", node(t, s, "nums").Kind)
	require.Equal(t, "seq", node(t, s, "nums").Type)
	require.Equal(t, "count_by", node(t, s, "counts").Type)
	require.Len(t, node(t, s, "counts").Subtasks, 2)
	require.Equal(t, node(t, s, "nums").Task, node(t, s, "all").Task, "all is chained to nums")
	require.NotEqual(t, node(t, s, "nums").Task, node(t, s, "counts").Task)
	require.Contains(t, s.Edges, pipeline.EdgeStatus{From: "p", To: "counts", Partition: "hash", Key: []string{"k"}})
	require.Contains(t, s.Edges, pipeline.EdgeStatus{From: "p", To: "all", Partition: "forward", Key: []string{}, Chained: true})
	require.Contains(t, s.Edges, pipeline.EdgeStatus{From: "p", Side: "errors", To: "dead", Partition: "forward", Key: []string{}})
	require.Len(t, s.Tasks, 3, "nums -> p -> all, counts -> out, dead (a side stream is never chained)")
	require.Equal(t, pipeline.TaskStatus{Index: 0, Name: "nums -> p -> all", Parallelism: 1, Nodes: []string{"nums", "p", "all"}}, s.Tasks[0])

	// Totals: the dead letter (n = 500) leaves p on its errors stream.
	require.Equal(t, int64(1000), sum(node(t, s, "nums"), recordsOut))
	require.Equal(t, int64(1000), sum(node(t, s, "p"), recordsIn))
	require.Equal(t, int64(999), sum(node(t, s, "p"), recordsOut))
	require.Equal(t, int64(1), sum(node(t, s, "p"), func(st pipeline.SubtaskStatus) int64 { return st.RecordErrors }))
	require.Equal(t, int64(999), sum(node(t, s, "counts"), recordsIn))
	require.Equal(t, int64(999), sum(node(t, s, "counts"), recordsOut))
	for _, sink := range []struct {
		id string
		n  int64
	}{{"out", 999}, {"all", 999}, {"dead", 1}} {
		require.Equal(t, sink.n, sum(node(t, s, sink.id), recordsIn), sink.id)
		require.Equal(t, sink.n, sum(node(t, s, sink.id), written), sink.id)
		require.Zero(t, sum(node(t, s, sink.id), recordsOut), sink.id)
	}
	require.Nil(t, node(t, s, "nums").Subtasks[0].RecordsWritten, "only sinks write")
	for _, n := range s.Nodes {
		for _, st := range n.Subtasks {
			require.Equal(t, "ended", st.Phase, "%s[%d]", n.ID, st.Subtask)
			require.Nil(t, st.Watermark, "no event time")
		}
	}

	// Checkpoints, transactions and state.
	require.NotNil(t, s.Checkpoints.LatestCompleted)
	require.True(t, s.Checkpoints.LatestCompleted.Final)
	require.NotEmpty(t, s.Checkpoints.History)
	log.mu.Lock()
	committed := int64(len(log.done))
	log.mu.Unlock()
	require.Positive(t, committed)
	require.Equal(t, pipeline.TransactionStatus{Commits: committed}, s.Transactions)
	for _, st := range node(t, s, "counts").Subtasks {
		require.NotNil(t, st.StateBytes, "counts[%d] keeps keyed state", st.Subtask)
		require.Positive(t, *st.StateBytes)
	}
	require.Nil(t, node(t, s, "nums").Subtasks[0].StateBytes)

	// The sinks' samples: the last records each received, in order.
	require.Len(t, s.Samples, 3)
	all := sample(t, s, "all")
	require.False(t, all.DeadLetters)
	require.Equal(t, seqInts(980, 1000), sampleNs(t, all))
	dead := sample(t, s, "dead")
	require.True(t, dead.DeadLetters)
	require.Len(t, dead.Records, 1)
	require.Contains(t, string(dead.Records[0]), `"n":500`)
	out := sample(t, s, "out")
	require.Len(t, out.Records, 20, "the last records of its two subtasks")

	// The JSON carries every field of the contract.
	b, err := json.Marshal(s)
	require.NoError(t, err)
	var doc map[string]any
	require.NoError(t, json.Unmarshal(b, &doc))
	require.ElementsMatch(t, []string{"pipeline", "state", "started", "uptime_ms", "restarts", "last_error", "guarantee",
		"guarantee_reasons", "now", "sampled_at", "window_ms", "nodes", "edges", "tasks", "checkpoints", "transactions", "samples"},
		slices.Collect(mapKeys(doc)))
	sub := doc["nodes"].([]any)[0].(map[string]any)["subtasks"].([]any)[0].(map[string]any)
	require.ElementsMatch(t, []string{"subtask", "records_in", "records_out", "records_in_per_second", "records_out_per_second",
		"busy_ratio", "backpressured_ratio", "idle_ratio", "backpressure", "phase", "watermark", "watermark_lag_ms",
		"late_dropped", "record_errors", "state_bytes"}, slices.Collect(mapKeys(sub)))
}

// mapKeys yields the keys of m.
func mapKeys(m map[string]any) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// seqInts returns from, ..., to-1.
func seqInts(from, to int) []int {
	var out []int
	for i := from; i < to; i++ {
		out = append(out, i)
	}
	return out
}

// waitForStatus polls the status until ok accepts it (the sampler's
// window moves once a second: there is no event to wait on).
func waitForStatus(t *testing.T, r *pipeline.Runner, what string, ok func(pipeline.Status) bool) pipeline.Status {
	t.Helper()
	found := make(chan pipeline.Status, 1)
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			if s := r.Status(); ok(s) {
				found <- s
				return
			}
			select {
			case <-tick.C:
			case <-stop:
				return
			}
		}
	}()
	return testkit.WaitFor(t, found, what)
}

// windowAfter accepts a status whose rates are measured after at.
func windowAfter(at time.Time) func(pipeline.Status) bool {
	return func(s pipeline.Status) bool {
		return s.SampledAt != nil && s.SampledAt.Add(-time.Duration(s.WindowMS)*time.Millisecond).After(at)
	}
}

// runInBackground runs r and returns a channel that gets Run's error.
func runInBackground(r *pipeline.Runner) <-chan error {
	done := make(chan error, 1)
	go func() { done <- r.Run(context.Background()) }()
	return done
}

// TestStatusBackpressure: a sink that blocks in Write keeps its task busy
// and backpressures the source's task, which blocks on the full channel
// between them: over any window while the gate is shut the source is
// backpressured (high) and the sink busy; /metrics counts that time.
func TestStatusBackpressure(t *testing.T) {
	gate := &gateSinkConfig{open: make(chan struct{}), entered: make(chan struct{}, 1)}
	spec, err := pipeline.Load(statusEnv(gate, nil), "bp.yaml", []byte(`
version: 1
name: bp
runtime:
  chaining: false
  batch_size: 10
  channel_capacity: 1
sources:
  - id: nums
    type: seq
    forever: true
sinks:
  - id: stuck
    type: gate
`))
	require.NoError(t, err)
	metrics := pipeline.NewMetrics()
	r, err := pipeline.NewRunner(spec, pipeline.RunnerOptions{Metrics: metrics, Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	done := runInBackground(r)
	opened := false
	defer func() {
		if !opened {
			close(gate.open)
		}
	}()

	testkit.WaitFor(t, gate.entered, "the sink to block in Write")
	waitForStatus(t, r, "the source's task to block on its full output", func(s pipeline.Status) bool {
		return node(t, s, "nums").Subtasks[0].Phase == "backpressured"
	})
	blocked := time.Now()
	s := waitForStatus(t, r, "a window that starts once the source blocked", windowAfter(blocked))
	src, sink := node(t, s, "nums").Subtasks[0], node(t, s, "stuck").Subtasks[0]
	require.Greater(t, src.BackpressuredRatio, 0.5, "the source's task is blocked on its output all along: %+v", src)
	require.Equal(t, pipeline.BackpressureHigh, src.Backpressure)
	require.Greater(t, sink.BusyRatio, 0.5, "the sink's task is in Write all along: %+v", sink)
	require.Equal(t, pipeline.BackpressureOK, sink.Backpressure)
	require.Equal(t, "running", s.State)
	bp := gathered(t, metrics.Registry, "eddy_task_backpressured_seconds_total", "id", "nums", "subtask", "0").GetCounter().GetValue()
	busy := gathered(t, metrics.Registry, "eddy_task_busy_seconds_total", "id", "stuck", "subtask", "0").GetCounter().GetValue()
	window := float64(s.WindowMS) / 1000
	require.Greater(t, bp, window/2, "the counter holds at least the window's backpressured time")
	require.Greater(t, busy, window/2)

	opened = true
	close(gate.open)
	require.NoError(t, r.Stop())
	require.NoError(t, testkit.WaitFor(t, done, "the run to stop"))
	require.Equal(t, "stopped", r.Status().State)
}

// TestStatusIdleAndSplits: a source that reads nothing leaves its task
// idle (and the task of its sink too); the status shows the splits it
// reports. Before its Open returns, the run is starting; a run that
// restores a checkpoint is restoring until then.
func TestStatusIdleAndSplits(t *testing.T) {
	dir := t.TempDir()
	quietText := `
version: 1
name: quiet
checkpoint:
  interval: 1h
runtime:
  chaining: false
sources:
  - id: q
    type: quiet
sinks:
  - id: out
    type: collect
`
	for _, run := range []string{"starting", "restoring"} {
		t.Run(run, func(t *testing.T) {
			quiet := &quietSourceConfig{entered: make(chan struct{}, 1), opened: make(chan struct{})}
			spec, err := pipeline.Load(statusEnv(&gateSinkConfig{}, quiet), "quiet.yaml", []byte(quietText))
			require.NoError(t, err)
			spec.Sinks[0].Config.(*collectConfig).c = newCollector()
			r, err := pipeline.NewRunner(spec, pipeline.RunnerOptions{StateDir: dir, Logger: slog.New(slog.DiscardHandler)})
			require.NoError(t, err)
			done := runInBackground(r)
			defer func() {
				select {
				case <-quiet.opened:
				default:
					close(quiet.opened)
				}
				_ = r.Stop()
				require.NoError(t, testkit.WaitFor(t, done, "the run to stop"))
			}()

			// The source's Open waits: the job runs, but not every task opened.
			testkit.WaitFor(t, quiet.entered, "the source to open")
			s := r.Status()
			require.Equal(t, run, s.State)
			require.Nil(t, node(t, s, "q").Subtasks[0].Splits, "a source reports its splits once it opened")
			close(quiet.opened)
			waitForStatus(t, r, "the run to be running", func(s pipeline.Status) bool { return s.State == "running" })

			s = waitForStatus(t, r, "the source's task to wait", func(s pipeline.Status) bool {
				return node(t, s, "q").Subtasks[0].Phase == "idle"
			})
			require.Equal(t, []pipeline.SplitStatus{quietSplit}, node(t, s, "q").Subtasks[0].Splits)
			s = waitForStatus(t, r, "a window after the source opened", windowAfter(time.Now()))
			for _, id := range []string{"q", "out"} {
				st := node(t, s, id).Subtasks[0]
				require.Greater(t, st.IdleRatio, 0.5, "%s waits for input all along: %+v", id, st)
				require.Zero(t, st.RecordsInPerSecond, id)
				require.Equal(t, pipeline.BackpressureOK, st.Backpressure, id)
			}
			require.Zero(t, node(t, s, "q").Subtasks[0].BackpressuredRatio)
		})
	}
}

// TestStatusRestartsAndLastError: a job that fails on every attempt is
// restarted as the strategy allows; the status counts the restarts and
// keeps the failure.
func TestStatusRestartsAndLastError(t *testing.T) {
	r, _ := newRunner(t, t.TempDir(), "restart:\n  strategy: fixed_delay\n  attempts: 2\n  delay: 1ms", "count: 300", 150,
		pipeline.RunnerOptions{})
	require.Error(t, r.Run(context.Background()))
	s := r.Status()
	require.Equal(t, "failed", s.State)
	require.Equal(t, 2, s.Restarts)
	require.Contains(t, s.LastError, "boom")
}

// TestStatusSampleAfterABurst: records that arrive shortly after the
// sample was published (the paced source's first batches are published
// at the first flush, the rest comes within sinkSamplePeriod), and then
// nothing more, are published all the same: a sink chained to its source
// and one behind a channel show the last records of a source that went
// quiet.
func TestStatusSampleAfterABurst(t *testing.T) {
	spec, err := pipeline.Load(testEnv(), "burst.yaml", []byte(`
version: 1
name: burst
sources:
  - id: nums
    type: seq
    count: 1000
    hold: true
    pace: true
steps:
  - id: p
    from: nums
    pass: null
    rebalance: true
sinks:
  - id: chained
    type: collect
    from: nums
  - id: behind
    type: collect
    from: p
`))
	require.NoError(t, err)
	for _, s := range spec.Sinks {
		s.Config.(*collectConfig).c = newCollector()
	}
	r, err := pipeline.NewRunner(spec, pipeline.RunnerOptions{Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	done := runInBackground(r)
	defer func() {
		require.NoError(t, r.Stop())
		require.NoError(t, testkit.WaitFor(t, done, "the run to stop"))
	}()
	s := waitForStatus(t, r, "the last records in the samples", func(s pipeline.Status) bool {
		return slices.Equal(sampleNs(t, sample(t, s, "chained")), seqInts(980, 1000)) &&
			slices.Equal(sampleNs(t, sample(t, s, "behind")), seqInts(980, 1000))
	})
	require.Equal(t, "running", s.State, "the source holds: the run goes on")
}

// TestStatusWatermark: each subtask shows its task's watermark and how far
// it is behind the wall clock, as of the status's now.
func TestStatusWatermark(t *testing.T) {
	spec, err := pipeline.Load(testEnv(), "wm.yaml", []byte(`
version: 1
name: wm
runtime:
  chaining: false
sources:
  - id: nums
    type: seq
    count: 100
    hold: true
    event_time: "n * 1000"
    watermark:
      max_out_of_orderness: 0ms
      interval: 0
sinks:
  - id: out
    type: collect
`))
	require.NoError(t, err)
	spec.Sinks[0].Config.(*collectConfig).c = newCollector()
	r, err := pipeline.NewRunner(spec, pipeline.RunnerOptions{Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	before := r.Status()
	require.Nil(t, node(t, before, "nums").Subtasks[0].Watermark, "no watermark before the run")
	done := runInBackground(r)
	defer func() {
		require.NoError(t, r.Stop())
		require.NoError(t, testkit.WaitFor(t, done, "the run to stop"))
	}()
	// The newest event time is 99 000: W = 99 000 - 0 - 1.
	const want = int64(98_999)
	s := waitForStatus(t, r, "the watermark to reach the sink", func(s pipeline.Status) bool {
		wm := node(t, s, "out").Subtasks[0].Watermark
		return wm != nil && *wm == want
	})
	for _, id := range []string{"nums", "out"} {
		st := node(t, s, id).Subtasks[0]
		require.Equal(t, want, *st.Watermark, id)
		require.Equal(t, s.Now.UnixMilli()-want, *st.WatermarkLagMS, id)
	}
}

// TestStatusTransactions: the status counts the transactions the runtime
// committed once their checkpoint completed, and the open transaction with
// records that a cancelled job dropped.
func TestStatusTransactions(t *testing.T) {
	quiet := &quietSourceConfig{feed: make(chan int)}
	spec, err := pipeline.Load(statusEnv(&gateSinkConfig{}, quiet), "txn.yaml", []byte(`
version: 1
name: txn
checkpoint:
  interval: 1h
sources:
  - id: q
    type: quiet
sinks:
  - id: out
    type: txn
`))
	require.NoError(t, err)
	spec.Sinks[0].Config.(*txnConfig).log = newTxnLog()
	r, err := pipeline.NewRunner(spec, pipeline.RunnerOptions{StateDir: t.TempDir(), Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	done := runInBackground(r)
	sinkIn := func(n int64) func(pipeline.Status) bool {
		return func(s pipeline.Status) bool { return node(t, s, "out").Subtasks[0].RecordsIn == n }
	}
	feed := func(from, to int) {
		for i := from; i < to; i++ {
			testkit.WaitFor(t, sendOn(quiet.feed, i), "the source to read")
		}
	}

	feed(0, 10)
	waitForStatus(t, r, "10 records at the sink", sinkIn(10))
	_, err = r.TriggerSavepoint(context.Background(), t.TempDir())
	require.NoError(t, err)
	s := waitForStatus(t, r, "the savepoint's transaction to be committed", func(s pipeline.Status) bool {
		return s.Transactions.Commits == 1
	})
	require.Zero(t, s.Transactions.Aborts)
	feed(10, 15)
	waitForStatus(t, r, "5 more records at the sink", sinkIn(15))
	r.Cancel()
	require.Error(t, testkit.WaitFor(t, done, "the run to end"))
	require.Equal(t, pipeline.TransactionStatus{Commits: 1, Aborts: 1}, r.Status().Transactions,
		"the 5 records after the savepoint were in the transaction the cancel dropped")
}

// sendOn sends v on ch from a goroutine; the channel it returns is closed
// once v was taken.
func sendOn[T any](ch chan<- T, v T) <-chan struct{} {
	sent := make(chan struct{})
	go func() {
		ch <- v
		close(sent)
	}()
	return sent
}
