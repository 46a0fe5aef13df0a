// Package pipeline owns eddy's core: the pipeline file (spec loading and validation
// with positions, including compiling every expression of a config with package
// expr), the component interfaces and their registry (Env), the physical plan
// (chaining, partitioning), the runtime (tasks, batched channels, in-band
// control events, the checkpoint coordinator seam) and the Runner, which owns a
// job's lifecycle: the checkpoint store, the restore point or imported
// savepoint, restarts, and stops with or without a savepoint. The CLI only maps
// flags, signals and output onto a Runner.
//
// pipeline imports expr and statestore of eddy's packages; operators/ and
// connectors/ import pipeline and register their components in init().
package pipeline
