package operators

import (
	"math"

	"github.com/eddy-stream/eddy/operators/agg"
	"github.com/eddy-stream/eddy/pipeline"
)

// Count windows and global windows.
//
// A count window of `size` records sliding by `slide` (tumbling: slide =
// size) fires every `slide` records of a key over its last `size` records
// (fewer before the key has seen `size`). Records are folded into pane
// accumulators of gcd(size, slide) records, addressed by (key, tag + pane
// index); a firing merges the panes of the window and drops those that no
// later window contains. The key's record counter is kept in `counter`.
// Windows are identified by record positions: window_start and window_end
// are the 0-based positions of the key's first record in the window and
// one past its last. A window that never filled is not emitted (Flink).
//
// A global window holds every record of a key, forever: its trigger fires
// it every `count` records and/or, in processing time, at most every
// `every` when it changed; these firings are "early". When the input ends
// (the final watermark) every key's global window fires "on_time" once
// more, from an event-time timer at the end of time registered with the
// key's first record.

var (
	nsCounter = string([]byte{tagCounter})
	nsGlobal  = string([]byte{tagGlobal})
)

func (w *windowOp) addCount(r *pipeline.Record) error {
	p := w.plan
	key := r.Key
	n, _ := w.counter.Get(key, nsCounter)
	if failed, err := w.add(r, w.nsC.get(n/p.pane)); failed {
		return err
	}
	n++
	w.counter.Put(key, nsCounter, n)
	if n%p.slide != 0 {
		return nil
	}
	start := max(n-p.size, 0)
	row, maxTime := w.countRow(key, start/p.pane, (n-1)/p.pane)
	w.result(key, row, start, n, firingOnTime, maxTime)
	for j := start / p.pane; j < max(n+p.slide-p.size, 0)/p.pane; j++ {
		w.accs.Clear(key, w.nsC.get(j))
	}
	return nil
}

// countRow returns the merged row of panes first..last of key and the
// greatest event time in them.
func (w *windowOp) countRow(key string, first, last int64) (*agg.Row, int64) {
	maxTime := pipeline.NoTime
	if first == last {
		b, ok := w.accs.Accumulator(key, w.nsC.get(first))
		if !ok { // cannot happen: the pane holds the record just added
			return agg.NewAccs(w.specs), maxTime
		}
		return w.rowOf(b), b.maxTime
	}
	w.scratch.Reset()
	for j := first; j <= last; j++ {
		if b, ok := w.accs.Accumulator(key, w.nsC.get(j)); ok {
			if err := w.scratch.Merge(w.rowOf(b)); err != nil {
				w.fail(err)
			}
			maxTime = max(maxTime, b.maxTime)
		}
	}
	return w.scratch, maxTime
}

func (w *windowOp) addGlobal(r *pipeline.Record) error {
	p := w.plan
	if failed, err := w.add(r, nsGlobal); failed {
		return err
	}
	if w.in.fresh {
		w.timers.RegisterEventTimer(r.Key, nsGlobal, math.MaxInt64)
	}
	if p.trigCount > 0 && w.in.box.row.Count()%p.trigCount == 0 {
		w.fireGlobal(r.Key, firingEarly, false)
	}
	if p.trigEvery > 0 {
		w.timers.RegisterProcessingTimer(r.Key, nsGlobal, alignedNext(w.procNow(), p.trigEvery))
	}
	return nil
}

// fireGlobal emits the global window of key, unless it did not change since
// its last firing and force is false.
func (w *windowOp) fireGlobal(key, firing string, force bool) {
	b, ok := w.accs.Accumulator(key, nsGlobal)
	if !ok {
		return
	}
	row := w.rowOf(b)
	last, _ := w.counter.Get(key, nsGlobal)
	if !force && row.Count() == last {
		return
	}
	w.counter.Put(key, nsGlobal, row.Count())
	w.result(key, row, nil, nil, firing, b.maxTime)
}
