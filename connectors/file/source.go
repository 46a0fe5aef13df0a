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
	"sync/atomic"
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

// Rescalable is true: a restore at another parallelism hands every old
// subtask's position to each new subtask, which takes the state of the
// files it owns now (see restoreRescaled).
func (c *SourceConfig) Rescalable() bool { return true }

// describedEntry is a PositionEntry as DescribePosition shows it.
type describedEntry struct {
	File   string `json:"file"`
	Offset int64  `json:"offset"`
	Line   int    `json:"line"`
	Done   bool   `json:"done,omitempty"`
}

// DescribePosition decodes a checkpointed position for `eddy state
// inspect` (pipeline.PositionDescriber): where each of the subtask's files
// resumes, as {"file", "offset", "line", "done"}.
func (c *SourceConfig) DescribePosition(b []byte) (any, error) {
	pos, err := DecodePosition(b)
	if err != nil {
		return nil, err
	}
	out := make([]describedEntry, len(pos.Entries))
	for i, e := range pos.Entries {
		out[i] = describedEntry{File: e.Name, Offset: e.Offset, Line: e.Line, Done: e.Done}
	}
	return out, nil
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
	// later are the files after cur that a rescaled restore found started
	// or done (their old subtask had read them): the position lists them
	// until cur passes them. Empty otherwise.
	later  []*input
	sub, p int // subtask and parallelism, written into positions
	dec    codec.BatchDecoder
	lines  [][]byte
	nums   []int
	// read and size are the bytes read of the subtask's files and their
	// size at Open, for Progress (another goroutine); size stays 0 with
	// follow, whose input has no end.
	read, size atomic.Int64
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
	// bytes is the file's size at Open; counted is what it added to the
	// source's read bytes.
	bytes, counted int64
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
	s.sub, s.p = sc.Subtask, max(sc.Parallelism, 1)
	for j, name := range names {
		if j%s.p == sc.Subtask {
			s.files = append(s.files, &input{index: j, name: name, line: 1})
		}
	}
	s.dec.Workers = s.cfg.DecodeWorkers
	s.dec.Observe(sc)
	switch {
	case sc.Restored != nil:
		pos, err := DecodePosition(sc.Restored)
		if err != nil {
			return fmt.Errorf("file source %q: restore: %w", s.id, err)
		}
		s.restore([]Position{pos}, func(int) int { return 0 })
	case sc.RestoredAll != nil:
		if err := s.restoreRescaled(sc.RestoredAll, names); err != nil {
			return fmt.Errorf("file source %q: restore at parallelism %d: %w", s.id, s.p, err)
		}
		sc.Position = s.position(nil)
	}
	if !s.cfg.Follow {
		s.measure()
	}
	return nil
}

// measure takes the size of the subtask's files, and counts what a
// restore found read, for Progress.
func (s *source) measure() {
	size := int64(0)
	for _, in := range s.files {
		if st, err := os.Stat(in.name); err == nil {
			in.bytes = st.Size()
		}
		size += in.bytes
		s.account(in)
	}
	s.size.Store(size)
}

// account adds what was read of in since it was last counted to the
// source's read bytes: all of it once done, else up to its offset.
func (s *source) account(in *input) {
	n := in.offset
	if in.done {
		n = max(in.bytes, in.offset)
	}
	s.read.Add(n - in.counted)
	in.counted = n
}

// Progress returns the bytes read of the subtask's files and their size
// (pipeline.Progresser); the size is 0 (unknown) with follow or before
// Open. A file that grew while read counts at most its size at Open.
func (s *source) Progress() (done, total int64) {
	total = s.size.Load()
	return min(s.read.Load(), total), total
}

// restore applies positions. A file listed in one resumes as its entry
// says. Without follow, an unlisted file is done when the first entry
// (the file being read) of its owner, pos[owner(j)] for file j (its index
// among all files), sorts after it; any other file starts from the
// beginning. owner may return -1: no position read that file.
func (s *source) restore(pos []Position, owner func(j int) int) {
	listed := map[string]PositionEntry{}
	for _, p := range pos {
		for _, e := range p.Entries {
			listed[e.Name] = e
		}
	}
	for _, in := range s.files {
		if e, ok := listed[in.name]; ok {
			in.offset, in.line = e.Offset, max(e.Line, 1)
			in.done = e.Done && !s.cfg.Follow
			continue
		}
		if s.cfg.Follow {
			continue
		}
		if o := owner(in.index); o >= 0 && len(pos[o].Entries) > 0 && in.name < pos[o].Entries[0].Name {
			in.done = true
		}
	}
	for s.cur < len(s.files) && s.files[s.cur].done {
		s.cur++
	}
	if !s.cfg.Follow {
		for _, in := range s.files[s.cur:] {
			if in.done || in.offset > 0 {
				s.later = append(s.later, in)
			}
		}
	}
}

// restoreRescaled restores the positions of every subtask of a checkpoint
// taken at another parallelism. Each names its subtask and parallelism,
// which tell which old subtask read each file: the files must be those of
// the checkpoint (same names, same order), else the restore fails.
func (s *source) restoreRescaled(all [][]byte, names []string) error {
	pos := make([]Position, 0, len(all))
	for _, b := range all {
		if b == nil {
			continue // a subtask that had read nothing: its files start fresh
		}
		p, err := DecodePosition(b)
		if err != nil {
			return err
		}
		pos = append(pos, p)
	}
	if len(pos) == 0 {
		return nil // no subtask had read anything
	}
	if s.cfg.Follow {
		// Every file read is listed, by name: files may come and go
		// (rotation), as in a restore at the same parallelism.
		s.restore(pos, func(int) int { return -1 })
		return nil
	}
	index := make(map[string]int, len(names))
	for j, n := range names {
		index[n] = j
	}
	bySub := map[int]int{}
	oldP := 0
	for i, p := range pos {
		if p.Parallelism == 0 {
			return errors.New("a position written by an older eddy, which does not record its parallelism: restore at the parallelism the checkpoint was taken with")
		}
		if oldP == 0 {
			oldP = p.Parallelism
		}
		if p.Parallelism != oldP || p.Subtask >= oldP || bySub[p.Subtask] > 0 {
			return fmt.Errorf("positions of subtask %d of %d and of %d subtasks do not belong together", p.Subtask, p.Parallelism, oldP)
		}
		for _, e := range p.Entries {
			j, ok := index[e.Name]
			if !ok {
				return fmt.Errorf("file %s, read by subtask %d, is gone: the files must be those of the checkpoint", e.Name, p.Subtask)
			}
			if j%oldP != p.Subtask {
				return fmt.Errorf("file %s was read by subtask %d of %d, but is file %d now: the files must be those of the checkpoint", e.Name, p.Subtask, oldP, j)
			}
		}
		bySub[p.Subtask] = i + 1
	}
	s.restore(pos, func(j int) int { return bySub[j%oldP] - 1 })
	return nil
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
		if in.done { // a restore found it read to its end
			s.cur++
			continue
		}
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
	b.Position = s.position(in)
	s.account(in)
}

// position encodes where the subtask is, in just read: with follow every
// file; else in (or, when nil, the first file not done) and the files after
// it that a rescaled restore found started or done.
func (s *source) position(in *input) []byte {
	p := Position{Subtask: s.sub, Parallelism: s.p}
	entry := func(f *input) PositionEntry {
		return PositionEntry{Name: f.name, Offset: f.offset, Line: f.line, Done: f.done && !s.cfg.Follow}
	}
	if s.cfg.Follow {
		for _, f := range s.files {
			p.Entries = append(p.Entries, entry(f))
		}
		return EncodePosition(p)
	}
	if in == nil {
		if s.cur == len(s.files) {
			if s.cur == 0 {
				return EncodePosition(p)
			}
			in = s.files[s.cur-1]
		} else {
			in = s.files[s.cur]
		}
	}
	p.Entries = append(p.Entries, entry(in))
	for len(s.later) > 0 && s.later[0].index <= in.index {
		s.later = s.later[1:]
	}
	for _, f := range s.later {
		p.Entries = append(p.Entries, entry(f))
	}
	return EncodePosition(p)
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

// Position is where a file subtask is.
type Position struct {
	// Subtask and Parallelism are the subtask's, which tell which files
	// it reads (file j: subtask j % Parallelism). Zero Parallelism: a
	// version-1 position, which did not record them.
	Subtask, Parallelism int
	// Entries: with follow one per file of the subtask. Without, first the
	// file being read (the subtask's files sorted before it are done),
	// then the later files that a rescaled restore found started or done.
	Entries []PositionEntry
}

// PositionEntry is where reading one file resumes.
type PositionEntry struct {
	Name   string // the file's path as the glob matched it
	Offset int64  // byte offset just after the last line read
	Line   int    // line number at Offset (1-based), for error messages
	Done   bool   // read to its end (not with follow)
}

// positionVersion starts every encoded position: 2 since positions record
// their subtask, parallelism and done files; 1 is still read.
const positionVersion = 2

// EncodePosition encodes the position of a file subtask: a version byte
// (2), uvarint subtask, uvarint parallelism, the number of entries, then
// per entry uvarint offset, uvarint line, uvarint flags (1: done), uvarint
// name length and the name. Version 1 had neither subtask, parallelism
// nor flags.
func EncodePosition(p Position) []byte {
	n := 1 + 3*binary.MaxVarintLen64
	for _, e := range p.Entries {
		n += 4*binary.MaxVarintLen64 + len(e.Name)
	}
	b := make([]byte, 0, n)
	b = append(b, positionVersion)
	b = binary.AppendUvarint(b, uint64(p.Subtask))
	b = binary.AppendUvarint(b, uint64(p.Parallelism))
	b = binary.AppendUvarint(b, uint64(len(p.Entries)))
	for _, e := range p.Entries {
		b = binary.AppendUvarint(b, uint64(e.Offset))
		b = binary.AppendUvarint(b, uint64(e.Line))
		var flags uint64
		if e.Done {
			flags |= 1
		}
		b = binary.AppendUvarint(b, flags)
		b = binary.AppendUvarint(b, uint64(len(e.Name)))
		b = append(b, e.Name...)
	}
	return b
}

// DecodePosition decodes what EncodePosition encoded, or a version-1
// position.
func DecodePosition(b []byte) (Position, error) {
	bad := func(what string) error { return fmt.Errorf("file source position is corrupt: %s", what) }
	if len(b) == 0 || b[0] == 0 || b[0] > positionVersion {
		return Position{}, bad("unknown version")
	}
	version := b[0]
	b = b[1:]
	next := func() (uint64, bool) {
		v, n := binary.Uvarint(b)
		if n <= 0 {
			return 0, false
		}
		b = b[n:]
		return v, true
	}
	var p Position
	if version >= 2 {
		sub, ok1 := next()
		par, ok2 := next()
		if !ok1 || !ok2 || par == 0 || sub >= par || par > 1<<20 {
			return Position{}, bad("subtask")
		}
		p.Subtask, p.Parallelism = int(sub), int(par)
	}
	count, ok := next()
	if !ok || count > uint64(len(b)) {
		return Position{}, bad("entry count")
	}
	p.Entries = make([]PositionEntry, 0, count)
	for range count {
		off, ok1 := next()
		line, ok2 := next()
		var flags uint64
		ok3 := true
		if version >= 2 {
			flags, ok3 = next()
		}
		nameLen, ok4 := next()
		if !ok1 || !ok2 || !ok3 || !ok4 || off > 1<<62 || line > 1<<62 || flags > 1 || nameLen > uint64(len(b)) {
			return Position{}, bad("entry")
		}
		p.Entries = append(p.Entries, PositionEntry{Name: string(b[:nameLen]), Offset: int64(off), Line: int(line), Done: flags&1 != 0})
		b = b[nameLen:]
	}
	if len(b) != 0 {
		return Position{}, bad("trailing bytes")
	}
	return p, nil
}
