// Package nexmark runs the Nexmark queries of configs/nexmark as a
// benchmark (`eddy bench nexmark`): each query file with its source's
// event count set, its sinks replaced by blackholes, with and without a
// checkpoint block, measured in a process of its own; a Result per run,
// written as a line that other tools read (scripts/bench-nexmark-flink.sh
// reads eddy's and Flink's).
//
// The measure is events per CPU-second, the generator included, as Flink's
// published Nexmark figures are (docs/benchmarks.md).
package nexmark
