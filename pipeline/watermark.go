package pipeline

import (
	"errors"
	"fmt"
	"math"
	"reflect"
	"strings"
	"time"

	"github.com/eddy-stream/eddy/expr"
	"github.com/expr-lang/expr/ast"
)

// WatermarkSpec is a source's `watermark:` block.
type WatermarkSpec struct {
	// MaxOutOfOrderness B: W = max_seen_ts - B - 1 (0: ascending timestamps).
	MaxOutOfOrderness Duration `yaml:"max_out_of_orderness"`
	// Interval between watermarks; 0 emits one after every record.
	Interval Duration `yaml:"interval"`
	// IdleTimeout marks a split idle after this long without records, so it
	// stops holding the watermark back (0: never).
	IdleTimeout Duration `yaml:"idle_timeout"`
}

// DefaultWatermarkInterval is the default watermark.interval.
const DefaultWatermarkInterval = 200 * time.Millisecond

// splitClock is the watermark state of one split of a source subtask.
type splitClock struct {
	maxTs      int64
	lastRecord time.Time
	done       bool
}

// watermarks generates a source subtask's watermark from per-split bounded
// out-of-orderness: the minimum over splits that are neither done nor idle.
type watermarks struct {
	bound   int64
	idle    time.Duration
	splits  map[int]*splitClock
	emitted int64
	// started is when the source opened: a source that never read a
	// record is idle once idle timeout passed since.
	started time.Time
}

func newWatermarks(w WatermarkSpec) *watermarks {
	return &watermarks{bound: w.MaxOutOfOrderness.Millis(), idle: w.IdleTimeout.D(), splits: map[int]*splitClock{},
		emitted: MinWatermark, started: time.Now()}
}

func (g *watermarks) split(i int) *splitClock {
	s, ok := g.splits[i]
	if !ok {
		s = &splitClock{maxTs: MinWatermark}
		g.splits[i] = s
	}
	return s
}

// declare registers split i before its first record: it holds the
// watermark back from now on, and its idle timeout counts from now.
func (g *watermarks) declare(i int) {
	g.split(i).lastRecord = g.started
}

// observe records an event timestamp of split i read at now.
func (g *watermarks) observe(i int, ts int64, now time.Time) {
	s := g.split(i)
	s.maxTs = max(s.maxTs, ts)
	s.lastRecord = now
}

// current returns the watermark the splits allow at now, and whether every
// open split is idle (then the returned watermark is meaningless).
func (g *watermarks) current(now time.Time) (wm int64, idle bool) {
	wm, active := int64(math.MaxInt64), 0
	for _, s := range g.splits {
		if s.done || (g.idle > 0 && now.Sub(s.lastRecord) >= g.idle) {
			continue
		}
		active++
		if s.maxTs == MinWatermark {
			wm = MinWatermark
			continue
		}
		wm = min(wm, s.maxTs-g.bound-1)
	}
	if active == 0 {
		// All splits done (more may come) or idle: hold at what was emitted.
		if len(g.splits) == 0 {
			return g.emitted, g.idle > 0 && now.Sub(g.started) >= g.idle
		}
		return g.emitted, g.idle > 0
	}
	return wm, false
}

// evalEventTime returns the event time of r by the source's event_time
// expression e, evaluated on m, in epoch ms.
func evalEventTime(m *expr.VM, e *expr.Expr, r *Record) (int64, error) {
	v, err := m.EvalRecord(e, r.Fields, r.Meta)
	var ts int64
	if err == nil {
		ts, err = EventTimeOf(v)
	}
	if err != nil {
		return 0, &eventTimeError{src: e.Source, err: err}
	}
	return ts, nil
}

// eventTimeError is the error of a record whose event time fails. Its text
// is one line naming the expression (expr's source snippet is left out),
// since it ends up in logs and dead letters.
type eventTimeError struct {
	src string
	err error
}

func (e *eventTimeError) Error() string {
	msg, _, _ := strings.Cut(e.err.Error(), "\n")
	return fmt.Sprintf("event_time %q: %s", e.src, msg)
}

func (e *eventTimeError) Unwrap() error { return e.err }

// EventTimeOf converts the result of an event_time expression (or of any
// expression that gives a time, such as a temporal join's version) to
// epoch ms: an integer or float number of ms, a time, or a timestamp
// string (zone-less ones in UTC).
func EventTimeOf(v any) (int64, error) {
	switch x := v.(type) {
	case int:
		return int64(x), nil
	case int64:
		return x, nil
	case int32:
		return int64(x), nil
	case uint64:
		if x > math.MaxInt64 {
			break
		}
		return int64(x), nil
	case float64:
		if math.IsNaN(x) || math.IsInf(x, 0) || x > math.MaxInt64 || x < math.MinInt64 {
			break
		}
		return int64(x), nil
	case time.Time:
		return x.UnixMilli(), nil
	case string:
		// The strings ts_parse reads without a layout, zone-less ones in UTC.
		ms, err := expr.ParseTimestamp(x, time.UTC)
		if err != nil {
			return 0, fmt.Errorf("%w (parse other layouts with ts_parse(field, layout))", err)
		}
		return ms, nil
	case nil:
		return 0, errors.New("the record has no timestamp (the expression returned null)")
	}
	return 0, fmt.Errorf("%v (%T) is not a timestamp: return epoch milliseconds, a time or a timestamp string", v, v)
}

// checkEventTime returns why a compiled event_time expression can never
// give a time, or nil when it may: a constant is evaluated as a record's
// result would be, and any other expression is judged by its static type
// (unknown for record fields, so `ts` always passes).
func checkEventTime(e *expr.Expr) error {
	node := e.Program().Node()
	switch node.(type) {
	case *ast.StringNode, *ast.BoolNode, *ast.NilNode, *ast.IntegerNode, *ast.FloatNode, *ast.ConstantNode:
		var m expr.VM
		v, err := m.Eval(e, map[string]any{})
		if err == nil {
			err = expr.CheckFinite(v)
		}
		if err == nil {
			_, err = EventTimeOf(v)
		}
		return err
	}
	t := node.Type()
	if t == nil {
		return nil
	}
	switch t.Kind() {
	case reflect.Interface, reflect.String,
		reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Uint, reflect.Uint8, reflect.Uint16,
		reflect.Uint32, reflect.Uint64, reflect.Uintptr, reflect.Float32, reflect.Float64:
		return nil
	case reflect.Int64:
		if t != reflect.TypeFor[time.Duration]() {
			return nil
		}
	case reflect.Struct:
		if t == reflect.TypeFor[time.Time]() {
			return nil
		}
	}
	return fmt.Errorf("it returns %s, not a time: return epoch milliseconds, a time or a timestamp string", t)
}
