package statestore

import (
	"bytes"
	"fmt"
	"io"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
)

// Memory is the heap state backend: state lives in Go maps, snapshots are
// copy-on-write (see Backend.Snapshot). It is what `state.backend: memory`
// selects; its snapshots are written to bbolt by the checkpoint storage.
type Memory struct {
	kg         KeyGroupFunc
	clock      func() int64
	start, end int

	gen    uint64 // bumped by Snapshot; see table.go
	err    error  // sticky
	closed bool

	// live counts the snapshots not released yet by the generation they
	// froze; shared is one more than the highest of those (0: none): groups
	// and entries of a lower generation may be read by a live snapshot, and
	// a write copies them first. Snapshots are released on the goroutine
	// that encodes them, while the task writes.
	liveMu sync.Mutex
	live   map[uint64]int
	shared atomic.Uint64
	// written[gi] is shared's value when the snapshot it stands for, the
	// only live one, has encoded key group index gi and let go of it
	// (WriteAndRelease): while shared keeps that value, no snapshot holds
	// the group, and its writes need no copy.
	written []atomic.Uint64

	states   map[string]registered
	pending  map[string]*pendingState
	timers   map[string]*TimerService
	restored map[int]bool
	// noTimerCache: the timer services keep no cache of encoded timers
	// (tests compare with it).
	noTimerCache bool

	// Incremental snapshots (memory_delta.go).
	incremental bool
	layout      uint64 // bumped when states change otherwise than by writes
	chain       deltaChain
	lostChanges bool // the deletion log overflowed and was dropped: the next checkpoint snapshot is full
}

// registered is a registered state: its table and the handle Register* returned.
type registered struct {
	tbl    memTable
	handle any
}

// memTable is a table of any Go type, as the backend sees it.
type memTable interface {
	State
	freeze() frozenState
	freezeDelta(full frozenState, since uint64) frozenState
	pruneDeletions(gen uint64)
	prepareRestore(gi int, entries []wireEntry, now int64) (func(), error)
	cleanup(now int64) int
}

// pendingState holds the restored entries of a state not registered yet, as
// raw CBOR, by key group index; they are decoded when it is registered and
// written as they are into snapshots taken before.
type pendingState struct {
	name   string
	kind   Kind
	groups [][]wireEntry
}

var _ Backend = (*Memory)(nil)

// NewMemory returns an empty memory backend.
func NewMemory(opts Options) (*Memory, error) {
	if err := opts.validate(); err != nil {
		return nil, err
	}
	return &Memory{
		kg:       opts.KeyGroup,
		clock:    opts.Clock,
		start:    opts.KeyGroups[0],
		end:      opts.KeyGroups[1],
		states:   map[string]registered{},
		pending:  map[string]*pendingState{},
		timers:   map[string]*TimerService{},
		restored: map[int]bool{},
		written:  make([]atomic.Uint64, opts.KeyGroups[1]-opts.KeyGroups[0]),

		incremental: opts.Incremental,
		chain:       deltaChain{unbounded: opts.Changelog},
	}, nil
}

func (m *Memory) sealed() {}

// index returns key's key group minus start, or -1 (recording the failure)
// when the key belongs to another subtask.
func (m *Memory) index(key string) int {
	g := m.kg(key)
	i := g - m.start
	if uint(i) >= uint(m.end-m.start) {
		m.fail(fmt.Errorf("%w: key %q is in key group %d, the backend holds [%d, %d)", ErrKeyGroupRange, key, g, m.start, m.end))
		return -1
	}
	return i
}

func (m *Memory) fail(err error) {
	if m.err == nil {
		m.err = err
	}
}

// KeyGroupRange implements Backend.
func (m *Memory) KeyGroupRange() (start, end int) { return m.start, m.end }

// Err implements Backend.
func (m *Memory) Err() error { return m.err }

// State implements Backend.
func (m *Memory) State(name string) (State, error) {
	r, ok := m.states[name]
	if !ok {
		return nil, fmt.Errorf("%w: %q", ErrUnknownState, name)
	}
	return r.tbl, nil
}

// StateNames implements Backend.
func (m *Memory) StateNames() []string {
	names := make([]string, 0, len(m.states))
	for n := range m.states {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// TimerService implements Backend.
func (m *Memory) TimerService(name string) *TimerService {
	s := m.timers[name]
	if s == nil {
		s = newTimerService(name, m)
		m.timers[name] = s
	}
	return s
}

// Clear implements Backend.
func (m *Memory) Clear(key, ns string) {
	for _, r := range m.states {
		r.tbl.Clear(key, ns)
	}
	if len(m.pending) == 0 {
		return
	}
	gi := m.index(key)
	if gi < 0 {
		return
	}
	match := func(e wireEntry) bool { return e.Key == key && e.NS == ns }
	for _, p := range m.pending {
		if slices.ContainsFunc(p.groups[gi], match) {
			// Copy, not filter in place: a snapshot may hold the slice.
			p.groups[gi] = slices.DeleteFunc(slices.Clone(p.groups[gi]), match)
		}
	}
}

// Cleanup implements Backend.
func (m *Memory) Cleanup() (int, error) {
	if m.closed {
		return 0, ErrClosed
	}
	now := m.clock()
	n := 0
	for _, r := range m.states {
		n += r.tbl.cleanup(now)
	}
	return n, nil
}

// Close implements Backend.
func (m *Memory) Close() error {
	m.closed = true
	return nil
}

// register implements the Register* functions for the memory backend.
func register[S, H any](m *Memory, spec stateSpec, fn tableFuncs[S], wrap func(*table[S]) H) (H, error) {
	var zero H
	if m.closed {
		return zero, ErrClosed
	}
	if r, ok := m.states[spec.name]; ok {
		if r.tbl.Kind() != spec.kind {
			return zero, fmt.Errorf("%w: state %q is registered as %s, not %s", ErrIncompatibleState, spec.name, r.tbl.Kind(), spec.kind)
		}
		h, ok := r.handle.(H)
		if !ok {
			return zero, fmt.Errorf("%w: state %q is registered as %T, not %T", ErrIncompatibleState, spec.name, r.handle, zero)
		}
		return h, nil
	}
	t := newTable(m, spec, fn)
	if p := m.pending[spec.name]; p != nil {
		if p.kind != spec.kind {
			return zero, fmt.Errorf("%w: state %q was restored as %s, not %s", ErrIncompatibleState, spec.name, p.kind, spec.kind)
		}
		now := m.clock()
		apply := make([]func(), len(p.groups))
		if err := forEachParallel(len(p.groups), func(gi int) (err error) {
			if len(p.groups[gi]) > 0 {
				apply[gi], err = t.prepareRestore(gi, p.groups[gi], now)
			}
			return err
		}); err != nil {
			return zero, fmt.Errorf("register state %q: %w", spec.name, err)
		}
		for _, f := range apply {
			if f != nil {
				f()
			}
		}
		delete(m.pending, spec.name)
	}
	h := wrap(t)
	m.states[spec.name] = registered{tbl: t, handle: h}
	m.layout++
	return h, nil
}

// Snapshot implements Backend. It copies, per state, the slice of key-group
// pointers and, per timer service, the slice of its record chunks (copied
// on write, timers.go); then it bumps the generation,
// which freezes every group and entry the snapshot references (table.go).
func (m *Memory) Snapshot() (Snapshot, error) { return m.snapshot(nil) }

// snapshot implements Snapshot: a checkpoint's when rec is not nil, a delta
// on rec.base when that is not nil.
func (m *Memory) snapshot(rec *snapRecord) (*memSnapshot, error) {
	if m.closed {
		return nil, ErrClosed
	}
	if m.err != nil {
		return nil, m.err
	}
	s := &memSnapshot{start: m.start, end: m.end, now: m.clock(), m: m, gen: m.gen, rec: rec}
	delta := rec != nil && rec.base != nil
	var deltas []frozenState
	for _, r := range m.states {
		f := r.tbl.freeze()
		s.states = append(s.states, f)
		if delta {
			deltas = append(deltas, r.tbl.freezeDelta(f, rec.base.seq))
		}
	}
	for _, p := range m.pending {
		s.states = append(s.states, &frozenPending{name_: p.name, kind_: p.kind, groups: slices.Clone(p.groups)})
	}
	byName := func(a, b frozenState) int { return cmpString(a.name(), b.name()) }
	slices.SortFunc(s.states, byName)
	if delta {
		slices.SortFunc(deltas, byName)
		s.full, s.states, s.delta = s.states, deltas, true
	}
	for _, t := range m.timers {
		if f := t.freeze(); f.n > 0 {
			s.timers = append(s.timers, f)
		}
	}
	slices.SortFunc(s.timers, func(a, b frozenTimers) int { return cmpString(a.name, b.name) })
	m.liveMu.Lock()
	if m.live == nil {
		m.live = map[uint64]int{}
	}
	m.live[m.gen]++
	m.shared.Store(max(m.shared.Load(), m.gen+1))
	m.liveMu.Unlock()
	m.gen++
	return s, nil
}

// released forgets a snapshot of generation gen: once no live snapshot
// shares a generation, writes change its groups and entries in place
// (Flink's CopyOnWriteStateMap does the same with its highest required
// snapshot version). The snapshot's reads happen before, on this
// goroutine; the task sees them done through shared.
func (m *Memory) released(gen uint64) {
	m.liveMu.Lock()
	defer m.liveMu.Unlock()
	if m.live[gen]--; m.live[gen] == 0 {
		delete(m.live, gen)
	}
	var shared uint64
	for g := range m.live {
		shared = max(shared, g+1)
	}
	m.shared.Store(shared)
}

// groupWritten is called by the snapshot of generation gen, on the
// goroutine that encodes it, once it has encoded key group index gi and
// let go of it. When it is the only live snapshot, writes to the group stop
// copying (written); a snapshot taken after changes shared, and with it
// the group is copied on write again.
func (m *Memory) groupWritten(gen uint64, gi int) {
	m.liveMu.Lock()
	defer m.liveMu.Unlock()
	if len(m.live) == 1 && m.live[gen] == 1 {
		m.written[gi].Store(gen + 1)
	}
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// Restore implements Backend.
func (m *Memory) Restore(blobs ...[]byte) error {
	if m.closed {
		return ErrClosed
	}
	if m.err != nil {
		return m.err
	}
	now := m.clock()
	var (
		apply        []func()
		pendingKinds = map[string]Kind{}
		groups       = map[int]bool{}
	)
	decoded, err := decodeBlobs(blobs, m.start, m.end, m.kg)
	if err != nil {
		return err
	}
	for bi, d := range decoded {
		kg, p := d.kg, d.p
		if m.restored[kg] || groups[kg] {
			return fmt.Errorf("restore blob %d: %w: key group %d", bi, ErrDuplicateKeyGroup, kg)
		}
		groups[kg] = true
		gi := kg - m.start
		for _, ws := range p.States {
			if r, ok := m.states[ws.Name]; ok {
				if r.tbl.Kind() != ws.Kind {
					return fmt.Errorf("restore key group %d: %w: state %q is registered as %s, the snapshot has %s", kg, ErrIncompatibleState, ws.Name, r.tbl.Kind(), ws.Kind)
				}
				f, err := r.tbl.prepareRestore(gi, ws.Entries, now)
				if err != nil {
					return fmt.Errorf("restore key group %d: %w", kg, err)
				}
				apply = append(apply, f)
				continue
			}
			kind, ok := pendingKinds[ws.Name]
			if !ok {
				kind = ws.Kind
				if old := m.pending[ws.Name]; old != nil {
					kind = old.kind
				}
				pendingKinds[ws.Name] = kind
			}
			if kind != ws.Kind {
				return fmt.Errorf("restore key group %d: %w: state %q is %s in one key group and %s in another", kg, ErrCorrupt, ws.Name, kind, ws.Kind)
			}
			apply = append(apply, stagePending(m, ws.Name, ws.Kind, gi, ws.Entries))
		}
	}
	for _, f := range apply {
		f()
	}
	m.restoreTimers(decoded)
	for kg := range groups {
		m.restored[kg] = true
	}
	m.layout++
	return nil
}

// stagePending returns the func that adds the entries of an unregistered
// state to the pending ones.
func stagePending(m *Memory, name string, kind Kind, gi int, entries []wireEntry) func() {
	return func() {
		p := m.pending[name]
		if p == nil {
			p = &pendingState{name: name, kind: kind, groups: make([][]wireEntry, m.end-m.start)}
			m.pending[name] = p
		}
		// A new slice: a snapshot may hold the old one. The values point
		// into the restore's blobs (rawItem): copied, into one buffer.
		n := 0
		for _, e := range entries {
			n += len(e.Value)
		}
		buf := make([]byte, 0, n)
		staged := append(slices.Clip(p.groups[gi]), entries...)
		for i := len(staged) - len(entries); i < len(staged); i++ {
			start := len(buf)
			buf = append(buf, staged[i].Value...)
			staged[i].Value = buf[start:len(buf):len(buf)]
		}
		p.groups[gi] = staged
	}
}

// frozenState is a state as a snapshot saw it.
type frozenState interface {
	name() string
	kind() Kind
	// appendGroup appends the entries of key group index gi to dst and
	// returns it with their number.
	appendGroup(dst []byte, gi int, now int64, enc *encoder) ([]byte, int, error)
	// drop forgets key group index gi, whose blob is encoded, so that the
	// garbage collector may take back what only the snapshot kept of it
	// (WriteAndRelease). appendGroup must not be called for gi again.
	drop(gi int)
}

type frozenPending struct {
	name_  string
	kind_  Kind
	groups [][]wireEntry
}

func (f *frozenPending) name() string { return f.name_ }
func (f *frozenPending) kind() Kind   { return f.kind_ }

func (f *frozenPending) drop(gi int) { f.groups[gi] = nil }

func (f *frozenPending) appendGroup(dst []byte, gi int, _ int64, _ *encoder) ([]byte, int, error) {
	entries := f.groups[gi]
	if len(entries) == 0 {
		return dst, 0, nil
	}
	entries = slices.Clone(entries)
	slices.SortFunc(entries, func(a, b wireEntry) int {
		if c := cmpString(a.Key, b.Key); c != 0 {
			return c
		}
		return cmpString(a.NS, b.NS)
	})
	for _, e := range entries {
		dst = AppendCBORHead(dst, majorArray, 4)
		dst = appendText(dst, e.Key)
		dst = appendText(dst, e.NS)
		dst = AppendCBORInt(dst, e.TS)
		dst = append(dst, e.Value...)
	}
	return dst, len(entries), nil
}

// memSnapshot is the memory backend's Snapshot.
type memSnapshot struct {
	start, end int
	now        int64 // TTL reference: entries expired at capture are left out
	states     []frozenState
	timers     []frozenTimers
	delta      bool // its blobs are delta blobs (blobDelta)
	// full are the states of a full snapshot when states are a delta's
	// (Full swaps them in); rec is the checkpoint's record, nil for
	// Snapshot's.
	full []frozenState
	rec  *snapRecord
	// m took the snapshot at generation gen and is told of its Release;
	// nil for the bbolt backend's snapshots, which encode with this type.
	m        *Memory
	gen      uint64
	released atomic.Bool
}

// Base implements DeltaSnapshot.
func (s *memSnapshot) Base() int64 {
	if s.rec == nil || !s.delta {
		return 0
	}
	return s.rec.baseID
}

// Full implements DeltaSnapshot.
func (s *memSnapshot) Full() {
	if !s.delta || s.released.Load() {
		return
	}
	s.states, s.full, s.delta = s.full, nil, false
	s.rec.full.Store(true)
}

// wrote records the size of the snapshot's part in its checkpoint's record.
func (s *memSnapshot) wrote(n int64) {
	if s.rec != nil {
		s.rec.written.Store(n)
	}
}

func (s *memSnapshot) KeyGroupRange() (start, end int) { return s.start, s.end }

func (s *memSnapshot) Release() {
	if s.released.Swap(true) {
		return
	}
	s.states, s.timers, s.full = nil, nil, nil
	if s.m != nil {
		s.m.released(s.gen)
	}
}

// blobWriter appends the blobs of a memSnapshot, in key-group order.
type blobWriter struct {
	s   *memSnapshot
	enc encoder
	// timers[i] holds service i's timers sorted by (group, domain, ts, key,
	// ns); next[i] is the first one of a group not written yet.
	timers [][]frozenTimer
	next   []int
	// cached[i][gi]: service i's cached encoding of group index gi
	// (timerCache.lookup); nil without a cache.
	cached [][]cachedTimers
}

func (s *memSnapshot) blobWriter() *blobWriter {
	w := &blobWriter{s: s, timers: make([][]frozenTimer, len(s.timers)), next: make([]int, len(s.timers)),
		cached: make([][]cachedTimers, len(s.timers))}
	for i := range s.timers {
		f := &s.timers[i]
		if f.cache != nil {
			w.cached[i] = f.cache.lookup(f, s.end-s.start)
		}
		w.timers[i] = f.sorted(w.cached[i])
	}
	return w
}

// appendGroup appends the blob of key group index gi to dst; nothing when
// the group has neither state nor timers. The groups must come in order.
func (w *blobWriter) appendGroup(dst []byte, gi int) ([]byte, error) {
	s := w.s
	start := len(dst)
	dst = beginBlob(dst, s.start+gi)
	if s.delta {
		dst[start+5] = blobDelta
	}
	dst = AppendCBORHead(dst, majorMap, 2)
	dst = AppendCBORHead(dst, majorUint, 1)
	statesAt := len(dst)
	dst = append(dst, 0) // [* state]: the count is patched below
	nStates := 0
	for _, st := range s.states {
		mark := len(dst)
		dst = AppendCBORHead(dst, majorArray, 3)
		dst = appendText(dst, st.name())
		dst = AppendCBORHead(dst, majorUint, uint64(st.kind()))
		entriesAt := len(dst)
		dst = append(dst, 0, 0, 0) // [* entry]: room for a count < 65536
		var n int
		var err error
		dst, n, err = st.appendGroup(dst, gi, s.now, &w.enc)
		if err != nil {
			return dst[:start], fmt.Errorf("encode key group %d: %w", s.start+gi, err)
		}
		if n == 0 {
			dst = dst[:mark]
			continue
		}
		dst = patchHead(dst, entriesAt, 3, majorArray, uint64(n))
		nStates++
	}
	dst = patchHead(dst, statesAt, 1, majorArray, uint64(nStates))
	dst = AppendCBORHead(dst, majorUint, 2)
	timersAt := len(dst)
	dst = append(dst, 0) // [* timers]
	nTimers := 0
	for i := range s.timers {
		svc := &s.timers[i]
		if c := w.cached[i]; c != nil && c[gi].snap != 0 {
			if len(c[gi].b) > 0 {
				dst = append(dst, c[gi].b...)
				nTimers++
			}
			continue
		}
		all := w.timers[i]
		j := w.next[i]
		for j < len(all) && int(all[j].group) == gi {
			j++
		}
		ts := all[w.next[i]:j]
		w.next[i] = j
		if len(ts) == 0 {
			if svc.cache != nil {
				svc.cache.store(gi, svc.snap, nil)
			}
			continue
		}
		mark := len(dst)
		dst = AppendCBORHead(dst, majorArray, 2)
		dst = appendText(dst, svc.name)
		dst = AppendCBORHead(dst, majorArray, uint64(len(ts)))
		for _, t := range ts {
			dst = AppendCBORHead(dst, majorArray, 4)
			dst = AppendCBORHead(dst, majorUint, uint64(t.domain))
			dst = AppendCBORInt(dst, t.id.ts)
			dst = appendText(dst, t.id.key)
			dst = appendText(dst, t.id.ns)
		}
		nTimers++
		if svc.cache != nil {
			svc.cache.store(gi, svc.snap, bytes.Clone(dst[mark:]))
		}
	}
	if nStates == 0 && nTimers == 0 {
		return dst[:start], nil
	}
	dst = patchHead(dst, timersAt, 1, majorArray, uint64(nTimers))
	dst = endBlob(dst, start)
	return dst, nil
}

// The two ways to encode a snapshot are one loop, encode.

func (s *memSnapshot) WriteTo(w io.Writer) (int64, error) { return s.writeTo(w, false) }

func (s *memSnapshot) WriteAndRelease(w io.Writer) (int64, error) {
	defer s.Release()
	return s.writeTo(w, true)
}

// writeTo implements WriteTo, and with drop WriteAndRelease.
func (s *memSnapshot) writeTo(w io.Writer, drop bool) (int64, error) {
	var total int64
	err := s.encode(drop, func(_ int, blob []byte) error {
		n, err := w.Write(blob)
		total += int64(n)
		return err
	})
	if err == nil {
		s.wrote(total)
	}
	return total, err
}

// encode calls fn with the blob of every key group that holds state or
// timers, in key-group order. The blob is valid until fn returns: the next
// key group's is encoded into the same buffer. With drop (WriteAndRelease)
// each key group is dropped from the snapshot once its blob is encoded,
// and the timers once they are sorted.
func (s *memSnapshot) encode(drop bool, fn func(group int, blob []byte) error) error {
	if s.states == nil && s.timers == nil {
		return nil
	}
	bw := s.blobWriter()
	if drop {
		for i := range s.timers {
			s.timers[i].queues = [2]frozenQueue{} // bw.timers holds what the blobs need
		}
	}
	var buf []byte
	for gi := 0; gi < s.end-s.start; gi++ {
		var err error
		if buf, err = bw.appendGroup(buf[:0], gi); err != nil {
			return err
		}
		if drop {
			for _, st := range s.states {
				st.drop(gi)
			}
			if s.m != nil {
				s.m.groupWritten(s.gen, gi)
			}
		}
		if len(buf) == 0 {
			continue
		}
		if err := fn(s.start+gi, buf); err != nil {
			return err
		}
	}
	return nil
}
