package file

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/eddy-stream/eddy/connectors/codec"
	"github.com/eddy-stream/eddy/pipeline"
)

func init() {
	pipeline.Default.RegisterSource(pipeline.SourcePlugin{
		Type:    "file",
		Summary: "reads JSON lines, CSV or text from files (a path, glob or directory), optionally following appends",
		New: func() pipeline.SourceConfig {
			return &SourceConfig{
				DecodeOptions: codec.DefaultDecodeOptions(codec.JSON),
				PollInterval:  pipeline.Duration(100 * time.Millisecond),
			}
		},
	})
}

// SourceConfig is the `file` source's configuration.
type SourceConfig struct {
	// Path is a file, a glob (*, ?, [...]) or a directory (its regular,
	// non-hidden files). The matching files, sorted by name, are the splits:
	// file j is read by subtask j % parallelism.
	Path string `yaml:"path" eddy:"required"`
	// format and csv_delimiter. Lines that do not decode go to the
	// source's on_error.
	codec.DecodeOptions `yaml:",inline"`
	// Follow keeps reading data appended to the files, like tail -f; the
	// input then never ends.
	Follow bool `yaml:"follow"`
	// PollInterval is how often a followed file is checked for new data.
	PollInterval pipeline.Duration `yaml:"poll_interval"`
	// DecodeWorkers is the number of goroutines that decode json lines of
	// one subtask in parallel; 0 = GOMAXPROCS, 1 = on the reading goroutine.
	DecodeWorkers int `yaml:"decode_workers"`
}

// Validate checks the keys.
func (c *SourceConfig) Validate() error {
	var errs []error
	if c.Path == "" {
		errs = append(errs, pipeline.FieldErr("path", "must name a file, a glob or a directory"))
	} else if _, err := filepath.Match(c.Path, ""); err != nil {
		errs = append(errs, pipeline.FieldErr("path", "%q is not a valid glob: %v", c.Path, err))
	}
	if err := c.DecodeOptions.Validate(); err != nil {
		errs = append(errs, err)
	}
	if c.DecodeWorkers < 0 {
		errs = append(errs, pipeline.FieldErr("decode_workers", "must be 0 (GOMAXPROCS) or more"))
	}
	if c.Follow && c.PollInterval <= 0 {
		errs = append(errs, pipeline.FieldErr("poll_interval", "must be positive with follow: true"))
	}
	return errors.Join(errs...)
}

// Bounded reports whether the input ends: unless follow is set.
func (c *SourceConfig) Bounded() bool { return !c.Follow }

// Guarantee is exactly-once: files are replayed from a byte offset.
func (c *SourceConfig) Guarantee() pipeline.Guarantee { return pipeline.ExactlyOnce }

// NewSource returns the source of one subtask.
func (c *SourceConfig) NewSource() (pipeline.Source, error) { return &source{cfg: c}, nil }

// batchLines is the most lines one Read decodes.
const batchLines = 1024

// source reads the files of one subtask: one after the other, or, with
// follow, all of them in turn.
type source struct {
	cfg    *SourceConfig
	id     string
	logger *slog.Logger
	files  []*input
	cur    int // the file being read (follow: the next one to try)
	dec    codec.BatchDecoder
	lines  [][]byte
	nums   []int
}

// input is one file of the subtask.
type input struct {
	index  int // among all matching files: the split
	name   string
	f      *os.File
	lr     *codec.LineReader
	dec    codec.Decoder
	offset int64 // just after the last line read
	line   int   // the line number at offset
	eof    bool  // the last read hit the end of the file
	done   bool  // read to the end (not with follow)
}

// Open lists the files, keeps this subtask's share and applies a restored position.
func (s *source) Open(_ context.Context, sc *pipeline.SourceContext) error {
	s.id = sc.ID
	s.logger = sc.Logger
	if s.logger == nil {
		s.logger = slog.Default()
	}
	names, err := expand(s.cfg.Path)
	if err != nil {
		return fmt.Errorf("file source %q: %w", s.id, err)
	}
	if len(names) == 0 {
		return fmt.Errorf("file source %q: no file matches %s", s.id, s.cfg.Path)
	}
	p := max(sc.Parallelism, 1)
	for j, name := range names {
		if j%p == sc.Subtask {
			s.files = append(s.files, &input{index: j, name: name, line: 1})
		}
	}
	s.dec.Workers = s.cfg.DecodeWorkers
	if sc.Restored != nil {
		entries, err := DecodePosition(sc.Restored)
		if err != nil {
			return fmt.Errorf("file source %q: restore: %w", s.id, err)
		}
		s.restore(entries)
	}
	return nil
}

// restore applies position entries. Without follow there is one entry, the
// file being read: the files sorted before it are done.
func (s *source) restore(entries []PositionEntry) {
	for _, in := range s.files {
		for _, e := range entries {
			switch {
			case e.Name == in.name:
				in.offset, in.line = e.Offset, max(e.Line, 1)
			case !s.cfg.Follow && in.name < e.Name:
				in.done = true
			}
		}
	}
	for s.cur < len(s.files) && s.files[s.cur].done {
		s.cur++
	}
}

// expand returns the files of path in name order.
func expand(path string) ([]string, error) {
	if st, err := os.Stat(path); err == nil && st.IsDir() {
		entries, err := os.ReadDir(path)
		if err != nil {
			return nil, err
		}
		var names []string
		for _, e := range entries {
			if e.Type().IsRegular() && !strings.HasPrefix(e.Name(), ".") {
				names = append(names, filepath.Join(path, e.Name()))
			}
		}
		return names, nil
	}
	matches, err := filepath.Glob(path)
	if err != nil {
		return nil, err
	}
	names := matches[:0]
	for _, m := range matches {
		if st, err := os.Stat(m); err == nil && !st.IsDir() {
			names = append(names, m)
		}
	}
	slices.Sort(names)
	return names, nil
}

// Read appends the records of the next lines of one file to b, and the
// lines that do not decode to b.Failed ("FILE:LINE: reason", {"raw": line});
// b.Split is the file's index and b.Position the position after those lines,
// so a batch of failed lines only moves the position past them too. The
// batch that ends a file (not with follow) has SplitDone set; it is empty
// when only blank lines were left.
func (s *source) Read(ctx context.Context, b *pipeline.ReadBatch) error {
	if s.cfg.Follow {
		return s.readFollow(ctx, b)
	}
	for s.cur < len(s.files) {
		if err := ctx.Err(); err != nil {
			return err
		}
		in := s.files[s.cur]
		n, err := s.readFile(ctx, in, b, true)
		if in.done {
			s.cur++
		}
		// A finished file ends its split, with its last records or, when
		// only blank lines were left, in a batch of its own.
		if n > 0 || in.done || err != nil {
			s.finish(in, b)
			return err
		}
	}
	return io.EOF
}

// readFollow reads the first file in turn that has new lines, waiting for
// appends when none has.
func (s *source) readFollow(ctx context.Context, b *pipeline.ReadBatch) error {
	poll := s.cfg.PollInterval.D()
	for {
		for range s.files {
			in := s.files[s.cur]
			s.cur = (s.cur + 1) % len(s.files)
			in.eof = false // look again
			n, err := s.readFile(ctx, in, b, false)
			if n > 0 || err != nil {
				s.finish(in, b)
				return err
			}
			s.checkTruncated(in)
		}
		t := time.NewTimer(poll)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}

// finish sets the batch's split and position after reading from in.
func (s *source) finish(in *input, b *pipeline.ReadBatch) {
	b.Split = in.index
	b.SplitDone = in.done
	if !s.cfg.Follow {
		b.Position = EncodePosition([]PositionEntry{{Name: in.name, Offset: in.offset, Line: in.line}})
		return
	}
	entries := make([]PositionEntry, len(s.files))
	for i, f := range s.files {
		entries[i] = PositionEntry{Name: f.name, Offset: f.offset, Line: f.line}
	}
	b.Position = EncodePosition(entries)
}

// readFile appends the records and failed records of up to batchLines lines
// of in to b and returns how many it appended. final says that the end of the file ends
// its last line (false with follow: a partial line waits for its end).
func (s *source) readFile(ctx context.Context, in *input, b *pipeline.ReadBatch, final bool) (int, error) {
	if in.f == nil {
		if err := s.openFile(in); err != nil {
			return 0, err
		}
	}
	for {
		s.lines, s.nums = s.lines[:0], s.nums[:0]
		for len(s.lines) < batchLines {
			line, no, ok := in.lr.Next(in.eof && final)
			if !ok {
				break
			}
			s.lines = append(s.lines, line)
			s.nums = append(s.nums, no)
		}
		if len(s.lines) > 0 {
			n := s.dec.Decode(in.dec, s.lines, s.nums, in.name, b)
			in.offset, in.line = in.lr.Offset(), in.lr.Line()
			if n == 0 {
				continue // blank lines (or the csv header) only
			}
			if final && in.lr.Buffered() == 0 {
				// The records and failed records hold no reference to the buffer:
				// look ahead, so that the last batch of a file ends its split.
				if err := s.fill(in); err != nil {
					return n, err
				}
				if in.eof && in.lr.Buffered() == 0 {
					return n, s.closeDone(in)
				}
			}
			return n, nil
		}
		if in.eof {
			if final {
				return 0, s.closeDone(in)
			}
			return 0, nil
		}
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		if err := s.fill(in); err != nil {
			return 0, err
		}
	}
}

// fill reads more of in's file; in.eof tells whether it hit the end.
func (s *source) fill(in *input) error {
	if _, err := in.lr.Fill(); errors.Is(err, io.EOF) {
		in.eof = true
	} else if err != nil {
		return fmt.Errorf("file source %q: read %s: %w", s.id, in.name, err)
	}
	return nil
}

// closeDone closes a file read to its end.
func (s *source) closeDone(in *input) error {
	in.done = true
	err := in.f.Close()
	in.f, in.lr = nil, nil
	if err != nil {
		return fmt.Errorf("file source %q: close %s: %w", s.id, in.name, err)
	}
	return nil
}

func (s *source) openFile(in *input) error {
	f, err := os.Open(in.name)
	if err != nil {
		return fmt.Errorf("file source %q: %w", s.id, err)
	}
	if in.offset > 0 {
		if _, err := f.Seek(in.offset, io.SeekStart); err != nil {
			_ = f.Close()
			return fmt.Errorf("file source %q: seek %s to %d: %w", s.id, in.name, in.offset, err)
		}
	}
	in.f = f
	in.lr = codec.NewLineReader(f, in.offset, in.line, s.cfg.Format == codec.CSV, 0)
	in.dec = s.cfg.NewDecoder()
	if s.cfg.Format == codec.CSV && in.offset > 0 {
		// Resuming inside a CSV file: read its header again.
		if err := readHeader(in); err != nil {
			return fmt.Errorf("file source %q: %s: %w", s.id, in.name, err)
		}
	}
	return nil
}

// readHeader feeds the first CSV record of in's file to its decoder.
func readHeader(in *input) error {
	f, err := os.Open(in.name)
	if err != nil {
		return err
	}
	defer f.Close()
	lr := codec.NewLineReader(f, 0, 1, true, 64<<10)
	eof := false
	for {
		line, _, ok := lr.Next(eof)
		if ok {
			if m, err := in.dec.Decode(line); err != nil || m != nil {
				return errors.Join(err, errors.New("the CSV header is not readable"))
			}
			if len(strings.TrimSpace(string(line))) > 0 {
				return nil
			}
			continue
		}
		if eof {
			return errors.New("the CSV header is missing")
		}
		if _, err := lr.Fill(); errors.Is(err, io.EOF) {
			eof = true
		} else if err != nil {
			return err
		}
	}
}

// checkTruncated starts a followed file over when it became shorter than
// what was read (it was truncated, as by logrotate's copytruncate).
func (s *source) checkTruncated(in *input) {
	if in.f == nil || !in.eof {
		return
	}
	st, err := in.f.Stat()
	if err != nil || st.Size() >= in.lr.ReadOffset() {
		return
	}
	s.logger.Warn("followed file was truncated; reading it from the start", "source", s.id, "file", in.name)
	if _, err := in.f.Seek(0, io.SeekStart); err != nil {
		return
	}
	in.offset, in.line, in.eof = 0, 1, false
	in.lr.Reset(in.f, 0, 1)
	in.dec = s.cfg.NewDecoder()
}

// Close closes the open files.
func (s *source) Close(context.Context) error {
	var errs []error
	for _, in := range s.files {
		if in.f != nil {
			errs = append(errs, in.f.Close())
			in.f = nil
		}
	}
	return errors.Join(errs...)
}

// PositionEntry is where reading one file resumes.
type PositionEntry struct {
	Name   string // the file's path as the glob matched it
	Offset int64  // byte offset just after the last line read
	Line   int    // line number at Offset (1-based), for error messages
}

// positionVersion starts every encoded position.
const positionVersion = 1

// EncodePosition encodes the position of a file subtask: a version byte
// (1), the number of entries, then per entry uvarint offset, uvarint line,
// uvarint name length and the name. Without follow there is one entry (the
// file being read: the files sorted before it are done); with follow there
// is one per file of the subtask.
func EncodePosition(entries []PositionEntry) []byte {
	n := 2
	for _, e := range entries {
		n += 3*binary.MaxVarintLen64 + len(e.Name)
	}
	b := make([]byte, 0, n)
	b = append(b, positionVersion)
	b = binary.AppendUvarint(b, uint64(len(entries)))
	for _, e := range entries {
		b = binary.AppendUvarint(b, uint64(e.Offset))
		b = binary.AppendUvarint(b, uint64(e.Line))
		b = binary.AppendUvarint(b, uint64(len(e.Name)))
		b = append(b, e.Name...)
	}
	return b
}

// DecodePosition decodes what EncodePosition encoded.
func DecodePosition(b []byte) ([]PositionEntry, error) {
	bad := func(what string) error { return fmt.Errorf("file source position is corrupt: %s", what) }
	if len(b) == 0 || b[0] != positionVersion {
		return nil, bad("unknown version")
	}
	b = b[1:]
	next := func() (uint64, bool) {
		v, n := binary.Uvarint(b)
		if n <= 0 {
			return 0, false
		}
		b = b[n:]
		return v, true
	}
	count, ok := next()
	if !ok || count > uint64(len(b)) {
		return nil, bad("entry count")
	}
	entries := make([]PositionEntry, 0, count)
	for range count {
		off, ok1 := next()
		line, ok2 := next()
		nameLen, ok3 := next()
		if !ok1 || !ok2 || !ok3 || off > 1<<62 || line > 1<<62 || nameLen > uint64(len(b)) {
			return nil, bad("entry")
		}
		entries = append(entries, PositionEntry{Name: string(b[:nameLen]), Offset: int64(off), Line: int(line)})
		b = b[nameLen:]
	}
	if len(b) != 0 {
		return nil, bad("trailing bytes")
	}
	return entries, nil
}
