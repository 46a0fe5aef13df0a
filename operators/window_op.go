package operators

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/eddy-stream/eddy/expr"
	"github.com/eddy-stream/eddy/operators/agg"
	"github.com/eddy-stream/eddy/pipeline"
	"github.com/eddy-stream/eddy/statestore"
)

// windowOp is the operator of a key_by step with a window, on one subtask
// (docs/windows.md). Its state (accumulators of windows,
// panes and sessions, session bounds, record counters) and its timers live
// in the subtask's keyed state backend, which snapshots them; the operator
// itself holds nothing that a restore would need.
//
// Time windows use event time when a record has one (Record.Time), else
// processing time (OperatorContext.Now at arrival). Event-time windows fire
// on event-time timers as the watermark passes their end, processing-time
// windows on processing-time timers (WakeAt, OnProcessingTime).
type windowOp struct {
	plan       *windowPlan
	specs      agg.Specs
	lateOutput string

	vm       expr.VM
	errs     *pipeline.ErrorHandler
	late     pipeline.Emitter // nil: late records are dropped
	dropped  prometheus.Counter
	firedCnt prometheus.Counter
	now      func() int64
	wakeAt   func(int64)
	// wakeReq is the processing time last passed to WakeAt and not yet
	// called back (0: none).
	wakeReq int64

	backend     statestore.Backend
	ownsBackend bool
	timers      *statestore.TimerService
	// accs holds the accumulators: of panes (tumbling, sliding), sessions,
	// count-window panes and global windows.
	accs statestore.AggregatingState[*addIn, *accBox, *accBox]
	// sessions holds per key the live session windows.
	sessions statestore.AggregatingState[*sessionSet, *sessionSet, *sessionSet]
	// counter holds per key the records seen (count windows) or the row
	// count at the last firing (global windows).
	counter statestore.ValueState[int64]

	// wm is the event-time watermark; procWM the processing time of the
	// last OnProcessingTime; ended is set by the final watermark.
	wm     int64
	procWM int64
	ended  bool
	// batchNow is the processing time of the batch being processed (0:
	// not read yet).
	batchNow int64

	in            addIn
	nsE, nsP      *nsCache
	nsC           *nsCache
	scratch       *agg.Row
	work          sessionSet
	sourceEntries []sessionEntry
	sources       []string
	out           []pipeline.Record
	lateOut       []pipeline.Record
	err           error // the first failure inside a state callback
}

func newWindowOp(c *KeyByConfig) (pipeline.Operator, error) {
	if c.plan == nil {
		if err := c.Validate(); err != nil {
			return nil, err
		}
	}
	return &windowOp{plan: c.plan, specs: c.Aggregate, lateOutput: c.LateOutput}, nil
}

// Open gets the backend, registers the window's states and timer service
// (named after the step) and asks for a wake-up if processing-time timers
// are pending (restored ones).
func (w *windowOp) Open(_ context.Context, oc *pipeline.OperatorContext) error {
	w.errs = oc.Errors
	if w.errs == nil {
		w.errs = pipeline.NewErrorHandler(oc.SubtaskInfo, pipeline.OnErrorFail, nil)
	}
	if w.lateOutput != "" && oc.Side != nil {
		w.late = oc.Side(lateSide)
	}
	if oc.Metrics != nil {
		w.dropped = oc.Metrics.LateDropped(oc.SubtaskInfo)
		w.firedCnt = oc.Metrics.WindowsFired(oc.SubtaskInfo)
	}
	w.now = oc.Now
	if w.now == nil {
		w.now = func() int64 { return time.Now().UnixMilli() }
	}
	w.wakeAt = oc.WakeAt
	if w.wakeAt == nil {
		w.wakeAt = func(int64) {}
	}
	if err := w.openState(oc); err != nil {
		return fmt.Errorf("window of %q: %w", oc.ID, err)
	}
	w.wm, w.procWM = pipeline.MinWatermark, math.MinInt64
	w.nsE, w.nsP, w.nsC = newNSCache(tagEvent), newNSCache(tagProc), newNSCache(tagCount)
	w.scratch = agg.NewAccs(w.specs)
	w.scheduleWake()
	return nil
}

func (w *windowOp) openState(oc *pipeline.OperatorContext) error {
	if oc.KeyedState != nil {
		b, err := oc.KeyedState()
		if err != nil {
			return err
		}
		w.backend = b
	} else {
		// A hand-built context (tests): a backend of every key group.
		maxPar := max(oc.MaxParallelism, 1)
		b, err := statestore.NewMemory(statestore.Options{
			KeyGroup:  func(key string) int { return pipeline.KeyGroup(key, maxPar) },
			KeyGroups: [2]int{0, maxPar},
		})
		if err != nil {
			return err
		}
		w.backend, w.ownsBackend = b, true
	}
	var err error
	w.accs, err = statestore.RegisterAggregating(w.backend, statestore.AggregatingDescriptor[*addIn, *accBox, *accBox]{
		Name:   oc.ID + "/window",
		Add:    w.addToBox,
		Merge:  w.mergeBoxes,
		Result: func(b *accBox) *accBox { return b },
		Copy:   w.copyBox,
	})
	if err != nil {
		return err
	}
	switch w.plan.kind {
	case kindSession:
		if w.sessions, err = registerSessions(w.backend, oc.ID+"/sessions"); err != nil {
			return err
		}
	case kindCount, kindGlobal:
		if w.counter, err = statestore.RegisterValue(w.backend, statestore.ValueDescriptor[int64]{Name: oc.ID + "/counter"}); err != nil {
			return err
		}
	}
	w.timers = w.backend.TimerService(oc.ID)
	return nil
}

// Close releases a backend the operator made itself; the runtime closes
// the one it handed out.
func (w *windowOp) Close() error {
	if w.ownsBackend && w.backend != nil {
		return w.backend.Close()
	}
	return nil
}

// fail records the first failure of a state callback.
func (w *windowOp) fail(err error) {
	if w.err == nil {
		w.err = err
	}
}

// The AggregatingState's functions. They run inside the backend's calls on
// the task goroutine; the box they get is writable (the backend copied it
// first if a snapshot shares it).

func (w *windowOp) addToBox(b *accBox, in *addIn) *accBox {
	if b == nil {
		var r *agg.Row
		b, r = agg.NewAccsWith[accBox](w.specs)
		b.row, b.maxTime = r, pipeline.NoTime
		in.fresh = true
	} else if b.row == nil {
		b.row, b.raw = w.decodeRow(b.raw), nil
	}
	in.box = b
	if err := b.row.Add(&w.vm, in.fields); err != nil {
		in.err = err
		return b
	}
	b.maxTime = max(b.maxTime, in.time)
	return b
}

func (w *windowOp) mergeBoxes(a, b *accBox) *accBox {
	if a.row == nil {
		a.row, a.raw = w.decodeRow(a.raw), nil
	}
	if err := a.row.Merge(w.rowOf(b)); err != nil {
		w.fail(fmt.Errorf("merge windows: %w", err))
	}
	a.maxTime = max(a.maxTime, b.maxTime)
	return a
}

func (w *windowOp) copyBox(b *accBox) *accBox {
	if b.row == nil {
		return &accBox{raw: b.raw, maxTime: b.maxTime}
	}
	c, r := agg.CloneWith[accBox](b.row)
	c.row, c.maxTime = r, b.maxTime
	return c
}

func (w *windowOp) decodeRow(raw []byte) *agg.Row {
	r := agg.NewAccs(w.specs)
	if len(raw) == 0 {
		return r
	}
	if err := r.UnmarshalCBOR(raw); err != nil {
		w.fail(fmt.Errorf("restore a window accumulator (were the aggregates changed?): %w", err))
	}
	return r
}

// rowOf returns a box's row for reading.
func (w *windowOp) rowOf(b *accBox) *agg.Row {
	if b.row != nil {
		return b.row
	}
	return w.decodeRow(b.raw)
}

// add folds record r into the accumulator of (key, ns). It reports whether
// the record failed (it then went to on_error, and nothing changed) and the
// error that must fail the task.
func (w *windowOp) add(r *pipeline.Record, ns string) (failed bool, err error) {
	w.in = addIn{fields: r.Fields, time: r.Time}
	w.accs.Add(r.Key, ns, &w.in)
	if w.in.err == nil {
		return false, nil
	}
	if w.in.fresh {
		w.accs.Clear(r.Key, ns)
	}
	return true, w.errs.Handle(*r, w.in.err)
}

// Process assigns each record to its windows.
func (w *windowOp) Process(in []pipeline.Record, out pipeline.Emitter) error {
	w.batchNow = 0
	for i := range in {
		r := &in[i]
		var err error
		switch w.plan.kind {
		case kindTumbling, kindSliding:
			ts, tag := w.timeOf(r)
			err = w.addTime(r, ts, tag)
		case kindSession:
			ts, tag := w.timeOf(r)
			err = w.addSession(r, ts, tag)
		case kindCount:
			err = w.addCount(r)
		case kindGlobal:
			err = w.addGlobal(r)
		}
		if err != nil {
			return err
		}
	}
	return w.flush(out)
}

// timeOf returns the time that assigns r to windows: its event time, or
// the processing time, always after the last processing-time firing so
// that a processing-time window never gets a record after it fired.
func (w *windowOp) timeOf(r *pipeline.Record) (int64, byte) {
	if r.Time != pipeline.NoTime {
		return r.Time, tagEvent
	}
	return w.procNow(), tagProc
}

// procNow is the processing time of the current batch.
func (w *windowOp) procNow() int64 {
	if w.batchNow == 0 {
		w.batchNow = w.now()
		if w.procWM != math.MinInt64 {
			w.batchNow = max(w.batchNow, w.procWM+1)
		}
	}
	return w.batchNow
}

// isLate reports whether the event-time window ending at end is late: its
// end - 1 + allowed_lateness <= W.
func (w *windowOp) isLate(end int64) bool {
	return satAdd(end-1, w.plan.lateness) <= w.wm
}

// lateRecord sends a late record to late_output with the bounds of the
// (first) window it missed, or drops and counts it.
func (w *windowOp) lateRecord(r *pipeline.Record, start, end int64) error {
	if w.late == nil {
		if w.dropped != nil {
			w.dropped.Inc()
		}
		return nil
	}
	if r.Fields == nil {
		r.Fields = map[string]any{}
	}
	r.Fields[fieldWindowStart] = start
	r.Fields[fieldWindowEnd] = end
	w.lateOut = append(w.lateOut, *r)
	return nil
}

// OnWatermark fires the event-time windows that wm completes and drops the
// state of those that became late.
func (w *windowOp) OnWatermark(wm int64, out pipeline.Emitter) error {
	if wm <= w.wm {
		return nil
	}
	w.wm = wm
	if wm == pipeline.MaxWatermark {
		w.ended = true
	}
	if err := w.timers.AdvanceWatermark(wm, w.onEventTimer); err != nil {
		return err
	}
	return w.flush(out)
}

// OnProcessingTime fires processing-time windows and early firings.
func (w *windowOp) OnProcessingTime(now int64, out pipeline.Emitter) error {
	w.wakeReq = 0
	w.procWM = max(w.procWM, now)
	w.batchNow = 0
	if err := w.timers.AdvanceProcessingTime(now, func(t statestore.Timer) error { return w.onProcTimer(t, false) }); err != nil {
		return err
	}
	return w.flush(out)
}

// Finish fires, after the input ended (the final watermark), the
// processing-time windows still open: no more records can reach them.
// After a stop without the final watermark it fires nothing.
func (w *windowOp) Finish(out pipeline.Emitter) error {
	if w.ended {
		if err := w.timers.AdvanceProcessingTime(math.MaxInt64, func(t statestore.Timer) error { return w.onProcTimer(t, true) }); err != nil {
			return err
		}
	}
	return w.flush(out)
}

func (w *windowOp) onEventTimer(t statestore.Timer) error {
	switch w.plan.kind {
	case kindTumbling, kindSliding:
		w.timeEventTimer(t)
	case kindSession:
		w.sessionEventTimer(t)
	case kindGlobal:
		w.fireGlobal(t.Key, firingOnTime, true)
	}
	return nil
}

func (w *windowOp) onProcTimer(t statestore.Timer, final bool) error {
	switch w.plan.kind {
	case kindTumbling, kindSliding:
		w.timeProcTimer(t, final)
	case kindSession:
		w.sessionProcTimer(t, final)
	case kindGlobal:
		if !final {
			w.fireGlobal(t.Key, firingEarly, false)
		}
	}
	return nil
}

// flush emits what the call produced, once per output, and asks for the
// next processing-time wake-up.
func (w *windowOp) flush(out pipeline.Emitter) error {
	err := w.err
	if err == nil && len(w.out) > 0 {
		err = out.Emit(w.out)
	}
	if err == nil && len(w.lateOut) > 0 {
		err = w.late.Emit(w.lateOut)
	}
	clear(w.out)
	clear(w.lateOut)
	w.out, w.lateOut = w.out[:0], w.lateOut[:0]
	w.scheduleWake()
	return err
}

func (w *windowOp) scheduleWake() {
	next, ok := w.timers.NextProcessingTime()
	if ok && (w.wakeReq == 0 || next < w.wakeReq) {
		w.wakeReq = next
		w.wakeAt(next)
	}
}

// result appends a window result: the key's fields, the aggregates, the
// window's bounds and the firing.
func (w *windowOp) result(key string, row *agg.Row, start, end any, firing string, t int64) {
	fields := make(map[string]any, len(w.plan.keyNames)+len(w.specs)+3)
	w.putKey(fields, key)
	row.Results(fields)
	fields[fieldWindowStart] = start
	fields[fieldWindowEnd] = end
	fields[fieldFiring] = firing
	w.out = append(w.out, pipeline.Record{Fields: fields, Time: t, Key: key})
	if w.firedCnt != nil {
		w.firedCnt.Inc()
	}
}

// putKey decodes the key into its output fields.
func (w *windowOp) putKey(fields map[string]any, key string) {
	names := w.plan.keyNames
	v, err := pipeline.DecodeKey(key)
	if err != nil {
		v = nil
	}
	if len(names) == 1 {
		fields[names[0]] = v
		return
	}
	parts, _ := v.([]any)
	for i, n := range names {
		if i < len(parts) {
			fields[n] = parts[i]
		} else {
			fields[n] = nil
		}
	}
}
