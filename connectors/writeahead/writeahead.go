package writeahead

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"

	"github.com/fxamacker/cbor/v2"

	"github.com/eddy-stream/eddy/expr"
	"github.com/eddy-stream/eddy/internal/fsutil"
	"github.com/eddy-stream/eddy/pipeline"
	"github.com/eddy-stream/eddy/statestore"
)

// A write-ahead sink (Flink's GenericWriteAheadSink) gives a sink without
// transactions the checkpoint-driven output of a two-phase-commit sink:
// the records a subtask receives between two barriers are kept, go into
// the checkpoint as the sink's committable, and are written to the wrapped
// sink only once that checkpoint completes (docs/checkpoints.md,
// "Write-ahead sinks").
//
// Idempotency comes from a commit marker per sink subtask (Flink's
// CheckpointCommitter): a small file under the pipeline's state dir,
// write-ahead/<sink id>/<subtask>.committed, holding the id of the last
// checkpoint whose records were written and flushed. A committable whose
// id is not above it is skipped. The marker is written after the wrapped
// sink's flush: a process that dies between the two writes that
// checkpoint's records again after the restore, the one window in which
// the output is at-least-once.
//
// Committable format (CBOR, RFC 8949), version 1:
//
//	committable = [1, checkpoint id, subtask, [* record]]
//	record      = [fields: map, time: int, key: tstr, meta: null / meta]
//	meta        = [key: bstr / null, headers: map / null, partition, offset, timestamp]
//
// subtask is the sink subtask that wrote it: after a restore at another
// parallelism, the subtask that commits it checks that subtask's marker.
// Field values are CBOR data items (times as tag 0 with nanoseconds);
// integers come back as int, lists as []any and maps as map[string]any.
const (
	formatVersion = 1
	// Dir is the directory under a pipeline's state dir that holds the
	// commit markers of its write-ahead sinks.
	Dir = "write-ahead"
	// warnBytes is the committable size above which a subtask warns
	// (once) that the records of a checkpoint interval are large.
	warnBytes = 64 << 20
	// batchSize is the number of records per Write when a committable
	// is written to the wrapped sink.
	batchSize = 1024
)

var (
	walEncMode = func() cbor.UserBufferEncMode {
		em, err := cbor.EncOptions{Time: cbor.TimeRFC3339Nano, TimeTag: cbor.EncTagRequired}.UserBufferEncMode()
		if err != nil {
			panic(err)
		}
		return em
	}()
	walDecMode = func() cbor.DecMode {
		dm, err := cbor.DecOptions{
			DefaultMapType:   reflect.TypeFor[map[string]any](),
			UTF8:             cbor.UTF8DecodeInvalid, // keys and record strings need not be valid UTF-8
			MaxNestedLevels:  256,
			MaxArrayElements: math.MaxInt32,
			MaxMapPairs:      math.MaxInt32,
		}.DecMode()
		if err != nil {
			panic(err)
		}
		return dm
	}()
)

// walRecord is a record as a committable holds it.
type walRecord struct {
	_      struct{} `cbor:",toarray"`
	Fields map[string]any
	Time   int64
	Key    string
	Meta   *walMeta
}

type walMeta struct {
	_         struct{} `cbor:",toarray"`
	Key       []byte
	Headers   map[string]string
	Partition int32
	Offset    int64
	Timestamp int64
}

// sink wraps a sink that is not a pipeline.TwoPhaseCommitSink. All
// methods are called on the task goroutine, as for any sink.
type sink struct {
	inner    pipeline.Sink
	stateDir string
	info     pipeline.SubtaskInfo
	// dir holds the markers of this sink id.
	dir string
	// buf holds the encoded records received since the last barrier, n
	// how many.
	buf bytes.Buffer
	n   uint64
	// committed is the marker of each subtask seen, once read.
	committed map[int]int64
	warned    bool
}

var _ pipeline.TwoPhaseCommitSink = (*sink)(nil)

func init() { pipeline.Default.RegisterWriteAhead(Wrap) }

// Wrap wraps inner, the sink of one subtask of a sink with `write_ahead:
// true`; its markers go under stateDir (JobOptions.StateDir). It is the
// pipeline.SinkWrapper this package registers in pipeline.Default; the
// runtime calls it once per sink subtask, after the config's NewSink,
// before the run starts.
func Wrap(inner pipeline.Sink, stateDir string) (pipeline.Sink, error) {
	if _, ok := inner.(pipeline.TwoPhaseCommitSink); ok {
		return nil, errors.New("write_ahead is for sinks without transactions, and this sink commits with checkpoints itself")
	}
	return &sink{inner: inner, stateDir: stateDir, committed: map[int]int64{}}, nil
}

// Open opens the wrapped sink, then writes the records of the restored
// committables that their subtask's marker does not cover, and sets the
// markers to what the restored checkpoint holds.
func (w *sink) Open(ctx context.Context, sc *pipeline.SinkContext) error {
	w.info = sc.SubtaskInfo
	if !sc.Checkpointing {
		return errors.New("write_ahead needs checkpoints: records are written when a checkpoint completes (add a checkpoint block, or remove write_ahead)")
	}
	if w.stateDir == "" {
		return errors.New("write_ahead needs a state directory for its commit markers (run with a state dir)")
	}
	w.dir = filepath.Join(w.stateDir, Dir, sc.ID)
	if err := os.MkdirAll(w.dir, 0o755); err != nil {
		return fmt.Errorf("create the write-ahead marker directory: %w", err)
	}
	// Check every restored committable before anything is written.
	latest := map[int]int64{}
	for _, c := range sc.Committables {
		h, _, err := decodeWALHeader(c)
		if err != nil {
			return fmt.Errorf("restored write-ahead committable: %w", err)
		}
		latest[h.subtask] = max(latest[h.subtask], h.id)
	}
	inner := *sc
	inner.Committables = nil
	if err := w.inner.Open(ctx, &inner); err != nil {
		return err
	}
	if err := w.Commit(ctx, sc.Committables); err != nil {
		return err
	}
	// A marker is only good for the lineage of checkpoints it was written
	// in. This subtask's marker with no restored committable of its own is
	// from an earlier fresh start (or another pipeline of the same name):
	// it is reset, or it would hide the new checkpoints' records. A marker
	// above what the restored checkpoint holds (a restore from an older
	// checkpoint or savepoint) comes down to it: new checkpoint ids follow
	// the restored one.
	if _, ok := latest[w.info.Subtask]; !ok {
		latest[w.info.Subtask] = 0
	}
	for sub, id := range latest {
		m, err := w.marker(sub)
		if err != nil {
			return err
		}
		if m != id {
			if err := w.setMarker(sub, id); err != nil {
				return err
			}
		}
	}
	return nil
}

// Write encodes the records into the interval's buffer; nothing reaches
// the wrapped sink before the checkpoint completes.
func (w *sink) Write(_ context.Context, batch []pipeline.Record) error {
	for i := range batch {
		r := &batch[i]
		wr := walRecord{Fields: r.Fields, Time: r.Time, Key: r.Key}
		if m := r.Meta; m != nil {
			wr.Meta = &walMeta{Key: m.Key, Headers: m.Headers, Partition: m.Partition, Offset: m.Offset, Timestamp: m.Timestamp}
		}
		size := w.buf.Len()
		if err := walEncMode.MarshalToBuffer(wr, &w.buf); err != nil {
			w.buf.Truncate(size)
			return fmt.Errorf("keep a record for the next checkpoint: %w", err)
		}
		w.n++
	}
	return nil
}

// Flush does nothing: records are flushed to the wrapped sink when their
// checkpoint completes.
func (w *sink) Flush(context.Context) error { return nil }

// PreCommit returns the records received since the previous barrier as
// the committable of checkpoint id, and starts a new interval.
func (w *sink) PreCommit(_ context.Context, id int64) ([]byte, error) {
	c := make([]byte, 0, 40+w.buf.Len())
	c = statestore.AppendCBORHead(c, cborArray, 4)
	c = statestore.AppendCBORHead(c, cborUint, formatVersion)
	c = statestore.AppendCBORInt(c, id)
	c = statestore.AppendCBORHead(c, cborUint, uint64(w.info.Subtask))
	c = statestore.AppendCBORHead(c, cborArray, w.n)
	c = append(c, w.buf.Bytes()...)
	w.n = 0
	if w.buf.Cap() > 8<<20 {
		w.buf = bytes.Buffer{} // do not keep a burst's buffer for good
	} else {
		w.buf.Reset()
	}
	if len(c) > warnBytes && !w.warned {
		w.warned = true
		w.info.Logger.Warn("write-ahead sink holds a large checkpoint interval in memory and in the checkpoint; take checkpoints more often (checkpoint.interval) or use a transactional sink",
			"checkpoint", id, "bytes", len(c))
	}
	return c, nil
}

// Commit writes the records of each committable to the wrapped sink, in
// order, flushes it and then advances the writing subtask's marker; a
// committable the marker covers is skipped, so committing twice is
// harmless.
func (w *sink) Commit(ctx context.Context, committables [][]byte) error {
	for _, c := range committables {
		h, recs, err := decodeWALHeader(c)
		if err != nil {
			return fmt.Errorf("write-ahead committable: %w", err)
		}
		m, err := w.marker(h.subtask)
		if err != nil {
			return err
		}
		if h.id <= m {
			continue
		}
		if err := w.writeRecords(ctx, h, recs); err != nil {
			return fmt.Errorf("write the records of checkpoint %d: %w", h.id, err)
		}
		if err := w.inner.Flush(ctx); err != nil {
			return fmt.Errorf("flush the records of checkpoint %d: %w", h.id, err)
		}
		if err := w.setMarker(h.subtask, h.id); err != nil {
			return err
		}
	}
	return nil
}

// writeRecords decodes the records of a committable and writes them to
// the wrapped sink in batches.
func (w *sink) writeRecords(ctx context.Context, h walHeader, b []byte) error {
	batch := make([]pipeline.Record, 0, min(h.records, batchSize))
	for i := uint64(0); i < h.records; i++ {
		var wr walRecord
		rest, err := walDecMode.UnmarshalFirst(b, &wr)
		if err != nil {
			return fmt.Errorf("decode record %d: %w", i, err)
		}
		b = rest
		if wr.Fields == nil {
			wr.Fields = map[string]any{}
		}
		for k, v := range wr.Fields {
			wr.Fields[k] = pipeline.NormalizeDecoded(v)
		}
		r := pipeline.Record{Fields: wr.Fields, Time: wr.Time, Key: wr.Key}
		if m := wr.Meta; m != nil {
			r.Meta = &expr.Meta{Key: m.Key, Headers: m.Headers, Partition: m.Partition, Offset: m.Offset, Timestamp: m.Timestamp}
		}
		batch = append(batch, r)
		if len(batch) == cap(batch) {
			if err := w.inner.Write(ctx, batch); err != nil {
				return err
			}
			batch = batch[:0]
		}
	}
	if len(b) != 0 {
		return errors.New("trailing bytes after the records")
	}
	if len(batch) > 0 {
		return w.inner.Write(ctx, batch)
	}
	return nil
}

// Close closes the wrapped sink; records not committed yet are in the
// checkpoint (or lost with a run that takes no final checkpoint, and
// replayed from the sources' positions).
func (w *sink) Close(ctx context.Context) error { return w.inner.Close(ctx) }

// markerPath is the commit marker of sink subtask sub.
func (w *sink) markerPath(sub int) string {
	return filepath.Join(w.dir, strconv.Itoa(sub)+".committed")
}

// marker returns the last checkpoint id committed for subtask sub (0: none).
func (w *sink) marker(sub int) (int64, error) {
	if id, ok := w.committed[sub]; ok {
		return id, nil
	}
	path := w.markerPath(sub)
	b, err := os.ReadFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		w.committed[sub] = 0
		return 0, nil
	case err != nil:
		return 0, fmt.Errorf("read write-ahead commit marker: %w", err)
	}
	id, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil || id < 0 {
		return 0, fmt.Errorf("write-ahead commit marker %s holds %q, not a checkpoint id: remove it to write the records of the restored checkpoint again (they may repeat)", path, b)
	}
	w.committed[sub] = id
	return id, nil
}

// setMarker durably records id as the last checkpoint committed for
// subtask sub: write a temporary file, fsync, rename over the marker,
// fsync the directory. Id 0 removes the marker.
func (w *sink) setMarker(sub int, id int64) error {
	path := w.markerPath(sub)
	if id == 0 {
		if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("reset write-ahead commit marker: %w", err)
		}
	} else if err := writeFileAtomic(path, []byte(strconv.FormatInt(id, 10)+"\n")); err != nil {
		return fmt.Errorf("write write-ahead commit marker for checkpoint %d: %w", id, err)
	}
	if err := fsutil.SyncDir(w.dir); err != nil {
		return fmt.Errorf("write write-ahead commit marker for checkpoint %d: %w", id, err)
	}
	w.committed[sub] = id
	return nil
}

// writeFileAtomic replaces path with data: write path.tmp, fsync, rename.
func writeFileAtomic(path string, data []byte) error {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		_ = os.Remove(tmp)
	}
	return err
}

// walHeader is what a committable says before its records.
type walHeader struct {
	id      int64
	subtask int
	records uint64
}

// decodeWALHeader reads a committable's header and returns the encoded
// records that follow.
func decodeWALHeader(c []byte) (walHeader, []byte, error) {
	var h walHeader
	major, n, rest, err := readCBORHead(c)
	if err != nil || major != cborArray || n != 4 {
		return h, nil, errors.New("not a write-ahead committable: the checkpoint holds another kind of sink's pending output (was the sink's type changed?)")
	}
	var version uint64
	if rest, err = walDecMode.UnmarshalFirst(rest, &version); err != nil {
		return h, nil, fmt.Errorf("format version: %w", err)
	}
	if version != formatVersion {
		return h, nil, fmt.Errorf("unknown format version %d (written by a newer eddy?)", version)
	}
	var sub uint64
	if rest, err = walDecMode.UnmarshalFirst(rest, &h.id); err != nil {
		return h, nil, fmt.Errorf("checkpoint id: %w", err)
	}
	if rest, err = walDecMode.UnmarshalFirst(rest, &sub); err != nil {
		return h, nil, fmt.Errorf("subtask: %w", err)
	}
	if sub > math.MaxInt32 {
		return h, nil, fmt.Errorf("subtask %d out of range", sub)
	}
	h.subtask = int(sub)
	major, h.records, rest, err = readCBORHead(rest)
	if err != nil || major != cborArray || h.records > uint64(len(rest)) {
		return h, nil, errors.New("malformed record list")
	}
	return h, rest, nil
}

// CBOR major types used by the committable's hand-written heads.
const (
	cborUint  = 0
	cborArray = 4
)

// readCBORHead reads a definite-length item head.
func readCBORHead(b []byte) (major byte, n uint64, rest []byte, err error) {
	major, info, n, rest, err := statestore.ReadCBORHead(b)
	if err == nil && info == 31 {
		err = fmt.Errorf("unsupported CBOR head 0x%02x", b[0])
	}
	return major, n, rest, err
}
