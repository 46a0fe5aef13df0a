package pipeline

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// alignStep is one event fed to a barrierAligner and what must follow.
type alignStep struct {
	// The event: barrier (with savepoint) delivered on input in, input in
	// terminating (closed), or the coordinator aborting up to abort.
	barrier   int64
	savepoint bool
	closed    bool
	abort     int64
	in        int

	// done is the checkpoint the event completed (0: none), first the
	// step whose barrier began that alignment.
	done  int64
	first int
	// blocked are the inputs held after the event.
	blocked []int
	changed bool
	// abandoned is the checkpoint a newer barrier abandoned; aborted the
	// one whose alignment abort ended.
	abandoned, aborted int64
}

func TestBarrierAligner(t *testing.T) {
	tests := []struct {
		name        string
		inputs      int
		atLeastOnce bool
		steps       []alignStep
	}{
		{
			name: "exactly_once: each input is held until every input delivered the barrier", inputs: 3,
			steps: []alignStep{
				{barrier: 1, in: 0, blocked: []int{0}, changed: true},
				{barrier: 1, in: 2, blocked: []int{0, 2}, changed: true},
				{barrier: 1, in: 1, done: 1, first: 0, changed: true},
				{barrier: 2, in: 1, blocked: []int{1}, changed: true},
				{barrier: 2, in: 0, blocked: []int{0, 1}, changed: true},
				{barrier: 2, in: 2, done: 2, first: 3, changed: true},
			},
		},
		{
			name: "exactly_once: one input", inputs: 1,
			steps: []alignStep{
				{barrier: 1, in: 0, done: 1, first: 0, changed: true},
			},
		},
		{
			name: "at_least_once: barriers are counted, no input is held", inputs: 2, atLeastOnce: true,
			steps: []alignStep{
				{barrier: 1, in: 0},
				{barrier: 1, in: 1, done: 1, first: 0},
			},
		},
		{
			name: "at_least_once: a savepoint is aligned", inputs: 2, atLeastOnce: true,
			steps: []alignStep{
				{barrier: 1, savepoint: true, in: 1, blocked: []int{1}, changed: true},
				{barrier: 1, savepoint: true, in: 0, done: 1, first: 0, changed: true},
				{barrier: 2, in: 0},
			},
		},
		{
			name: "an input that terminates while aligning is no longer waited for", inputs: 3,
			steps: []alignStep{
				{barrier: 1, in: 0, blocked: []int{0}, changed: true},
				{closed: true, in: 1, blocked: []int{0}},
				{barrier: 1, in: 2, done: 1, first: 0, changed: true},
				// The next alignment waits for the two open inputs only.
				{barrier: 2, in: 2, blocked: []int{2}, changed: true},
				{barrier: 2, in: 0, done: 2, first: 3, changed: true},
			},
		},
		{
			name: "the last input waited for terminating completes the alignment", inputs: 2,
			steps: []alignStep{
				{barrier: 1, in: 0, blocked: []int{0}, changed: true},
				{closed: true, in: 1, done: 1, first: 0, changed: true},
			},
		},
		{
			name: "an input terminating outside an alignment", inputs: 2,
			steps: []alignStep{
				{closed: true, in: 0},
				{barrier: 1, in: 1, done: 1, first: 1, changed: true},
			},
		},
		{
			name: "a newer barrier abandons the older alignment; late barriers of it are ignored", inputs: 2,
			steps: []alignStep{
				{barrier: 1, in: 0, blocked: []int{0}, changed: true},
				{barrier: 2, in: 1, blocked: []int{1}, changed: true, abandoned: 1},
				{barrier: 1, in: 0, blocked: []int{1}},
				{barrier: 2, in: 0, done: 2, first: 1, changed: true},
			},
		},
		{
			name: "an aborted checkpoint releases its inputs and its barriers are ignored", inputs: 2,
			steps: []alignStep{
				{barrier: 3, in: 0, blocked: []int{0}, changed: true},
				{abort: 3, aborted: 3},
				{barrier: 3, in: 1},
				{barrier: 4, in: 1, blocked: []int{1}, changed: true},
				{abort: 2, blocked: []int{1}},
				{barrier: 4, in: 0, done: 4, first: 3, changed: true},
			},
		},
	}
	t0 := time.Unix(1000, 0)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := newBarrierAligner(tt.inputs, tt.atLeastOnce)
			for i, s := range tt.steps {
				at := fmt.Sprintf("step %d", i)
				var got alignment
				switch {
				case s.abort != 0:
					require.Equal(t, s.aborted, a.abort(s.abort), at)
				case s.closed:
					got = a.onClosed(s.in)
				default:
					got = a.onBarrier(s.in, Barrier{ID: s.barrier, Savepoint: s.savepoint}, t0.Add(time.Duration(i)*time.Second))
				}
				want := alignment{Changed: s.changed, Abandoned: s.abandoned}
				if s.done != 0 {
					want.Done, want.Barrier, want.First = true, Barrier{ID: s.done, Savepoint: s.savepoint}, t0.Add(time.Duration(s.first)*time.Second)
				}
				require.Equal(t, want, got, at)
				var blocked []int
				for in := range tt.inputs {
					if a.blocked(in) {
						blocked = append(blocked, in)
					}
				}
				require.Equal(t, s.blocked, blocked, at)
			}
		})
	}
}
