package operators

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/eddy-stream/eddy/pipeline"
	"go.yaml.in/yaml/v3"
)

// The keys of a key_by step's window (docs/windows.md). The operator is in
// window_op.go; the window kinds in window_time.go, window_session.go and
// window_count.go.

// WindowSpec is the `window:` mapping of a key_by step.
//
//	window: { type: tumbling, size: 10s, offset: 2s }
//	window: { type: sliding, size: 10s, slide: 2s }
//	window: { type: session, gap: 30s }
//	window: { type: count, size: 100, slide: 10 }
//	window: { type: global }              # with trigger: {count: N, every: D}
type WindowSpec struct {
	Type string `yaml:"type" enum:"tumbling,sliding,session,count,global"`
	// Size is a duration for tumbling and sliding windows, a number of
	// records for count windows.
	Size windowLength `yaml:"size"`
	// Slide is a duration (sliding) or a number of records (count).
	Slide windowLength `yaml:"slide"`
	// Offset shifts the start of tumbling and sliding windows; it may be
	// negative.
	Offset windowLength `yaml:"offset"`
	// Gap is the inactivity that closes a session.
	Gap windowLength `yaml:"gap"`
}

// TriggerSpec is the `trigger:` mapping of a key_by step with a window.
type TriggerSpec struct {
	// EarlyEvery emits partial results of open time windows at most this
	// often, in processing time.
	EarlyEvery *pipeline.Duration `yaml:"early_every"`
	// Count fires a global window every Count records of a key.
	Count *int64 `yaml:"count"`
	// Every fires a global window at most this often, in processing time.
	Every *pipeline.Duration `yaml:"every"`
}

// windowLength is a size, slide, offset or gap as written: a duration for
// time windows, a number of records for count windows. Validate parses it
// once the window type is known.
type windowLength struct {
	raw string
	set bool
}

// UnmarshalYAML keeps the scalar.
func (l *windowLength) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode || n.Tag == "!!null" {
		return fmt.Errorf("must be a duration such as 10s (a number of records for count windows), not %s", describeYAML(n))
	}
	l.raw, l.set = strings.TrimSpace(n.Value), true
	return nil
}

func describeYAML(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	}
	return strconv.Quote(n.Value)
}

// millis parses a duration in whole milliseconds; signed allows a leading '-'.
func (l windowLength) millis(signed bool) (int64, error) {
	s, neg := l.raw, false
	if signed {
		if rest, ok := strings.CutPrefix(s, "-"); ok {
			s, neg = rest, true
		}
	}
	d, err := pipeline.ParseDuration(s)
	if err != nil {
		return 0, err
	}
	if d%time.Millisecond != 0 {
		return 0, fmt.Errorf("%q is not a whole number of milliseconds", l.raw)
	}
	ms := d.Milliseconds()
	if neg {
		ms = -ms
	}
	return ms, nil
}

// count parses a number of records.
func (l windowLength) count() (int64, error) {
	n, err := strconv.ParseInt(l.raw, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%q is not a number of records (count windows count records, e.g. size: 100)", l.raw)
	}
	return n, nil
}

// windowKind is the window type.
type windowKind uint8

const (
	kindTumbling windowKind = iota + 1
	kindSliding
	kindSession
	kindCount
	kindGlobal
)

var windowKinds = map[string]windowKind{
	"tumbling": kindTumbling, "sliding": kindSliding, "session": kindSession, "count": kindCount, "global": kindGlobal,
}

// maxPanes bounds the panes one window is built from (sliding windows).
const maxPanes = 1000

// windowPlan is a validated window: everything the operator needs.
type windowPlan struct {
	kind windowKind
	// Time windows: ms; count windows: records. pane is the width of the
	// pane accumulators: gcd(size, slide).
	size, slide, offset, pane int64
	gap                       int64 // session, ms
	lateness                  int64 // ms
	early                     int64 // trigger.early_every, ms; 0: none
	trigCount                 int64 // global: trigger.count; 0: none
	trigEvery                 int64 // global: trigger.every, ms; 0: none
	// keyNames are the output fields of the key's parts.
	keyNames []string
}

func (p *windowPlan) timeWindows() bool { return p.kind == kindTumbling || p.kind == kindSliding }

// Output fields every window result has besides its key and aggregates.
const (
	fieldWindowStart = "window_start"
	fieldWindowEnd   = "window_end"
	fieldFiring      = "_firing"
	// lateSide is the side output that late_output names.
	lateSide = "late"
)

// The values of _firing.
const (
	firingOnTime     = "on_time"
	firingLateUpdate = "late_update"
	firingEarly      = "early"
)

var plainName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// notFieldNames are identifiers that are not record fields: expr's words
// and record metadata.
var notFieldNames = []string{"true", "false", "nil", "in", "not", "and", "or", "matches", "contains",
	"startsWith", "endsWith", "let", "_key", "_partition", "_offset", "_timestamp", "_headers"}

// keyFieldNames names the output fields of a key: a key expression that is
// a plain field name gives its name, another gives "key" (the first part)
// or "key_N" (part N of a composite key, from 1).
func keyFieldNames(keys KeyList) []string {
	names := make([]string, len(keys))
	for i, k := range keys {
		src := strings.TrimSpace(k.Source)
		switch {
		case plainName.MatchString(src) && !slices.Contains(notFieldNames, src):
			names[i] = src
		case i == 0:
			names[i] = "key"
		default:
			names[i] = fmt.Sprintf("key_%d", i+1)
		}
	}
	return names
}

// validateWindow checks window, aggregate, allowed_lateness, late_output and
// trigger, and keeps the resolved window in c.plan.
func (c *KeyByConfig) validateWindow() error {
	var errs []error
	fail := func(key, format string, args ...any) { errs = append(errs, pipeline.FieldErr(key, format, args...)) }
	if len(c.Aggregate) > 0 {
		if err := c.Aggregate.Compile(); err != nil {
			errs = append(errs, err)
		}
	}
	if c.Window == nil {
		if c.AllowedLateness != nil {
			fail("allowed_lateness", "applies to windows: add a window, e.g. window: {type: tumbling, size: 10s}")
		}
		if c.LateOutput != "" {
			fail("late_output", "applies to windows: add a window, e.g. window: {type: tumbling, size: 10s}")
		}
		if c.Trigger != nil {
			fail("trigger", "applies to windows: add a window, e.g. window: {type: tumbling, size: 10s}")
		}
		return errors.Join(errs...)
	}
	if len(c.Aggregate) == 0 {
		fail("window", "a window needs an aggregate that says what to compute per key and window, e.g. aggregate: {n: count(), avg_temp: avg(temp)}")
	}
	p := &windowPlan{keyNames: keyFieldNames(c.KeyBy)}
	errs = append(errs, c.resolveWindow(p)...)
	errs = append(errs, c.checkOutputNames(p)...)
	if p.kind == kindSliding || p.kind == kindSession || (p.kind == kindCount && p.slide != p.size) {
		if err := c.Aggregate.Mergeable(); err != nil && c.Aggregate.Compiled() {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	c.plan = p
	return nil
}

// resolveWindow parses the window, lateness and trigger keys into p.
func (c *KeyByConfig) resolveWindow(p *windowPlan) []error {
	var errs []error
	fail := func(key, format string, args ...any) { errs = append(errs, pipeline.FieldErr(key, format, args...)) }
	w := c.Window
	kind, ok := windowKinds[w.Type]
	switch {
	case w.Type == "":
		fail("window", "give the window's type: tumbling, sliding, session, count or global")
		return errs
	case !ok:
		fail("window.type", "unknown window type %q: use tumbling, sliding, session, count or global", w.Type)
		return errs
	}
	p.kind = kind
	notFor := func(l windowLength, key, why string) {
		if l.set {
			fail("window."+key, "%s windows have no %s%s", w.Type, key, why)
		}
	}
	duration := func(l windowLength, key string, signed bool) int64 {
		ms, err := l.millis(signed)
		if err != nil {
			fail("window."+key, "%v", err)
		}
		return ms
	}
	switch kind {
	case kindTumbling, kindSliding:
		notFor(w.Gap, "gap", " (session windows do)")
		if !w.Size.set {
			fail("window", "give the window's size, e.g. size: 10s")
			return errs
		}
		p.size = duration(w.Size, "size", false)
		if p.size <= 0 && len(errs) == 0 {
			fail("window.size", "must be positive")
		}
		if w.Offset.set {
			p.offset = duration(w.Offset, "offset", true)
		}
		if kind == kindTumbling {
			notFor(w.Slide, "slide", "; use type: sliding for windows that overlap")
			p.slide = p.size
		} else {
			if !w.Slide.set {
				fail("window", "give the slide of a sliding window, e.g. size: 10s, slide: 2s (use type: tumbling for slide = size)")
				return errs
			}
			p.slide = duration(w.Slide, "slide", false)
			switch {
			case len(errs) > 0:
			case p.slide <= 0:
				fail("window.slide", "must be positive")
			case p.slide > p.size:
				fail("window.slide", "%s is larger than the size %s: records between windows would belong to none", w.Slide.raw, w.Size.raw)
			}
		}
		if len(errs) == 0 {
			if p.offset <= -p.slide || p.offset >= p.slide {
				what := "size"
				if kind == kindSliding {
					what = "slide"
				}
				fail("window.offset", "must be shorter than the %s (between -%s and %s, exclusive)", what, msString(p.slide), msString(p.slide))
			}
			p.pane = gcd(p.size, p.slide)
			if n := p.size / p.pane; n > maxPanes {
				fail("window.slide", "a window of size %s sliding by %s is built from %d panes of %s (their greatest common divisor); choose a slide that divides the size, or at most %d panes",
					w.Size.raw, w.Slide.raw, n, msString(p.pane), maxPanes)
			}
		}
	case kindSession:
		notFor(w.Size, "size", "; a session lasts while records are at most gap apart")
		notFor(w.Slide, "slide", "")
		notFor(w.Offset, "offset", "")
		if !w.Gap.set {
			fail("window", "give the session gap, e.g. gap: 30s")
			return errs
		}
		p.gap = duration(w.Gap, "gap", false)
		if p.gap <= 0 && len(errs) == 0 {
			fail("window.gap", "must be positive")
		}
	case kindCount:
		notFor(w.Offset, "offset", "")
		notFor(w.Gap, "gap", " (session windows do)")
		if !w.Size.set {
			fail("window", "give the number of records per window, e.g. size: 100")
			return errs
		}
		var err error
		if p.size, err = w.Size.count(); err != nil {
			fail("window.size", "%v", err)
		} else if p.size < 1 {
			fail("window.size", "must be at least 1")
		}
		p.slide = p.size
		if w.Slide.set {
			if p.slide, err = w.Slide.count(); err != nil {
				fail("window.slide", "%v", err)
			} else if p.slide < 1 || p.slide > p.size {
				fail("window.slide", "must be between 1 and the size (%d)", p.size)
			}
		}
		if len(errs) == 0 {
			p.pane = gcd(p.size, p.slide)
			if n := p.size / p.pane; n > maxPanes {
				fail("window.slide", "a window of %d records sliding by %d is built from %d panes of %d records; choose a slide that divides the size, or at most %d panes",
					p.size, p.slide, n, p.pane, maxPanes)
			}
		}
	case kindGlobal:
		for key, l := range map[string]windowLength{"size": w.Size, "slide": w.Slide, "offset": w.Offset, "gap": w.Gap} {
			notFor(l, key, "; a global window holds all records of a key")
		}
	}
	errs = append(errs, c.resolveLateness(p)...)
	errs = append(errs, c.resolveTrigger(p)...)
	return errs
}

func (c *KeyByConfig) resolveLateness(p *windowPlan) []error {
	var errs []error
	fail := func(key, format string, args ...any) { errs = append(errs, pipeline.FieldErr(key, format, args...)) }
	eventTime := p.kind != kindCount && p.kind != kindGlobal
	if c.AllowedLateness != nil {
		p.lateness = c.AllowedLateness.Millis()
		if !eventTime && *c.AllowedLateness != 0 {
			fail("allowed_lateness", "%s windows are never late: allowed_lateness applies to tumbling, sliding and session windows", c.Window.Type)
		}
		if time.Duration(*c.AllowedLateness)%time.Millisecond != 0 {
			fail("allowed_lateness", "must be a whole number of milliseconds")
		}
	}
	if c.LateOutput != "" {
		switch {
		case !eventTime:
			fail("late_output", "%s windows are never late: late_output applies to tumbling, sliding and session windows", c.Window.Type)
		case !streamID.MatchString(c.LateOutput):
			fail("late_output", "%q: name the stream with letters, digits, '_' and '-' (no '.'), e.g. late_output: late_readings", c.LateOutput)
		}
	}
	return errs
}

var streamID = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_-]*$`)

func (c *KeyByConfig) resolveTrigger(p *windowPlan) []error {
	var errs []error
	fail := func(key, format string, args ...any) { errs = append(errs, pipeline.FieldErr(key, format, args...)) }
	t := c.Trigger
	if p.kind == kindGlobal {
		if t == nil || (t.Count == nil && t.Every == nil) {
			fail("window", "a global window never ends: give it a trigger, e.g. trigger: {count: 100} or trigger: {every: 10s}")
			return errs
		}
		if t.EarlyEvery != nil {
			fail("trigger.early_every", "a global window fires only early: use trigger.every")
		}
		if t.Count != nil {
			if p.trigCount = *t.Count; p.trigCount < 1 {
				fail("trigger.count", "must be at least 1")
			}
		}
		if t.Every != nil {
			if p.trigEvery = t.Every.Millis(); p.trigEvery < 1 {
				fail("trigger.every", "must be at least 1ms")
			}
		}
		return errs
	}
	if t == nil {
		return nil
	}
	if t.Count != nil {
		fail("trigger.count", "fires global windows; %s windows fire on their own (early results: trigger.early_every)", c.Window.Type)
	}
	if t.Every != nil {
		fail("trigger.every", "fires global windows; %s windows take trigger.early_every for early results", c.Window.Type)
	}
	if t.EarlyEvery != nil {
		if p.kind == kindCount {
			fail("trigger.early_every", "count windows fire on counts, not on time")
		} else if p.early = t.EarlyEvery.Millis(); p.early < 1 {
			fail("trigger.early_every", "must be at least 1ms")
		}
	}
	if t.EarlyEvery == nil && t.Count == nil && t.Every == nil {
		fail("trigger", "give early_every, e.g. trigger: {early_every: 5s}")
	}
	return errs
}

// checkOutputNames rejects a result record whose fields would collide.
func (c *KeyByConfig) checkOutputNames(p *windowPlan) []error {
	var errs []error
	reserved := []string{fieldWindowStart, fieldWindowEnd, fieldFiring}
	seen := map[string]string{}
	for _, n := range p.keyNames {
		switch {
		case slices.Contains(reserved, n):
			errs = append(errs, pipeline.FieldErr("key_by", "the key field %q would collide with the window's own %s field; key by an expression such as string(%s)", n, n, n))
		case seen[n] != "":
			errs = append(errs, pipeline.FieldErr("key_by", "the key names the output field %q twice", n))
		}
		seen[n] = "the key"
	}
	for _, r := range reserved {
		seen[r] = "the window"
	}
	for _, s := range c.Aggregate {
		if who := seen[s.Name]; who != "" {
			errs = append(errs, pipeline.FieldErr("aggregate."+s.Name, "the output field %q is already %s's: rename the aggregate", s.Name, who))
		}
	}
	return errs
}

func gcd(a, b int64) int64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

func msString(ms int64) string { return (time.Duration(ms) * time.Millisecond).String() }
