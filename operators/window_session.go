package operators

import (
	"slices"

	"github.com/eddy-stream/eddy/pipeline"
	"github.com/eddy-stream/eddy/statestore"
)

// Session windows. Each record opens the window [ts, ts + gap); windows of
// a key that overlap or touch merge (Flink's MergingWindowSet).
//
// State: the key's live sessions are one sessionSet per time domain
// (`sessions`, namespace "e" or "p"); each session's accumulator lives in
// `accs` under a namespace that stays fixed for the session's life, tag +
// the start of the window that opened it (sessionEntry.NS). When sessions
// merge, the earliest one's namespace keeps the merged accumulator.
//
// Timers are re-armed lazily, so that a record extending its session (the
// common case) touches no timer: a session's timer fires at or before the
// time it is due, and the handler looks at the session's current bounds:
//
//   - at end - 1 it fires (on time), then arms cleanup at end - 1 +
//     allowed_lateness (or drops the session at once without lateness);
//   - at end - 1 + allowed_lateness it drops the session;
//   - earlier than either (the session grew since the timer was set) it
//     re-arms for the one due next.
//
// An unfired session always has a timer pending at or before its end - 1;
// a fired one (within its lateness) at or before its cleanup. Timers of
// sessions merged away find no session and do nothing.

// sessionEntry is one live session of a key: the window [Start, End) and
// the namespace number of its accumulator.
type sessionEntry struct {
	_     struct{} `cbor:",toarray"`
	Start int64
	End   int64
	NS    int64
}

// sessionSet is the live sessions of a key in one time domain. It is the
// ACC of an AggregatingState whose Add replaces the entries: the backend
// hands Add a writable copy, so the update needs no allocation.
type sessionSet struct {
	_ struct{} `cbor:",toarray"`
	E []sessionEntry
}

var (
	nsSessionsEvent = string([]byte{tagEvent})
	nsSessionsProc  = string([]byte{tagProc})
)

func registerSessions(b statestore.Backend, name string) (statestore.AggregatingState[*sessionSet, *sessionSet, *sessionSet], error) {
	return statestore.RegisterAggregating(b, statestore.AggregatingDescriptor[*sessionSet, *sessionSet, *sessionSet]{
		Name: name,
		Add: func(acc, in *sessionSet) *sessionSet {
			if acc == nil {
				acc = &sessionSet{}
			}
			acc.E = append(acc.E[:0], in.E...)
			return acc
		},
		Merge:  func(a, _ *sessionSet) *sessionSet { return a }, // never merged
		Result: func(s *sessionSet) *sessionSet { return s },
		Copy:   func(s *sessionSet) *sessionSet { return &sessionSet{E: slices.Clone(s.E)} },
	})
}

// putSessions stores the key's sessions (w.work).
func (w *windowOp) putSessions(key string, tag byte) {
	ns := nsSessionsEvent
	if tag != tagEvent {
		ns = nsSessionsProc
	}
	if len(w.work.E) == 0 {
		w.sessions.Clear(key, ns)
		return
	}
	w.sessions.Add(key, ns, &w.work)
}

func (w *windowOp) getSessions(key string, tag byte) []sessionEntry {
	ns := nsSessionsEvent
	if tag != tagEvent {
		ns = nsSessionsProc
	}
	if s, ok := w.sessions.Accumulator(key, ns); ok {
		return s.E
	}
	return nil
}

func (w *windowOp) sessionCache(tag byte) *nsCache {
	if tag == tagEvent {
		return w.nsE
	}
	return w.nsP
}

// sessionFired reports whether a session of domain tag ending at end has
// fired: processing-time sessions are dropped when they fire.
func (w *windowOp) sessionFired(end int64, tag byte) bool {
	return tag == tagEvent && end-1 <= w.wm
}

// addSession assigns r, at time ts of domain tag, to its session.
func (w *windowOp) addSession(r *pipeline.Record, ts int64, tag byte) error {
	key := r.Key
	start, end := ts, satAdd(ts, w.plan.gap)
	live := w.getSessions(key, tag)
	// The sessions the record's window overlaps or touches, by start.
	target := -1
	merged := sessionEntry{Start: start, End: end}
	touches := 0
	for i, e := range live {
		if e.Start <= end && e.End >= start {
			touches++
			if target < 0 || e.Start < live[target].Start {
				target = i
			}
			merged.Start, merged.End = min(merged.Start, e.Start), max(merged.End, e.End)
		}
	}
	cache := w.sessionCache(tag)
	if target < 0 {
		if tag == tagEvent && w.isLate(end) {
			return w.lateRecord(r, start, end)
		}
		ns := cache.get(ts)
		if failed, err := w.add(r, ns); failed {
			return err
		}
		merged.NS = ts
		w.work.E = append(append(w.work.E[:0], live...), merged)
		w.putSessions(key, tag)
		switch {
		case w.sessionFired(end, tag):
			// Not late, so within the lateness: fire now, arm cleanup.
			w.fireSession(key, ns, merged, firingLateUpdate)
			w.timers.RegisterEventTimer(key, ns, satAdd(end-1, w.plan.lateness))
		case tag == tagEvent:
			w.timers.RegisterEventTimer(key, ns, end-1)
		default:
			w.timers.RegisterProcessingTimer(key, ns, end-1)
		}
		w.earlySession(key, ns, merged, tag)
		return nil
	}
	// The record joins the sessions it touches: they merge into the
	// earliest, which gets the record first (a failed record changes
	// nothing), then the others' accumulators in start order.
	t := live[target]
	ns := cache.get(t.NS)
	if failed, err := w.add(r, ns); failed {
		return err
	}
	merged.NS = t.NS
	if touches > 1 || merged != t {
		w.work.E = w.work.E[:0]
		w.sources = w.sources[:0]
		for i, e := range live {
			switch {
			case i == target:
				w.work.E = append(w.work.E, merged)
			case e.Start <= end && e.End >= start:
				w.sourceEntries = append(w.sourceEntries, e)
			default:
				w.work.E = append(w.work.E, e)
			}
		}
		if len(w.sourceEntries) > 0 {
			slices.SortFunc(w.sourceEntries, func(a, b sessionEntry) int { return cmpInt64(a.Start, b.Start) })
			for _, e := range w.sourceEntries {
				w.sources = append(w.sources, cache.get(e.NS))
			}
			w.sourceEntries = w.sourceEntries[:0]
			w.accs.MergeNamespaces(key, ns, w.sources...)
		}
		w.putSessions(key, tag)
		// An unfired session has a timer at or before its end - 1; a fired
		// target that grows past the watermark needs one.
		if w.sessionFired(t.End, tag) && !w.sessionFired(merged.End, tag) {
			w.timers.RegisterEventTimer(key, ns, merged.End-1)
		}
	}
	if tag == tagEvent && w.wm == pipeline.MinWatermark {
		// Before the first watermark (after a restore: the session may
		// have fired before the checkpoint), arm its firing again.
		w.timers.RegisterEventTimer(key, ns, merged.End-1)
	}
	if w.sessionFired(merged.End, tag) {
		w.fireSession(key, ns, merged, firingLateUpdate)
	}
	w.earlySession(key, ns, merged, tag)
	return nil
}

// earlySession arms the early firing of an open session.
func (w *windowOp) earlySession(key, ns string, e sessionEntry, tag byte) {
	p := w.plan
	if p.early == 0 || w.sessionFired(e.End, tag) {
		return
	}
	if at := alignedNext(w.procNow(), p.early); tag == tagEvent || at < e.End-1 {
		w.timers.RegisterProcessingTimer(key, ns, at)
	}
}

func (w *windowOp) fireSession(key, ns string, e sessionEntry, firing string) {
	b, ok := w.accs.Accumulator(key, ns)
	if !ok {
		return
	}
	w.result(key, w.rowOf(b), e.Start, e.End, firing, e.End-1)
}

// findSession returns the live session of key whose accumulator is under
// ns.
func (w *windowOp) findSession(key, ns string) (sessionEntry, bool) {
	tag, n := decodeNS(ns)
	for _, e := range w.getSessions(key, tag) {
		if e.NS == n {
			return e, true
		}
	}
	return sessionEntry{}, false
}

// dropSession deletes a session's accumulator and entry.
func (w *windowOp) dropSession(key, ns string) {
	tag, n := decodeNS(ns)
	w.accs.Clear(key, ns)
	w.work.E = w.work.E[:0]
	for _, e := range w.getSessions(key, tag) {
		if e.NS != n {
			w.work.E = append(w.work.E, e)
		}
	}
	w.putSessions(key, tag)
}

func (w *windowOp) sessionEventTimer(t statestore.Timer) {
	e, ok := w.findSession(t.Key, t.Namespace)
	if !ok {
		return // merged away
	}
	due, cleanup := e.End-1, satAdd(e.End-1, w.plan.lateness)
	switch {
	case t.Timestamp == due:
		w.fireSession(t.Key, t.Namespace, e, firingOnTime)
		if w.plan.lateness == 0 {
			w.dropSession(t.Key, t.Namespace)
		} else {
			w.timers.RegisterEventTimer(t.Key, t.Namespace, cleanup)
		}
	case t.Timestamp < due:
		w.timers.RegisterEventTimer(t.Key, t.Namespace, due)
	case t.Timestamp < cleanup:
		w.timers.RegisterEventTimer(t.Key, t.Namespace, cleanup)
	default:
		w.dropSession(t.Key, t.Namespace)
	}
}

// sessionProcTimer handles the processing-time timers of sessions: the
// firing of processing-time sessions (re-armed lazily like event-time
// ones) and early firings.
func (w *windowOp) sessionProcTimer(t statestore.Timer, final bool) {
	e, ok := w.findSession(t.Key, t.Namespace)
	if !ok {
		return
	}
	if t.Namespace[0] == tagEvent {
		if !final && e.End-1 > w.wm {
			w.fireSession(t.Key, t.Namespace, e, firingEarly)
		}
		return
	}
	switch {
	case t.Timestamp >= e.End-1:
		w.fireSession(t.Key, t.Namespace, e, firingOnTime)
		w.dropSession(t.Key, t.Namespace)
	default:
		w.timers.RegisterProcessingTimer(t.Key, t.Namespace, e.End-1)
		if !final && w.plan.early > 0 && floorMod(t.Timestamp, w.plan.early) == 0 {
			w.fireSession(t.Key, t.Namespace, e, firingEarly)
		}
	}
}

func cmpInt64(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
