package pipeline

import (
	"fmt"
	"maps"
	"slices"
	"sync"

	"github.com/eddy-stream/eddy/expr"
)

// Config is a component's configuration: a struct pointer with yaml tags,
// pre-filled with defaults by the plugin's New func. Validate reports what is
// wrong (FieldErr to point at a key); it runs after decoding and expression
// compilation.
type Config interface {
	Validate() error
}

// SourceConfig builds the sources of one `sources:` entry.
type SourceConfig interface {
	Config
	// NewSource returns the source of one subtask; called once per subtask
	// before the run starts.
	NewSource() (Source, error)
}

// SinkConfig builds the sinks of one `sinks:` entry.
type SinkConfig interface {
	Config
	NewSink() (Sink, error)
}

// StepConfig builds the operators of one `steps:` entry.
type StepConfig interface {
	Config
	NewOperator() (Operator, error)
}

// Optional capabilities of configs, found by type assertion.
type (
	// Bounded is implemented by source configs that know whether their input
	// ends (file, generator with count).
	Bounded interface{ Bounded() bool }
	// Rescalable is implemented by source configs whose positions can be
	// redistributed when the source restores at another parallelism (its
	// sources get SourceContext.RestoredAll).
	Rescalable interface{ Rescalable() bool }
	// MaxParallelismer caps a source's parallelism (stdin: 1).
	MaxParallelismer interface{ MaxParallelism() int }
	// PositionDescriber is implemented by source configs whose sources
	// checkpoint a position (ReadBatch.Position): DescribePosition decodes
	// one, as a value that encoding/json renders for a reader (`eddy state
	// inspect`), or fails when b is not one. It runs outside any job,
	// without calling NewSource, on a config the plugin's New returned.
	PositionDescriber interface {
		DescribePosition(b []byte) (any, error)
	}
	// GuaranteeOf tells the delivery guarantee a source or sink can give:
	// replayable sources and transactional sinks give exactly-once.
	GuaranteeOf interface{ Guarantee() Guarantee }
	// KeyedStep is implemented by step configs whose inputs are hash
	// partitioned by a key (key_by, dedupe, join): KeyExprs returns the key
	// expression(s) of input i (the index in StepSpec.Inputs). Every input
	// of a step must give equal keys the same encoding, so that records of
	// equal keys meet in one subtask whichever input they came from.
	KeyedStep interface{ KeyExprs(input int) []*expr.Expr }
	// InputDeclarer is implemented by step configs that name their input
	// streams in keys of their own instead of `from` (join: join.left and
	// join.right): InputStreams returns them in input order, each with the
	// path of its key in the step for error positions. The step's
	// operator tells its inputs apart by implementing MultiInputOperator.
	InputDeclarer interface{ InputStreams() []DeclaredInput }
	// Describer is implemented by step configs that can say in a few words
	// what they do beyond their kind (a join: its kind, type and bounds);
	// `eddy explain` shows it beside the step.
	Describer interface{ Describe() string }
	// SideOutputter is implemented by step configs that emit side streams
	// other than "<id>.errors": it maps each stream id that other steps and
	// sinks may read to the side output name the operator emits to.
	SideOutputter interface{ SideOutputs() map[string]string }
)

// DeclaredInput is an input stream a step names in its own keys.
type DeclaredInput struct {
	// Path is the key that names it, from the step's mapping, e.g.
	// ["join", "left"].
	Path []string
	// Stream is the id of the stream: a source, a step or a side stream.
	Stream string
}

// SourcePlugin registers a source type.
type SourcePlugin struct {
	Type    string
	Summary string
	// New returns a config pre-filled with defaults.
	New func() SourceConfig
}

// SinkPlugin registers a sink type.
type SinkPlugin struct {
	Type    string
	Summary string
	New     func() SinkConfig
}

// StepPlugin registers a step kind. Kind is the key that selects it in a
// step (filter, map, key_by, ...); the config struct's yaml keys are the keys
// that kind owns, Kind among them.
type StepPlugin struct {
	Kind    string
	Summary string
	New     func() StepConfig
}

// SinkWrapper wraps the sink of one subtask of a sink with `write_ahead:
// true` so that it writes each checkpoint's records once that checkpoint
// completes; stateDir is JobOptions.StateDir, where it keeps its commit
// markers. connectors/writeahead registers it; the runtime calls it once
// per sink subtask, after the config's NewSink, before the run starts.
type SinkWrapper func(inner Sink, stateDir string) (Sink, error)

// Env is a set of components. Default holds everything registered in init();
// tests can build an isolated Env.
type Env struct {
	mu         sync.RWMutex
	sources    map[string]SourcePlugin
	sinks      map[string]SinkPlugin
	steps      map[string]StepPlugin
	writeAhead SinkWrapper
	// groupClient decodes the connection keys of a group block (group.go).
	groupClient func() GroupClientConfig
}

// NewEnv returns an empty Env.
func NewEnv() *Env {
	return &Env{sources: map[string]SourcePlugin{}, sinks: map[string]SinkPlugin{}, steps: map[string]StepPlugin{}}
}

// Default is the Env that components register into from init().
var Default = NewEnv()

// RegisterSource adds a source type; it panics on a duplicate (a programming error).
func (e *Env) RegisterSource(p SourcePlugin) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if _, dup := e.sources[p.Type]; dup {
		panic(fmt.Sprintf("source type %q registered twice", p.Type))
	}
	e.sources[p.Type] = p
}

// RegisterSink adds a sink type.
func (e *Env) RegisterSink(p SinkPlugin) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if _, dup := e.sinks[p.Type]; dup {
		panic(fmt.Sprintf("sink type %q registered twice", p.Type))
	}
	e.sinks[p.Type] = p
}

// RegisterStep adds a step kind.
func (e *Env) RegisterStep(p StepPlugin) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if _, dup := e.steps[p.Kind]; dup {
		panic(fmt.Sprintf("step kind %q registered twice", p.Kind))
	}
	e.steps[p.Kind] = p
}

// RegisterWriteAhead sets the wrapper of sinks with `write_ahead: true`; it
// panics when one is set already (a programming error).
func (e *Env) RegisterWriteAhead(w SinkWrapper) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.writeAhead != nil {
		panic("write-ahead sink wrapper registered twice")
	}
	e.writeAhead = w
}

// WriteAhead returns the wrapper of sinks with `write_ahead: true`, or nil
// when none is registered.
func (e *Env) WriteAhead() SinkWrapper {
	e.mu.RLock()
	defer e.mu.RUnlock()
	return e.writeAhead
}

// Source returns the plugin of a source type.
func (e *Env) Source(typ string) (SourcePlugin, bool) {
	e.mu.RLock()
	defer e.mu.RUnlock()
	p, ok := e.sources[typ]
	return p, ok
}

// Sink returns the plugin of a sink type.
func (e *Env) Sink(typ string) (SinkPlugin, bool) {
	e.mu.RLock()
	defer e.mu.RUnlock()
	p, ok := e.sinks[typ]
	return p, ok
}

// Step returns the plugin of a step kind.
func (e *Env) Step(kind string) (StepPlugin, bool) {
	e.mu.RLock()
	defer e.mu.RUnlock()
	p, ok := e.steps[kind]
	return p, ok
}

// SourceTypes lists the registered source types, sorted.
func (e *Env) SourceTypes() []string {
	e.mu.RLock()
	defer e.mu.RUnlock()
	return slices.Sorted(maps.Keys(e.sources))
}

// SinkTypes lists the registered sink types, sorted.
func (e *Env) SinkTypes() []string {
	e.mu.RLock()
	defer e.mu.RUnlock()
	return slices.Sorted(maps.Keys(e.sinks))
}

// StepKinds lists the registered step kinds, sorted.
func (e *Env) StepKinds() []string {
	e.mu.RLock()
	defer e.mu.RUnlock()
	return slices.Sorted(maps.Keys(e.steps))
}
