package checkpoint

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"iter"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"

	"github.com/eddy-stream/eddy/internal/fsutil"
	"github.com/eddy-stream/eddy/statestore"
)

// Checkpoint storage: the durable half of a
// checkpoint. The checkpoint coordinator (pipeline/) begins checkpoint N,
// the tasks' asynchronous snapshot parts Put their blobs into it from their
// own goroutines, and the coordinator Completes it once every task acked.
// docs/checkpoints.md specifies the file layout.
//
// Guarantees:
//   - A checkpoint is complete once its metadata record is committed, in one
//     bbolt transaction, after every part's transaction was committed (bbolt
//     writes and fsyncs each commit). No read ever returns an incomplete
//     checkpoint.
//   - Every part is stored with its CRC32-C, and the metadata lists every
//     part with its size and CRC32-C; Latest verifies all of it and falls
//     back to the previous retained checkpoint when the newest does not
//     verify, with a warning.
//   - Retention keeps the newest Retain completed checkpoints, and deletes
//     incomplete leftovers (aborted, failed, or from a crash).
//   - Incremental checkpoints: a part may be a delta on the same-named part
//     of an older completed checkpoint, its base, which may be a delta
//     itself: a chain that ends at a whole part. Retention keeps every
//     checkpoint that a kept one, a pinned one, or a pending one's delta
//     part needs; reads return the merged whole part; a checkpoint verifies
//     only with every part of its chains.

const (
	// FileName is the checkpoint store's file in its state dir.
	FileName = "checkpoints.db"
	// checkpointOwnerFile records the process holding the store, for the
	// error a second process gets.
	checkpointOwnerFile = FileName + ".owner"

	// DefaultRetain is Options.Retain's default,
	// as the pipeline file's checkpoint.retain.
	DefaultRetain = 3
	// DefaultLockTimeout is Options.LockTimeout's
	// default.
	DefaultLockTimeout = time.Second

	// MaxPartNameLen bounds a part name (a bbolt key).
	MaxPartNameLen = 1024

	// A group commit takes puts until it holds this many bytes or items.
	maxBatchBytes = 64 << 20
	maxBatchItems = 1024
)

// Options configure Open.
type Options struct {
	// Retain is the number of completed checkpoints kept (the pipeline
	// file's checkpoint.retain); 0 means DefaultRetain. Keep at
	// least 2 so that a corrupt newest checkpoint has one to fall back to.
	Retain int
	// Logger gets the warnings (fallback to an older checkpoint, failed
	// retention) and debug lines (deletions). Default: slog.Default().
	Logger *slog.Logger
	// LockTimeout bounds the wait for the file lock that another process
	// may hold (ErrStateDirLocked). 0 means DefaultLockTimeout.
	LockTimeout time.Duration
	// Faults injects failures at the storage seams; tests only. Nil in
	// production.
	Faults Faults
}

// Meta describes a checkpoint: what Begin is given, and what
// Checkpoint.Meta returns.
type Meta struct {
	// Pipeline is the pipeline's name.
	Pipeline string
	// FileHash identifies the pipeline file the checkpoint was taken with
	// (e.g. "sha256:…"), so that a restore can tell it changed.
	FileHash string
	// Time is when the checkpoint was triggered; Begin sets the zero time to
	// now.
	Time time.Time
}

// PartInfo is what the metadata records of one part.
type PartInfo struct {
	Name   string
	Size   int64  // bytes of the blob as stored (of a delta part: of the delta)
	CRC32C uint32 // CRC32-C (Castagnoli) of the blob as stored
	// Base is 0 for a whole part. Otherwise the part is a delta on the part
	// of the same name of checkpoint Base (older, completed), which may be
	// a delta itself; Checkpoint.Get returns the merged whole part.
	Base int64
}

// Info is one row of List.
type Info struct {
	ID       int64
	Time     time.Time // when it was triggered (Meta.Time)
	Pipeline string
	Size     int64 // bytes of the parts stored so far, not of their bases
	Parts    int   // parts stored so far
	Complete bool  // the metadata record is written; says nothing of verification
	// Incremental is set when a part of the completed checkpoint is a
	// delta (PartInfo.Base), so that restoring it reads older checkpoints
	// too. Always false for an incomplete checkpoint.
	Incremental bool
}

// Store stores the checkpoints of one pipeline in one bbolt file,
// DIR/checkpoints.db, which one process at a time holds open (a file lock).
//
// All methods are safe for concurrent use. Write transactions go through a
// single writer goroutine that group-commits the Puts queued while it
// commits the previous group, so concurrent Puts share fsyncs.
type Store struct {
	dir         string
	path        string
	partsDir    string // of the parts written with Create (checkpoint_files.go)
	db          *bolt.DB
	retain      int
	log         *slog.Logger
	faults      Faults
	lockTimeout time.Duration

	reqs       chan *writeReq
	writerDone chan struct{}

	mu          sync.Mutex
	closed      bool
	inflight    sync.WaitGroup // submitted write requests not answered yet
	active      map[int64]*pending
	maxComplete int64

	// pinMu guards pins, and is held by retention from its choice of
	// victims to their deletion, so that a pinned checkpoint (one a
	// Checkpoint value or an export reads) is never deleted under it.
	pinMu sync.Mutex
	pins  map[int64]int
}

// Open opens (creating it and dir if needed) the checkpoint
// store of one pipeline: the bbolt file DIR/checkpoints.db. It waits at most
// LockTimeout for the file lock, then fails with ErrStateDirLocked naming
// the process that holds it. Opening deletes incomplete leftovers (from a
// crash) and checkpoints past retention.
func Open(dir string, opts Options) (*Store, error) {
	if opts.Retain < 0 {
		return nil, fmt.Errorf("open checkpoint store in %s: retain %d is negative", dir, opts.Retain)
	}
	s := &Store{
		dir:         dir,
		path:        filepath.Join(dir, FileName),
		partsDir:    filepath.Join(dir, PartsDir),
		retain:      cmp.Or(opts.Retain, DefaultRetain),
		log:         opts.Logger,
		faults:      opts.Faults,
		lockTimeout: cmp.Or(opts.LockTimeout, DefaultLockTimeout),
		reqs:        make(chan *writeReq, 64),
		writerDone:  make(chan struct{}),
		active:      map[int64]*pending{},
		pins:        map[int64]int{},
	}
	if s.log == nil {
		s.log = slog.Default()
	}
	if s.faults == nil {
		s.faults = noFaults{}
	}
	wrap := func(err error) error { return fmt.Errorf("open checkpoint store %s: %w", s.path, err) }
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, wrap(err)
	}
	_, statErr := os.Stat(s.path)
	created := errors.Is(statErr, os.ErrNotExist)
	db, err := statestore.OpenMapped(s.path, &bolt.Options{
		Timeout:      s.lockTimeout,
		FreelistType: bolt.FreelistMapType,
	})
	if errors.Is(err, berrors.ErrTimeout) {
		return nil, fmt.Errorf("state dir %s is in use by another eddy (%s; its lock on %s was not released within %s): %w",
			dir, readOwner(filepath.Join(dir, checkpointOwnerFile)), FileName, s.lockTimeout, ErrStateDirLocked)
	}
	if err != nil {
		return nil, wrap(err)
	}
	s.db = db
	if created {
		if err := fsutil.SyncDir(dir); err != nil {
			_ = db.Close()
			return nil, wrap(err)
		}
	}
	err = db.Update(func(tx *bolt.Tx) error {
		if err := checkFormat(tx, storeKind, true); err != nil {
			return err
		}
		root := tx.Bucket(bktCheckpoints)
		c := root.Cursor()
		for k, v := c.Last(); k != nil; k, v = c.Prev() {
			if id, ok := ckptID(k); ok && v == nil && root.Bucket(k).Get(keyMeta) != nil {
				s.maxComplete = id
				break
			}
		}
		return nil
	})
	if err != nil {
		_ = db.Close()
		return nil, wrap(err)
	}
	writeOwner(filepath.Join(dir, checkpointOwnerFile))
	s.removePartFiles(s.applyRetention())
	go s.writer()
	return s, nil
}

// Path returns the store's file.
func (s *Store) Path() string { return s.path }

// Close waits for the writes in flight (and Puts blocked in them), then
// closes the file and releases the lock. Pending checkpoints stay
// incomplete (the next open deletes them); Checkpoints read from the store
// fail with ErrClosed. When ctx ends first, Close returns its error and
// the file is closed once the writes finish. Later calls return nil.
func (s *Store) Close(ctx context.Context) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	done := make(chan error, 1)
	go func() {
		s.inflight.Wait()
		close(s.reqs)
		<-s.writerDone
		removeOwner(filepath.Join(s.dir, checkpointOwnerFile))
		done <- s.db.Close()
	}()
	select {
	case err := <-done:
		if err != nil {
			return fmt.Errorf("close checkpoint store %s: %w", s.path, err)
		}
		return nil
	case <-ctx.Done():
		return fmt.Errorf("close checkpoint store %s: writes still in flight: %w", s.path, ctx.Err())
	}
}

// Begin starts writing checkpoint id, which must be positive, not being
// written already, and greater than every completed checkpoint of the store
// (ErrID): after a restore, continue from the newest id List
// shows, plus one. An incomplete leftover with this id is deleted. Nothing
// is written until the first Put (or Complete). Called by the checkpoint
// coordinator when it triggers checkpoint id.
func (s *Store) Begin(id int64, meta Meta) (Writer, error) {
	wrap := func(err error) error { return fmt.Errorf("begin checkpoint %d: %w", id, err) }
	if id <= 0 {
		return nil, wrap(fmt.Errorf("%w: ids start at 1", ErrID))
	}
	if meta.Time.IsZero() {
		meta.Time = time.Now()
	}
	info, err := encodeRecord(recInfo, wireInfo{ID: id, Time: meta.Time.UnixNano(), Pipeline: meta.Pipeline, FileHash: meta.FileHash})
	if err != nil {
		return nil, wrap(err)
	}
	p := &pending{s: s, id: id, meta: meta, info: info, parts: map[string]PartInfo{}, files: map[string]string{}}
	s.mu.Lock()
	switch {
	case s.closed:
		s.mu.Unlock()
		return nil, wrap(ErrClosed)
	case s.active[id] != nil:
		s.mu.Unlock()
		return nil, wrap(fmt.Errorf("%w: checkpoint %d is being written already", ErrID, id))
	case id <= s.maxComplete:
		newest := s.maxComplete
		s.mu.Unlock()
		return nil, wrap(fmt.Errorf("%w: checkpoint %d is complete; new ids must be greater", ErrID, newest))
	}
	s.active[id] = p
	s.mu.Unlock()

	var leftover bool
	if err := s.db.View(func(tx *bolt.Tx) error {
		leftover = tx.Bucket(bktCheckpoints).Bucket(ckptKey(id)) != nil
		return nil
	}); err != nil {
		s.deactivate(id)
		return nil, wrap(err)
	}
	if leftover {
		if err := s.submit(&writeReq{op: wDelete, ids: []int64{id}, fault: OpAbort}); err != nil {
			s.deactivate(id)
			return nil, wrap(fmt.Errorf("delete incomplete leftover: %w", err))
		}
	}
	return p, nil
}

func (s *Store) deactivate(id int64) {
	s.mu.Lock()
	delete(s.active, id)
	s.mu.Unlock()
}

// List returns the checkpoints in the store, complete or not, newest first.
// It does not verify them (Latest does).
func (s *Store) List() ([]Info, error) {
	var out []Info
	err := s.view(func(tx *bolt.Tx) error {
		out = listCheckpoints(tx)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list checkpoints in %s: %w", s.path, err)
	}
	return out, nil
}

// listCheckpoints reads the rows of List from a read transaction: every
// checkpoint bucket, complete or not, newest first, unverified.
func listCheckpoints(tx *bolt.Tx) []Info {
	var out []Info
	root := tx.Bucket(bktCheckpoints)
	c := root.Cursor()
	for k, v := c.Last(); k != nil; k, v = c.Prev() {
		id, ok := ckptID(k)
		if !ok || v != nil {
			continue // not a checkpoint bucket: ignored, as by Latest
		}
		cb := root.Bucket(k)
		ci := Info{ID: id, Complete: cb.Get(keyMeta) != nil}
		if ci.Complete {
			bases, err := readBases(cb)
			ci.Incremental = err == nil && len(bases) > 0
		}
		var info wireInfo
		if decodeRecord(recInfo, cb.Get(keyInfo), &info) == nil {
			ci.Time = time.Unix(0, info.Time)
			ci.Pipeline = info.Pipeline
		}
		if pb := cb.Bucket(bktParts); pb != nil {
			pc := pb.Cursor()
			for pk, pv := pc.First(); pk != nil; pk, pv = pc.Next() {
				ci.Parts++
				ci.Size += int64(max(len(pv)-partTrailer, 0))
			}
		}
		if fb := cb.Bucket(bktFiles); fb != nil {
			fc := fb.Cursor()
			for fk, fv := fc.First(); fk != nil; fk, fv = fc.Next() {
				ci.Parts++
				if size, _, err := parseFileRef(fv); err == nil {
					ci.Size += size
				}
			}
		}
		out = append(out, ci)
	}
	return out
}

// Latest returns the newest completed checkpoint whose metadata and every
// part verify, with every part of the chains of its delta parts. A newer
// one that does not verify is skipped with a warning naming it and saying
// why. With no completed checkpoint at all it returns
// ErrNoCheckpoint; when none verifies, an error wrapping
// ErrNoValidCheckpoint (and each checkpoint's ErrCorrupt) that
// lists what was tried. It reads every byte of the checkpoint it returns
// and of those it skips. The Checkpoint must be closed; until then,
// retention keeps it.
func (s *Store) Latest(ctx context.Context) (*Checkpoint, error) {
	var ids []int64
	incomplete := 0
	err := s.view(func(tx *bolt.Tx) error {
		root := tx.Bucket(bktCheckpoints)
		c := root.Cursor()
		for k, v := c.Last(); k != nil; k, v = c.Prev() {
			id, ok := ckptID(k)
			if !ok || v != nil {
				continue
			}
			if root.Bucket(k).Get(keyMeta) != nil {
				ids = append(ids, id)
			} else {
				incomplete++
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("latest checkpoint in %s: %w", s.path, err)
	}
	if len(ids) == 0 {
		if incomplete > 0 {
			return nil, fmt.Errorf("latest checkpoint in %s: %w (%d incomplete ignored)", s.path, ErrNoCheckpoint, incomplete)
		}
		return nil, fmt.Errorf("latest checkpoint in %s: %w", s.path, ErrNoCheckpoint)
	}
	var errs []error
	// A part of a chain that several checkpoints share is read once.
	checked := map[partKey]error{}
	for i, id := range ids {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("latest checkpoint in %s: %w", s.path, err)
		}
		cp, err := s.open(ctx, id, checked)
		if err == nil {
			return cp, nil
		}
		if ctx.Err() != nil || errors.Is(err, ErrClosed) {
			return nil, fmt.Errorf("latest checkpoint in %s: %w", s.path, err)
		}
		errs = append(errs, fmt.Errorf("checkpoint %d: %w", id, err))
		if i+1 < len(ids) {
			s.log.Warn("checkpoint is unreadable; falling back to the previous retained checkpoint",
				"store", s.path, "checkpoint", id, "reason", err.Error(), "fallback", ids[i+1])
		} else {
			s.log.Warn("checkpoint is unreadable; no older checkpoint to fall back to",
				"store", s.path, "checkpoint", id, "reason", err.Error())
		}
	}
	return nil, fmt.Errorf("%w in %s: tried %d completed checkpoint(s) %v, none verifies; "+
		"restore from a savepoint, or move the state dir away to start from scratch: %w",
		ErrNoValidCheckpoint, s.path, len(ids), ids, errors.Join(errs...))
}

// Checkpoint returns completed checkpoint id after verifying it entirely,
// as Latest does but without falling back (ErrNoCheckpoint when there is
// no such completed checkpoint).
func (s *Store) Checkpoint(ctx context.Context, id int64) (*Checkpoint, error) {
	cp, err := s.open(ctx, id, nil)
	if err != nil {
		return nil, fmt.Errorf("checkpoint %d in %s: %w", id, s.path, err)
	}
	return cp, nil
}

// open pins checkpoint id (and so, through retention, every checkpoint of
// its chains) and verifies it; checked is verifyCheckpoint's.
func (s *Store) open(ctx context.Context, id int64, checked map[partKey]error) (*Checkpoint, error) {
	if err := s.pin(id); err != nil {
		return nil, err
	}
	var r *ckptRecord
	err := s.view(func(tx *bolt.Tx) error {
		var err error
		r, err = verifyCheckpoint(ctx, tx, s.partsDir, id, checked)
		return err
	})
	if err != nil {
		s.unpin(id)
		return nil, err
	}
	return &Checkpoint{rec: r, db: s.db, store: s, partsDir: s.partsDir}, nil
}

// view runs fn in a read transaction unless the store is closed.
func (s *Store) view(fn func(*bolt.Tx) error) error {
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return ErrClosed
	}
	err := s.db.View(fn)
	if errors.Is(err, berrors.ErrDatabaseNotOpen) {
		return ErrClosed
	}
	return err
}

// pin keeps checkpoint id from retention until unpin, and with it the
// checkpoints of its chains.
func (s *Store) pin(id int64) error {
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return ErrClosed
	}
	s.pinMu.Lock()
	s.pins[id]++
	s.pinMu.Unlock()
	return nil
}

func (s *Store) unpin(id int64) {
	s.pinMu.Lock()
	if s.pins[id]--; s.pins[id] <= 0 {
		delete(s.pins, id)
	}
	s.pinMu.Unlock()
}

// Writer is a checkpoint being written, as Store.Begin returns it: parts
// come in with Put and Create, then Complete makes the checkpoint visible
// atomically, or Abort deletes it. A checkpoint that did not complete is
// never restored. The runtime's checkpoint coordinator (package pipeline)
// begins one per checkpoint it triggers.
type Writer interface {
	// Put stores one small part, e.g. "src/<source id>/<subtask>" (a
	// source's position), "sink/<id>/<subtask>" (a sink's committables)
	// or "meta/savepoint". Called from the coordinator's writer
	// goroutines, one per ack, concurrently. A part name is stored once
	// (ErrDuplicatePart); a failed Put fails the checkpoint.
	Put(part string, blob []byte) error
	// Create streams a part to storage while it is encoded (a subtask's
	// keyed state, statestore's Snapshot.WriteAndRelease), so that it is
	// never held encoded in memory. With base 0 the part is whole;
	// otherwise it is a delta on the part of the same name of completed
	// checkpoint base (statestore.DeltaSnapshot), and Create fails with
	// ErrDeltaBase when that part is gone: the caller then writes the
	// part whole. Called from the ack's writer goroutine.
	Create(part string, base int64) (PartWriter, error)
	// Complete durably marks the checkpoint complete, after all its parts.
	// Called by the coordinator's goroutine once every task acked and
	// every part is written.
	Complete(ctx context.Context) error
	// Abort discards what was written; a no-op after a successful
	// Complete and after another Abort. Called by the coordinator's
	// goroutine when the checkpoint fails, expires, is subsumed by a newer
	// one or the job ends; Puts and PartWriters in flight are waited for.
	Abort() error
}

// pending is the Writer of a checkpoint being written: parts come in with Put,
// then Complete makes it visible, or Abort deletes it.
type pending struct {
	s    *Store
	id   int64
	meta Meta
	info []byte // the info record, written with the first part

	mu     sync.Mutex
	state  pendingCkptState
	err    error // the first failed write
	parts  map[string]PartInfo
	files  map[string]string // part name -> file name, of the parts written with Create
	nfiles int               // files created
	puts   sync.WaitGroup    // Puts and PartWriters in flight
	// aborted is set by Abort before it waits for puts: the PartWriters
	// in flight fail their next write (PartWriter.check).
	aborted atomic.Bool
	// bases are the pins Create with a base took on the bases of delta parts,
	// released once the checkpoint is complete (its metadata then keeps
	// them) or failed.
	bases []int64
}

type pendingCkptState uint8

const (
	pendingCkptOpen pendingCkptState = iota
	pendingCkptCompleting
	pendingCkptCompleted
	pendingCkptFailed
	pendingCkptAborted
)

// Put stores one part of the checkpoint, e.g. "op/<step id>/<subtask>" (a
// task's keyed-state blobs), "src/<source id>/<subtask>" (a source's
// position) or "sink/<id>/<subtask>". It returns once the part is committed
// and fsynced. Called from the tasks' asynchronous snapshot goroutines,
// concurrently: Puts queued while the writer commits are committed together,
// in one transaction (one fsync). blob may be reused once Put returns.
//
// A part name is stored once (ErrDuplicatePart). A failed Put fails the
// checkpoint: Complete then returns ErrFailed; Abort it.
func (p *pending) Put(part string, blob []byte) error {
	wrap := func(err error) error { return fmt.Errorf("put part %q of checkpoint %d: %w", part, p.id, err) }
	if len(blob)+partTrailer > bolt.MaxValueSize {
		return wrap(fmt.Errorf("%w: a blob of %d bytes (at most %d)", ErrInvalidPart, len(blob), bolt.MaxValueSize-partTrailer))
	}
	crc := crc32.Checksum(blob, crcTable)
	if err := p.admit(part, func() { p.parts[part] = PartInfo{Name: part, Size: int64(len(blob)), CRC32C: crc} }); err != nil {
		return wrap(err)
	}
	defer p.puts.Done()

	stored, err := p.s.faults.Blob(p.id, part, blob)
	if err == nil {
		err = p.s.submit(&writeReq{op: wPut, p: p, id: p.id, part: part, value: partValue(stored, crc)})
	}
	if err != nil {
		p.fail(err)
		return wrap(err)
	}
	return nil
}

// admit checks that part may be stored now (a valid name, the checkpoint
// open and not failed, the name not taken by a Put or a Create) and, under
// the same lock, records it with add and counts it in flight: the caller
// calls p.puts.Done when it is stored or failed.
func (p *pending) admit(part string, add func()) error {
	if part == "" || len(part) > MaxPartNameLen {
		return fmt.Errorf("%w: a name of %d bytes (1 to %d)", ErrInvalidPart, len(part), MaxPartNameLen)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case p.state != pendingCkptOpen:
		return ErrFinished
	case p.err != nil:
		return fmt.Errorf("%w: %w", ErrFailed, p.err)
	}
	_, put := p.parts[part]
	if _, created := p.files[part]; put || created {
		return ErrDuplicatePart
	}
	add()
	p.puts.Add(1)
	return nil
}

func (p *pending) fail(err error) {
	p.mu.Lock()
	if p.err == nil {
		p.err = err
	}
	p.mu.Unlock()
}

func (p *pending) setState(st pendingCkptState) {
	p.mu.Lock()
	p.state = st
	p.mu.Unlock()
}

// Complete makes the checkpoint visible: it waits for the Puts in flight,
// then writes the metadata record (id, times, pipeline, file hash, every
// part with its size and CRC32-C) in one transaction
// that also checks that every part is stored. Once Complete returns nil the
// checkpoint is durable and complete, and retention has run (its failure
// is only logged: it is retried after the next checkpoint). Called by the
// coordinator once every task acked.
//
// ctx bounds the wait for Puts and for the writer; a commit that started is
// waited for. When Complete fails, the checkpoint is not complete and never
// will be: Abort it (retention deletes it otherwise).
func (p *pending) Complete(ctx context.Context) error {
	wrap := func(err error) error { return fmt.Errorf("complete checkpoint %d: %w", p.id, err) }
	p.mu.Lock()
	if p.state != pendingCkptOpen {
		p.mu.Unlock()
		return wrap(ErrFinished)
	}
	p.state = pendingCkptCompleting
	p.mu.Unlock()
	fail := func(err error) error {
		p.fail(err)
		p.setState(pendingCkptFailed)
		p.s.deactivate(p.id)
		p.releaseBases()
		return wrap(err)
	}
	if err := waitGroup(ctx, &p.puts); err != nil {
		return fail(err)
	}
	p.mu.Lock()
	firstErr := p.err
	parts := slices.SortedFunc(maps.Values(p.parts), func(a, b PartInfo) int { return strings.Compare(a.Name, b.Name) })
	files := maps.Clone(p.files)
	meta := p.meta
	p.mu.Unlock()
	if firstErr != nil {
		return fail(fmt.Errorf("%w: %w", ErrFailed, firstErr))
	}
	if len(files) > 0 {
		if err := p.s.syncPartFiles(p.id, files, parts); err != nil {
			return fail(fmt.Errorf("part files: %w", err))
		}
	}
	wm := wireMeta{
		ID:        p.id,
		Time:      meta.Time.UnixNano(),
		Completed: time.Now().UnixNano(),
		Pipeline:  meta.Pipeline,
		FileHash:  meta.FileHash,
		Parts:     make([]wirePart, len(parts)),
	}
	for i, pi := range parts {
		wm.Parts[i] = wirePart{Name: pi.Name, Size: pi.Size, CRC: pi.CRC32C}
		if pi.Base != 0 {
			if wm.Bases == nil {
				wm.Bases = map[string]int64{}
			}
			wm.Bases[pi.Name] = pi.Base
		}
	}
	version := byte(1)
	switch {
	case len(wm.Bases) > 0:
		version = deltaFormatVersion
	case len(files) > 0:
		version = filesFormatVersion
	}
	rec, err := encodeRecordVersion(recMeta, version, wm)
	if err != nil {
		return fail(err)
	}
	if err := p.s.submit(&writeReq{op: wComplete, p: p, id: p.id, ctx: ctx, value: rec, parts: parts, files: files}); err != nil {
		return fail(err)
	}
	p.setState(pendingCkptCompleted)
	return nil
}

// releaseBases releases the pins on the bases of the delta parts, once:
// the metadata of a completed checkpoint keeps them from then on (the
// writer releases them as it commits the metadata, before retention
// runs), and a failed one needs them no more.
func (p *pending) releaseBases() {
	p.mu.Lock()
	bases := p.bases
	p.bases = nil
	p.mu.Unlock()
	for _, id := range bases {
		p.s.unpin(id)
	}
}

// Abort deletes what the checkpoint wrote, after the Puts in flight; the
// streamed parts in flight fail at their next write, so it waits for one
// write of each, not for the whole part. It is
// a no-op after a successful Complete (so `defer p.Abort()` is fine) and
// after another Abort. When the deletion fails, retention deletes the data
// later.
func (p *pending) Abort() error {
	p.mu.Lock()
	switch p.state {
	case pendingCkptCompleted, pendingCkptAborted:
		p.mu.Unlock()
		return nil
	case pendingCkptCompleting:
		p.mu.Unlock()
		return fmt.Errorf("abort checkpoint %d: %w: Complete is running", p.id, ErrFinished)
	}
	p.state = pendingCkptAborted
	p.aborted.Store(true)
	p.mu.Unlock()
	p.puts.Wait()
	err := p.s.submit(&writeReq{op: wDelete, ids: []int64{p.id}, fault: OpAbort})
	p.s.deactivate(p.id)
	p.releaseBases()
	if err != nil {
		return fmt.Errorf("abort checkpoint %d: %w", p.id, err)
	}
	return nil
}

// waitGroup waits for wg or ctx.
func waitGroup(ctx context.Context, wg *sync.WaitGroup) error {
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Checkpoint is a completed, verified checkpoint (from Latest, or
// OpenSavepoint). Its parts are read from the file on demand, each checked
// again. Safe for concurrent use; Close it when done.
type Checkpoint struct {
	rec      *ckptRecord
	db       *bolt.DB
	store    *Store // nil for a savepoint, whose db the Checkpoint owns
	partsDir string // the store's part files; "" for a savepoint

	mu     sync.Mutex
	closed bool
	err    error
}

// ID returns the checkpoint's id.
func (c *Checkpoint) ID() int64 { return c.rec.id }

// Meta returns the checkpoint's metadata.
func (c *Checkpoint) Meta() Meta { return c.rec.meta }

// CompletedAt returns when Complete wrote the metadata.
func (c *Checkpoint) CompletedAt() time.Time { return c.rec.completed }

// Size returns the total bytes of the checkpoint's own parts, as stored:
// a delta part counts with its size, not with its chain's.
func (c *Checkpoint) Size() int64 { return c.rec.size }

// Parts lists the parts, sorted by name, each as stored (a delta part with
// its Base, Size and CRC32C).
func (c *Checkpoint) Parts() []PartInfo { return slices.Clone(c.rec.parts) }

// Get returns a copy of one part's blob, checked against its checksum and
// the metadata (ErrCorrupt), or ErrPartNotFound. For a delta part
// it reads every part of the chain, each checked so, and returns them
// merged: the whole part, as a full snapshot would have written it.
func (c *Checkpoint) Get(part string) ([]byte, error) {
	wrap := func(err error) error { return fmt.Errorf("checkpoint %d: get part %q: %w", c.rec.id, part, err) }
	pi, ok := c.rec.find(part)
	if !ok {
		return nil, wrap(ErrPartNotFound)
	}
	c.mu.Lock()
	closed := c.closed
	c.mu.Unlock()
	if closed {
		return nil, wrap(ErrClosed)
	}
	view := c.db.View
	if c.store != nil {
		view = c.store.view
	}
	var blob []byte
	var err error
	if chain := c.rec.chains[part]; chain != nil {
		blob, err = readChain(view, c.partsDir, chain)
	} else {
		blob, err = readPart(view, c.partsDir, c.rec.id, pi)
	}
	if err != nil {
		return nil, wrap(err)
	}
	return blob, nil
}

// Prefix yields, in name order, the parts whose name starts with prefix and
// their blobs (copies, checked and merged as by Get), e.g.
// Prefix("op/per_sensor/") for every subtask's state of one step. When
// reading a part fails, the iteration stops and Err returns the error.
func (c *Checkpoint) Prefix(prefix string) iter.Seq2[string, []byte] {
	return func(yield func(string, []byte) bool) {
		parts := c.rec.parts
		i, _ := slices.BinarySearchFunc(parts, prefix, func(p PartInfo, s string) int { return strings.Compare(p.Name, s) })
		for ; i < len(parts) && strings.HasPrefix(parts[i].Name, prefix); i++ {
			blob, err := c.Get(parts[i].Name)
			if err != nil {
				c.mu.Lock()
				if c.err == nil {
					c.err = err
				}
				c.mu.Unlock()
				return
			}
			if !yield(parts[i].Name, blob) {
				return
			}
		}
	}
}

// Err returns the first error that stopped a Prefix iteration.
func (c *Checkpoint) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// Close releases the checkpoint: retention may delete it (and the
// checkpoints of its chains that nothing else needs) again, and a
// savepoint's file is closed. Later reads fail with ErrClosed.
func (c *Checkpoint) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	c.mu.Unlock()
	if c.store != nil {
		c.store.unpin(c.rec.id)
		return nil
	}
	return c.db.Close()
}

// The writer goroutine: every write transaction of the store runs on it.

type writeOp uint8

const (
	wPut writeOp = iota
	wComplete
	wDelete
)

type writeReq struct {
	op    writeOp
	p     *pending
	id    int64
	part  string
	value []byte            // wPut: the part value; wComplete: the metadata record
	parts []PartInfo        // wComplete: the parts the metadata lists
	files map[string]string // wComplete: the parts in files, name -> file
	ctx   context.Context
	ids   []int64 // wDelete
	fault Op      // wDelete: OpAbort or OpRetain
	done  chan error
}

// submit hands r to the writer and waits for its result.
func (s *Store) submit(r *writeReq) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return ErrClosed
	}
	s.inflight.Add(1)
	s.mu.Unlock()
	defer s.inflight.Done()
	r.done = make(chan error, 1)
	s.reqs <- r
	return <-r.done
}

func (s *Store) writer() {
	defer close(s.writerDone)
	var next *writeReq
	for {
		r := next
		next = nil
		if r == nil {
			var ok bool
			if r, ok = <-s.reqs; !ok {
				return
			}
		}
		switch r.op {
		case wComplete:
			later, err := s.writeComplete(r)
			r.done <- err
			// After the reply: unlinking the files of a large part takes
			// a while (about 0.3–0.7 s per GiB while the disk is busy),
			// and the completion, with the sinks' commits after it, need
			// not wait for it.
			s.removePartFiles(later)
			continue
		case wDelete:
			r.done <- s.deleteCheckpoints(r.ids, r.fault)
			continue
		}
		// Group commit: take the Puts that queued up meanwhile.
		batch, size := []*writeReq{r}, len(r.value)
	gather:
		for len(batch) < maxBatchItems && size < maxBatchBytes {
			select {
			case r2, ok := <-s.reqs:
				if !ok {
					break gather
				}
				if r2.op != wPut {
					next = r2
					break gather
				}
				batch = append(batch, r2)
				size += len(r2.value)
			default:
				break gather
			}
		}
		err := s.writePuts(batch)
		for _, r := range batch {
			r.done <- err
		}
	}
}

// ckptBucketForWrite returns the bucket of pending checkpoint p, creating
// it (with its info record) on the first write.
func ckptBucketForWrite(tx *bolt.Tx, p *pending) (*bolt.Bucket, error) {
	root := tx.Bucket(bktCheckpoints)
	cb := root.Bucket(ckptKey(p.id))
	if cb != nil {
		if cb.Get(keyMeta) != nil {
			return nil, fmt.Errorf("checkpoint %d is complete already", p.id)
		}
		return cb, nil
	}
	cb, err := root.CreateBucket(ckptKey(p.id))
	if err != nil {
		return nil, err
	}
	if err := cb.Put(keyInfo, p.info); err != nil {
		return nil, err
	}
	if _, err := cb.CreateBucket(bktParts); err != nil {
		return nil, err
	}
	return cb, nil
}

func (s *Store) writePuts(batch []*writeReq) error {
	return s.db.Update(func(tx *bolt.Tx) error {
		for _, r := range batch {
			cb, err := ckptBucketForWrite(tx, r.p)
			if err != nil {
				return err
			}
			if err := cb.Bucket(bktParts).Put([]byte(r.part), r.value); err != nil {
				return err
			}
		}
		for _, r := range batch {
			if err := s.faults.Commit(OpPut, r.id, r.part); err != nil {
				return err
			}
		}
		return nil
	})
}

// writeComplete writes the metadata of a completed checkpoint and applies
// retention; it returns the checkpoints whose part files are still to be
// removed (applyRetention's).
func (s *Store) writeComplete(r *writeReq) ([]int64, error) {
	if err := r.ctx.Err(); err != nil {
		return nil, err
	}
	err := s.db.Update(func(tx *bolt.Tx) error {
		cb, err := ckptBucketForWrite(tx, r.p)
		if err != nil {
			return err
		}
		pb := cb.Bucket(bktParts)
		var fb *bolt.Bucket
		if len(r.files) > 0 {
			if fb, err = cb.CreateBucketIfNotExists(bktFiles); err != nil {
				return err
			}
		}
		for _, pi := range r.parts {
			if file, ok := r.files[pi.Name]; ok {
				if err := fb.Put([]byte(pi.Name), fileRef(pi.Size, file)); err != nil {
					return err
				}
				continue
			}
			if v := pb.Get([]byte(pi.Name)); v == nil || int64(len(v)-partTrailer) != pi.Size {
				return fmt.Errorf("%w: part %q is not stored as written", ErrCorrupt, pi.Name)
			}
		}
		n := len(r.files)
		c := pb.Cursor()
		for k, _ := c.First(); k != nil; k, _ = c.Next() {
			n++
		}
		if n != len(r.parts) {
			return fmt.Errorf("%w: %d parts stored, %d written", ErrCorrupt, n, len(r.parts))
		}
		// The bases are pinned, so this holds unless something else
		// deleted them: never reference a base that is gone.
		metas := newChainMetas(tx)
		for _, pi := range r.parts {
			if pi.Base == 0 {
				continue
			}
			base, err := metas.get(pi.Base)
			if err != nil {
				return fmt.Errorf("%w: part %q is a delta on checkpoint %d: %w", ErrDeltaBase, pi.Name, pi.Base, err)
			}
			if _, ok := base.find(pi.Name); !ok {
				return fmt.Errorf("%w: part %q is a delta on checkpoint %d, which has no such part", ErrDeltaBase, pi.Name, pi.Base)
			}
		}
		if err := cb.Put(keyMeta, r.value); err != nil {
			return err
		}
		return s.faults.Commit(OpComplete, r.id, "")
	})
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	delete(s.active, r.id)
	s.maxComplete = max(s.maxComplete, r.id)
	s.mu.Unlock()
	// From now on the metadata keeps the bases, as long as retention keeps
	// this checkpoint.
	r.p.releaseBases()
	return s.applyRetention(), nil
}

// deleteCheckpoints deletes checkpoints ids in one transaction, then their
// part files.
func (s *Store) deleteCheckpoints(ids []int64, op Op) error {
	err := s.deleteRecords(ids, op)
	if err == nil {
		s.removePartFiles(ids)
	}
	return err
}

// deleteRecords deletes checkpoints ids in one transaction, leaving their
// part files.
func (s *Store) deleteRecords(ids []int64, op Op) error {
	return s.db.Update(func(tx *bolt.Tx) error {
		root := tx.Bucket(bktCheckpoints)
		for _, id := range ids {
			cb := root.Bucket(ckptKey(id))
			if cb == nil {
				continue
			}
			if op == OpAbort && cb.Get(keyMeta) != nil {
				return fmt.Errorf("checkpoint %d is complete; not deleting it", id)
			}
			if err := root.DeleteBucket(ckptKey(id)); err != nil {
				return fmt.Errorf("delete checkpoint %d: %w", id, err)
			}
			if err := s.faults.Commit(op, id, ""); err != nil {
				return err
			}
		}
		return nil
	})
}

// applyRetention deletes the completed checkpoints past the newest Retain,
// and incomplete ones that no pending checkpoint of this store is writing
// (aborted, failed, leftovers of a crash), and the part files of
// checkpoints the store does not hold. It keeps pinned checkpoints (read by
// a Checkpoint or an export, or the base of a pending checkpoint's delta
// part) and, transitively, the bases of the delta parts of every
// checkpoint it keeps. It runs on the writer goroutine (or in Open, before
// it starts); failures are logged.
//
// The part files of the completed checkpoints it deletes are left to the
// caller, which removes them with removePartFiles (the writer after it
// replied to the completion): it returns those checkpoints. Their ids
// can never be written again (Begin refuses ids up to the newest
// completed one), so removing their directories later cannot hit a new
// checkpoint's files; the directories of the others go at once.
func (s *Store) applyRetention() (later []int64) {
	s.pinMu.Lock()
	defer s.pinMu.Unlock()
	// The directories first: one created after this listing belongs to a
	// checkpoint that is active below.
	dirs, dirErr := s.partFileDirs()
	s.mu.Lock()
	active := maps.Clone(s.active)
	s.mu.Unlock()
	var victims, orphans, bases []int64
	err := s.db.View(func(tx *bolt.Tx) error {
		root := tx.Bucket(bktCheckpoints)
		for _, id := range dirs {
			if root.Bucket(ckptKey(id)) == nil && active[id] == nil && s.pins[id] == 0 {
				orphans = append(orphans, id)
			}
		}
		var ids, todo []int64 // every checkpoint, newest first; kept ones whose bases are not looked at yet
		keep := map[int64]bool{}
		c := root.Cursor()
		kept := 0
		for k, v := c.Last(); k != nil; k, v = c.Prev() {
			id, ok := ckptID(k)
			if !ok || v != nil {
				continue
			}
			ids = append(ids, id)
			switch {
			case root.Bucket(k).Get(keyMeta) != nil:
				if kept++; kept <= s.retain {
					keep[id] = true
					todo = append(todo, id)
				}
			case active[id] != nil:
				keep[id] = true
			}
		}
		for id := range s.pins {
			if !keep[id] {
				keep[id] = true
				todo = append(todo, id)
			}
		}
		for len(todo) > 0 {
			id := todo[len(todo)-1]
			todo = todo[:len(todo)-1]
			cb := root.Bucket(ckptKey(id))
			if cb == nil || cb.Get(keyMeta) == nil {
				continue
			}
			refs, err := readBases(cb)
			if err != nil {
				// Unreadable metadata: no read can use this checkpoint
				// (Latest falls back past it), nor so its bases.
				continue
			}
			for _, base := range refs {
				if !keep[base] {
					keep[base] = true
					todo = append(todo, base)
					bases = append(bases, base)
				}
			}
		}
		for _, id := range ids {
			if !keep[id] {
				victims = append(victims, id)
			}
		}
		return nil
	})
	if err == nil && len(orphans) > 0 {
		s.removePartFiles(orphans)
		s.log.Debug("part files of no checkpoint removed", "store", s.path, "checkpoints", orphans)
	}
	if err == nil && dirErr != nil {
		s.log.Warn("could not list the checkpoints' part files; retrying after the next checkpoint", "store", s.path, "error", dirErr.Error())
	}
	if err == nil && len(victims) > 0 {
		err = s.deleteRecords(victims, OpRetain)
	}
	if err != nil {
		s.log.Warn("checkpoint retention failed; retrying after the next checkpoint",
			"store", s.path, "checkpoints", victims, "error", err.Error())
		return nil
	}
	s.mu.Lock()
	newest := s.maxComplete
	s.mu.Unlock()
	var now []int64
	for _, id := range victims {
		if id <= newest {
			later = append(later, id)
		} else {
			now = append(now, id)
		}
	}
	s.removePartFiles(now)
	if len(victims) > 0 {
		slices.Sort(bases)
		s.log.Debug("checkpoints deleted by retention", "store", s.path, "checkpoints", victims, "retain", s.retain, "kept_as_bases", bases)
	}
	return later
}

// The owner file names the process holding the store, for the error that
// a second one gets. It is informational: the lock is bbolt's flock.

func writeOwner(path string) {
	host, _ := os.Hostname()
	line := "pid " + strconv.Itoa(os.Getpid()) + " on " + host + " since " + time.Now().Format(time.RFC3339) + "\n"
	_ = os.WriteFile(path, []byte(line), 0o644)
}

func readOwner(path string) string {
	b, err := os.ReadFile(path)
	if err != nil || len(b) == 0 {
		return "pid unknown"
	}
	return strings.TrimSpace(string(b))
}

func removeOwner(path string) {
	b, err := os.ReadFile(path)
	if err == nil && strings.HasPrefix(string(b), "pid "+strconv.Itoa(os.Getpid())+" ") {
		_ = os.Remove(path)
	}
}
