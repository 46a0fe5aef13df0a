package operators

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/eddy-stream/eddy/expr"
	"github.com/eddy-stream/eddy/pipeline"
	"github.com/eddy-stream/eddy/statestore"
)

func init() {
	register(pipeline.StepPlugin{
		Kind:    "dedupe",
		Summary: "keep the first record per key value within a time span, drop the later ones",
		New:     func() pipeline.StepConfig { return &DedupeConfig{} },
	})
}

// DedupeConfig is a `dedupe:` step. Its input is hash-partitioned by the key
// like key_by's, so each key lives on one subtask, in its keyed state.
//
//	steps:
//	  - id: unique_orders
//	    dedupe: order_id            # or [customer, order_id]
//	    within: 10m
//
// A record whose key was kept at time t0 is a duplicate, and dropped, when
// its own time ts is < t0 + within. The time is the event time, or the
// processing time when the record has none (a source without event_time).
// The key's state is cleared once the watermark reaches t0 + within - 1
// (no later record can be a duplicate of it), or, in processing time, once
// the clock reaches t0 + within. docs/changelog.md describes the semantics.
type DedupeConfig struct {
	Dedupe KeyList `yaml:"dedupe"`
	// Within is how long after a kept record its duplicates are dropped.
	Within pipeline.Duration `yaml:"within"`
}

// Validate requires a key and a positive span.
func (c *DedupeConfig) Validate() error {
	var errs []error
	if len(c.Dedupe) == 0 {
		errs = append(errs, pipeline.FieldErr("dedupe", "give a key expression or a list of them, e.g. dedupe: order_id"))
	}
	if c.Within.Millis() <= 0 {
		errs = append(errs, pipeline.FieldErr("within", "give a duration of 1ms or more, how long duplicates of a kept record are dropped, e.g. within: 10m"))
	}
	return errors.Join(errs...)
}

// KeyExprs implements pipeline.KeyedStep: the runtime partitions the input
// by the dedupe key.
func (c *DedupeConfig) KeyExprs(int) []*expr.Expr {
	out := make([]*expr.Expr, len(c.Dedupe))
	for i := range c.Dedupe {
		out[i] = &c.Dedupe[i]
	}
	return out
}

// NewOperator returns the dedupe of one subtask.
func (c *DedupeConfig) NewOperator() (pipeline.Operator, error) {
	return &dedupeOp{within: c.Within.Millis()}, nil
}

// Names of the dedupe operator's state and timer service in its backend.
const (
	dedupeState  = "dedupe/until"
	dedupeTimers = "dedupe"
)

// dedupeOp keeps, per key, until: the end (exclusive) of the span in which
// records of the key are duplicates, t0 + within. A timer clears it: an
// event-time timer at until - 1 for records with event time, a
// processing-time timer at until for the others.
type dedupeOp struct {
	within int64
	until  statestore.ValueState[int64]
	timers *statestore.TimerService
	now    func() int64
	wakeAt func(int64)
}

// Open registers the state and timers on the step's keyed state backend.
func (o *dedupeOp) Open(_ context.Context, oc *pipeline.OperatorContext) error {
	if oc.KeyedState == nil {
		return errors.New("dedupe needs keyed state, and the operator context has none")
	}
	b, err := oc.KeyedState()
	if err != nil {
		return err
	}
	if o.until, err = statestore.RegisterValue(b, statestore.ValueDescriptor[int64]{Name: dedupeState}); err != nil {
		return fmt.Errorf("dedupe state: %w", err)
	}
	o.timers = b.TimerService(dedupeTimers)
	o.now = oc.Now
	if o.now == nil {
		o.now = func() int64 { return time.Now().UnixMilli() }
	}
	o.wakeAt = oc.WakeAt
	if o.wakeAt == nil {
		o.wakeAt = func(int64) {}
	}
	// Restored processing-time timers need a wake-up too.
	o.scheduleWake()
	return nil
}

// Close has nothing to release: the runtime closes the backend.
func (o *dedupeOp) Close() error { return nil }

// Process keeps the first record of each key per span, compacted to the
// front of in, and emits them in their input order.
func (o *dedupeOp) Process(in []pipeline.Record, out pipeline.Emitter) error {
	kept := 0
	now, proc := int64(0), false
	for i := range in {
		r := &in[i]
		ts, inProc := r.Time, false
		if ts == pipeline.NoTime {
			if now == 0 {
				now = o.now() // once per batch
			}
			ts, inProc = now, true
		}
		until, seen := o.until.Get(r.Key, "")
		if seen && ts < until {
			continue // a duplicate
		}
		if seen {
			// The span of the previous kept record ended, but its timer
			// has not fired yet: it is replaced.
			o.timers.DeleteEventTimer(r.Key, "", until-1)
			o.timers.DeleteProcessingTimer(r.Key, "", until)
		}
		until = saturatingAdd(ts, o.within)
		o.until.Put(r.Key, "", until)
		if inProc {
			o.timers.RegisterProcessingTimer(r.Key, "", until)
			proc = true
		} else {
			o.timers.RegisterEventTimer(r.Key, "", until-1)
		}
		in[kept] = *r
		kept++
	}
	clear(in[kept:])
	if proc {
		o.scheduleWake()
	}
	return emit(out, in[:kept])
}

// OnWatermark clears the keys whose span the watermark has passed: no
// record that is not late can be their duplicate any more.
func (o *dedupeOp) OnWatermark(wm int64, _ pipeline.Emitter) error {
	return o.timers.AdvanceWatermark(wm, func(t statestore.Timer) error {
		o.expire(t.Key, t.Timestamp+1)
		return nil
	})
}

// OnProcessingTime clears the processing-time keys whose span ended.
func (o *dedupeOp) OnProcessingTime(now int64, _ pipeline.Emitter) error {
	err := o.timers.AdvanceProcessingTime(now, func(t statestore.Timer) error {
		o.expire(t.Key, t.Timestamp)
		return nil
	})
	o.scheduleWake()
	return err
}

// expire deletes key's state if its span ends at or before until (the
// timer's; a newer span has its own timer).
func (o *dedupeOp) expire(key string, until int64) {
	if u, ok := o.until.Get(key, ""); ok && u <= until {
		o.until.Delete(key, "")
	}
}

// scheduleWake asks for a call at the earliest processing-time timer.
func (o *dedupeOp) scheduleWake() {
	if next, ok := o.timers.NextProcessingTime(); ok {
		o.wakeAt(next)
	}
}

// saturatingAdd returns a + b (b >= 0) without overflowing past MaxInt64.
func saturatingAdd(a, b int64) int64 {
	if a > pipeline.MaxWatermark-b {
		return pipeline.MaxWatermark
	}
	return a + b
}
