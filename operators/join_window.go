package operators

import (
	"context"
	"errors"
	"fmt"

	"github.com/eddy-stream/eddy/pipeline"
	"github.com/eddy-stream/eddy/statestore"
)

// The window join (docs/joins.md): the records of both sides whose keys are
// equal and whose event times fall in one window pair up when the watermark
// reaches the window's end - 1, as Flink's window join (a coGroup over
// windows) does. Windows are tumbling, sliding (a record belongs to
// size/slide windows) or session windows, which records of either side
// open, extend and merge.
//
// State, per key and window, under the namespace of the window (tag 'e' +
// its start; a session's: tag 'e' + the start of the window that opened
// it, fixed for the session's life as in window_session.go):
//
//   - left, right: each side's records in the window, held once per window
//     they belong to;
//   - fired (with allowed_lateness only): the window fired and is kept for
//     late records. A record that reaches it pairs at once with the other
//     side's records: the pairs of the records already there went out at
//     the firing or when the later of the two arrived, so each pair is
//     emitted once. The mark, not the watermark, says so, because a
//     restore starts the watermark over;
//   - sessions: the key's live sessions (session windows).
//
// The null-padded rows of outer joins are emitted when the window is
// purged, at end - 1 + allowed_lateness (its firing when there is no
// lateness): only then is it known that no record of the other side will
// come, so a padded row is never followed by a pair that contradicts it.
//
// Timers, per key and window: the firing at end - 1 and the purge at
// end - 1 + allowed_lateness, registered by each record of a window that
// has not fired (the purge only, by a record of one that has). Session
// timers are re-armed lazily as windowOp's are: a record that extends its
// session registers nothing, and the session's timer, when it fires
// before the session's current end - 1 (or purge time), arms the next one.
type windowJoin struct {
	joinBase
	win *windowPlan
	// rows holds each side's records per (key, window).
	rows [2]statestore.ListState[map[string]any]
	// fired marks the windows that fired and wait for their purge.
	fired    statestore.ValueState[bool]
	sessions statestore.AggregatingState[*sessionSet, *sessionSet, *sessionSet]
	ns       *nsCache

	// start and end are the bounds of the window whose rows are being
	// emitted; startV and endV the same, boxed once per window for
	// select's environment.
	start, end   int64
	startV, endV any

	work    sessionSet
	merging []mergingSession
	sources []string
	out     []pipeline.Record
}

// mergingSession is a live session that a record merges with others: its
// namespace and whether it fired.
type mergingSession struct {
	ns    string
	fired bool
}

func newWindowJoin(p *joinPlan) *windowJoin {
	return &windowJoin{joinBase: joinBase{plan: p}, win: p.window}
}

// Open sets up the shared parts and registers the join's state.
func (j *windowJoin) Open(_ context.Context, oc *pipeline.OperatorContext) error {
	if err := j.open(oc); err != nil {
		return err
	}
	if err := j.register(oc.ID); err != nil {
		return fmt.Errorf("window join %q: %w", oc.ID, err)
	}
	j.ns = newNSCache(tagEvent)
	return nil
}

// register registers the states on the backend.
func (j *windowJoin) register(id string) error {
	for side, name := range sideNames {
		rows, err := statestore.RegisterList(j.backend, statestore.ListDescriptor[map[string]any]{Name: id + "/" + name})
		if err != nil {
			return err
		}
		j.rows[side] = rows
	}
	var err error
	if j.fired, err = statestore.RegisterValue(j.backend, statestore.ValueDescriptor[bool]{Name: id + "/fired"}); err != nil {
		return err
	}
	if j.win.kind == kindSession {
		j.sessions, err = registerSessions(j.backend, id+"/sessions")
	}
	return err
}

// Process is not called: the runtime calls ProcessInput.
func (j *windowJoin) Process([]pipeline.Record, pipeline.Emitter) error {
	return errors.New("join: records must say their input")
}

// ProcessInput assigns each record of one side to its windows; a record
// that reaches a window that fired emits its pairs at once.
func (j *windowJoin) ProcessInput(side int, in []pipeline.Record, out pipeline.Emitter) error {
	for i := range in {
		if err := j.add(side, &in[i]); err != nil {
			return j.flush(out, err)
		}
	}
	clear(in) // the records are held in state or consumed
	return j.flush(out, nil)
}

// add assigns r, a record of side, to its windows. An error means the task
// must fail (on_error: fail, or a failed dead letter).
func (j *windowJoin) add(side int, r *pipeline.Record) error {
	ts, err := eventTime(r)
	if err != nil {
		return j.errs.Handle(*r, err)
	}
	if j.win.kind == kindSession {
		return j.addSession(side, r, ts)
	}
	return j.addTime(side, r, ts)
}

// OnWatermark fires the windows that wm completes and purges those whose
// lateness it passed.
func (j *windowJoin) OnWatermark(wm int64, out pipeline.Emitter) error {
	if wm <= j.wm {
		return nil
	}
	j.wm = wm
	return j.flush(out, j.timers.AdvanceWatermark(wm, j.onTimer))
}

// flush emits what the call produced, then its late records, and returns
// err after them: what came before a failure goes downstream first.
func (j *windowJoin) flush(out pipeline.Emitter, err error) error {
	err = failAfter(out, j.out, err)
	clear(j.out) // let the emitted maps be collected
	j.out = j.out[:0]
	if lerr := j.flushLate(); err == nil {
		err = lerr
	}
	return err
}

func (j *windowJoin) onTimer(t statestore.Timer) error {
	if j.win.kind == kindSession {
		return j.sessionTimer(t)
	}
	return j.timeTimer(t)
}

// isLate reports whether the window ending at end is late: its
// end - 1 + allowed_lateness <= the watermark, so it was purged.
func (j *windowJoin) isLate(end int64) bool {
	return satAdd(end-1, j.plan.lateness) <= j.wm
}

// firedWindow reports whether the window of key under ns, ending at end,
// fired: it is marked so, or the watermark passed its end - 1 (a window
// that held no record then fires for this one: it is marked now). Without
// allowed_lateness no window that fired is kept.
func (j *windowJoin) firedWindow(key, ns string, end int64) bool {
	if j.plan.lateness == 0 {
		return false
	}
	if _, ok := j.fired.Get(key, ns); ok {
		return true
	}
	if end-1 <= j.wm {
		j.fired.Put(key, ns, true)
		return true
	}
	return false
}

// addTime assigns r, at time ts, to its tumbling or sliding windows: the
// windows that are not late. A record whose windows are all late is late.
func (j *windowJoin) addTime(side int, r *pipeline.Record, ts int64) error {
	w := j.win
	lastStart := ts - floorMod(ts-w.offset, w.slide)
	// The earliest window containing ts: windows start every slide.
	firstStart := lastStart - (lastStart+w.size-ts-1)/w.slide*w.slide
	if j.isLate(lastStart + w.size) {
		// The last window of ts ends last: all of them are late.
		j.tooLate(side, *r)
		return nil
	}
	for s := firstStart; s <= lastStart; s += w.slide {
		end := s + w.size
		if j.isLate(end) {
			continue
		}
		ns := j.ns.get(s)
		if j.firedWindow(r.Key, ns, end) {
			if err := j.pairNew(side, r.Fields, r.Key, ns, s, end); err != nil {
				return err
			}
		} else {
			j.timers.RegisterEventTimer(r.Key, ns, end-1)
		}
		if j.plan.lateness > 0 {
			j.timers.RegisterEventTimer(r.Key, ns, satAdd(end-1, j.plan.lateness))
		}
		j.rows[side].Add(r.Key, ns, r.Fields)
	}
	return nil
}

// timeTimer fires a tumbling or sliding window at its end - 1 and purges
// it at end - 1 + allowed_lateness (both at once without lateness).
func (j *windowJoin) timeTimer(t statestore.Timer) error {
	_, start := decodeNS(t.Namespace)
	end := start + j.win.size
	due, purge := end-1, satAdd(end-1, j.plan.lateness)
	if t.Timestamp == due {
		if err := j.fire(t.Key, t.Namespace, start, end); err != nil {
			return err
		}
		if purge != due {
			j.fired.Put(t.Key, t.Namespace, true)
			return nil
		}
	}
	if t.Timestamp == purge {
		return j.purge(t.Key, t.Namespace, start, end)
	}
	return nil
}

// addSession adds r, at time ts, to its session: the window
// [ts, ts + gap) merged with the key's live sessions it overlaps or
// touches. A record that opens a new session that is late is late.
func (j *windowJoin) addSession(side int, r *pipeline.Record, ts int64) error {
	key := r.Key
	start, end := ts, satAdd(ts, j.win.gap)
	live := j.getSessions(key)
	target := -1
	merged := sessionEntry{Start: start, End: end}
	for i, e := range live {
		if e.Start <= end && e.End >= start {
			if target < 0 || e.Start < live[target].Start {
				target = i
			}
			merged.Start, merged.End = min(merged.Start, e.Start), max(merged.End, e.End)
		}
	}
	if target < 0 {
		if j.isLate(end) {
			j.tooLate(side, *r)
			return nil
		}
		merged.NS = ts
		ns := j.ns.get(ts)
		j.rows[side].Add(key, ns, r.Fields)
		j.work.E = append(append(j.work.E[:0], live...), merged)
		j.putSessions(key)
		if j.firedWindow(key, ns, end) {
			// Nothing to pair: the session holds this record alone.
			j.timers.RegisterEventTimer(key, ns, satAdd(end-1, j.plan.lateness))
		} else {
			j.timers.RegisterEventTimer(key, ns, end-1)
		}
		return nil
	}
	t := live[target]
	merged.NS = t.NS
	ns := j.ns.get(t.NS)
	fired := false
	j.merging, j.sources = j.merging[:0], j.sources[:0]
	for i, e := range live {
		if e.Start > end || e.End < start {
			continue
		}
		m := mergingSession{ns: j.ns.get(e.NS)}
		if j.plan.lateness > 0 {
			_, m.fired = j.fired.Get(key, m.ns)
			fired = fired || m.fired
		}
		j.merging = append(j.merging, m)
		if i != target {
			j.sources = append(j.sources, m.ns)
		}
	}
	if fired {
		if err := j.pairMerged(side, r.Fields, key, merged); err != nil {
			return err
		}
	}
	j.rows[side].Add(key, ns, r.Fields)
	if len(j.sources) > 0 {
		j.rows[sideLeft].MergeNamespaces(key, ns, j.sources...)
		j.rows[sideRight].MergeNamespaces(key, ns, j.sources...)
		for _, src := range j.sources {
			j.fired.Delete(key, src)
		}
	}
	if fired {
		// The target, the earliest, may not be marked: after a restore
		// (the watermark starts over) a new session can open before one
		// that fired.
		j.fired.Put(key, ns, true)
	}
	// The target's timer re-arms itself: it is due at or before the
	// target's end - 1 (its purge, if it fired), no later than the merged
	// session's purge.
	if len(j.sources) > 0 || merged != t {
		j.work.E = j.work.E[:0]
		for i, e := range live {
			switch {
			case i == target:
				j.work.E = append(j.work.E, merged)
			case e.Start > end || e.End < start:
				j.work.E = append(j.work.E, e)
			}
		}
		j.putSessions(key)
	}
	return nil
}

// pairMerged emits, when a record of side with fields f merges sessions
// of which one or more fired (j.merging), the pairs not emitted yet: those
// of f, those across two sessions, and those within a session that has not
// fired. The merged session counts as fired from then on.
func (j *windowJoin) pairMerged(side int, f map[string]any, key string, e sessionEntry) error {
	j.setWindow(e.Start, e.End)
	for a, ma := range j.merging {
		left := j.rows[sideLeft].Get(key, ma.ns)
		for b, mb := range j.merging {
			if a == b && ma.fired {
				continue
			}
			for _, r := range j.rows[sideRight].Get(key, mb.ns) {
				for _, l := range left {
					if err := j.emitPair(l, r, key); err != nil {
						return err
					}
				}
			}
		}
	}
	for _, m := range j.merging {
		if err := j.pairWith(side, f, key, m.ns); err != nil {
			return err
		}
	}
	return nil
}

// sessionTimer fires a session at its end - 1 and purges it at
// end - 1 + allowed_lateness; a timer due earlier than that (the session
// grew since it was set) arms the next one.
func (j *windowJoin) sessionTimer(t statestore.Timer) error {
	e, ok := j.findSession(t.Key, t.Namespace)
	if !ok {
		return nil // merged away
	}
	due, purge := e.End-1, satAdd(e.End-1, j.plan.lateness)
	fired := false
	if j.plan.lateness > 0 {
		_, fired = j.fired.Get(t.Key, t.Namespace)
	}
	switch {
	case !fired && t.Timestamp < due:
		j.timers.RegisterEventTimer(t.Key, t.Namespace, due)
		return nil
	case !fired:
		if err := j.fire(t.Key, t.Namespace, e.Start, e.End); err != nil {
			return err
		}
		if purge != due {
			j.fired.Put(t.Key, t.Namespace, true)
			j.timers.RegisterEventTimer(t.Key, t.Namespace, purge)
			return nil
		}
	case t.Timestamp < purge:
		j.timers.RegisterEventTimer(t.Key, t.Namespace, purge)
		return nil
	}
	err := j.purge(t.Key, t.Namespace, e.Start, e.End)
	j.dropSession(t.Key, e.NS)
	return err
}

func (j *windowJoin) getSessions(key string) []sessionEntry {
	if s, ok := j.sessions.Accumulator(key, nsSessionsEvent); ok {
		return s.E
	}
	return nil
}

// putSessions stores the key's sessions (j.work).
func (j *windowJoin) putSessions(key string) {
	if len(j.work.E) == 0 {
		j.sessions.Clear(key, nsSessionsEvent)
		return
	}
	j.sessions.Add(key, nsSessionsEvent, &j.work)
}

// findSession returns the live session of key under ns.
func (j *windowJoin) findSession(key, ns string) (sessionEntry, bool) {
	_, n := decodeNS(ns)
	for _, e := range j.getSessions(key) {
		if e.NS == n {
			return e, true
		}
	}
	return sessionEntry{}, false
}

// dropSession removes the session of key whose namespace number is n.
func (j *windowJoin) dropSession(key string, n int64) {
	j.work.E = j.work.E[:0]
	for _, e := range j.getSessions(key) {
		if e.NS != n {
			j.work.E = append(j.work.E, e)
		}
	}
	j.putSessions(key)
}

// setWindow makes [start, end) the window of the rows emitted next.
func (j *windowJoin) setWindow(start, end int64) {
	if j.start != start || j.startV == nil {
		j.start, j.startV = start, start
	}
	if j.end != end || j.endV == nil {
		j.end, j.endV = end, end
	}
}

// fire emits every pair of the window of key under ns.
func (j *windowJoin) fire(key, ns string, start, end int64) error {
	left := j.rows[sideLeft].Get(key, ns)
	right := j.rows[sideRight].Get(key, ns)
	if len(left) == 0 || len(right) == 0 {
		return nil
	}
	j.setWindow(start, end)
	for _, l := range left {
		for _, r := range right {
			if err := j.emitPair(l, r, key); err != nil {
				return err
			}
		}
	}
	return nil
}

// pairNew emits the pairs that a record of side with fields f makes in
// the window [start, end) of key under ns, which fired.
func (j *windowJoin) pairNew(side int, f map[string]any, key, ns string, start, end int64) error {
	j.setWindow(start, end)
	return j.pairWith(side, f, key, ns)
}

// pairWith emits the pairs of a record of side with fields f and the other
// side's records of key under ns, in the window set by setWindow.
func (j *windowJoin) pairWith(side int, f map[string]any, key, ns string) error {
	for _, o := range j.rows[1-side].Get(key, ns) {
		l, r := f, o
		if side == sideRight {
			l, r = o, f
		}
		if err := j.emitPair(l, r, key); err != nil {
			return err
		}
	}
	return nil
}

// purge drops the window of key under ns; an outer join first emits the
// padded rows of the side kept unmatched when the other side had no record
// in the window.
func (j *windowJoin) purge(key, ns string, start, end int64) error {
	err := j.padUnmatched(key, ns, start, end)
	j.rows[sideLeft].Clear(key, ns)
	j.rows[sideRight].Clear(key, ns)
	if j.plan.lateness > 0 {
		j.fired.Delete(key, ns)
	}
	return err
}

// padUnmatched emits, for an outer join, the padded rows of the window of
// key under ns: those of its records of a kept side when the other side
// has none there.
func (j *windowJoin) padUnmatched(key, ns string, start, end int64) error {
	for side := range 2 {
		if !j.plan.typ.keepsUnmatched(side) || len(j.rows[1-side].Get(key, ns)) > 0 {
			continue
		}
		j.setWindow(start, end)
		for _, f := range j.rows[side].Get(key, ns) {
			l, r := f, map[string]any(nil)
			if side == sideRight {
				l, r = nil, f
			}
			if err := j.emitPair(l, r, key); err != nil {
				return err
			}
		}
	}
	return nil
}

// emitPair appends the output row of l and r (nil: the padded side) in the
// window set by setWindow: time end - 1, select's environment with
// window_start and window_end besides left and right. A row whose select
// fails follows on_error as the record {left, right}; the error returned
// means the task must fail.
func (j *windowJoin) emitPair(l, r map[string]any, key string) error {
	if j.plan.selects != nil {
		j.env[fieldWindowStart], j.env[fieldWindowEnd] = j.startV, j.endV
	}
	rec, err := j.joined(l, r, j.end-1, key)
	if err != nil {
		failed := pipeline.Record{Fields: map[string]any{"left": l, "right": r}, Time: j.end - 1, Key: key}
		return j.errs.Handle(failed, err)
	}
	j.out = append(j.out, rec)
	return nil
}

// WatermarkHold implements pipeline.WatermarkHolder: with
// allowed_lateness, an outer join emits its padded rows when a window is
// purged (end - 1 + lateness), with the window's time (end - 1), so its
// output watermark stays lateness behind for them not to be late
// downstream.
func (j *windowJoin) WatermarkHold() int64 {
	if j.plan.typ == joinInner {
		return 0
	}
	return j.plan.lateness
}
