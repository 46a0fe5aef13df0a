package pipeline

import "time"

// barrierAligner is a task's checkpoint barrier handler over its inputs
// (Flink's CheckpointBarrierHandler). It only keeps count: the task reads
// the inputs, checkpoints and logs.
//
// Aligned (checkpoint mode exactly_once, and every savepoint in either
// mode): an input that delivered barrier N is blocked, its later records
// left in its channel, until every open input delivered N; then the task
// checkpoints and the inputs are released. Unaligned tracking
// (at_least_once): barriers are counted the same way but no input is
// blocked, so records after the barrier on a fast input are processed
// before the checkpoint and may be seen again after a restore.
//
// A barrier newer than the one being aligned abandons that alignment; a
// barrier older than it, or of an aborted checkpoint, is ignored. An input
// that terminates delivers no more barriers: the alignment no longer waits
// for it.
//
// It belongs to the task goroutine and takes no locks.
type barrierAligner struct {
	atLeastOnce bool
	inputs      []alignInput
	// current is the checkpoint being aligned (ID 0 when none), first when
	// its first barrier arrived.
	current Barrier
	first   time.Time
	// abortedUpTo is the newest checkpoint the coordinator aborted: its
	// barriers, if any still arrive, are ignored.
	abortedUpTo int64
}

// alignInput is what the aligner knows of one input.
type alignInput struct {
	closed  bool // terminated: delivers no more barriers
	barrier bool // delivered the current barrier
	blocked bool // held until the alignment completes
}

// alignment is what a barrier or a terminated input did.
type alignment struct {
	// Done: every open input delivered Barrier, whose first copy arrived
	// at First; the task checkpoints now. The inputs are released.
	Done    bool
	Barrier Barrier
	First   time.Time
	// Changed: an input was blocked or released, so the set of inputs the
	// task reads from changed.
	Changed bool
	// Abandoned is the checkpoint whose alignment a newer barrier
	// abandoned, or 0.
	Abandoned int64
}

// newBarrierAligner returns the aligner of a task with n inputs;
// atLeastOnce is checkpoint mode at_least_once.
func newBarrierAligner(n int, atLeastOnce bool) *barrierAligner {
	return &barrierAligner{atLeastOnce: atLeastOnce, inputs: make([]alignInput, n)}
}

// onBarrier records that input i delivered barrier b at now.
func (a *barrierAligner) onBarrier(i int, b Barrier, now time.Time) alignment {
	var res alignment
	switch {
	case b.ID < a.current.ID || b.ID <= a.abortedUpTo:
		return res // a barrier of an abandoned or aborted checkpoint
	case b.ID > a.current.ID:
		res.Abandoned = a.current.ID
		a.current, a.first = b, now
		res.Changed = a.release()
	}
	a.inputs[i].barrier = true
	// A savepoint is aligned in either mode (as in Flink).
	if !a.atLeastOnce || b.Savepoint {
		a.inputs[i].blocked = true
		res.Changed = true
	}
	return a.complete(res)
}

// onClosed records that input i terminated.
func (a *barrierAligner) onClosed(i int) alignment {
	a.inputs[i].closed = true
	if a.current.ID == 0 {
		return alignment{}
	}
	return a.complete(alignment{})
}

// abort gives up the alignment of checkpoints up to id, which the
// coordinator aborted, and ignores their barriers from now on. It returns
// the checkpoint whose alignment it ended (its inputs are released), or 0.
func (a *barrierAligner) abort(id int64) int64 {
	a.abortedUpTo = max(a.abortedUpTo, id)
	if a.current.ID == 0 || a.current.ID > id {
		return 0
	}
	ended := a.current.ID
	a.current, a.first = Barrier{}, time.Time{}
	a.release()
	return ended
}

// blocked reports whether input i is held for the current alignment.
func (a *barrierAligner) blocked(i int) bool { return a.inputs[i].blocked }

// complete finishes the alignment into res once every open input
// delivered the current barrier.
func (a *barrierAligner) complete(res alignment) alignment {
	for _, in := range a.inputs {
		if !in.closed && !in.barrier {
			return res
		}
	}
	res.Done, res.Barrier, res.First = true, a.current, a.first
	a.current, a.first = Barrier{}, time.Time{}
	if a.release() {
		res.Changed = true
	}
	return res
}

// release forgets every input's barrier and unblocks it; it reports
// whether an input was blocked.
func (a *barrierAligner) release() bool {
	changed := false
	for i := range a.inputs {
		changed = changed || a.inputs[i].blocked
		a.inputs[i].barrier, a.inputs[i].blocked = false, false
	}
	return changed
}
