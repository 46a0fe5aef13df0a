package ui_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"sync"
	"time"

	"github.com/eddy-stream/eddy/admin"
	// Every connector and step kind registers itself in pipeline.Default.
	_ "github.com/eddy-stream/eddy/connectors/all"
	_ "github.com/eddy-stream/eddy/operators"
	"github.com/eddy-stream/eddy/pipeline"
)

// fakeName is the fake pipeline's name.
const fakeName = "shop"

// fakeTarget is a running pipeline whose status is fakeStatus and whose
// savepoint calls are recorded.
type fakeTarget struct {
	mu sync.Mutex
	// triggers are the directories of the savepoints asked for; stops
	// counts the stops with a savepoint.
	triggers []string
	stops    int
}

func newFakeTarget() *fakeTarget { return &fakeTarget{} }

func (f *fakeTarget) State() pipeline.RunState { return pipeline.RunRunning }

func (f *fakeTarget) Status() pipeline.Status { return fakeStatus() }

func (f *fakeTarget) TriggerSavepoint(_ context.Context, dir string) (pipeline.Savepoint, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.triggers = append(f.triggers, dir)
	return pipeline.Savepoint{ID: 7, Path: "/sp/sp-7.db"}, nil
}

func (f *fakeTarget) StopWithSavepoint(context.Context, string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.stops++
	return nil
}

func (f *fakeTarget) FinalSavepoint(context.Context) (pipeline.Savepoint, error) {
	return pipeline.Savepoint{ID: 8, Path: "/sp/sp-8.db", Final: true}, nil
}

// calls returns the savepoint directories asked for and the stops.
func (f *fakeTarget) calls() ([]string, int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.triggers...), f.stops
}

// newFakePipeline is the admin endpoint of target, with its savepoints in
// savepointDir.
func newFakePipeline(target *fakeTarget, savepointDir string) *admin.Pipeline {
	return admin.NewPipeline(admin.PipelineOptions{Name: fakeName, Target: target, Metrics: pipeline.NewMetrics(),
		SavepointDir: savepointDir, Checkpoints: true, Logger: quietLogger()})
}

func quietLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

func ptr[T any](v T) *T { return &v }

// enrich is the id of a node whose name is markup: the page must show it
// as text.
const enrich = "<i>enrich</i>"

// fakeStatus is a status with every part the dashboard renders, markup in
// the user's data (records, errors, an id) included.
func fakeStatus() pipeline.Status {
	started := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	wm := started.UnixMilli()
	return pipeline.Status{
		Pipeline: fakeName, State: "running", Started: &started, UptimeMS: (3600 + 120 + 3) * 1000, Restarts: 2,
		LastError: `sink "out": <script>alert(1)</script> refused`,
		Guarantee: "exactly-once", GuaranteeReasons: []string{},
		Now: started.Add(time.Hour),
		Nodes: []pipeline.NodeStatus{
			{ID: "orders", Kind: "source", Type: "kafka", Parallelism: 2, Task: 0, Subtasks: []pipeline.SubtaskStatus{
				{Subtask: 0, RecordsOut: 90000, RecordsOutPerSecond: 1500, BusyRatio: 0.3, IdleRatio: 0.7, Backpressure: "ok", Phase: "busy",
					Splits: []pipeline.SplitStatus{{Split: 0, Name: "orders/0", Offset: 4711, Lag: ptr[int64](12)}, {Split: 1, Name: "orders/2", Offset: -1}}},
				{Subtask: 1, RecordsOut: 30000, RecordsOutPerSecond: 500, BusyRatio: 0.1, IdleRatio: 0.9, Backpressure: "ok", Phase: "idle",
					Splits: []pipeline.SplitStatus{{Split: 0, Name: "orders/1", Offset: 99, Lag: ptr[int64](0), Idle: true}}},
			}},
			{ID: enrich, Kind: "step", Type: "set", Detail: "<b>bold</b>", Parallelism: 2, Task: 0, Subtasks: []pipeline.SubtaskStatus{
				{Subtask: 0, RecordsIn: 90000, RecordsOut: 90000, RecordsInPerSecond: 1500, RecordsOutPerSecond: 1500, Backpressure: "ok", RecordErrors: 4},
				{Subtask: 1, RecordsIn: 30000, RecordsOut: 30000, RecordsInPerSecond: 500, RecordsOutPerSecond: 500, Backpressure: "ok"},
			}},
			{ID: "slow", Kind: "step", Type: "key_by", Parallelism: 1, Task: 1, Subtasks: []pipeline.SubtaskStatus{
				{Subtask: 0, RecordsIn: 120000, RecordsOut: 100, RecordsInPerSecond: 2000, RecordsOutPerSecond: 2,
					BusyRatio: 0.2, BackpressuredRatio: 0.75, IdleRatio: 0.05, Backpressure: "high", Phase: "backpressured",
					Watermark: &wm, WatermarkLagMS: ptr[int64](2500), LateDropped: 3, StateBytes: ptr[int64](2048)},
			}},
			{ID: "out", Kind: "sink", Type: "file", Parallelism: 1, Task: 2, Subtasks: []pipeline.SubtaskStatus{
				{Subtask: 0, RecordsIn: 100, RecordsWritten: ptr[int64](100), RecordsInPerSecond: 2, Backpressure: "ok"},
			}},
			{ID: "bad", Kind: "sink", Type: "stdout", Parallelism: 1, Task: 3, Subtasks: []pipeline.SubtaskStatus{
				{Subtask: 0, RecordsIn: 4, RecordsWritten: ptr[int64](4), Backpressure: "ok"},
			}},
		},
		Edges: []pipeline.EdgeStatus{
			{From: "orders", To: enrich, Partition: "forward", Key: []string{}, Chained: true},
			{From: enrich, To: "slow", Partition: "hash", Key: []string{"user"}},
			{From: "slow", To: "out", Partition: "forward", Key: []string{}},
			{From: enrich, Side: "errors", To: "bad", Partition: "forward", Key: []string{}},
		},
		Tasks: []pipeline.TaskStatus{
			{Index: 0, Name: "orders -> " + enrich, Parallelism: 2, Nodes: []string{"orders", enrich}},
			{Index: 1, Name: "slow", Parallelism: 1, Nodes: []string{"slow"}},
			{Index: 2, Name: "out", Parallelism: 1, Nodes: []string{"out"}},
			{Index: 3, Name: "bad", Parallelism: 1, Nodes: []string{"bad"}},
		},
		Checkpoints: pipeline.CheckpointStats{
			Restored: &pipeline.CheckpointRestore{ID: 5, At: started},
			InProgress: []pipeline.CheckpointRecord{
				{ID: 9, Kind: "checkpoint", Status: "in_progress", Triggered: started.Add(59 * time.Minute), DurationMS: 40, Acknowledged: 1, Tasks: 4},
			},
			History: []pipeline.CheckpointRecord{
				{ID: 8, Kind: "checkpoint", Status: "completed", Triggered: started.Add(58 * time.Minute), DurationMS: 120, Acknowledged: 4, Tasks: 4, StateBytes: 4096, AlignmentMS: 15},
				{ID: 7, Kind: "checkpoint", Status: "failed", Triggered: started.Add(57 * time.Minute), DurationMS: 3000, Acknowledged: 2, Tasks: 4, Error: "<u>timeout</u>"},
				{ID: 6, Kind: "savepoint", Status: "completed", Triggered: started.Add(56 * time.Minute), DurationMS: 80, Acknowledged: 4, Tasks: 4, StateBytes: 2048},
			},
		},
		Transactions: pipeline.TransactionStatus{Commits: 8, Aborts: 1},
		Samples: []pipeline.SinkSample{
			{Sink: "out", Records: []json.RawMessage{json.RawMessage(`{"n":1,"user":"<img src=x onerror=alert(1)>"}`)}},
			{Sink: "bad", DeadLetters: true, Records: []json.RawMessage{json.RawMessage(`{"error":"</code><script>alert(2)</script>","step":"<i>enrich</i>"}`)}},
		},
	}
}
