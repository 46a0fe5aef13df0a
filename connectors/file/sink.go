package file

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/eddy-stream/eddy/connectors/codec"
	"github.com/eddy-stream/eddy/pipeline"
)

func init() {
	pipeline.Default.RegisterSink(pipeline.SinkPlugin{
		Type:    "file",
		Summary: "writes JSON lines (keys sorted) or CSV to a file per subtask",
		New: func() pipeline.SinkConfig {
			return &SinkConfig{EncodeOptions: codec.DefaultEncodeOptions()}
		},
	})
}

// SinkConfig is the `file` sink's configuration.
type SinkConfig struct {
	// Path is the output file. With parallelism > 1, subtask k writes PATH
	// with "-k" before the extension (out.jsonl -> out-0.jsonl, out-1.jsonl).
	// A path ending in "/" or naming a directory gets one file per subtask
	// inside it: part-K.jsonl (json) or part-K.csv (csv). Parent
	// directories are created.
	Path string `yaml:"path" eddy:"required"`
	// format, columns and csv_delimiter.
	codec.EncodeOptions `yaml:",inline"`
	// Append adds to an existing file instead of truncating it at the start
	// of the run. A csv header is written only to an empty file.
	Append bool `yaml:"append"`
	// Sync makes every Flush (each checkpoint, the end of input) fsync the file.
	Sync bool `yaml:"sync"`
}

// Validate checks the keys.
func (c *SinkConfig) Validate() error {
	var errs []error
	if c.Path == "" {
		errs = append(errs, pipeline.FieldErr("path", "must name the file to write"))
	}
	if err := c.EncodeOptions.Validate(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// Guarantee is at-least-once: what was written before a failure is written
// again after a restore.
func (c *SinkConfig) Guarantee() pipeline.Guarantee { return pipeline.AtLeastOnce }

// NewSink returns the sink of one subtask.
func (c *SinkConfig) NewSink() (pipeline.Sink, error) { return &sink{cfg: c}, nil }

// OutputPath returns the file subtask k of p writes for path.
func OutputPath(path string, format codec.Format, k, p int) string {
	isDir := strings.HasSuffix(path, "/") || strings.HasSuffix(path, string(filepath.Separator))
	if st, err := os.Stat(path); err == nil && st.IsDir() {
		isDir = true
	}
	if isDir {
		ext := ".jsonl"
		if format == codec.CSV {
			ext = ".csv"
		}
		return filepath.Join(path, fmt.Sprintf("part-%d%s", k, ext))
	}
	if p <= 1 {
		return path
	}
	dir, base := filepath.Split(path)
	ext := filepath.Ext(base)
	if ext == base { // ".hidden": no extension
		ext = ""
	}
	return dir + strings.TrimSuffix(base, ext) + fmt.Sprintf("-%d", k) + ext
}

// writeBuffer is the size of a sink's write buffer.
const writeBuffer = 256 << 10

type sink struct {
	cfg  *SinkConfig
	id   string
	path string
	f    *os.File
	w    *bufio.Writer
	enc  codec.Encoder
}

// Open creates or truncates (or, with append, opens) the subtask's file.
func (s *sink) Open(_ context.Context, sc *pipeline.SinkContext) error {
	s.id = sc.ID
	s.path = OutputPath(s.cfg.Path, s.cfg.Format, sc.Subtask, sc.Parallelism)
	if err := os.MkdirAll(filepath.Dir(s.path), 0o755); err != nil {
		return fmt.Errorf("file sink %q: %w", s.id, err)
	}
	flags := os.O_CREATE | os.O_WRONLY | os.O_TRUNC
	if s.cfg.Append {
		flags = os.O_CREATE | os.O_WRONLY | os.O_APPEND
	}
	f, err := os.OpenFile(s.path, flags, 0o644)
	if err != nil {
		return fmt.Errorf("file sink %q: %w", s.id, err)
	}
	s.f = f
	s.w = bufio.NewWriterSize(f, writeBuffer)
	s.enc = s.cfg.NewEncoder()
	if h := s.enc.Header(); h != nil {
		st, err := f.Stat()
		if err != nil {
			return fmt.Errorf("file sink %q: %w", s.id, err)
		}
		if st.Size() == 0 {
			_, _ = s.w.Write(h)
		}
	}
	return nil
}

// Write encodes the records into the write buffer.
func (s *sink) Write(_ context.Context, batch []pipeline.Record) error {
	for i := range batch {
		buf, err := s.enc.Append(s.w.AvailableBuffer(), batch[i].Fields)
		if err != nil {
			return fmt.Errorf("file sink %q: %s: %w", s.id, s.path, err)
		}
		if _, err := s.w.Write(buf); err != nil {
			return fmt.Errorf("file sink %q: write %s: %w", s.id, s.path, err)
		}
	}
	return nil
}

// Flush writes the buffer to the file, and fsyncs it with sync: true.
func (s *sink) Flush(context.Context) error {
	if s.w == nil {
		return nil
	}
	if err := s.w.Flush(); err != nil {
		return fmt.Errorf("file sink %q: write %s: %w", s.id, s.path, err)
	}
	if s.cfg.Sync {
		if err := s.f.Sync(); err != nil {
			return fmt.Errorf("file sink %q: sync %s: %w", s.id, s.path, err)
		}
	}
	return nil
}

// Close flushes and closes the file.
func (s *sink) Close(ctx context.Context) error {
	if s.f == nil {
		return nil
	}
	err := s.Flush(ctx)
	if cerr := s.f.Close(); cerr != nil && err == nil {
		err = fmt.Errorf("file sink %q: close %s: %w", s.id, s.path, cerr)
	}
	s.f, s.w = nil, nil
	return err
}
