package stdio

import (
	"bufio"
	"context"
	"fmt"
	"os"

	"github.com/eddy-stream/eddy/connectors/codec"
	"github.com/eddy-stream/eddy/pipeline"
)

func init() {
	pipeline.Default.RegisterSink(pipeline.SinkPlugin{
		Type:    "stdout",
		Summary: "writes JSON lines (keys sorted) or CSV to standard output",
		New: func() pipeline.SinkConfig {
			return &StdoutConfig{EncodeOptions: codec.DefaultEncodeOptions()}
		},
	})
}

// StdoutConfig is the `stdout` sink's configuration.
type StdoutConfig struct {
	// format (json or csv), columns and csv_delimiter. A csv header is
	// written when the sink opens.
	codec.EncodeOptions `yaml:",inline"`
}

// Validate checks the keys.
func (c *StdoutConfig) Validate() error { return c.EncodeOptions.Validate() }

// MaxParallelism is 1, so that lines of different subtasks never interleave.
func (c *StdoutConfig) MaxParallelism() int { return 1 }

// Guarantee is at-least-once: lines printed before a failure are printed
// again after a restore.
func (c *StdoutConfig) Guarantee() pipeline.Guarantee { return pipeline.AtLeastOnce }

// NewSink returns the sink.
func (c *StdoutConfig) NewSink() (pipeline.Sink, error) { return &stdoutSink{cfg: c}, nil }

type stdoutSink struct {
	cfg *StdoutConfig
	id  string
	w   *bufio.Writer
	enc codec.Encoder
}

// Open buffers output to the job's standard output.
func (s *stdoutSink) Open(_ context.Context, sc *pipeline.SinkContext) error {
	s.id = sc.ID
	out := sc.Stdout
	if out == nil {
		out = os.Stdout
	}
	s.w = bufio.NewWriterSize(out, 64<<10)
	s.enc = s.cfg.NewEncoder()
	if h := s.enc.Header(); h != nil {
		_, _ = s.w.Write(h)
	}
	return nil
}

// Write encodes the records into the buffer. A record that does not
// encode is a pipeline.SinkRecordError; the records before it stay written.
func (s *stdoutSink) Write(_ context.Context, batch []pipeline.Record) error {
	for i := range batch {
		buf, err := s.enc.Append(s.w.AvailableBuffer(), batch[i].Fields)
		if err != nil {
			return &pipeline.SinkRecordError{Index: i, Err: fmt.Errorf("stdout sink %q: %w", s.id, err)}
		}
		if _, err := s.w.Write(buf); err != nil {
			return fmt.Errorf("stdout sink %q: %w", s.id, err)
		}
	}
	return nil
}

// Flush writes the buffer out.
func (s *stdoutSink) Flush(context.Context) error {
	if s.w == nil {
		return nil
	}
	if err := s.w.Flush(); err != nil {
		return fmt.Errorf("stdout sink %q: %w", s.id, err)
	}
	return nil
}

// Close flushes; standard output stays open.
func (s *stdoutSink) Close(ctx context.Context) error {
	err := s.Flush(ctx)
	s.w = nil
	return err
}
