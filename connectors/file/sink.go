package file

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/eddy-stream/eddy/connectors/codec"
	"github.com/eddy-stream/eddy/pipeline"
)

func init() {
	pipeline.Default.RegisterSink(pipeline.SinkPlugin{
		Type:    "file",
		Summary: "writes JSON lines (keys sorted) or CSV to files; with checkpoints, exactly-once part files committed per checkpoint",
		New: func() pipeline.SinkConfig {
			return &SinkConfig{EncodeOptions: codec.DefaultEncodeOptions(), RollSize: DefaultRollSize}
		},
	})
}

// DefaultRollSize is the default roll_size.
const DefaultRollSize pipeline.ByteSize = 128 << 20

// SinkConfig is the `file` sink's configuration.
type SinkConfig struct {
	// Path is where output goes.
	//
	// Without checkpoints it is the output file. With parallelism > 1,
	// subtask k writes PATH with "-k" before the extension (out.jsonl ->
	// out-0.jsonl, out-1.jsonl). A path ending in "/" or naming a directory
	// gets one file per subtask inside it: part-K.jsonl (json) or
	// part-K.csv (csv). Parent directories are created.
	//
	// With checkpoints the sink writes part files committed per checkpoint
	// (see sink_parts.go): a path ending in "/" or naming a directory holds
	// part-K-N.jsonl (part-K-N.csv); DIR/NAME.EXT holds NAME-K-N.EXT in DIR,
	// for subtask K and sequence number N.
	Path string `yaml:"path" eddy:"required"`
	// format, columns and csv_delimiter.
	codec.EncodeOptions `yaml:",inline"`
	// Append adds to an existing file instead of truncating it at the start
	// of the run. A csv header is written only to an empty file. Without
	// checkpoints only.
	Append bool `yaml:"append"`
	// Sync makes every Flush (each checkpoint, the end of input) fsync the
	// file. Without checkpoints only: part files are always fsynced.
	Sync bool `yaml:"sync"`
	// RollSize starts a new part file before a record would take the
	// current one past this size (with checkpoints only).
	RollSize pipeline.ByteSize `yaml:"roll_size"`
	// RollInterval starts a new part file when the current one is this old
	// (with checkpoints only); 0: only at checkpoints.
	RollInterval pipeline.Duration `yaml:"roll_interval"`
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
	if c.RollSize <= 0 {
		errs = append(errs, pipeline.FieldErr("roll_size", "must be positive, as in 128MiB"))
	}
	return errors.Join(errs...)
}

// Guarantee is exactly-once. It assumes checkpoints: then the sink writes
// part files that become visible only when the checkpoint covering their
// records completes, and a restore deletes what no completed checkpoint
// covers. The config cannot know whether the pipeline checkpoints, so the
// plan weighs the checkpoint block: without one, the plain writer is
// at-least-once at best (and the plan says at-most-once for every pipeline
// without checkpoints); with mode at_least_once, unaligned barriers let
// records after a barrier into the transaction before it, so the pipeline
// is at-least-once whatever the sink does.
func (c *SinkConfig) Guarantee() pipeline.Guarantee { return pipeline.ExactlyOnce }

// NewSink returns the sink of one subtask.
func (c *SinkConfig) NewSink() (pipeline.Sink, error) {
	return &sink{cfg: c, fs: osFS{}, now: time.Now}, nil
}

// OutputPath returns the file subtask k of p writes for path.
// It is the file of the plain writer (without checkpoints).
func OutputPath(path string, format codec.Format, k, p int) string {
	if isDirPath(path) {
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

// isDirPath tells whether path names a directory: it ends in a separator
// or names an existing directory.
func isDirPath(path string) bool {
	if strings.HasSuffix(path, "/") || strings.HasSuffix(path, string(filepath.Separator)) {
		return true
	}
	st, err := os.Stat(path)
	return err == nil && st.IsDir()
}

// writeBuffer is the size of a sink's write buffer.
const writeBuffer = 256 << 10

// sink is the file sink of one subtask: the plain writer below, or with
// checkpoints the transactional partWriter (sink_parts.go). All methods
// run on the sink's task goroutine.
type sink struct {
	cfg *SinkConfig
	fs  fileSystem       // the seam for fault injection (transactional mode)
	now func() time.Time // the clock of roll_interval
	id  string
	// parts is the transactional writer, set when the pipeline checkpoints.
	parts *partWriter

	// The plain writer.
	path string
	f    *os.File
	w    *bufio.Writer
	enc  codec.Encoder
}

var _ pipeline.TwoPhaseCommitSink = (*sink)(nil)

// Open starts the subtask's output. With checkpoints it commits the restored
// committables, deletes the subtask's in-progress and pending part files
// that none of them references, and continues numbering part files after
// the highest one in the directory; the first part file is created with the
// first record. Without checkpoints it creates or truncates (or, with
// append, opens) the subtask's file.
func (s *sink) Open(ctx context.Context, sc *pipeline.SinkContext) error {
	s.id = sc.ID
	if sc.Checkpointing {
		logger := sc.Logger
		if logger == nil {
			logger = slog.New(slog.DiscardHandler)
		}
		rollSize := int64(s.cfg.RollSize)
		if rollSize <= 0 {
			rollSize = int64(DefaultRollSize)
		}
		s.parts = &partWriter{
			fs: s.fs, now: s.now, logger: logger, id: sc.ID, subtask: sc.Subtask, parallelism: sc.Parallelism,
			layout: partLayoutOf(s.cfg.Path, s.cfg.Format), enc: s.cfg.NewEncoder(),
			rollSize: rollSize, rollInterval: s.cfg.RollInterval.D(),
		}
		return s.parts.open(ctx, sc.Committables)
	}
	if _, err := commitAll(ctx, s.fs, sc.Committables); err != nil {
		return fmt.Errorf("file sink %q: restore: %w", s.id, err)
	}
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

// Write encodes the records into the write buffer (with checkpoints, of
// the in-progress part file, rolling it by roll_size and roll_interval). A
// record that does not encode (an infinite float in json) is a
// pipeline.SinkRecordError; the records before it stay written.
func (s *sink) Write(_ context.Context, batch []pipeline.Record) error {
	if s.parts != nil {
		return s.parts.write(batch)
	}
	for i := range batch {
		buf, err := s.enc.Append(s.w.AvailableBuffer(), batch[i].Fields)
		if err != nil {
			return &pipeline.SinkRecordError{Index: i, Err: fmt.Errorf("file sink %q: %s: %w", s.id, s.path, err)}
		}
		if _, err := s.w.Write(buf); err != nil {
			return fmt.Errorf("file sink %q: %w", s.id, pathErr("write", s.path, err))
		}
	}
	return nil
}

// Flush writes the buffer to the file, and fsyncs it with sync: true.
// With checkpoints it makes nothing visible: it only rolls a part file
// older than roll_interval (to a pending file that the next checkpoint
// commits).
func (s *sink) Flush(context.Context) error {
	if s.parts != nil {
		return s.parts.flush()
	}
	if s.w == nil {
		return nil
	}
	if err := s.w.Flush(); err != nil {
		return fmt.Errorf("file sink %q: %w", s.id, pathErr("write", s.path, err))
	}
	if s.cfg.Sync {
		if err := s.f.Sync(); err != nil {
			return fmt.Errorf("file sink %q: %w", s.id, pathErr("sync", s.path, err))
		}
	}
	return nil
}

// PreCommit, at the barrier of checkpoint id, flushes, fsyncs and closes
// the in-progress part file, renames it to its pending name and fsyncs the
// directory; the committable lists it with the parts rolled since the last
// barrier and every earlier part not committed yet. Without checkpoints
// (not called by the runtime) it flushes and returns an empty committable.
func (s *sink) PreCommit(ctx context.Context, id int64) ([]byte, error) {
	if s.parts != nil {
		return s.parts.preCommit(ctx, id)
	}
	if err := s.Flush(ctx); err != nil {
		return nil, err
	}
	return json.Marshal(committable{V: committableVersion, Checkpoint: id, Files: []partEntry{}})
}

// Commit renames the committables' pending part files to their final
// names and fsyncs the directory. A part whose final file exists and
// pending file does not was committed before and is skipped; a part with
// neither is an error wrapping ErrPartLost.
func (s *sink) Commit(ctx context.Context, committables [][]byte) error {
	if s.parts != nil {
		return s.parts.commit(ctx, committables)
	}
	if _, err := commitAll(ctx, s.fs, committables); err != nil {
		return fmt.Errorf("file sink %q: %w", s.id, err)
	}
	return nil
}

// Close flushes and closes the file. With checkpoints it only closes the
// in-progress part file: on a graceful end the runtime has pre-committed
// and committed a final checkpoint before, so nothing is in progress; after
// a failure the in-progress records belong to no completed checkpoint, and
// the next start deletes the file.
func (s *sink) Close(ctx context.Context) error {
	if s.parts != nil {
		return s.parts.close()
	}
	if s.f == nil {
		return nil
	}
	err := s.Flush(ctx)
	if cerr := s.f.Close(); cerr != nil && err == nil {
		err = fmt.Errorf("file sink %q: %w", s.id, pathErr("close", s.path, cerr))
	}
	s.f, s.w = nil, nil
	return err
}
