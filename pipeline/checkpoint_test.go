package pipeline_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/eddy-stream/eddy/checkpoint"
	"github.com/eddy-stream/eddy/pipeline"
	"github.com/eddy-stream/eddy/pipeline/pipelinetest"
	"github.com/stretchr/testify/require"
)

const exactlyOnceText = `
version: 1
name: eo
checkpoint:
  interval: 5ms
  mode: %s
sources:
  - id: nums
    type: seq
    count: 3000
    keys: 7
    pace: true
    parallelism: 2
steps:
  - id: counts
    count_by: k
    parallelism: %d
sinks:
  - id: out
    type: txn
    parallelism: 2
`

// TestCheckpointsSurviveCrashes runs a keyed count to a two-phase-commit
// sink, cancels the job (a crash: in-flight and uncommitted data is lost)
// right after some checkpoint completed, restores the next job from the
// latest checkpoint, several times, then lets it finish. The committed
// output must be what one uninterrupted run gives: with exactly_once every
// record once and every key's counts 1..n; with at_least_once nothing missing.
func TestCheckpointsSurviveCrashes(t *testing.T) {
	for _, mode := range []string{"exactly_once", "at_least_once"} {
		t.Run(mode, func(t *testing.T) {
			store, log := pipelinetest.NewMemStore(), newTxnLog()
			rng := rand.New(rand.NewPCG(1, 2))
			crashes := 0
			for attempt := 0; ; attempt++ {
				// Rescale the keyed step between runs: keyed state moves by key group.
				plan, _ := load(t, fmt.Sprintf(exactlyOnceText, mode, 1+attempt%3))
				plan.Spec.Sinks[0].Config.(*txnConfig).log = log
				before := store.Count()
				job, err := pipeline.Start(context.Background(), plan, pipeline.JobOptions{Store: store, Restore: store.Latest()})
				require.NoError(t, err)
				if attempt == 4 {
					require.NoError(t, pipelinetest.WaitJob(t, job))
					break
				}
				// Crash once one or two more checkpoints completed, or at the end.
				target := before + 1 + rng.IntN(2)
			wait:
				for store.Count() < target {
					select {
					case <-job.Done():
						break wait
					case <-time.After(time.Millisecond):
					}
				}
				job.Cancel()
				if err := pipelinetest.WaitJob(t, job); err != nil {
					crashes++
				}
			}
			require.Positive(t, crashes, "at least one run crashed before it finished")

			out := log.output()
			var ns []int
			perKey := map[int][]int64{}
			for _, r := range out {
				ns = append(ns, r["n"].(int))
				perKey[r["k"].(int)] = append(perKey[r["k"].(int)], r["count"].(int64))
			}
			slices.Sort(ns)
			if mode == "exactly_once" {
				require.Equal(t, 3000, len(ns), "records committed")
				for i, n := range ns {
					require.Equal(t, i, n, "record %d missing or repeated", i)
				}
				for k, counts := range perKey {
					slices.Sort(counts)
					for i, c := range counts {
						require.Equal(t, int64(i+1), c, "key %d", k)
					}
				}
				return
			}
			ns = slices.Compact(ns)
			require.Equal(t, 3000, len(ns), "at-least-once: nothing missing")
		})
	}
}

// TestRestoreRefusesToDropState restores a checkpoint into a pipeline whose
// stateful step was renamed: the restore fails unless dropping that state
// is allowed, and then the renamed step starts empty.
func TestRestoreRefusesToDropState(t *testing.T) {
	store, log := pipelinetest.NewMemStore(), newTxnLog()
	plan, _ := load(t, fmt.Sprintf(exactlyOnceText, "exactly_once", 1))
	plan.Spec.Sinks[0].Config.(*txnConfig).log = log
	require.NoError(t, pipelinetest.RunJob(context.Background(), plan, pipeline.JobOptions{Store: store}))
	restored := store.Latest()
	require.NotNil(t, restored)

	renamed := strings.Replace(fmt.Sprintf(exactlyOnceText, "exactly_once", 1), "id: counts", "id: tallies", 1)
	plan, _ = load(t, renamed)
	plan.Spec.Sinks[0].Config.(*txnConfig).log = log
	_, err := pipeline.Start(context.Background(), plan, pipeline.JobOptions{Store: store, Restore: restored})
	require.ErrorIs(t, err, pipeline.ErrRestore)
	require.ErrorContains(t, err, `state of step "counts"`)

	job, err := pipeline.Start(context.Background(), plan, pipeline.JobOptions{Store: store, Restore: restored, AllowNonRestoredState: true})
	require.NoError(t, err)
	require.NoError(t, pipelinetest.WaitJob(t, job))
}

// heldStore holds the Puts of checkpoint 1 until a later checkpoint
// completed (which subsumes checkpoint 1), then until the job ended or for
// a while, and counts those that went on once the job had ended.
type heldStore struct {
	*pipelinetest.MemStore
	started   chan struct{} // closed once job is set
	job       *pipeline.Job
	later     chan struct{} // closed when a checkpoint after 1 completed
	laterOnce sync.Once
	held      atomic.Int32
	late      atomic.Int32
}

func (s *heldStore) Begin(id int64, meta checkpoint.Meta) (checkpoint.Writer, error) {
	p, err := s.MemStore.Begin(id, meta)
	return &heldPending{Writer: p, s: s, id: id}, err
}

type heldPending struct {
	checkpoint.Writer
	s  *heldStore
	id int64
}

func (p *heldPending) Put(part string, blob []byte) error {
	if p.id == 1 {
		p.s.held.Add(1)
		<-p.s.started
		<-p.s.later
		// The test runs in a synctest bubble: the fake clock moves on
		// only once every other goroutine of the job is blocked, so a
		// job that does not wait for this Put has ended by then.
		select {
		case <-p.s.job.Done():
			p.s.late.Add(1)
		case <-time.After(time.Second):
		}
	}
	return p.Writer.Put(part, blob)
}

func (p *heldPending) Complete(ctx context.Context) error {
	err := p.Writer.Complete(ctx)
	if p.id > 1 {
		p.s.laterOnce.Do(func() { close(p.s.later) })
	}
	return err
}

// TestJobEndWaitsForSnapshotWriters holds the writes of checkpoint 1 until
// the final checkpoint completed and subsumed it: the job must not end (nor
// Wait return) while those writes still run, as the caller closes the
// store after Wait.
func TestJobEndWaitsForSnapshotWriters(t *testing.T) {
	synctest.Test(t, testJobEndWaitsForSnapshotWriters)
}

func testJobEndWaitsForSnapshotWriters(t *testing.T) {
	text := strings.Replace(fmt.Sprintf(exactlyOnceText, "exactly_once", 2), "interval: 5ms", "interval: 1ms\n  timeout: 1h", 1)
	plan, _ := load(t, text)
	log := newTxnLog()
	plan.Spec.Sinks[0].Config.(*txnConfig).log = log
	store := &heldStore{MemStore: pipelinetest.NewMemStore(), started: make(chan struct{}), later: make(chan struct{})}
	job, err := pipeline.Start(context.Background(), plan, pipeline.JobOptions{Store: store})
	require.NoError(t, err)
	store.job = job
	close(store.started)
	require.NoError(t, pipelinetest.WaitJob(t, job))
	// A Put the job did not wait for sees it ended once it runs.
	synctest.Wait()

	require.Positive(t, store.held.Load(), "checkpoint 1 wrote parts")
	require.Zero(t, store.late.Load(), "writes of checkpoint 1 that went on after the job ended")
	require.False(t, store.Completed(1), "checkpoint 1 completed although a later one subsumed it")
	require.Len(t, log.output(), 3000)
}
