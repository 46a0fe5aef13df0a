package pipeline_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/eddy-stream/eddy/internal/lowprio"
	"github.com/eddy-stream/eddy/pipeline"
	"github.com/stretchr/testify/require"
)

// niceStore records the nice value of the thread of every Put: the
// goroutine that encodes and writes a task's snapshot.
type niceStore struct {
	*memStore
	mu    sync.Mutex
	nices []int
}

func (s *niceStore) Begin(id int64, meta pipeline.CheckpointMeta) (pipeline.PendingCheckpoint, error) {
	p, err := s.memStore.Begin(id, meta)
	return &nicePending{PendingCheckpoint: p, s: s}, err
}

type nicePending struct {
	pipeline.PendingCheckpoint
	s *niceStore
}

func (p *nicePending) Put(part string, blob []byte) error {
	prio, err := syscall.Getpriority(syscall.PRIO_PROCESS, syscall.Gettid())
	if err != nil {
		return err
	}
	p.s.mu.Lock()
	p.s.nices = append(p.s.nices, 20-prio) // the system call returns 20 - nice
	p.s.mu.Unlock()
	return p.PendingCheckpoint.Put(part, blob)
}

// TestCheckpointPriority runs a keyed count with checkpoints at each
// checkpoint.priority: the snapshots are encoded and written on threads of
// that priority, and the output is what it is without checkpoints.
func TestCheckpointPriority(t *testing.T) {
	for _, tc := range []struct {
		prio pipeline.CheckpointPriority
		nice int
	}{{pipeline.PriorityNormal, 0}, {pipeline.PriorityLow, lowprio.Nice}} {
		prio, nice := tc.prio, tc.nice
		t.Run(prio.String(), func(t *testing.T) {
			text := fmt.Sprintf(exactlyOnceText, "exactly_once", 2)
			text = strings.Replace(text, "  mode: exactly_once\n", "  mode: exactly_once\n  priority: "+prio.String()+"\n", 1)
			plan, _ := load(t, text)
			require.Equal(t, prio, plan.Spec.Checkpoint.Priority)
			log := newTxnLog()
			plan.Spec.Sinks[0].Config.(*txnConfig).log = log
			store := &niceStore{memStore: newMemStore()}
			job, err := pipeline.Start(context.Background(), plan, pipeline.JobOptions{Store: store})
			require.NoError(t, err)
			require.NoError(t, job.Wait())

			require.Positive(t, store.count(), "checkpoints completed")
			// Wait returned after every writer ended: they all put
			// before it, so nices is complete.
			store.mu.Lock()
			nices := slices.Clone(store.nices)
			store.mu.Unlock()
			require.NotEmpty(t, nices)
			for _, n := range nices {
				require.Equal(t, nice, n, "nice value of a thread that wrote a snapshot")
			}
			var ns []int
			for _, r := range log.output() {
				ns = append(ns, r["n"].(int))
			}
			slices.Sort(ns)
			require.Len(t, ns, 3000)
			for i, n := range ns {
				require.Equal(t, i, n, "record %d missing or repeated", i)
			}
		})
	}
}
