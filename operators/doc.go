// Package operators holds eddy's step kinds, one file per kind: filter, set,
// map, drop, flat_map, key_by (with windows, window*.go, or a continuous
// aggregate, continuous.go) and dedupe. Each file declares the kind's config struct
// (yaml keys, defaults, Validate) and its operator, and registers the kind in
// init(), so pipeline.Default knows every kind once this package is imported.
// Register adds the same kinds to another Env, for tests that build an
// isolated set of components.
//
// Operators run on the task goroutine of one subtask (see pipeline.Operator):
// each instance owns its expression VM and its scratch slices, so it needs no
// locks, and it emits at most once per input batch. A record that fails (an
// expression error, a result of the wrong type) goes to the step's on_error
// policy through OperatorContext.Errors and is not emitted. Operators count
// nothing themselves: the runtime counts records in and out, the
// ErrorHandler counts errors.
//
// Stateful steps (windows, continuous aggregates, dedupe) keep all their
// state and timers in the keyed-state backend that OperatorContext.KeyedState
// gives them, so checkpoints capture it without operator code; aggregate
// functions live in operators/agg.
//
// operators imports pipeline (interfaces, registry, expressions) and
// statestore (keyed state), never connectors/ or cmd/.
package operators
