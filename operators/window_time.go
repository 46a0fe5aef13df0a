package operators

import (
	"github.com/eddy-stream/eddy/operators/agg"
	"github.com/eddy-stream/eddy/pipeline"
	"github.com/eddy-stream/eddy/statestore"
)

// Tumbling and sliding windows. A key's records are kept in pane
// accumulators of width gcd(size, slide) (the window itself when tumbling),
// addressed by (key, tag + pane start); a window's result merges its panes
// when it fires, so a record costs one accumulator update however many
// windows it belongs to.
//
// Timers, addressed by (key, tag + window start), are registered when a
// pane of the key is created, for each window containing it:
//
//   - fire at end - 1 (event time, or processing time for records without
//     event time), unless the window already fired;
//   - cleanup at end - 1 + allowed_lateness (event time, when lateness > 0;
//     else firing cleans up): the window is late, and the panes that no
//     later window contains, [start, start + slide), are dropped;
//   - early firing (trigger.early_every), a processing-time timer at the
//     next multiple of the interval, registered by every record of a window
//     that has not fired.

// addTime assigns r, at time ts of domain tag, to its windows.
func (w *windowOp) addTime(r *pipeline.Record, ts int64, tag byte) error {
	p := w.plan
	event := tag == tagEvent
	cache := w.nsP
	if event {
		cache = w.nsE
	}
	lastStart := ts - floorMod(ts-p.offset, p.slide)
	// The earliest window containing ts: windows start every slide.
	firstStart := lastStart - (lastStart+p.size-ts-1)/p.slide*p.slide
	if event && w.isLate(lastStart+p.size) {
		// The last window of ts ends last: all of them are late.
		return w.lateRecord(r, firstStart, firstStart+p.size)
	}
	paneStart := ts - floorMod(ts-p.offset, p.pane)
	if failed, err := w.add(r, cache.get(paneStart)); failed {
		return err
	}
	// A new pane registers the timers of its windows. Before the first
	// watermark every record does (as Flink's trigger does per record): a
	// restored window may have fired before the checkpoint, and the
	// watermark, which snapshots do not hold, starts over.
	arm := w.in.fresh || (event && w.wm == pipeline.MinWatermark)
	if !arm && p.early == 0 && (!event || firstStart+p.size-1 > w.wm) {
		return nil // no window of ts fired yet, and the pane's timers are set
	}
	// The windows that also contain the key's previous pane got their
	// timers with it (or were late then, and are now): when that pane
	// exists, only the windows starting in this pane need timers.
	armFrom := firstStart
	if arm && p.pane != p.size && w.wm != pipeline.MinWatermark {
		if _, ok := w.accs.Accumulator(r.Key, cache.get(paneStart-p.pane)); ok {
			armFrom = paneStart - p.pane + 1
		}
	}
	for s := firstStart; s <= lastStart; s += p.slide {
		end := s + p.size
		if event && w.isLate(end) {
			continue // not added to it: it never fires again
		}
		fired := event && end-1 <= w.wm
		armThis := arm && s >= armFrom
		if !armThis && !fired && p.early == 0 {
			continue // the window's timers are registered
		}
		ns := cache.get(s)
		if armThis {
			switch {
			case !event:
				w.timers.RegisterProcessingTimer(r.Key, ns, end-1)
			case !fired:
				w.timers.RegisterEventTimer(r.Key, ns, end-1)
			}
			if event && p.lateness > 0 {
				w.timers.RegisterEventTimer(r.Key, ns, satAdd(end-1, p.lateness))
			}
		}
		switch {
		case fired:
			w.fireTime(r.Key, s, tag, firingLateUpdate)
		case p.early > 0:
			if at := alignedNext(w.procNow(), p.early); event || at < end-1 {
				w.timers.RegisterProcessingTimer(r.Key, ns, at)
			}
		}
	}
	return nil
}

// windowRow returns the accumulated row of the window of key starting at
// start: its pane, or its panes merged. ok is false when it holds nothing.
func (w *windowOp) windowRow(key string, start int64, tag byte) (row *agg.Row, ok bool) {
	p := w.plan
	cache := w.nsP
	if tag == tagEvent {
		cache = w.nsE
	}
	if p.pane == p.size {
		b, ok := w.accs.Accumulator(key, cache.get(start))
		if !ok {
			return nil, false
		}
		return w.rowOf(b), true
	}
	w.scratch.Reset()
	for ps := start; ps < start+p.size; ps += p.pane {
		if b, found := w.accs.Accumulator(key, cache.get(ps)); found {
			if err := w.scratch.Merge(w.rowOf(b)); err != nil {
				w.fail(err)
			}
			ok = true
		}
	}
	return w.scratch, ok
}

// fireTime emits the result of the window of key starting at start.
func (w *windowOp) fireTime(key string, start int64, tag byte, firing string) {
	row, ok := w.windowRow(key, start, tag)
	if !ok {
		return
	}
	end := start + w.plan.size
	w.result(key, row, start, end, firing, end-1)
}

// cleanupTime drops the panes that only windows up to the one starting at
// start contain: [start, start + slide).
func (w *windowOp) cleanupTime(key string, start int64, tag byte) {
	p := w.plan
	cache := w.nsP
	if tag == tagEvent {
		cache = w.nsE
	}
	for ps := start; ps < start+p.slide; ps += p.pane {
		w.accs.Clear(key, cache.get(ps))
	}
}

func (w *windowOp) timeEventTimer(t statestore.Timer) {
	tag, start := decodeNS(t.Namespace)
	end := start + w.plan.size
	switch t.Timestamp {
	case end - 1:
		w.fireTime(t.Key, start, tag, firingOnTime)
		if w.plan.lateness == 0 {
			w.cleanupTime(t.Key, start, tag)
		}
	case satAdd(end-1, w.plan.lateness):
		w.cleanupTime(t.Key, start, tag)
	}
}

// timeProcTimer handles a processing-time timer: the firing of a
// processing-time window, or an early firing. final (the input ended)
// fires processing-time windows and skips early firings.
func (w *windowOp) timeProcTimer(t statestore.Timer, final bool) {
	tag, start := decodeNS(t.Namespace)
	end := start + w.plan.size
	switch {
	case tag == tagProc && t.Timestamp == end-1:
		w.fireTime(t.Key, start, tag, firingOnTime)
		w.cleanupTime(t.Key, start, tag)
	case final:
	case tag == tagProc && t.Timestamp < end-1, tag == tagEvent && end-1 > w.wm:
		w.fireTime(t.Key, start, tag, firingEarly)
	}
}
