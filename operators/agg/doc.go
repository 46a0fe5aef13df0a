// Package agg is eddy's library of aggregate functions: the `aggregate:`
// mapping of window steps and continuous aggregates (output field → call,
// such as `n: count()` or `avg_c: avg(temp_c)`), the accumulators that fold
// records into results, and their snapshot encoding.
//
// A step declares its aggregates as a Specs field; the loader decodes it
// (Specs.UnmarshalYAML parses every call), the step's Validate calls
// Specs.Compile (and Mergeable or Retractable when it needs those), and each
// subtask keeps one Row per key and window or pane (NewAccs). A Row folds
// records in with Add, takes them back out with Retract where the functions
// allow it, combines with a later Row with Merge (pane sharing in sliding
// windows, session merges), writes its results with Results, and encodes
// itself to CBOR for snapshots. docs/aggregates.md describes the functions
// for users.
//
// Rows are not safe for concurrent use: each belongs to the task goroutine
// that owns its key. Specs, once compiled, are shared read-only by all
// subtasks.
//
// agg imports pipeline (expressions, field errors), statestore (the CBOR
// helpers of its snapshot encoding), internal/prefetch (Row.PrefetchHeld),
// and no other eddy package; operators and the runtime import agg, never the reverse.
package agg
