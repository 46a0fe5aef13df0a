// Package stdio provides the `stdin` source (JSON lines, CSV or text from
// standard input) and the `stdout` sink (JSON lines or CSV to standard
// output). Both run with parallelism 1.
//
// It imports pipeline and connectors/codec only.
package stdio

import (
	"io"
	"os"
)

// Stdin and Stdout are what the stdin source reads and the stdout sink
// writes. They are read when a source or sink opens; tests, and the CLI
// (to honour cobra's OutOrStdout), may replace them before a run.
var (
	Stdin  io.Reader = os.Stdin
	Stdout io.Writer = os.Stdout
)
