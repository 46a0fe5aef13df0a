package pipeline_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/eddy-stream/eddy/checkpoint"
	"github.com/eddy-stream/eddy/internal/testkit"
	"github.com/eddy-stream/eddy/pipeline"
	"github.com/eddy-stream/eddy/pipeline/pipelinetest"
)

// savepointText is a keyed count from two paced source subtasks to a
// two-phase-commit sink. The first %s is the checkpoint block's extra keys,
// the second the source's length (forever: true, or count: N).
const savepointText = `
version: 1
name: sp
checkpoint:
  interval: %s
  mode: %s
  retain: %d
sources:
  - id: nums
    type: seq
    %s
    keys: 7
    pace: true
    parallelism: 2
steps:
  - id: counts
    count_by: k
    parallelism: 3
sinks:
  - id: out
    type: txn
    parallelism: 2
`

// recStore is a bbolt checkpoint store that records, for each checkpoint
// begun, whether it was marked as a savepoint (its SavepointMetaPart was
// put), and can fail the Put of a savepoint's metadata.
type recStore struct {
	s *checkpoint.Store

	mu          sync.Mutex
	savepoints  map[int64]bool // by id, of every checkpoint begun
	failMetaPut int            // Puts of SavepointMetaPart to fail
}

func newRecStore(t *testing.T, retain int) *recStore {
	t.Helper()
	s, err := checkpoint.Open(t.TempDir(), checkpoint.Options{Retain: retain, Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.Close(context.Background())) })
	return &recStore{s: s, savepoints: map[int64]bool{}}
}

func (r *recStore) Begin(id int64, meta checkpoint.Meta) (checkpoint.Writer, error) {
	r.mu.Lock()
	r.savepoints[id] = false
	r.mu.Unlock()
	p, err := r.s.Begin(id, meta)
	if err != nil {
		return nil, err
	}
	return &recPending{Writer: p, r: r, id: id}, nil
}

func (r *recStore) ExportSavepoint(id int64, path string) error {
	return r.s.ExportSavepoint(id, path)
}

// savepoint reports whether checkpoint id was marked as a savepoint.
func (r *recStore) savepoint(id int64) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.savepoints[id]
}

// completed returns the ids of the completed checkpoints in the store.
func (r *recStore) completed(t *testing.T) []int64 {
	t.Helper()
	infos, err := r.s.List()
	require.NoError(t, err)
	var ids []int64
	for _, i := range infos {
		if i.Complete {
			ids = append(ids, i.ID)
		}
	}
	return ids
}

type recPending struct {
	checkpoint.Writer
	r  *recStore
	id int64
}

func (p *recPending) Put(part string, blob []byte) error {
	p.r.mu.Lock()
	fail := part == pipeline.SavepointMetaPart && p.r.failMetaPut > 0
	if fail {
		p.r.failMetaPut--
	}
	p.r.mu.Unlock()
	if fail {
		return errors.New("injected: disk full")
	}
	if err := p.Writer.Put(part, blob); err != nil {
		return err
	}
	if part == pipeline.SavepointMetaPart {
		p.r.mu.Lock()
		p.r.savepoints[p.id] = true
		p.r.mu.Unlock()
	}
	return nil
}

// loadSavepointPlan loads savepointText with a txn sink writing to log.
func loadSavepointPlan(t *testing.T, log *txnLog, interval, mode string, retain int, length string) *pipeline.Plan {
	t.Helper()
	plan, _ := load(t, fmt.Sprintf(savepointText, interval, mode, retain, length))
	plan.Spec.Sinks[0].Config.(*txnConfig).log = log
	return plan
}

// openSavepoint opens a savepoint file and returns it with its metadata
// part decoded and the next position of each source subtask.
func openSavepoint(t *testing.T, path string) (*checkpoint.Checkpoint, pipeline.SavepointMeta, []int64) {
	t.Helper()
	cp, err := checkpoint.OpenSavepoint(path)
	require.NoError(t, err)
	t.Cleanup(func() { _ = cp.Close() })
	b, err := cp.Get(pipeline.SavepointMetaPart)
	require.NoError(t, err)
	meta, err := pipeline.DecodeSavepointMeta(b)
	require.NoError(t, err)
	var next []int64
	for sub := range 2 {
		pos, err := cp.Get(fmt.Sprintf("src/nums/%d", sub))
		require.NoError(t, err)
		next = append(next, int64(binary.BigEndian.Uint64(pos)))
	}
	return cp, meta, next
}

// startReading starts plan and returns once both source subtasks emitted
// records: a savepoint then holds a position for each (the test source
// cannot restore an empty one).
func startReading(t *testing.T, plan *pipeline.Plan, opts pipeline.JobOptions) *pipeline.Job {
	t.Helper()
	opts.Metrics = pipeline.NewMetrics()
	job, err := pipeline.Start(context.Background(), plan, opts)
	require.NoError(t, err)
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for sub := range 2 {
		for pipeline.CounterValue(opts.Metrics.RecordsOut(pipeline.SubtaskInfo{ID: "nums", Subtask: sub})) == 0 {
			select {
			case <-tick.C:
			case <-job.Done():
				t.Fatalf("the job ended: %v", job.Wait())
			}
		}
	}
	return job
}

// requireExactlyOnce: the committed output holds every n in 0..n-1 once,
// and each key's counts are 1, 2, ... in the order of its records.
func requireExactlyOnce(t *testing.T, out []map[string]any, n int) {
	t.Helper()
	ns := make([]int, 0, len(out))
	perKey := map[int][]int64{}
	for _, r := range out {
		ns = append(ns, r["n"].(int))
		perKey[r["k"].(int)] = append(perKey[r["k"].(int)], r["count"].(int64))
	}
	slices.Sort(ns)
	require.Len(t, ns, n, "records committed")
	for i, got := range ns {
		require.Equal(t, i, got, "record %d missing or repeated", i)
	}
	for k, counts := range perKey {
		slices.Sort(counts)
		for i, c := range counts {
			require.Equal(t, int64(i+1), c, "key %d", k)
		}
	}
}

// TestTriggerSavepointRestores takes a savepoint of a running job, crashes
// the job, restores the savepoint file into a new job with another store
// and lets it finish: the committed output is exactly once, also in
// at_least_once mode, where the savepoint is aligned all the same.
func TestTriggerSavepointRestores(t *testing.T) {
	for _, mode := range []string{"exactly_once", "at_least_once"} {
		t.Run(mode, func(t *testing.T) {
			store, log := newRecStore(t, 3), newTxnLog()
			plan := loadSavepointPlan(t, log, "1h", mode, 3, "forever: true")
			job := startReading(t, plan, pipeline.JobOptions{Store: store})
			dir := filepath.Join(t.TempDir(), "savepoints")
			sp, err := job.TriggerSavepoint(context.Background(), dir)
			require.NoError(t, err)
			require.Equal(t, int64(1), sp.ID)
			require.False(t, sp.Final)
			require.Equal(t, filepath.Join(dir, pipeline.SavepointFileName(sp.ID, sp.Time)), sp.Path)
			require.True(t, store.savepoint(sp.ID), "the savepoint's checkpoint is marked as one")
			job.Cancel() // a crash: what the job did after the savepoint is lost
			require.ErrorIs(t, pipelinetest.WaitJob(t, job), context.Canceled)

			cp, meta, next := openSavepoint(t, sp.Path)
			require.Equal(t, sp.ID, cp.ID())
			require.Equal(t, "sp", cp.Meta().Pipeline)
			require.Equal(t, plan.Spec.Hash, cp.Meta().FileHash)
			require.Equal(t, pipeline.SavepointMeta{
				Version: 1, ID: sp.ID, Pipeline: "sp", FileHash: plan.Spec.Hash, Time: sp.Time.UTC(), MaxParallelism: 128,
				Nodes: []pipeline.SavepointNode{{ID: "nums", Kind: "source", Parallelism: 2}, {ID: "counts", Kind: "step", Parallelism: 3}, {ID: "out", Kind: "sink", Parallelism: 2}},
			}, meta)

			// Restore at another parallelism of the keyed step, and let the
			// source end a little after where the savepoint left it.
			n := int(max(next[0], next[1])) + 2000
			text := strings.Replace(fmt.Sprintf(savepointText, "1h", mode, 3, fmt.Sprintf("count: %d", n)), "parallelism: 3", "parallelism: 1", 1)
			plan2, _ := load(t, text)
			plan2.Spec.Sinks[0].Config.(*txnConfig).log = log
			store2 := newRecStore(t, 3)
			metrics := pipeline.NewMetrics()
			job2, err := pipeline.Start(context.Background(), plan2, pipeline.JobOptions{Store: store2, Restore: cp, Metrics: metrics})
			require.NoError(t, err)
			require.NoError(t, pipelinetest.WaitJob(t, job2))
			require.Equal(t, sp.ID, metrics.CheckpointStats().Restored.ID)
			require.Equal(t, float64(sp.ID), gathered(t, metrics.Registry, "eddy_checkpoint_restored_id").GetGauge().GetValue())
			// A later job of the same run that starts empty clears it.
			require.NoError(t, pipelinetest.RunJob(context.Background(), loadSavepointPlan(t, newTxnLog(), "1h", mode, 3, "count: 10"),
				pipeline.JobOptions{Store: newRecStore(t, 3), Metrics: metrics}))
			require.Nil(t, metrics.CheckpointStats().Restored)
			require.Zero(t, gathered(t, metrics.Registry, "eddy_checkpoint_restored_id").GetGauge().GetValue())
			requireExactlyOnce(t, log.output(), n)
			require.Equal(t, []int64{sp.ID + 1}, store2.completed(t), "the restored job's final checkpoint follows the savepoint's id")
		})
	}
}

// TestStopWithSavepoint stops a running job with a savepoint: its final
// checkpoint is the savepoint, and a job restored from the file continues
// exactly where the first one stopped.
func TestStopWithSavepoint(t *testing.T) {
	store, log := newRecStore(t, 3), newTxnLog()
	plan := loadSavepointPlan(t, log, "5ms", "exactly_once", 3, "forever: true")
	job := startReading(t, plan, pipeline.JobOptions{Store: store})
	dir := t.TempDir()
	require.NoError(t, job.StopWithSavepoint(context.Background(), dir))
	require.NoError(t, pipelinetest.WaitJob(t, job))
	sp, err := job.FinalSavepoint()
	require.NoError(t, err)
	require.True(t, sp.Final)
	require.True(t, store.savepoint(sp.ID))
	require.Equal(t, sp.ID, slices.Max(store.completed(t)), "the savepoint is the job's last checkpoint")
	require.ErrorIs(t, job.StopWithSavepoint(context.Background(), dir), pipeline.ErrJobEnding)

	_, meta, next := openSavepoint(t, sp.Path)
	require.True(t, meta.Final)
	// Subtask 0 read 0, 2, ... next[0]-2; subtask 1 read 1, 3, ... next[1]-2.
	require.Len(t, log.output(), int(next[0]/2+(next[1]-1)/2), "the final savepoint committed everything read")

	n := int(max(next[0], next[1])) + 2000
	cp, err := checkpoint.OpenSavepoint(sp.Path)
	require.NoError(t, err)
	defer func() { require.NoError(t, cp.Close()) }()
	plan2 := loadSavepointPlan(t, log, "5ms", "exactly_once", 3, fmt.Sprintf("count: %d", n))
	require.NoError(t, pipelinetest.RunJob(context.Background(), plan2, pipeline.JobOptions{Store: newRecStore(t, 3), Restore: cp}))
	requireExactlyOnce(t, log.output(), n)
}

// TestSavepointOutlivesRetention: the savepoint's checkpoint is a regular
// one in the store, which retention deletes in time; the file stays valid.
// Several savepoints requested at once are taken one after the other.
func TestSavepointOutlivesRetention(t *testing.T) {
	store, log := newRecStore(t, 1), newTxnLog()
	plan := loadSavepointPlan(t, log, "2ms", "exactly_once", 1, "forever: true")
	job := startReading(t, plan, pipeline.JobOptions{Store: store})
	dir := t.TempDir()
	sps := make([]pipeline.Savepoint, 3)
	errs := make([]error, 3)
	var wg sync.WaitGroup
	for i := range sps {
		wg.Go(func() { sps[i], errs[i] = job.TriggerSavepoint(context.Background(), dir) })
	}
	testkit.Wait(t, "the savepoints", wg.Wait)
	ids := map[int64]bool{}
	for i, sp := range sps {
		require.NoError(t, errs[i])
		require.True(t, store.savepoint(sp.ID))
		ids[sp.ID] = true
	}
	require.Len(t, ids, 3, "one checkpoint per savepoint")
	newest := int64(0)
	for id := range ids {
		newest = max(newest, id)
	}
	// Wait for a periodic checkpoint after the savepoints: with retain 1
	// it deletes them from the store.
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for slices.Max(append(store.completed(t), 0)) <= newest {
		select {
		case <-tick.C:
		case <-job.Done():
			t.Fatalf("the job ended: %v", job.Wait())
		}
	}
	job.Stop()
	require.NoError(t, pipelinetest.WaitJob(t, job))
	store.mu.Lock()
	for id, sp := range store.savepoints {
		require.Equal(t, ids[id], sp, "checkpoint %d", id)
	}
	store.mu.Unlock()
	for _, sp := range sps {
		require.NotContains(t, store.completed(t), sp.ID, "retention deleted the savepoint's checkpoint")
		cp, meta, _ := openSavepoint(t, sp.Path)
		require.Equal(t, sp.ID, cp.ID())
		require.Equal(t, sp.ID, meta.ID)
	}
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Len(t, entries, 3, "one file per savepoint, no temporary file left")
}

// TestSavepointFailuresLeaveTheJobRunning: a savepoint whose checkpoint
// fails, or whose file cannot be written, fails the request, not the job,
// although checkpoint.tolerable_failures is 0.
func TestSavepointFailuresLeaveTheJobRunning(t *testing.T) {
	store, log := newRecStore(t, 3), newTxnLog()
	store.failMetaPut = 1
	plan := loadSavepointPlan(t, log, "1h", "exactly_once", 3, "forever: true")
	metrics := pipeline.NewMetrics()
	job, err := pipeline.Start(context.Background(), plan, pipeline.JobOptions{Store: store, Metrics: metrics})
	require.NoError(t, err)
	dir := t.TempDir()

	_, err = job.TriggerSavepoint(context.Background(), dir)
	require.ErrorContains(t, err, "injected: disk full")

	notADir := filepath.Join(dir, "file")
	require.NoError(t, os.WriteFile(notADir, nil, 0o644))
	_, err = job.TriggerSavepoint(context.Background(), notADir)
	require.ErrorContains(t, err, "write savepoint 2 to "+notADir)

	sp, err := job.TriggerSavepoint(context.Background(), dir)
	require.NoError(t, err)
	require.Equal(t, int64(3), sp.ID)
	// Counted before each request was answered; not as checkpoints.
	count := func(kind, result string) float64 {
		return gathered(t, metrics.Registry, "eddy_checkpoints_total", "kind", kind, "result", result).GetCounter().GetValue()
	}
	require.Equal(t, 2.0, count("savepoint", "failed"))
	require.Equal(t, 1.0, count("savepoint", "completed"))
	require.Equal(t, uint64(1), gathered(t, metrics.Registry, "eddy_checkpoint_duration_seconds", "kind", "savepoint").GetHistogram().GetSampleCount())
	require.Zero(t, count("checkpoint", "failed"))
	require.Zero(t, count("checkpoint", "completed"))
	// The newest checkpoint in the store is the third savepoint's.
	require.Equal(t, 3.0, gathered(t, metrics.Registry, "eddy_checkpoint_last_completed_id").GetGauge().GetValue())
	stats := metrics.CheckpointStats()
	require.Len(t, stats.History, 3)
	for i, want := range []struct {
		status, err string
	}{{"completed", ""}, {"failed", "write savepoint 2 to " + notADir}, {"failed", "injected: disk full"}} {
		r := stats.History[i]
		require.Equal(t, int64(3-i), r.ID)
		require.Equal(t, "savepoint", r.Kind)
		require.Equal(t, want.status, r.Status, "savepoint %d", r.ID)
		if want.err == "" {
			require.Empty(t, r.Error)
		} else {
			require.Contains(t, r.Error, want.err)
		}
	}
	require.Equal(t, int64(2), stats.LatestFailed.ID)
	require.Equal(t, int64(3), stats.LatestCompleted.ID)
	job.Stop()
	require.NoError(t, pipelinetest.WaitJob(t, job))
	_, err = job.TriggerSavepoint(context.Background(), dir)
	require.ErrorIs(t, err, pipeline.ErrJobEnding)
}

// TestSavepointErrors: no savepoint without a checkpoint block, nor once
// a bounded job took its final checkpoint.
func TestSavepointErrors(t *testing.T) {
	plan, _ := load(t, "version: 1\nname: plain\nsources: [{id: nums, type: seq, forever: true}]\nsinks: [{type: collect}]\n")
	job, err := pipeline.Start(context.Background(), plan, pipeline.JobOptions{})
	require.NoError(t, err)
	_, err = job.TriggerSavepoint(context.Background(), t.TempDir())
	require.ErrorIs(t, err, pipeline.ErrNoCheckpoints)
	require.ErrorIs(t, job.StopWithSavepoint(context.Background(), t.TempDir()), pipeline.ErrNoCheckpoints)
	job.Stop()
	require.NoError(t, pipelinetest.WaitJob(t, job))

	log := newTxnLog()
	plan = loadSavepointPlan(t, log, "1h", "exactly_once", 3, "count: 10")
	job, err = pipeline.Start(context.Background(), plan, pipeline.JobOptions{Store: newRecStore(t, 3)})
	require.NoError(t, err)
	require.NoError(t, pipelinetest.WaitJob(t, job))
	_, err = job.TriggerSavepoint(context.Background(), t.TempDir())
	require.ErrorIs(t, err, pipeline.ErrJobEnding)
	require.ErrorIs(t, job.StopWithSavepoint(context.Background(), t.TempDir()), pipeline.ErrJobEnding)
	_, err = job.FinalSavepoint()
	require.ErrorContains(t, err, "no stop with savepoint was requested")
	require.Len(t, log.output(), 10)
}

func TestOnSigterm(t *testing.T) {
	const text = "version: 1\nname: s\ncheckpoint:\n  interval: 1s\n%ssources: [{type: seq}]\nsinks: [{type: collect}]\n"
	spec, err := pipeline.Load(testEnv(), "s.yaml", fmt.Appendf(nil, text, ""))
	require.NoError(t, err)
	require.Equal(t, pipeline.SigtermSavepoint, spec.Checkpoint.OnSigterm, "the default")
	for _, want := range []pipeline.SigtermAction{pipeline.SigtermSavepoint, pipeline.SigtermCheckpoint, pipeline.SigtermNone} {
		spec, err := pipeline.Load(testEnv(), "s.yaml", fmt.Appendf(nil, text, "  on_sigterm: "+want.String()+"\n"))
		require.NoError(t, err, want.String())
		require.Equal(t, want, spec.Checkpoint.OnSigterm)
	}
	_, err = pipeline.Load(testEnv(), "s.yaml", fmt.Appendf(nil, text, "  on_sigterm: savepiont\n"))
	require.ErrorIs(t, err, pipeline.ErrInvalid)
	require.EqualError(t, err, `s.yaml:5:15: on_sigterm: on_sigterm must be savepoint, checkpoint or none, not "savepiont" (did you mean "savepoint"?)`)
}

// slowStep passes records on after a pause per batch: a slow task whose
// input channel holds a backlog.
type slowConfig struct {
	Pause pipeline.Duration `yaml:"slow"`
}

func (c *slowConfig) Validate() error { return nil }
func (c *slowConfig) NewOperator() (pipeline.Operator, error) {
	return &slowOp{pause: c.Pause.D()}, nil
}

type slowOp struct{ pause time.Duration }

func (o *slowOp) Open(context.Context, *pipeline.OperatorContext) error { return nil }
func (o *slowOp) Process(in []pipeline.Record, out pipeline.Emitter) error {
	time.Sleep(o.pause)
	return out.Emit(in)
}
func (o *slowOp) Close() error { return nil }

// alignedText unions a fast source behind a slow task and a paced source
// into a keyed count: the fast source's barrier reaches the count well
// after the paced one's, so an unaligned snapshot would hold records of
// the paced source that come after its barrier (and after its position).
// %s: the mode; %s, %s: the sources' lengths.
const alignedText = `
version: 1
name: aligned
runtime:
  chaining: false
checkpoint:
  interval: 1h
  mode: %s
sources:
  - id: a
    type: seq
    tag: a
    keys: 5
    %s
  - id: b
    type: seq
    tag: b
    keys: 5
    pace: true
    %s
steps:
  - id: slowed
    from: a
    slow: 2ms
  - id: counts
    from: [slowed, b]
    count_by: k
sinks:
  - id: out
    type: txn
`

func loadAligned(t *testing.T, log *txnLog, mode, a, b string) *pipeline.Plan {
	t.Helper()
	env := testEnv()
	env.RegisterStep(pipeline.StepPlugin{Kind: "slow", New: func() pipeline.StepConfig { return &slowConfig{} }})
	spec, err := pipeline.Load(env, "aligned.yaml", fmt.Appendf(nil, alignedText, mode, a, b))
	require.NoError(t, err)
	spec.Sinks[0].Config.(*txnConfig).log = log
	plan, err := pipeline.Compile(spec)
	require.NoError(t, err)
	return plan
}

// TestSavepointIsAlignedInAtLeastOnceMode: a savepoint of an at_least_once
// job holds no record twice (the paced input is held until the slow one's
// barrier arrived), so crashing after it and restoring it gives every
// record exactly once. (Unaligned, the restored job repeats hundreds of
// b's records.)
func TestSavepointIsAlignedInAtLeastOnceMode(t *testing.T) {
	log := newTxnLog()
	// a reads as fast as it can (the test source paces unbounded ones).
	plan := loadAligned(t, log, "at_least_once", "count: 100000000", "forever: true")
	metrics := pipeline.NewMetrics()
	job, err := pipeline.Start(context.Background(), plan, pipeline.JobOptions{Store: newRecStore(t, 3), Metrics: metrics})
	require.NoError(t, err)
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	// By the time b read 2000 records, a's backlog fills the channels
	// between a, slowed and counts.
	for _, src := range []string{"a", "b"} {
		for pipeline.CounterValue(metrics.RecordsOut(pipeline.SubtaskInfo{ID: src})) < 2000 {
			select {
			case <-tick.C:
			case <-job.Done():
				t.Fatalf("the job ended: %v", job.Wait())
			}
		}
	}
	sp, err := job.TriggerSavepoint(context.Background(), t.TempDir())
	require.NoError(t, err)
	job.Cancel()
	require.ErrorIs(t, pipelinetest.WaitJob(t, job), context.Canceled)

	cp, err := checkpoint.OpenSavepoint(sp.Path)
	require.NoError(t, err)
	defer func() { require.NoError(t, cp.Close()) }()
	counts := map[string]int{}
	for _, src := range []string{"a", "b"} {
		pos, err := cp.Get("src/" + src + "/0")
		require.NoError(t, err)
		counts[src] = int(binary.BigEndian.Uint64(pos)) + 500
	}
	plan = loadAligned(t, log, "at_least_once", fmt.Sprintf("count: %d", counts["a"]), fmt.Sprintf("count: %d", counts["b"]))
	require.NoError(t, pipelinetest.RunJob(context.Background(), plan, pipeline.JobOptions{Store: newRecStore(t, 3), Restore: cp}))

	seen := map[string]map[int]int{"a": {}, "b": {}}
	perKey := map[int][]int64{}
	for _, r := range log.output() {
		seen[r["src"].(string)][r["n"].(int)]++
		perKey[r["k"].(int)] = append(perKey[r["k"].(int)], r["count"].(int64))
	}
	for src, n := range counts {
		var wrong []string
		for i := range n {
			if c := seen[src][i]; c != 1 {
				wrong = append(wrong, fmt.Sprintf("%d (%d times)", i, c))
			}
		}
		require.Empty(t, wrong[:min(len(wrong), 5)], "records of %s missing or repeated: %d", src, len(wrong))
		require.Equal(t, n, len(seen[src]), "records of %s", src)
	}
	for k, cs := range perKey {
		slices.Sort(cs)
		for i, c := range cs {
			require.Equal(t, int64(i+1), c, "key %d", k)
		}
	}
}
