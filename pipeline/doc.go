// Package pipeline owns eddy's core: the pipeline file (spec loading and validation
// with positions, including compiling every expression of a config with package
// expr), the component interfaces and their registry (Env), the physical plan
// (chaining, partitioning) and the runtime (tasks, batched channels, in-band
// control events, the checkpoint coordinator seam).
//
// pipeline imports expr and statestore of eddy's packages; operators/ and
// connectors/ import pipeline and register their components in init().
package pipeline
