package operators

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/eddy-stream/eddy/expr"
	"github.com/eddy-stream/eddy/pipeline"
	"github.com/eddy-stream/eddy/statestore"
)

func init() {
	register(pipeline.StepPlugin{
		Kind:    "join",
		Summary: "join two streams on a key: interval (between), window, regular (ttl) or temporal (enrichment) join",
		New:     func() pipeline.StepConfig { return &JoinConfig{Join: JoinSpec{Type: "inner"}} },
	})
}

// JoinConfig is a `join:` step (docs/joins.md). It reads two streams,
// hash-partitioned by their key expressions so that records of equal keys
// meet in one subtask, and joins them in one of four ways: an interval
// join (`between`), a window join (`window`), a temporal join
// (`temporal`), or else a regular join, whose state `ttl` bounds.
//
//	steps:
//	  - id: enriched
//	    join:
//	      left: bids
//	      right: auctions
//	      on: { left: auction, right: id }
//	      type: inner
//	      between: { lower: -5s, upper: 10s }
//	      select:
//	        auction: left.auction
//	        seller: right.seller
//	    allowed_lateness: 0s
//	    late_output: late_join
type JoinConfig struct {
	Join JoinSpec `yaml:"join"`
	// AllowedLateness keeps a window join's windows this long after they
	// fired, and lets an interval join accept records this far behind the
	// watermark; nil: 0.
	AllowedLateness *pipeline.Duration `yaml:"allowed_lateness"`
	// LateOutput names the side stream that gets the late records of
	// either input, each with the field _side; "": they are dropped and
	// counted.
	LateOutput string `yaml:"late_output"`

	plan *joinPlan
}

// JoinSpec is the `join:` mapping.
type JoinSpec struct {
	// Left and Right are the ids of the joined streams.
	Left  string `yaml:"left"`
	Right string `yaml:"right"`
	// On holds each side's key expression(s).
	On JoinKeys `yaml:"on"`
	// Type is inner, left, right or full.
	Type string `yaml:"type" enum:"inner,left,right,full"`
	// Between makes an interval join.
	Between *JoinBounds `yaml:"between"`
	// Window makes a window join (tumbling, sliding or session).
	Window *WindowSpec `yaml:"window"`
	// TTL is how long a regular join keeps a row it has not seen again
	// (processing time); nil: forever.
	TTL *pipeline.Duration `yaml:"ttl"`
	// Temporal makes a temporal (enrichment) join.
	Temporal *TemporalSpec `yaml:"temporal"`
	// Select lists the output fields, expressions over left and right (a
	// missing side is nil, and so is every field read from it); none: the
	// fields of left, then those of right that left does not have.
	Select expr.Map `yaml:"select" expr:"nullsafe"`
}

// JoinKeys are the key expressions of both sides: one expression each, or
// lists of equal length (a composite key).
type JoinKeys struct {
	Left  KeyList `yaml:"left"`
	Right KeyList `yaml:"right"`
}

// JoinBounds are an interval join's bounds: a right record joins a left
// one when right.ts is in [left.ts + lower, left.ts + upper].
type JoinBounds struct {
	Lower windowLength `yaml:"lower"`
	Upper windowLength `yaml:"upper"`
	// LowerExclusive and UpperExclusive leave a bound out of the interval.
	LowerExclusive bool `yaml:"lower_exclusive"`
	UpperExclusive bool `yaml:"upper_exclusive"`
}

// TemporalSpec is a temporal join's `temporal:` mapping.
type TemporalSpec struct {
	// Version is the time from which a right row is valid (epoch ms),
	// over the right record; unset: the right record's event time.
	Version expr.Expr `yaml:"version"`
}

// joinKind is which of the four joins a step is.
type joinKind int

const (
	joinInterval joinKind = iota
	joinWindow
	joinRegular
	joinTemporal
)

func (k joinKind) String() string {
	switch k {
	case joinInterval:
		return "interval"
	case joinWindow:
		return "window"
	case joinTemporal:
		return "temporal"
	}
	return "regular"
}

// joinType says which unmatched rows a join emits, padded with a missing
// side: none (inner), the left ones, the right ones, or both (full).
type joinType int

const (
	joinInner joinType = iota
	joinLeft
	joinRight
	joinFull
)

var joinTypes = map[string]joinType{"inner": joinInner, "left": joinLeft, "right": joinRight, "full": joinFull}

// keepsUnmatched tells whether unmatched rows of side are emitted.
func (t joinType) keepsUnmatched(side int) bool {
	if side == sideLeft {
		return t == joinLeft || t == joinFull
	}
	return t == joinRight || t == joinFull
}

// The inputs of a join, in StepSpec.Inputs order.
const (
	sideLeft  = 0
	sideRight = 1
)

// sideNames are the values of a late record's _side field.
var sideNames = [2]string{"left", "right"}

// fieldSide is the field that tells a late record's input.
const fieldSide = "_side"

// joinPlan is a join step resolved by Validate.
type joinPlan struct {
	id   string
	kind joinKind
	typ  joinType
	// lower and upper are an interval join's bounds in ms, inclusive
	// (an exclusive bound is moved in by 1 ms).
	lower, upper int64
	// window is a window join's window.
	window *windowPlan
	// lateness is allowed_lateness in ms.
	lateness int64
	// ttl is a regular join's retention; 0: none.
	ttl time.Duration
	// version is a temporal join's version expression; nil: event time.
	version *expr.Expr
	// selects are the output fields; nil: merge left and right.
	selects    expr.Map
	lateOutput string
}

// Validate checks the join and resolves its plan.
func (c *JoinConfig) Validate() error {
	var errs []error
	fail := func(key, format string, args ...any) {
		errs = append(errs, pipeline.FieldErr(key, format, args...))
	}
	j := &c.Join
	if j.Left == "" {
		fail("join", "name the left stream, e.g. left: bids")
	}
	if j.Right == "" {
		fail("join", "name the right stream, e.g. right: auctions")
	}
	switch {
	case len(j.On.Left) == 0 || len(j.On.Right) == 0:
		fail("join", "give each side's key, e.g. on: {left: auction, right: id}")
	case len(j.On.Left) != len(j.On.Right):
		fail("join.on", "the left key has %d parts and the right %d: give both sides the same number", len(j.On.Left), len(j.On.Right))
	}
	p := &joinPlan{selects: j.Select, lateOutput: c.LateOutput}
	typ, ok := joinTypes[j.Type]
	if !ok {
		fail("join.type", "unknown join type %q: use inner, left, right or full", j.Type)
	}
	p.typ = typ
	var kinds []string
	if j.Between != nil {
		kinds = append(kinds, "between")
		p.kind = joinInterval
	}
	if j.Window != nil {
		kinds = append(kinds, "window")
		p.kind = joinWindow
	}
	if j.Temporal != nil {
		kinds = append(kinds, "temporal")
		p.kind = joinTemporal
	}
	if len(kinds) == 0 {
		p.kind = joinRegular
	}
	if len(kinds) > 1 {
		fail("join."+kinds[1], "a join is one of interval (between), window or temporal, not %s and %s", kinds[0], kinds[1])
		return errors.Join(errs...)
	}
	if j.TTL != nil && p.kind != joinRegular {
		fail("join.ttl", "applies to a regular join (no between, window or temporal): the %s join's state is cleared by the watermark", p.kind)
	}
	if c.AllowedLateness != nil {
		p.lateness = c.AllowedLateness.Millis()
		if p.kind == joinRegular {
			fail("allowed_lateness", "a regular join has no event-time bound: every record joins")
		}
	}
	if c.LateOutput != "" && p.kind == joinRegular {
		fail("late_output", "a regular join has no event-time bound: no record is late")
	}
	switch p.kind {
	case joinInterval:
		errs = append(errs, p.resolveBounds(j.Between)...)
	case joinWindow:
		errs = append(errs, p.resolveWindow(c)...)
	case joinRegular:
		if j.TTL != nil {
			p.ttl = j.TTL.D()
		}
	case joinTemporal:
		if p.typ != joinInner && p.typ != joinLeft {
			fail("join.type", "a temporal join is inner or left: every left record looks up the right row valid at its time")
		}
		if j.Temporal.Version.IsSet() {
			p.version = &j.Temporal.Version
		}
	}
	if err := checkFieldNames("join.select", exprNames(j.Select)); err != nil {
		errs = append(errs, err)
	}
	if p.kind == joinRegular && slices.Contains(exprNames(j.Select), pipeline.OpField) {
		fail("join.select", "%s is the changelog kind of every row a regular join emits; name the field otherwise", pipeline.OpField)
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	c.plan = p
	return nil
}

// resolveBounds reads an interval join's bounds.
func (p *joinPlan) resolveBounds(b *JoinBounds) []error {
	var errs []error
	bound := func(l windowLength, key string, exclusive bool, in int64) int64 {
		if !l.set {
			errs = append(errs, pipeline.FieldErr("join.between", "give the %s bound, e.g. between: {lower: -5s, upper: 10s}", key))
			return 0
		}
		ms, err := l.millis(true)
		if err != nil {
			errs = append(errs, pipeline.FieldErr("join.between."+key, "%v", err))
			return 0
		}
		if exclusive {
			ms += in
		}
		return ms
	}
	p.lower = bound(b.Lower, "lower", b.LowerExclusive, 1)
	p.upper = bound(b.Upper, "upper", b.UpperExclusive, -1)
	if len(errs) == 0 && p.lower > p.upper {
		errs = append(errs, pipeline.FieldErr("join.between", "the interval [%s, %s] is empty: lower must not pass upper", b.Lower.raw, b.Upper.raw))
	}
	return errs
}

// resolveWindow reads a window join's window and lateness the way a
// key_by step's are read.
func (p *joinPlan) resolveWindow(c *JoinConfig) []error {
	kb := &KeyByConfig{KeyBy: c.Join.On.Left, Window: c.Join.Window, AllowedLateness: c.AllowedLateness}
	w := &windowPlan{keyNames: keyFieldNames(c.Join.On.Left)}
	errs := kb.resolveWindow(w)
	for i, err := range errs {
		var fe *pipeline.FieldError
		if errors.As(err, &fe) && strings.HasPrefix(fe.Key, "window") {
			errs[i] = pipeline.FieldErr("join."+fe.Key, "%s", fe.Msg)
		}
	}
	if len(errs) == 0 && !w.timeWindows() && w.kind != kindSession {
		errs = append(errs, pipeline.FieldErr("join.window.type", "a window join takes tumbling, sliding or session windows, not %s", c.Join.Window.Type))
	}
	p.window = w
	return errs
}

// KeyExprs implements pipeline.KeyedStep: each input is partitioned by its
// own side's key.
func (c *JoinConfig) KeyExprs(input int) []*expr.Expr {
	keys := c.Join.On.Left
	if input == sideRight {
		keys = c.Join.On.Right
	}
	out := make([]*expr.Expr, len(keys))
	for i := range keys {
		out[i] = &keys[i]
	}
	return out
}

// InputStreams implements pipeline.InputDeclarer: left, then right.
func (c *JoinConfig) InputStreams() []pipeline.DeclaredInput {
	return []pipeline.DeclaredInput{
		{Path: []string{"join", "left"}, Stream: c.Join.Left},
		{Path: []string{"join", "right"}, Stream: c.Join.Right},
	}
}

// SideOutputs implements pipeline.SideOutputter: late_output names the
// side output "late".
func (c *JoinConfig) SideOutputs() map[string]string {
	if c.LateOutput == "" {
		return nil
	}
	return map[string]string{c.LateOutput: lateSide}
}

// Describe implements pipeline.Describer: the kind, type and bounds, e.g.
// "interval inner join: right.ts in [left.ts - 5s, left.ts + 10s]".
func (c *JoinConfig) Describe() string {
	if c.plan == nil {
		return ""
	}
	p := c.plan
	types := [...]string{"inner", "left", "right", "full"}
	d := fmt.Sprintf("%s %s join", p.kind, types[p.typ])
	switch p.kind {
	case joinInterval:
		bound := func(ms int64) string {
			if ms < 0 {
				return " - " + msString(-ms)
			}
			return " + " + msString(ms)
		}
		d += fmt.Sprintf(": right.ts in [left.ts%s, left.ts%s]", bound(p.lower), bound(p.upper))
	case joinWindow:
		d += ": " + c.Join.Window.Type + " windows"
	case joinTemporal:
		if p.version != nil {
			d += ": right rows valid from " + oneLineExpr(p.version.Source)
		} else {
			d += ": right rows valid from their event time"
		}
	case joinRegular:
		if p.ttl > 0 {
			d += ", ttl " + p.ttl.String()
		} else {
			d += ", no ttl: state grows with the distinct rows"
		}
	}
	return d
}

// NewOperator returns the operator of one subtask for the join's kind.
func (c *JoinConfig) NewOperator() (pipeline.Operator, error) {
	if c.plan == nil {
		if err := c.Validate(); err != nil {
			return nil, err
		}
	}
	switch c.plan.kind {
	case joinInterval:
		return newIntervalJoin(c.plan), nil
	case joinWindow:
		return newWindowJoin(c.plan), nil
	case joinTemporal:
		return newTemporalJoin(c.plan), nil
	}
	return newRegularJoin(c.plan), nil
}

// joinBase is what every join operator shares on one subtask: the state
// backend and timers, the error handler, the late output, and the
// evaluation of select. Each kind embeds it and implements ProcessInput,
// OnWatermark and Finish.
type joinBase struct {
	plan *joinPlan
	vm   expr.VM
	errs *pipeline.ErrorHandler
	// late gets late records; nil: they are dropped and counted.
	late    pipeline.Emitter
	dropped prometheus.Counter
	now     func() int64

	backend     statestore.Backend
	ownsBackend bool
	timers      *statestore.TimerService
	// wm is the watermark the operator last saw.
	wm int64

	env     map[string]any
	lateOut []pipeline.Record
}

// open sets up what every join kind needs; the kind registers its states
// on b.backend after it.
func (b *joinBase) open(oc *pipeline.OperatorContext) error {
	b.errs = oc.Errors
	if b.errs == nil {
		b.errs = pipeline.NewErrorHandler(oc.SubtaskInfo, pipeline.OnErrorFail, nil)
	}
	if b.plan.lateOutput != "" && oc.Side != nil {
		b.late = oc.Side(lateSide)
	}
	if oc.Metrics != nil {
		b.dropped = oc.Metrics.LateDropped(oc.SubtaskInfo)
	}
	b.now = oc.Now
	if b.now == nil {
		b.now = func() int64 { return time.Now().UnixMilli() }
	}
	if oc.KeyedState != nil {
		bk, err := oc.KeyedState()
		if err != nil {
			return fmt.Errorf("join %q: %w", oc.ID, err)
		}
		b.backend = bk
	} else {
		// A hand-built context (tests): a backend of every key group.
		maxPar := max(oc.MaxParallelism, 1)
		bk, err := statestore.NewMemory(statestore.Options{
			KeyGroup:  func(key string) int { return pipeline.KeyGroup(key, maxPar) },
			KeyGroups: [2]int{0, maxPar},
		})
		if err != nil {
			return err
		}
		b.backend, b.ownsBackend = bk, true
	}
	b.timers = b.backend.TimerService(oc.ID)
	b.wm = pipeline.MinWatermark
	b.env = make(map[string]any, 2)
	return nil
}

// Close releases a backend the operator made itself; the runtime closes
// the one it handed out.
func (b *joinBase) Close() error {
	if b.ownsBackend && b.backend != nil {
		return b.backend.Close()
	}
	return nil
}

// joined builds the output record of a pair; l or r is nil for the padded
// side of an outer join's unmatched row. The record has time t and key.
func (b *joinBase) joined(l, r map[string]any, t int64, key string) (pipeline.Record, error) {
	rec := pipeline.Record{Time: t, Key: key}
	if b.plan.selects == nil {
		f := make(map[string]any, len(l)+len(r))
		for k, v := range r {
			f[k] = v
		}
		for k, v := range l {
			f[k] = v
		}
		rec.Fields = f
		return rec, nil
	}
	b.env["left"], b.env["right"] = l, r
	f := make(map[string]any, len(b.plan.selects))
	for i := range b.plan.selects {
		e := &b.plan.selects[i]
		v, err := b.vm.Eval(&e.Expr, b.env)
		if err == nil {
			err = expr.CheckFinite(v)
		}
		if err != nil {
			clear(b.env)
			return rec, &evalError{kind: "join", field: e.Name, src: e.Expr.Source, err: err}
		}
		f[e.Name] = v
	}
	clear(b.env)
	rec.Fields = f
	return rec, nil
}

// tooLate handles a record of side that arrived too late to join: it goes
// to the late output with _side, or is dropped and counted.
func (b *joinBase) tooLate(side int, r pipeline.Record) {
	if b.late == nil {
		if b.dropped != nil {
			b.dropped.Inc()
		}
		return
	}
	if r.Fields == nil {
		r.Fields = make(map[string]any, 1)
	}
	r.Fields[fieldSide] = sideNames[side]
	b.lateOut = append(b.lateOut, r)
}

// flushLate emits the late records gathered while processing a batch.
func (b *joinBase) flushLate() error {
	if len(b.lateOut) == 0 {
		return nil
	}
	err := b.late.Emit(b.lateOut)
	clear(b.lateOut)
	b.lateOut = b.lateOut[:0]
	return err
}

// eventTime returns a record's event time; a record without one (a
// processing-time source) cannot be placed in event time.
func eventTime(r *pipeline.Record) (int64, error) {
	if r.Time == pipeline.NoTime {
		return 0, errNoEventTime
	}
	return r.Time, nil
}

// errNoEventTime marks a record without event time reaching a join that
// needs one.
var errNoEventTime = errors.New("the record has no event time: give its source an event_time")

// oneLineExpr collapses the whitespace of an expression's source.
func oneLineExpr(s string) string { return strings.Join(strings.Fields(s), " ") }
