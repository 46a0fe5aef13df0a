// Package all registers every connector of eddy, and the write-ahead sink
// wrapper, in pipeline.Default; the CLI imports it for its side effects.
package all

import (
	// Each connector registers its sources and sinks in init().
	_ "github.com/eddy-stream/eddy/connectors/blackhole"
	_ "github.com/eddy-stream/eddy/connectors/file"
	_ "github.com/eddy-stream/eddy/connectors/generator"
	_ "github.com/eddy-stream/eddy/connectors/kafka"
	_ "github.com/eddy-stream/eddy/connectors/nexmark"
	_ "github.com/eddy-stream/eddy/connectors/socket"
	_ "github.com/eddy-stream/eddy/connectors/stdio"
	_ "github.com/eddy-stream/eddy/connectors/writeahead"
)
