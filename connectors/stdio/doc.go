// Package stdio provides the `stdin` source (JSON lines, CSV or text from
// standard input) and the `stdout` sink (JSON lines or CSV to standard
// output). Both run with parallelism 1.
//
// They read and write the job's streams (pipeline.JobOptions.Stdin and
// Stdout, which `eddy run` sets to its command's), the process's when the
// job sets none.
//
// It imports pipeline and connectors/codec only.
package stdio
