package statestore

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"sync"
	"syscall"
	"time"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
)

// The bbolt backend keeps the live state in a bbolt file, one bucket per
// state, one record per (key, namespace) (bolt_table.go has the format),
// and the keys in use in a bounded write-back cache:
//
//   - A state access finds its key in the cache, or loads the key's records
//     (every namespace of the key, decoded on first use) into it.
//   - Writes change the cached entry and mark it dirty. When a load finds
//     the cache full, the dirty entries are encoded into a batch of record
//     writes (the namespaces written and deleted since the previous flush)
//     that another goroutine commits in one bbolt transaction, while the
//     task goes on; then about half of the entries are evicted, those not
//     used since the previous eviction first (CLOCK). An entry whose writes
//     are in the batch is evicted only after the commit (landFlush), so
//     that a load never reads the file before it.
//   - Snapshot writes the dirty entries, then opens a bbolt read
//     transaction: a consistent view of the file that the snapshot encodes
//     on another goroutine while the task keeps writing (bbolt's pages are
//     copy-on-write, so nothing is copied here).
//
// An access never evicts the entry of the key it works on, and iterations
// (Namespaces, MapState.Iterate) pin their entry, so that every pointer into
// the cache stays valid for as long as the memory backend's does.
//
// Timers stay on the heap, in the memory backend's TimerService: they are
// one per (key, window) rather than per value, fire in order from a heap
// that a file cannot serve cheaply, and the memory backend's snapshot copy
// (O(timers), a few bytes each) is already what this backend needs.

// DefaultCacheEntries is the cache bound of a bbolt backend when
// BoltOptions.CacheEntries is 0.
const DefaultCacheEntries = 10_000

// livePageSize is the page size of the live state file. bbolt's default,
// the OS page (4 KiB), holds only three values of 1 KiB: each flush then
// rewrites a page (and a write call) for about every value it writes, and
// the tree is deep. 16 KiB pages flush and restore faster; 64 KiB pages
// are slower with keys in random order, each value then rewriting 64 KiB
// (docs/state.md, "Live files").
const livePageSize = 16 << 10

// BoltFileName is the name of the live state file in BoltOptions.Dir.
const BoltFileName = "live.db"

// mmapReserve is the address space the live state file and the checkpoint
// store map at open: 32 GiB on 64-bit systems other than Windows (where
// bbolt would grow the file to the mapping's size). Mapping is not memory:
// only the file's pages in use are read, and the file grows as it is
// written. When a file outgrows its mapping, bbolt maps it again, which
//   - waits for every read transaction to end: a snapshot of the bbolt
//     backend is one, open while it is encoded (seconds for a GiB), and a
//     live file with the old pages pinned by it grows fast, so the task's
//     next flush stalled for the rest of the encoding (throughput fell to a
//     quarter for 2 s after each checkpoint with 1 GiB of state and a
//     1 GiB mapping);
//   - first copies every value of the committing transaction out of the old
//     mapping: in the checkpoint store, a second copy of each state part
//     written then, about 4 s of CPU per GiB.
var mmapReserve = func() int {
	if runtime.GOOS == "windows" || strconv.IntSize < 64 {
		return 0
	}
	size := int64(32 << 30)
	return int(size)
}()

// OpenMapped opens the bbolt file at path with opts, mapping mmapReserve up
// front. Where the address space is limited (RLIMIT_AS, `ulimit -v`) and
// that fails, it maps 1 GiB, and failing that what the file needs, as bbolt
// does by default: the file works the same, but a write that grows it past
// the mapping waits for the snapshots being encoded.
func OpenMapped(path string, opts *bolt.Options) (*bolt.DB, error) {
	var db *bolt.DB
	var err error
	for _, size := range []int{mmapReserve, min(mmapReserve, 1<<30), 0} {
		opts.InitialMmapSize = size
		db, err = bolt.Open(path, 0o600, opts)
		if !errors.Is(err, syscall.ENOMEM) || size == 0 {
			break
		}
	}
	return db, err
}

// BoltOptions configure a bbolt backend.
type BoltOptions struct {
	Options
	// Dir is the directory of the live state file (BoltFileName), created if
	// needed. The file is scratch: a file left there by an earlier run is
	// replaced (Restore fills the new one from a snapshot), and Close
	// removes the file and then the directory if it is empty. Empty: a new
	// temporary directory, removed by Close.
	Dir string
	// CacheEntries bounds the write-back cache: how many keys, summed over
	// the states, are kept decoded in memory. 0: DefaultCacheEntries.
	CacheEntries int
}

// Bolt is the bbolt state backend: the live state is in a bbolt file, the
// keys in use in a bounded write-back cache, and the timers on the heap. It
// is what `state.backend: bbolt` selects, for state larger than memory.
// It behaves as Memory does, and its snapshots are byte for byte those of a
// Memory holding the same state, so a savepoint of one restores into the
// other. Like Memory, it is used from the task goroutine only (the
// Backend contract); its snapshots encode on any goroutine.
//
// Differences: a state access may read or write the file (a cache miss, a
// flush), and a disk error is recorded as the backend's sticky error (Err);
// values go through CBOR when their key is evicted, so a value read back
// has the types a restore would give it (an `any` integer comes back as
// int64); Snapshot writes the dirty part of the cache before it returns.
// Close ends the backend's snapshots: one being encoded finishes first, a
// later WriteTo returns ErrClosed.
type Bolt struct {
	kg         KeyGroupFunc
	clock      func() int64
	start, end int

	dir, path string
	tempDir   bool // dir was created by NewBolt: Close removes it whole
	db        *bolt.DB
	rtx       *bolt.Tx // the read transaction of cache loads; see view

	limit  int // cache bound, in entries
	cached int // entries in the cache, all states

	err    error // sticky
	closed bool

	states  map[string]boltRegistered
	tables  []boltTableOps // the registered states, in registration order
	pending map[string]Kind
	// mem holds the timer services (and only them).
	mem      *Memory
	restored map[int]bool

	// The flush in flight (startFlush, landFlush): its record writes, their
	// keys and values in arena (bbolt holds the slices until the commit),
	// and the commit's result; flight is nil when none is in flight.
	arena  []byte
	ops    []boltOp
	flight chan error
	keyBuf []byte

	snapMu sync.Mutex
	snaps  map[*boltSnap]struct{} // open snapshots, closed by Close

	// Incremental snapshots (bolt_delta.go).
	incremental bool
	layout      uint64 // bumped when states change otherwise than by writes
	seq         uint64 // checkpoint snapshots taken
	changes     []changeSet
	chain       deltaChain
	lostChanges bool // changes since the last snapshot were not all recorded
}

type boltRegistered struct {
	tbl    boltTableOps
	handle any
}

// boltTableOps is a boltTable of any Go type, as the backend sees it.
type boltTableOps interface {
	State
	// encodeDirty appends the writes of the dirty entries to ops, their
	// keys and values encoded in arena; handedOff then marks the entries
	// clean and in flight, and landed evictable once the writes committed.
	encodeDirty(ops *[]boltOp, arena *[]byte) error
	handedOff()
	landed()
	// evict drops up to n clean, unpinned entries, those used since the
	// last sweep only when all is true (else it clears their use bit), and
	// returns how many it dropped.
	evict(n int, all bool) int
	// dropCache drops every unpinned entry (they must be clean).
	dropCache() int
	freeze(tx *bolt.Tx, start int) frozenState
	freezeDelta(tx *bolt.Tx, start int, changed [][]string) frozenState
	takeChanges() []string
	restoreGroup(tx *bolt.Tx, group int, entries []wireEntry, now int64) error
	cleanup(now int64) (int, error)
}

var (
	_ IncrementalBackend = (*Bolt)(nil)
	_ DeltaSnapshot      = (*boltSnapshot)(nil)
)

// NewBolt creates the live state file and returns an empty bbolt backend.
// The runtime calls it on the task goroutine when a stateful step opens.
func NewBolt(opts BoltOptions) (*Bolt, error) {
	if err := opts.validate(); err != nil {
		return nil, err
	}
	if opts.CacheEntries < 0 {
		return nil, fmt.Errorf("%w: CacheEntries %d is negative", ErrInvalidOptions, opts.CacheEntries)
	}
	if opts.CacheEntries == 0 {
		opts.CacheEntries = DefaultCacheEntries
	}
	mem, err := NewMemory(opts.Options)
	if err != nil {
		return nil, err
	}
	b := &Bolt{
		kg: opts.KeyGroup, clock: opts.Clock, start: opts.KeyGroups[0], end: opts.KeyGroups[1],
		dir: opts.Dir, limit: opts.CacheEntries,
		states: map[string]boltRegistered{}, pending: map[string]Kind{}, mem: mem,
		restored: map[int]bool{}, snaps: map[*boltSnap]struct{}{}, incremental: opts.Incremental,
		chain: deltaChain{unbounded: opts.Changelog},
	}
	if b.dir == "" {
		if b.dir, err = os.MkdirTemp("", "eddy-state-"); err != nil {
			return nil, fmt.Errorf("create live state directory: %w", err)
		}
		b.tempDir = true
	} else if err := os.MkdirAll(b.dir, 0o700); err != nil {
		return nil, fmt.Errorf("create live state directory: %w", err)
	}
	b.path = filepath.Join(b.dir, BoltFileName)
	if err := os.Remove(b.path); err != nil && !errors.Is(err, os.ErrNotExist) {
		_ = b.removeFiles()
		return nil, fmt.Errorf("remove the live state file of an earlier run: %w", err)
	}
	b.db, err = OpenMapped(b.path, &bolt.Options{
		// Another process holding the new file's lock is a second eddy
		// running the same pipeline: fail rather than wait.
		Timeout: time.Second,
		// The file is scratch: it is recreated at every start and restored
		// from the latest checkpoint, which is what makes state durable.
		// Syncing it would only slow every flush down, so nothing is synced
		// (data, file growth, freelist): a crash can leave it torn, and it
		// is never read again.
		NoSync:         true,
		NoGrowSync:     true,
		NoFreelistSync: true,
		FreelistType:   bolt.FreelistMapType,
		PageSize:       livePageSize,
	})
	if err != nil {
		_ = b.removeFiles()
		if errors.Is(err, berrors.ErrTimeout) {
			return nil, fmt.Errorf("open live state file %s: another process holds it: stop the other eddy running this pipeline, or give this one another state dir", b.path)
		}
		return nil, fmt.Errorf("open live state file %s: %w", b.path, err)
	}
	return b, nil
}

func (b *Bolt) sealed() {}

// removeFiles removes the live file and the directory (when NewBolt created
// it, or when it is empty).
func (b *Bolt) removeFiles() error {
	if b.tempDir {
		return os.RemoveAll(b.dir)
	}
	err := os.Remove(b.path)
	if errors.Is(err, os.ErrNotExist) {
		err = nil
	}
	_ = os.Remove(b.dir) // fails when something else is in it: keep it then
	return err
}

// index returns key's key group minus start, or -1 (recording the failure)
// when the key belongs to another subtask.
func (b *Bolt) index(key string) int {
	g := b.kg(key)
	i := g - b.start
	if uint(i) >= uint(b.end-b.start) {
		b.fail(fmt.Errorf("%w: key %q is in key group %d, the backend holds [%d, %d)", ErrKeyGroupRange, key, g, b.start, b.end))
		return -1
	}
	return i
}

func (b *Bolt) fail(err error) {
	if b.err == nil {
		b.err = err
	}
}

// KeyGroupRange implements Backend.
func (b *Bolt) KeyGroupRange() (start, end int) { return b.start, b.end }

// Err implements Backend. It includes the failures of the timer services.
func (b *Bolt) Err() error {
	if b.err != nil {
		return b.err
	}
	return b.mem.Err()
}

// State implements Backend.
func (b *Bolt) State(name string) (State, error) {
	r, ok := b.states[name]
	if !ok {
		return nil, fmt.Errorf("%w: %q", ErrUnknownState, name)
	}
	return r.tbl, nil
}

// StateNames implements Backend.
func (b *Bolt) StateNames() []string {
	names := slices.Collect(maps.Keys(b.states))
	sort.Strings(names)
	return names
}

// TimerService implements Backend. Timers live on the heap (see above).
func (b *Bolt) TimerService(name string) *TimerService { return b.mem.TimerService(name) }

// Clear implements Backend.
func (b *Bolt) Clear(key, ns string) {
	for _, t := range b.tables {
		t.Clear(key, ns)
	}
	if len(b.pending) == 0 {
		return
	}
	gi := b.index(key)
	if gi < 0 {
		return
	}
	if b.closed {
		b.fail(ErrClosed)
		return
	}
	k := append(appendKeyPrefix(nil, b.start+gi, key), ns...)
	err := b.update(func(tx *bolt.Tx) error {
		for name := range b.pending {
			if bkt := tx.Bucket([]byte(name)); bkt != nil {
				if err := bkt.Delete(k); err != nil {
					return fmt.Errorf("state %q, key %q: %w", name, key, err)
				}
			}
		}
		return nil
	})
	if err != nil {
		b.fail(fmt.Errorf("clear restored state in %s: %w", b.path, err))
	}
}

// Cleanup implements Backend. It reads every record of the states with a
// TTL, so call it rarely (after a checkpoint, on a slow timer).
func (b *Bolt) Cleanup() (int, error) {
	if b.closed {
		return 0, ErrClosed
	}
	now := b.clock()
	n := 0
	for _, t := range b.tables {
		c, err := t.cleanup(now)
		n += c
		if err != nil {
			err = fmt.Errorf("clean up state %q in %s: %w", t.Name(), b.path, err)
			b.fail(err)
			return n, err
		}
	}
	return n, nil
}

// boltOp is one record write of a flush: key put with val, or deleted.
type boltOp struct {
	bucket   []byte // the state's bucket
	name     string // the state key, for errors
	key, val []byte
	del      bool
}

// flush writes every dirty cache entry and waits for the commit.
func (b *Bolt) flush() error {
	if err := b.landFlush(); err != nil {
		return err
	}
	if err := b.startFlush(); err != nil {
		return err
	}
	return b.landFlush()
}

// startFlush encodes the writes of every dirty cache entry, on the task
// goroutine, and commits them in one transaction on a goroutine of its
// own, so that bbolt's B+tree updates and the commit (page allocation,
// writes) run beside the task. Nothing may be in flight (landFlush first).
func (b *Bolt) startFlush() error {
	if b.closed {
		return ErrClosed
	}
	arena, ops := b.arena[:0], b.ops[:0]
	for _, t := range b.tables {
		if err := t.encodeDirty(&ops, &arena); err != nil {
			return fmt.Errorf("write state cache to %s: %w", b.path, err)
		}
	}
	b.arena, b.ops = arena, ops
	for _, t := range b.tables {
		t.handedOff()
	}
	if len(ops) == 0 {
		for _, t := range b.tables {
			t.landed()
		}
		return nil
	}
	done := make(chan error, 1)
	b.flight = done
	go func() {
		done <- b.db.Update(func(tx *bolt.Tx) error { return applyOps(tx, ops) })
	}()
	return nil
}

// landFlush waits for the flush in flight, if any. Once it committed, its
// entries can be evicted, and the read transaction of loads ends: it may be
// older than the commit, and a load must see what an evicted entry wrote.
// The read transaction also ends before the wait: while it is open, a
// commit that grows the file past its mapping cannot remap it.
//
// After a failed commit the flush's entries stay in the cache for good (they
// hold values the file does not), and the caller records the error as the
// backend's failure, after which it takes no snapshot.
func (b *Bolt) landFlush() error {
	if b.flight == nil {
		return nil
	}
	b.endRead()
	err := <-b.flight
	b.flight = nil
	if err != nil {
		return fmt.Errorf("write state cache to %s: %w", b.path, err)
	}
	for _, t := range b.tables {
		t.landed()
	}
	return nil
}

// applyOps makes the writes of a flush in tx.
func applyOps(tx *bolt.Tx, ops []boltOp) error {
	var bkt *bolt.Bucket
	for i := range ops {
		op := &ops[i]
		if i == 0 || !bytes.Equal(op.bucket, ops[i-1].bucket) {
			if bkt = tx.Bucket(op.bucket); bkt == nil {
				return fmt.Errorf("state %q: %w: no bucket", op.bucket, errRecord)
			}
		}
		if op.del {
			if err := bkt.Delete(op.key); err != nil {
				return fmt.Errorf("delete key %q of state %q: %w", op.name, op.bucket, err)
			}
			continue
		}
		if err := bkt.Put(op.key, op.val); err != nil {
			return fmt.Errorf("write key %q of state %q: %w", op.name, op.bucket, err)
		}
	}
	return nil
}

// update runs fn in a write transaction, after the flush in flight and
// after ending the read transaction of view: a read transaction open on
// this goroutine would block a write that grows the file's mapping, and
// would keep the pages the write frees from being reused.
func (b *Bolt) update(fn func(*bolt.Tx) error) error {
	if err := b.landFlush(); err != nil {
		return err
	}
	b.endRead()
	return b.db.Update(fn)
}

// view runs fn in a read transaction that is begun on first use and kept
// until the next write (update), so that cache loads share it.
func (b *Bolt) view(fn func(*bolt.Tx) error) error {
	if b.rtx == nil {
		tx, err := b.db.Begin(false)
		if err != nil {
			return err
		}
		b.rtx = tx
	}
	return fn(b.rtx)
}

func (b *Bolt) endRead() {
	if b.rtx != nil {
		_ = b.rtx.Rollback()
		b.rtx = nil
	}
}

// makeRoom is called before a key is loaded into the cache. When the cache
// is full it waits for the flush in flight, starts one of the dirty entries,
// and evicts entries until it is half full: those of the flush that landed,
// and clean ones, not those of the flush it started. In steady state the
// cache then holds the entries in flight and those loaded since.
func (b *Bolt) makeRoom() {
	if b.cached < b.limit {
		return
	}
	err := b.landFlush()
	if err == nil {
		err = b.startFlush()
	}
	if err != nil {
		b.fail(err) // dirty entries cannot be dropped: the cache grows
		return
	}
	target := b.limit / 2
	for _, all := range []bool{false, true} {
		for _, t := range b.tables {
			if b.cached <= target {
				return
			}
			b.cached -= t.evict(b.cached-target, all)
		}
	}
}

// register implements the Register* functions for the bbolt backend.
func registerBolt[S, H any](b *Bolt, spec stateSpec, fn tableFuncs[S], wrap func(*boltTable[S]) H) (H, error) {
	var zero H
	if b.closed {
		return zero, ErrClosed
	}
	if r, ok := b.states[spec.name]; ok {
		if r.tbl.Kind() != spec.kind {
			return zero, fmt.Errorf("%w: state %q is registered as %s, not %s", ErrIncompatibleState, spec.name, r.tbl.Kind(), spec.kind)
		}
		h, ok := r.handle.(H)
		if !ok {
			return zero, fmt.Errorf("%w: state %q is registered as %T, not %T", ErrIncompatibleState, spec.name, r.handle, zero)
		}
		return h, nil
	}
	t := newBoltTable(b, spec, fn)
	kind, restored := b.pending[spec.name]
	if restored && kind != spec.kind {
		return zero, fmt.Errorf("%w: state %q was restored as %s, not %s", ErrIncompatibleState, spec.name, kind, spec.kind)
	}
	err := b.update(func(tx *bolt.Tx) error {
		bkt, err := tx.CreateBucketIfNotExists(t.bucket)
		if err != nil {
			return err
		}
		if restored {
			return t.adopt(bkt, b.clock())
		}
		return nil
	})
	if err != nil {
		return zero, fmt.Errorf("register state %q: %w", spec.name, err)
	}
	delete(b.pending, spec.name)
	b.layout++
	h := wrap(t)
	b.states[spec.name] = boltRegistered{tbl: t, handle: h}
	b.tables = append(b.tables, t)
	return h, nil
}

// Snapshot implements Backend. It writes the dirty cache entries, opens a
// read transaction that the snapshot encodes from, and captures the timers.
func (b *Bolt) Snapshot() (Snapshot, error) {
	if err := b.beginSnapshot(); err != nil {
		return nil, err
	}
	return b.snapshot(nil, nil)
}

// beginSnapshot checks that the backend can take a snapshot and writes the
// dirty cache entries.
func (b *Bolt) beginSnapshot() error {
	if b.closed {
		return ErrClosed
	}
	if err := b.Err(); err != nil {
		return err
	}
	if err := b.flush(); err != nil {
		b.fail(err)
		return err
	}
	return nil
}

// snapshot takes a snapshot of the flushed state: a checkpoint's when rec
// is not nil, a delta on rec.base when that is not nil, with since[i] the
// change sets of table i after the base.
func (b *Bolt) snapshot(rec *snapRecord, since [][][]string) (*boltSnapshot, error) {
	tx, err := b.db.Begin(false)
	if err != nil {
		err = fmt.Errorf("snapshot %s: %w", b.path, err)
		b.fail(err)
		return nil, err
	}
	ms := &memSnapshot{start: b.start, end: b.end, now: b.clock(), rec: rec}
	var full []frozenState
	for i, t := range b.tables {
		full = append(full, t.freeze(tx, b.start))
		if rec != nil && rec.base != nil {
			ms.states = append(ms.states, t.freezeDelta(tx, b.start, since[i]))
		}
	}
	for name, kind := range b.pending {
		full = append(full, &boltFrozenPending{name_: name, kind_: kind, tx: tx, start: b.start})
	}
	byName := func(a, b frozenState) int { return cmpString(a.name(), b.name()) }
	slices.SortFunc(full, byName)
	if rec != nil && rec.base != nil {
		slices.SortFunc(ms.states, byName)
		ms.delta, ms.full = true, full
	} else {
		ms.states = full
	}
	for _, t := range b.mem.timers {
		if f := t.freeze(); f.n > 0 {
			ms.timers = append(ms.timers, f)
		}
	}
	slices.SortFunc(ms.timers, func(a, b frozenTimers) int { return cmpString(a.name, b.name) })

	s := &boltSnap{b: b, tx: tx, snap: ms}
	b.snapMu.Lock()
	b.snaps[s] = struct{}{}
	b.snapMu.Unlock()
	out := &boltSnapshot{s: s}
	// A snapshot dropped without Release would pin the file's old pages
	// (and block its growth past the mapping) until Close.
	runtime.AddCleanup(out, func(s *boltSnap) { s.end(snapReleased) }, s)
	return out, nil
}

// Restore implements Backend. Everything is checked before the transaction
// that writes the state, and an error inside it (a value that does not
// decode into a registered state's type) rolls it back: a failed Restore
// changes nothing.
func (b *Bolt) Restore(blobs ...[]byte) error {
	if b.closed {
		return ErrClosed
	}
	if err := b.Err(); err != nil {
		return err
	}
	now := b.clock()
	decoded, err := decodeBlobs(blobs, b.start, b.end, b.kg)
	if err != nil {
		return err
	}
	var (
		pendingKinds = map[string]Kind{}
		groups       = map[int]bool{}
	)
	for bi, d := range decoded {
		kg := d.kg
		if b.restored[kg] || groups[kg] {
			return fmt.Errorf("restore blob %d: %w: key group %d", bi, ErrDuplicateKeyGroup, kg)
		}
		groups[kg] = true
		for _, ws := range d.p.States {
			if r, ok := b.states[ws.Name]; ok {
				if r.tbl.Kind() != ws.Kind {
					return fmt.Errorf("restore key group %d: %w: state %q is registered as %s, the snapshot has %s", kg, ErrIncompatibleState, ws.Name, r.tbl.Kind(), ws.Kind)
				}
				continue
			}
			kind, ok := pendingKinds[ws.Name]
			if !ok {
				kind = ws.Kind
				if old, ok := b.pending[ws.Name]; ok {
					kind = old
				}
				pendingKinds[ws.Name] = kind
			}
			if kind != ws.Kind {
				return fmt.Errorf("restore key group %d: %w: state %q is %s in one key group and %s in another", kg, ErrCorrupt, ws.Name, kind, ws.Kind)
			}
		}
	}
	// The records of the restored keys are merged with what the file holds:
	// write the cache first, and drop it after.
	if err := b.flush(); err != nil {
		b.fail(err)
		return err
	}
	err = b.update(func(tx *bolt.Tx) error {
		for _, g := range decoded {
			for _, ws := range g.p.States {
				if r, ok := b.states[ws.Name]; ok {
					if err := r.tbl.restoreGroup(tx, g.kg, ws.Entries, now); err != nil {
						return fmt.Errorf("restore key group %d: %w", g.kg, err)
					}
					continue
				}
				bkt, err := tx.CreateBucketIfNotExists([]byte(ws.Name))
				if err != nil {
					return err
				}
				bkt.FillPercent = restoreFill
				for _, e := range ws.Entries {
					k := append(appendKeyPrefix(nil, g.kg, e.Key), e.NS...)
					if err := bkt.Put(k, appendValue(nil, e.TS, e.Value)); err != nil {
						return fmt.Errorf("restore key group %d, state %q, key %q: %w", g.kg, ws.Name, e.Key, err)
					}
				}
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	// The cached entries of restored keys are stale. (An iteration pins its
	// entry: restoring while one runs is not supported.)
	for _, t := range b.tables {
		b.cached -= t.dropCache()
	}
	maps.Copy(b.pending, pendingKinds)
	b.layout++
	b.mem.restoreTimers(decoded)
	for kg := range groups {
		b.restored[kg] = true
	}
	return nil
}

// Close implements Backend: it ends the open snapshots, closes the file and
// removes it.
func (b *Bolt) Close() error {
	if b.closed {
		return nil
	}
	b.closed = true
	b.snapMu.Lock()
	snaps := slices.Collect(maps.Keys(b.snaps))
	b.snapMu.Unlock()
	for _, s := range snaps {
		s.end(snapClosed)
	}
	_ = b.landFlush() // the file is removed below: what it holds no longer matters
	for _, t := range b.tables {
		t.dropCache()
	}
	b.cached = 0
	b.endRead()
	err := b.db.Close()
	if err != nil {
		err = fmt.Errorf("close live state file %s: %w", b.path, err)
	}
	if rerr := b.removeFiles(); rerr != nil {
		err = errors.Join(err, fmt.Errorf("remove live state file: %w", rerr))
	}
	return err
}

// The states of a boltSnap.
const (
	snapOpen = iota
	snapReleased
	snapClosed
)

// boltSnap is the part of a snapshot that the backend tracks: the read
// transaction and the captured states. mu serialises encoding and ending.
type boltSnap struct {
	b     *Bolt
	mu    sync.Mutex
	state int
	tx    *bolt.Tx
	snap  *memSnapshot
}

// end rolls back the read transaction, once; any goroutine.
func (s *boltSnap) end(state int) {
	s.mu.Lock()
	if s.state == snapOpen {
		s.state = state
		_ = s.tx.Rollback()
		s.snap.Release()
	}
	s.mu.Unlock()
	s.b.snapMu.Lock()
	delete(s.b.snaps, s)
	s.b.snapMu.Unlock()
}

// boltSnapshot is the bbolt backend's Snapshot. It encodes with the memory
// backend's code (the same format, byte for byte) from states that read the
// snapshot's transaction.
type boltSnapshot struct{ s *boltSnap }

func (o *boltSnapshot) KeyGroupRange() (start, end int) { return o.s.snap.start, o.s.snap.end }

func (o *boltSnapshot) WriteTo(w io.Writer) (n int64, err error) {
	err = o.encode(func(m *memSnapshot) (err error) {
		n, err = m.WriteTo(w)
		return err
	})
	return n, err
}

// encode runs fn on the captured states while the snapshot is open: it
// does nothing once the snapshot is released, and fails once the backend
// is closed.
func (o *boltSnapshot) encode(fn func(*memSnapshot) error) error {
	s := o.s
	s.mu.Lock()
	defer s.mu.Unlock()
	switch s.state {
	case snapReleased:
		return nil
	case snapClosed:
		return fmt.Errorf("encode snapshot: %w", ErrClosed)
	}
	return fn(s.snap)
}

// Base implements DeltaSnapshot.
func (o *boltSnapshot) Base() int64 {
	s := o.s
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.snap.Base()
}

// Full implements DeltaSnapshot.
func (o *boltSnapshot) Full() {
	s := o.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.state == snapOpen {
		s.snap.Full()
	}
}

func (o *boltSnapshot) WriteAndRelease(w io.Writer) (int64, error) {
	defer o.Release()
	return o.WriteTo(w)
}

func (o *boltSnapshot) Release() { o.s.end(snapReleased) }
