// Package pipeline owns eddy's core: the pipeline file (spec loading and validation
// with positions), the component interfaces and their registry (Env), expression
// compilation, the physical plan (chaining, partitioning) and the runtime (tasks,
// batched channels, in-band control events, the checkpoint coordinator seam).
//
// pipeline imports none of eddy's other packages; operators/ and connectors/
// import pipeline and register their components in init().
package pipeline
