// Package pipeline owns eddy's core: the pipeline file (spec loading and validation
// with positions), the component interfaces and their registry (Env), expression
// compilation, the physical plan (chaining, partitioning), the runtime (tasks,
// batched channels, in-band control events, the checkpoint coordinator seam) and
// the Runner, which owns a job's lifecycle: the checkpoint store, the restore
// point or imported savepoint, restarts, and stops with or without a savepoint.
// The CLI only maps flags, signals and output onto a Runner.
//
// pipeline imports none of eddy's other packages; operators/ and connectors/
// import pipeline and register their components in init().
package pipeline
