package pipeline

import (
	"maps"
	"math"
	"time"

	"github.com/eddy-stream/eddy/expr"
)

// Time values are event or processing timestamps in epoch milliseconds.
const (
	// NoTime marks a record without an event timestamp.
	NoTime int64 = math.MinInt64
	// MaxWatermark is the watermark that ends event time: every window fires.
	MaxWatermark int64 = math.MaxInt64
	// MinWatermark is the watermark before any input has been seen.
	MinWatermark int64 = math.MinInt64
)

// Record is one data item. Fields is the record's content and the environment of
// expressions. A Record is owned by exactly one task at a time: an operator may
// change it in place while processing it; fan-out clones it.
type Record struct {
	Fields map[string]any
	// Time is the event timestamp in epoch ms, or NoTime.
	Time int64
	// Key is the canonical encoding of the record's key (see EncodeKey), set by
	// hash partitioning into a key_by step; "" when the stream is not keyed.
	Key string
	// Meta carries source metadata (Kafka key, headers, partition, offset), or nil.
	Meta *expr.Meta
}

// NewRecord returns a record with the given fields and no event time.
func NewRecord(fields map[string]any) Record {
	return Record{Fields: fields, Time: NoTime}
}

// Clone returns a copy whose top-level fields can be changed without affecting r.
// Nested values are shared: operators treat them as immutable.
func (r Record) Clone() Record {
	c := r
	c.Fields = maps.Clone(r.Fields)
	return c
}

// ControlKind tells the kind of an in-band control event.
type ControlKind uint8

const (
	// ControlWatermark carries a watermark: no more records with Time <= Watermark.
	ControlWatermark ControlKind = iota + 1
	// ControlBarrier is a checkpoint barrier.
	ControlBarrier
	// ControlEndOfInput says the channel carries no more records or
	// watermarks (end of data); barriers and ControlTerminate may follow.
	ControlEndOfInput
	// ControlIdle says the channel carries no records for a while: its
	// watermark stops holding back the receiver's until it carries a record
	// or watermark again.
	ControlIdle
	// ControlTerminate says the channel carries nothing more: it follows
	// end-of-input, and the final checkpoint's barrier when there is one.
	ControlTerminate
)

func (k ControlKind) String() string {
	switch k {
	case ControlWatermark:
		return "watermark"
	case ControlBarrier:
		return "barrier"
	case ControlEndOfInput:
		return "end-of-input"
	case ControlIdle:
		return "idle"
	case ControlTerminate:
		return "terminate"
	}
	return "unknown"
}

// Control is an in-band control event. It travels in order with records:
// everything sent on a channel before it is delivered before it.
type Control struct {
	Kind      ControlKind
	Watermark int64
	Barrier   Barrier
}

// Barrier marks checkpoint ID in a stream (Chandy–Lamport marker).
type Barrier struct {
	ID int64
	// Savepoint is true for a user-requested savepoint.
	Savepoint bool
	// Final is true for the checkpoint taken after the end of data: the
	// last one of the run.
	Final bool
	// Triggered is when the coordinator triggered the checkpoint (each
	// task's start delay is measured from it).
	Triggered time.Time
}

// Batch is the unit sent between tasks: records, then at most one control event.
// A sender always flushes pending records before a control event, so the
// control event is the last element of the batch that carries it.
type Batch struct {
	Records []Record
	Control *Control
}

// NormalizeDecoded turns the integers a CBOR decoder produced (int64,
// uint64) into int, the type expressions produce, in lists and maps too,
// in place: for values read back from a snapshot or a committable. Pure
// but for the in-place update of v's lists and maps.
func NormalizeDecoded(v any) any {
	switch x := v.(type) {
	case int64:
		if x >= math.MinInt && x <= math.MaxInt {
			return int(x)
		}
	case uint64:
		if x <= math.MaxInt {
			return int(x)
		}
	case []any:
		for i := range x {
			x[i] = NormalizeDecoded(x[i])
		}
	case map[string]any:
		for k, e := range x {
			x[k] = NormalizeDecoded(e)
		}
	}
	return v
}
