package stdio

import (
	"context"
	"os"

	"github.com/eddy-stream/eddy/connectors/codec"
	"github.com/eddy-stream/eddy/pipeline"
)

func init() {
	pipeline.Default.RegisterSource(pipeline.SourcePlugin{
		Type:    "stdin",
		Summary: "reads JSON lines, CSV or text from standard input until it ends",
		New: func() pipeline.SourceConfig {
			return &StdinConfig{DecodeOptions: codec.DefaultDecodeOptions(codec.JSON)}
		},
	})
}

// StdinConfig is the `stdin` source's configuration.
type StdinConfig struct {
	// format and csv_delimiter. Lines that do not decode go to the
	// source's on_error.
	codec.DecodeOptions `yaml:",inline"`
}

// Validate checks the keys.
func (c *StdinConfig) Validate() error { return c.DecodeOptions.Validate() }

// MaxParallelism is 1: there is one standard input.
func (c *StdinConfig) MaxParallelism() int { return 1 }

// Bounded is true: the input ends when standard input does (EOF, Ctrl-D).
// An interactive terminal or a pipe that stays open keeps the run going
// until it is stopped.
func (c *StdinConfig) Bounded() bool { return true }

// Guarantee is at-most-once: standard input cannot be replayed.
func (c *StdinConfig) Guarantee() pipeline.Guarantee { return pipeline.AtMostOnce }

// NewSource returns the source.
func (c *StdinConfig) NewSource() (pipeline.Source, error) { return &stdinSource{cfg: c}, nil }

type stdinSource struct {
	cfg    *StdinConfig
	lines  *codec.AsyncLines
	stream *codec.Stream
}

// Open starts reading standard input on a goroutine of its own, so that
// Read can return when its context is done while a read blocks. A restored
// position is ignored: standard input cannot be replayed.
func (s *stdinSource) Open(_ context.Context, sc *pipeline.SourceContext) error {
	in := sc.Stdin
	if in == nil {
		in = os.Stdin
	}
	s.lines = codec.StartLines(in, s.cfg.Format == codec.CSV)
	s.stream = codec.NewStream("stdin", s.lines, &s.cfg.DecodeOptions, sc)
	return nil
}

// Read appends the records of the next lines, and the lines that do not
// decode to b.Failed ("stdin:LINE: reason", {"raw": line}); io.EOF when the
// input ended. Position stays nil.
func (s *stdinSource) Read(ctx context.Context, b *pipeline.ReadBatch) error {
	return s.stream.Read(ctx, b)
}

// Close stops the reading goroutine once its pending read returns (standard
// input is not closed).
func (s *stdinSource) Close(context.Context) error {
	if s.lines != nil {
		s.lines.Stop()
	}
	return nil
}
