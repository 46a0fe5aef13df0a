package file

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/eddy-stream/eddy/connectors/codec"
	"github.com/eddy-stream/eddy/pipeline"
)

// The transactional file sink (Flink's FileSink): with checkpoints, the sink
// writes part files. Records go to a hidden in-progress file; PreCommit (at
// the barrier) flushes, fsyncs and closes it and renames it to a hidden
// pending file; Commit (once the checkpoint is complete, and again at a
// restore) renames pending files to their final, visible names. A file
// rolled by roll_size or roll_interval becomes pending at once and joins the
// next committable. Only a rename makes a file visible, so a reader never
// sees a part file that is incomplete or not covered by a completed
// checkpoint.
//
// On disk, for part prefix P, subtask K and sequence number N (at least six
// digits) in the part directory:
//
//	.P-K-N.EXT.inprogress   being written
//	.P-K-N.EXT.pending      pre-committed, waiting for its checkpoint
//	P-K-N.EXT               committed
//
// The committable of a PreCommit is JSON (see committable) naming every
// pending file of this subtask that no Commit has covered yet, so that
// the committable of the restored checkpoint alone commits everything
// pre-committed before it, including transactions of checkpoints that
// failed.

// Errors of Commit, to test with errors.Is.
var (
	// ErrPartLost is returned when neither the pending file nor the final
	// file of a committable exists: the checkpoint's output is gone
	// (deleted or moved by someone else).
	ErrPartLost = errors.New("pre-committed part file lost")
	// ErrPartDamaged is returned when a pending file does not have the size
	// PreCommit recorded (a torn write, or someone changed it).
	ErrPartDamaged = errors.New("pre-committed part file damaged")
)

// committableVersion is the version of the committable encoding.
const committableVersion = 1

// committable is what PreCommit returns, JSON-encoded, e.g.
//
//	{"v":1,"checkpoint":7,"subtask":0,"dir":"out","files":[
//	  {"pending":".result-0-000003.jsonl.pending","final":"result-0-000003.jsonl","size":1048576}]}
//
// Dir is the part directory as configured (relative paths resolve against
// the working directory); pending and final are file names in it; size is
// the file's length in bytes. An empty transaction has "files":[].
type committable struct {
	V          int         `json:"v"`
	Checkpoint int64       `json:"checkpoint"`
	Subtask    int         `json:"subtask"`
	Dir        string      `json:"dir"`
	Files      []partEntry `json:"files"`
}

// partEntry is one pending -> final rename of a committable.
type partEntry struct {
	Pending string `json:"pending"`
	Final   string `json:"final"`
	Size    int64  `json:"size"`
}

func decodeCommittable(b []byte) (committable, error) {
	var c committable
	if err := json.Unmarshal(b, &c); err != nil {
		return c, fmt.Errorf("decode committable: %w", err)
	}
	if c.V != committableVersion {
		return c, fmt.Errorf("committable has version %d, this eddy reads version %d", c.V, committableVersion)
	}
	for _, e := range c.Files {
		if !isBaseName(e.Final) || e.Pending != pendingName(e.Final) {
			return c, fmt.Errorf("committable of checkpoint %d: bad part file names %q -> %q", c.Checkpoint, e.Pending, e.Final)
		}
	}
	return c, nil
}

func isBaseName(name string) bool {
	return name != "" && name != "." && name != ".." && filepath.Base(name) == name && !strings.ContainsAny(name, `/\`)
}

// partLayout is where part files go and how they are named.
type partLayout struct {
	dir, prefix, ext string
}

// partLayoutOf returns the layout for the sink's path: a path ending in '/'
// or naming an existing directory holds part-K-N.jsonl (.csv for csv);
// any other path is DIR/NAME.EXT and holds NAME-K-N.EXT in DIR.
func partLayoutOf(path string, format codec.Format) partLayout {
	if isDirPath(path) {
		ext := ".jsonl"
		if format == codec.CSV {
			ext = ".csv"
		}
		return partLayout{dir: filepath.Clean(path), prefix: "part", ext: ext}
	}
	dir, base := filepath.Split(path)
	ext := filepath.Ext(base)
	if ext == base { // ".hidden": no extension
		ext = ""
	}
	return partLayout{dir: filepath.Clean(dir), prefix: strings.TrimSuffix(base, ext), ext: ext}
}

// final returns the final name of part seq of subtask k.
func (l partLayout) final(k int, seq int64) string {
	return fmt.Sprintf("%s-%d-%06d%s", l.prefix, k, seq, l.ext)
}

func inProgressName(final string) string { return "." + final + ".inprogress" }
func pendingName(final string) string    { return "." + final + ".pending" }

type partKind int

const (
	partFinal partKind = iota
	partPending
	partInProgress
)

// parse returns the subtask, sequence number and kind of a part file
// name of the layout; ok is false for any other name.
func (l partLayout) parse(name string) (k int, seq int64, kind partKind, ok bool) {
	kind, base := partFinal, name
	if s, found := strings.CutSuffix(name, ".inprogress"); found && strings.HasPrefix(s, ".") {
		kind, base = partInProgress, s[1:]
	} else if s, found := strings.CutSuffix(name, ".pending"); found && strings.HasPrefix(s, ".") {
		kind, base = partPending, s[1:]
	}
	rest, found := strings.CutPrefix(base, l.prefix+"-")
	if !found {
		return 0, 0, 0, false
	}
	sub, rest, found := strings.Cut(rest, "-")
	if !found || !allDigits(sub) {
		return 0, 0, 0, false
	}
	digits, found := strings.CutSuffix(rest, l.ext)
	if !found || !allDigits(digits) {
		return 0, 0, 0, false
	}
	k, err := strconv.Atoi(sub)
	if err != nil {
		return 0, 0, 0, false
	}
	seq, err = strconv.ParseInt(digits, 10, 64)
	if err != nil {
		return 0, 0, 0, false
	}
	return k, seq, kind, true
}

func allDigits(s string) bool { return s != "" && strings.Trim(s, "0123456789") == "" }

// partWriter is the transactional mode of the file sink of one subtask. Its
// methods run on the sink's task goroutine.
type partWriter struct {
	fs      fileSystem
	now     func() time.Time
	logger  *slog.Logger
	id      string
	subtask int
	// parallelism is the sink's parallelism in this run: the subtask also
	// owns the leftovers of the old subtasks j >= parallelism with
	// j mod parallelism == subtask (a run restored at a lower parallelism),
	// as it commits their committables.
	parallelism  int
	layout       partLayout
	enc          codec.Encoder
	rollSize     int64
	rollInterval time.Duration

	seq  int64         // sequence number of the next part file
	cur  *part         // the in-progress part, nil until the next record
	w    *bufio.Writer // writes cur; reused across parts
	line []byte        // scratch: one encoded record
	// rolled are parts made pending since the last PreCommit.
	rolled []partEntry
	// uncommitted are parts in committables that Commit has not covered
	// yet, oldest first; every new committable repeats them.
	uncommitted []partEntry
	// err is sticky: after a failed write, fsync or rename the sink cannot
	// tell what reached the disk (a failed fsync may have dropped dirty
	// pages), so it only fails until the runtime restarts it from the last
	// checkpoint.
	err error
}

type part struct {
	f       fsFile
	final   string
	size    int64 // bytes written, buffered included
	records int
	opened  time.Time
}

func (p *partWriter) path(name string) string { return filepath.Join(p.layout.dir, name) }

func (p *partWriter) errorf(format string, args ...any) error {
	return fmt.Errorf("file sink %q: "+format, append([]any{p.id}, args...)...)
}

// open commits the restored committables, then deletes the in-progress and
// pending files of this subtask (and of the old subtasks it took over, see
// owns) that none of them references (the crashed run's, whose records the
// sources replay), and continues the sequence numbers after the highest one
// of its own left in the directory.
func (p *partWriter) open(ctx context.Context, committables [][]byte) error {
	if err := p.fs.MkdirAll(p.layout.dir); err != nil {
		return p.errorf("%w", err)
	}
	if _, err := commitAll(ctx, p.fs, committables); err != nil {
		return p.errorf("restore: %w", err)
	}
	referenced := map[string]bool{}
	for _, b := range committables {
		c, _ := decodeCommittable(b) // decoded by commitAll already
		for _, e := range c.Files {
			referenced[filepath.Join(filepath.Clean(c.Dir), e.Pending)] = true
		}
	}
	entries, err := p.fs.ReadDir(p.layout.dir)
	if err != nil {
		return p.errorf("restore: %w", err)
	}
	removed := 0
	for _, e := range entries {
		k, seq, kind, ok := p.layout.parse(e.Name())
		if !ok || !p.owns(k) {
			continue
		}
		name := p.path(e.Name())
		if kind == partFinal || referenced[name] || !e.Type().IsRegular() {
			if k == p.subtask {
				p.seq = max(p.seq, seq+1)
			}
			continue
		}
		if err := ctx.Err(); err != nil {
			return p.errorf("restore: %w", err)
		}
		if err := p.fs.Remove(name); err != nil {
			return p.errorf("abort leftover part file: %w", err)
		}
		removed++
		p.logger.Info("file sink removed a part file no checkpoint references; the sources replay its records",
			"file", name)
	}
	if removed > 0 {
		if err := p.fs.SyncDir(p.layout.dir); err != nil {
			return p.errorf("fsync directory %s: %w", p.layout.dir, err)
		}
	}
	return nil
}

// owns tells whether the part files of subtask k are this subtask's to
// clean up at a restore: its own, and those of an old subtask that the
// current parallelism no longer has and whose committables it commits.
func (p *partWriter) owns(k int) bool {
	return k == p.subtask || (p.parallelism > 0 && k >= p.parallelism && k%p.parallelism == p.subtask)
}

func (p *partWriter) fail(err error) error {
	p.err = err
	return err
}

func (p *partWriter) failed() error {
	return p.errorf("failed earlier, waiting for a restore: %w", p.err)
}

// write encodes the records into the in-progress part, rolling first when
// the part is older than roll_interval, and whenever a record would take
// it past roll_size.
func (p *partWriter) write(batch []pipeline.Record) error {
	if p.err != nil {
		return p.failed()
	}
	if err := p.rollIfDue(); err != nil {
		return err
	}
	for i := range batch {
		line, err := p.enc.Append(p.line[:0], batch[i].Fields)
		if err != nil {
			return &pipeline.SinkRecordError{Index: i, Err: p.errorf("%s: %w", p.layout.dir, err)}
		}
		p.line = line
		if p.cur != nil && p.cur.records > 0 && p.cur.size+int64(len(line)) > p.rollSize {
			if err := p.finishPart(); err != nil {
				return p.fail(err)
			}
		}
		if p.cur == nil {
			if err := p.startPart(); err != nil {
				return p.fail(err)
			}
		}
		if _, err := p.w.Write(line); err != nil {
			return p.fail(p.errorf("%w", pathErr("write", p.path(inProgressName(p.cur.final)), err)))
		}
		p.cur.size += int64(len(line))
		p.cur.records++
	}
	return nil
}

// flush runs at buffer timeouts and barriers: it makes nothing visible and
// writes nothing out; it only rolls a part older than roll_interval.
func (p *partWriter) flush() error {
	if p.err != nil {
		return p.failed()
	}
	return p.rollIfDue()
}

func (p *partWriter) rollIfDue() error {
	if p.cur == nil || p.rollInterval <= 0 || p.now().Sub(p.cur.opened) < p.rollInterval {
		return nil
	}
	if err := p.finishPart(); err != nil {
		return p.fail(err)
	}
	return nil
}

// startPart creates the next in-progress file and writes the header.
func (p *partWriter) startPart() error {
	final := p.layout.final(p.subtask, p.seq)
	if _, err := p.fs.Lstat(p.path(final)); err == nil {
		return p.errorf("%s already exists: another sink writes part files with the same path (give each sink its own path)", p.path(final))
	}
	f, err := p.fs.Create(p.path(inProgressName(final)))
	if err != nil {
		return p.errorf("%w", err)
	}
	p.seq++
	if p.w == nil {
		p.w = bufio.NewWriterSize(f, writeBuffer)
	} else {
		p.w.Reset(f)
	}
	p.cur = &part{f: f, final: final, opened: p.now()}
	if h := p.enc.Header(); h != nil {
		if _, err := p.w.Write(h); err != nil {
			return p.errorf("%w", pathErr("write", p.path(inProgressName(final)), err))
		}
		p.cur.size = int64(len(h))
	}
	return nil
}

// finishPart flushes, fsyncs and closes the in-progress part and renames it
// to its pending name. On error the file stays in progress (invisible) and
// is deleted at the next start.
func (p *partWriter) finishPart() error {
	c := p.cur
	p.cur = nil
	inProgress, pending := p.path(inProgressName(c.final)), p.path(pendingName(c.final))
	if err := p.w.Flush(); err != nil {
		_ = c.f.Close()
		return p.errorf("%w", pathErr("write", inProgress, err))
	}
	if err := c.f.Sync(); err != nil {
		_ = c.f.Close()
		return p.errorf("%w", pathErr("fsync", inProgress, err))
	}
	if err := c.f.Close(); err != nil {
		return p.errorf("%w", pathErr("close", inProgress, err))
	}
	if err := p.fs.Rename(inProgress, pending); err != nil {
		return p.errorf("%w", pathErr("pre-commit", inProgress, err))
	}
	p.rolled = append(p.rolled, partEntry{Pending: pendingName(c.final), Final: c.final, Size: c.size})
	return nil
}

// preCommit ends the transaction of checkpoint id: the in-progress part
// becomes pending, the directory is fsynced, and the committable lists it
// with the rolled parts and the earlier uncommitted ones.
func (p *partWriter) preCommit(ctx context.Context, id int64) ([]byte, error) {
	if p.err != nil {
		return nil, p.failed()
	}
	if err := ctx.Err(); err != nil {
		return nil, p.errorf("pre-commit checkpoint %d: %w", id, err)
	}
	if p.cur != nil {
		if err := p.finishPart(); err != nil {
			return nil, p.fail(err)
		}
	}
	if len(p.rolled) > 0 {
		if err := p.fs.SyncDir(p.layout.dir); err != nil {
			return nil, p.fail(p.errorf("pre-commit checkpoint %d: fsync directory %s: %w", id, p.layout.dir, err))
		}
		p.uncommitted = append(p.uncommitted, p.rolled...)
		p.rolled = p.rolled[:0]
	}
	c := committable{
		V: committableVersion, Checkpoint: id, Subtask: p.subtask, Dir: p.layout.dir,
		Files: append([]partEntry{}, p.uncommitted...),
	}
	b, err := json.Marshal(c)
	if err != nil {
		return nil, p.errorf("pre-commit checkpoint %d: %w", id, err)
	}
	return b, nil
}

// commit makes the committables' parts visible and forgets them.
func (p *partWriter) commit(ctx context.Context, committables [][]byte) error {
	done, err := commitAll(ctx, p.fs, committables)
	if err != nil {
		return p.errorf("%w", err)
	}
	if len(done) > 0 && len(p.uncommitted) > 0 {
		kept := p.uncommitted[:0]
		for _, e := range p.uncommitted {
			if !done[p.path(e.Final)] {
				kept = append(kept, e)
			}
		}
		clear(p.uncommitted[len(kept):])
		p.uncommitted = kept
	}
	return nil
}

// close closes the in-progress file without making it pending: its records
// belong to no completed checkpoint, and the next start deletes it.
func (p *partWriter) close() error {
	if p.cur == nil {
		return nil
	}
	c := p.cur
	p.cur = nil
	if err := c.f.Close(); err != nil {
		return p.errorf("%w", pathErr("close", p.path(inProgressName(c.final)), err))
	}
	return nil
}

// commitAll renames the pending files of the committables to their final
// names and fsyncs the directories. A part already committed (final there,
// pending gone) is skipped, so committing again is harmless. It returns the
// final paths of every part the committables list.
func commitAll(ctx context.Context, fsys fileSystem, committables [][]byte) (map[string]bool, error) {
	done := map[string]bool{}
	var dirs []string
	for i, b := range committables {
		c, err := decodeCommittable(b)
		if err != nil {
			return done, fmt.Errorf("committable %d: %w", i, err)
		}
		dir := filepath.Clean(c.Dir)
		for _, e := range c.Files {
			if err := ctx.Err(); err != nil {
				return done, fmt.Errorf("commit checkpoint %d: %w", c.Checkpoint, err)
			}
			renamed, err := commitPart(fsys, dir, e)
			if err != nil {
				return done, fmt.Errorf("commit checkpoint %d: %w", c.Checkpoint, err)
			}
			done[filepath.Join(dir, e.Final)] = true
			if renamed && !slices.Contains(dirs, dir) {
				dirs = append(dirs, dir)
			}
		}
	}
	for _, dir := range dirs {
		if err := fsys.SyncDir(dir); err != nil {
			return done, fmt.Errorf("commit: fsync directory %s: %w", dir, err)
		}
	}
	return done, nil
}

// commitPart renames one pending file to its final name; renamed is false
// when it was committed before.
func commitPart(fsys fileSystem, dir string, e partEntry) (renamed bool, err error) {
	pending, final := filepath.Join(dir, e.Pending), filepath.Join(dir, e.Final)
	st, err := fsys.Lstat(pending)
	if errors.Is(err, fs.ErrNotExist) {
		if _, ferr := fsys.Lstat(final); ferr == nil {
			return false, nil
		} else if !errors.Is(ferr, fs.ErrNotExist) {
			return false, ferr
		}
		return false, fmt.Errorf("neither %s nor %s exists: %w (the records of this checkpoint are not in the output)", pending, final, ErrPartLost)
	}
	if err != nil {
		return false, err
	}
	if st.Size() != e.Size {
		return false, fmt.Errorf("%s has %d bytes, the checkpoint recorded %d: %w", pending, st.Size(), e.Size, ErrPartDamaged)
	}
	if _, err := fsys.Lstat(final); err == nil {
		return false, fmt.Errorf("both %s and %s exist: not overwriting a file another writer made", pending, final)
	}
	if err := fsys.Rename(pending, final); err != nil {
		return false, err
	}
	return true, nil
}
