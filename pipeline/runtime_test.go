package pipeline_test

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/eddy-stream/eddy/internal/testkit"
	"github.com/eddy-stream/eddy/pipeline"
	"github.com/eddy-stream/eddy/pipeline/pipelinetest"
	"github.com/stretchr/testify/require"
)

func TestHashPartitioningKeepsOrderPerKey(t *testing.T) {
	plan, cols := load(t, `
version: 1
name: order
sources:
  - id: nums
    type: seq
    count: 20000
    keys: 7
    parallelism: 2
steps:
  - id: by_k
    keyed: k
    parallelism: 3
sinks:
  - id: out
    type: collect
    parallelism: 3
`)
	require.Equal(t, pipeline.Hash, plan.Node("by_k").Inputs[0].Partition)
	require.True(t, plan.Node("out").Inputs[0].Chained)
	run(t, plan)

	got := cols["out"].all()
	require.Len(t, got, 20000)
	// Every key lands on one subtask; per key and per source subtask, n rises.
	subOfKey := map[any]any{}
	last := map[[2]int]int{}
	for _, r := range got {
		k := r["k"].(int)
		if prev, ok := subOfKey[k]; ok {
			require.Equal(t, prev, r["at"], "key %d on two subtasks", k)
		}
		subOfKey[k] = r["at"]
		n := r["n"].(int)
		from := [2]int{k, n % 2}
		if prev, ok := last[from]; ok {
			require.Greater(t, n, prev, "key %d out of order", k)
		}
		last[from] = n
		require.Equal(t, fmt.Sprint(k), r["key"])
	}
	// Key groups spread the 7 keys over more than one subtask.
	subs := map[any]bool{}
	for _, s := range subOfKey {
		subs[s] = true
	}
	require.Greater(t, len(subs), 1)
}

func TestUnionAndFanOut(t *testing.T) {
	plan, cols := load(t, `
version: 1
name: union
parallelism: 2
sources:
  - id: a
    type: seq
    count: 1000
    tag: a
  - id: b
    type: seq
    count: 500
    tag: b
steps:
  - id: both
    from: [a, b]
    pass:
sinks:
  - id: left
    type: collect
    from: both
  - id: right
    type: collect
    from: both
`)
	run(t, plan)
	for _, id := range []string{"left", "right"} {
		got := cols[id].all()
		require.Len(t, got, 1500, id)
		count := map[string]int{}
		seen := map[string]bool{}
		for _, r := range got {
			count[r["src"].(string)]++
			seen[fmt.Sprint(r["src"], r["n"])] = true
			require.Equal(t, true, r["passed"])
		}
		require.Equal(t, map[string]int{"a": 1000, "b": 500}, count, id)
		require.Len(t, seen, 1500, "every record exactly once in %s", id)
	}
	// Fan-out gives each sink its own copy: changing one does not touch the other.
	l, r := cols["left"].all(), cols["right"].all()
	l[0]["mutated"] = true
	for _, rec := range r {
		require.NotContains(t, rec, "mutated")
	}
}

func TestChainingOnAndOffGiveTheSameOutput(t *testing.T) {
	const text = `
version: 1
name: chain
parallelism: 2
runtime:
  chaining: %v
  batch_size: 64
sources:
  - id: nums
    type: seq
    count: 5000
    keys: 13
steps:
  - id: p1
    pass:
  - id: k
    keyed: k
  - id: p2
    pass:
sinks:
  - id: out
    type: collect
`
	outputs := map[bool][]string{}
	for _, chaining := range []bool{true, false} {
		plan, cols := load(t, fmt.Sprintf(text, chaining))
		if chaining {
			require.Len(t, plan.Chains, 2, "nums->p1 and k->p2->out")
		} else {
			require.Len(t, plan.Chains, 5)
		}
		run(t, plan)
		var lines []string
		for _, r := range cols["out"].all() {
			lines = append(lines, fmt.Sprint(r["n"], r["k"], r["at"], r["passed"]))
		}
		sort.Strings(lines)
		outputs[chaining] = lines
	}
	require.Len(t, outputs[true], 5000)
	require.Equal(t, outputs[true], outputs[false])
}

func TestBackpressureBoundsInFlightRecords(t *testing.T) {
	plan, cols := load(t, `
version: 1
name: slow
runtime:
  batch_size: 10
  channel_capacity: 2
sources:
  - id: nums
    type: seq
    forever: true
steps:
  - id: r
    pass:
    rebalance: true
sinks:
  - id: out
    type: collect
    from: r
`)
	// Unchained sink: records wait in channels, which must stay bounded.
	plan.Spec.Runtime.Chaining = false
	plan, err := pipeline.Compile(plan.Spec)
	require.NoError(t, err)
	c := cols["out"]
	c.delay = 2 * time.Millisecond
	c.written = make(chan int, 1024)
	metrics := pipeline.NewMetrics()
	job, err := pipeline.Start(context.Background(), plan, pipeline.JobOptions{Metrics: metrics})
	require.NoError(t, err)
	info := func(id string) pipeline.SubtaskInfo { return pipeline.SubtaskInfo{ID: id} }
	// Per hop at most capacity batches queued, one batch being built and one
	// in the receiver's hands; the source's reader holds up to 4 batches of 100.
	const bound = 2 * ((2+2)*10 + 4*100)
	written := 0
	for written < 2000 {
		written += testkit.WaitFor(t, c.written, "the sink to write")
		read := pipeline.CounterValue(metrics.RecordsOut(info("nums")))
		sunk := pipeline.CounterValue(metrics.RecordsIn(info("out")))
		require.LessOrEqual(t, read-sunk, float64(bound), "records in flight")
	}
	job.Stop()
	go func() {
		for range c.written {
		}
	}()
	require.NoError(t, pipelinetest.WaitJob(t, job))
	require.Equal(t, pipeline.CounterValue(metrics.RecordsOut(info("nums"))), pipeline.CounterValue(metrics.RecordsIn(info("out"))),
		"a graceful stop drains everything read")
}

func TestCheckpointBarriersAreAlignedAndAcked(t *testing.T) {
	plan, cols := load(t, `
version: 1
name: barriers
parallelism: 2
sources:
  - id: a
    type: seq
    forever: true
    keys: 5
  - id: b
    type: seq
    forever: true
    keys: 5
steps:
  - id: k
    from: [a, b]
    keyed: k
    parallelism: 3
sinks:
  - id: out
    type: collect
`)
	// Every task acks each checkpoint: 2+2 source tasks, 3 keyed tasks and
	// 2 sink tasks (the sink is not chained: its parallelism differs).
	var mu sync.Mutex
	acks := map[int64][]pipeline.Ack{}
	allAcked := make(chan struct{})
	job, err := pipeline.Start(context.Background(), plan, pipeline.JobOptions{OnAck: func(a pipeline.Ack) {
		mu.Lock()
		acks[a.Checkpoint] = append(acks[a.Checkpoint], a)
		if a.Checkpoint == 3 && len(acks[3]) == 9 {
			close(allAcked)
		}
		mu.Unlock()
	}})
	require.NoError(t, err)
	for id := int64(1); id <= 3; id++ {
		require.NoError(t, job.TriggerCheckpoint(context.Background(), pipeline.Barrier{ID: id}))
	}
	testkit.WaitFor(t, allAcked, "every task to ack checkpoint 3")
	job.Stop()
	require.NoError(t, pipelinetest.WaitJob(t, job))
	mu.Lock()
	defer mu.Unlock()
	for id := int64(1); id <= 3; id++ {
		require.Len(t, acks[id], 9, "checkpoint %d", id)
		var positions []string
		for _, a := range acks[id] {
			for src := range a.Positions {
				positions = append(positions, fmt.Sprintf("%s %d", src, a.Subtask))
			}
		}
		slices.Sort(positions)
		require.Equal(t, []string{"a 0", "a 1", "b 0", "b 1"}, positions)
	}
	require.NotEmpty(t, cols["out"].all())
}

func TestOnErrorPolicies(t *testing.T) {
	const text = `
version: 1
name: errs
sources:
  - id: nums
    type: seq
    count: 10
steps:
  - id: p
    pass: 3
    on_error: %s
sinks:
  - id: out
    type: collect
%s`
	t.Run("skip", func(t *testing.T) {
		plan, cols := load(t, fmt.Sprintf(text, "skip", ""))
		run(t, plan)
		require.Len(t, cols["out"].all(), 9)
	})
	t.Run("default is fail", func(t *testing.T) {
		plan, _ := load(t, strings.Replace(fmt.Sprintf(text, "x", ""), "    on_error: x\n", "", 1))
		require.Equal(t, pipeline.OnErrorFail, plan.Spec.Steps[0].OnError)
		require.Equal(t, pipeline.OnErrorFail, plan.Spec.Sources[0].OnError)
		err := pipelinetest.RunJob(context.Background(), plan, pipeline.JobOptions{})
		require.ErrorIs(t, err, pipeline.ErrRecordFailed)
	})
	t.Run("fail", func(t *testing.T) {
		plan, _ := load(t, fmt.Sprintf(text, "fail", ""))
		r, err := pipeline.NewRunner(plan.Spec, pipeline.RunnerOptions{})
		require.NoError(t, err)
		err = r.Run(context.Background())
		require.ErrorIs(t, err, pipeline.ErrRecordFailed)
		require.ErrorContains(t, err, "boom")
	})
	t.Run("dead_letter", func(t *testing.T) {
		plan, cols := load(t, fmt.Sprintf(text, "dead_letter", `  - id: dead
    type: collect
    from: p.errors
`))
		run(t, plan)
		require.Len(t, cols["out"].all(), 9)
		dead := cols["dead"].all()
		require.Len(t, dead, 1)
		require.Equal(t, "p", dead[0]["step"])
		require.Equal(t, "boom", dead[0]["error"])
		require.Equal(t, 3, dead[0]["record"].(map[string]any)["n"])
	})
}

// TestKeyErrorsFollowTheKeyStepsPolicy: records whose key fails go, as
// dead letters, over an edge of their own to the key_by step's subtask 0,
// which emits them on its errors stream; with checkpoints, barriers cross
// that edge too.
func TestKeyErrorsFollowTheKeyStepsPolicy(t *testing.T) {
	const text = `
version: 1
name: keyerr
%s
sources:
  - id: nums
    type: seq
    count: 1000
    parallelism: 2
steps:
  - id: k
    keyed: 'n %% 4 == 0 ? {"map": 1} : n'
    on_error: %s
    parallelism: 3
sinks:
  - id: out
    type: collect
  - id: dead
    type: collect
    from: k.errors
    parallelism: 1
`
	for _, tt := range []struct {
		name, checkpoint string
	}{
		{name: "without checkpoints"},
		{name: "exactly_once", checkpoint: "checkpoint:\n  interval: 1ms"},
		{name: "at_least_once", checkpoint: "checkpoint:\n  interval: 1ms\n  mode: at_least_once"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			plan, cols := load(t, fmt.Sprintf(text, tt.checkpoint, "dead_letter"))
			e := plan.Node("k").Inputs[0]
			require.Equal(t, pipeline.Hash, e.Partition)
			require.NotNil(t, e.DeadLetters)
			require.Equal(t, pipeline.Global, e.DeadLetters.Partition)
			require.NotContains(t, plan.Node("nums").Outputs, e.DeadLetters, "not a node output")
			store := pipelinetest.NewMemStore()
			require.NoError(t, pipelinetest.RunJob(context.Background(), plan, pipeline.JobOptions{Store: store}))
			require.Len(t, cols["out"].all(), 750)
			dead := cols["dead"].all()
			require.Len(t, dead, 250)
			for _, d := range dead {
				require.Contains(t, d["error"], "key_by")
				require.Equal(t, 0, d["record"].(map[string]any)["n"].(int)%4)
			}
			if tt.checkpoint != "" {
				require.NotZero(t, store.Count(), "checkpoints completed")
			}
		})
	}
	t.Run("skip: no dead-letter edge", func(t *testing.T) {
		plan, _ := load(t, fmt.Sprintf(text, "", "skip"))
		require.Nil(t, plan.Node("k").Inputs[0].DeadLetters)
	})
}

// A key that is NaN or infinite (a division by zero) is a key error.
func TestNonFiniteKeysAreKeyErrors(t *testing.T) {
	plan, cols := load(t, `
version: 1
name: keynan
sources:
  - id: nums
    type: seq
    count: 10
steps:
  - id: k
    keyed: 'n == 0 ? 0 / n : 1 / n'
    on_error: dead_letter
    parallelism: 2
sinks:
  - id: out
    type: collect
  - id: dead
    type: collect
    from: k.errors
`)
	run(t, plan)
	require.Len(t, cols["out"].all(), 9)
	dead := cols["dead"].all()
	require.Len(t, dead, 1)
	require.Equal(t, 0, dead[0]["record"].(map[string]any)["n"])
	require.Equal(t, "key_by: the result is NaN, not a finite number (a division by zero?)", dead[0]["error"])
}

func TestUpsertSinksDropRetractions(t *testing.T) {
	plan, cols := load(t, `
version: 1
name: changelog
sources:
  - id: nums
    type: seq
    count: 9
steps:
  - ops: true
sinks:
  - id: retract
    type: collect
  - id: upsert
    type: collect
    changelog: upsert
`)
	run(t, plan)
	ops := func(id string) (out []string) {
		for _, r := range cols[id].all() {
			out = append(out, fmt.Sprintf("%v %v", r["n"], r[pipeline.OpField]))
		}
		return out
	}
	require.Equal(t, []string{"0 +I", "1 -U", "2 +U", "3 +I", "4 -U", "5 +U", "6 +I", "7 -U", "8 +U"}, ops("retract"))
	require.Equal(t, []string{"0 +I", "2 +U", "3 +I", "5 +U", "6 +I", "8 +U"}, ops("upsert"))
}
