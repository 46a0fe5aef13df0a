package statestore

import (
	"iter"
	"maps"
	"reflect"
	"slices"
	"strings"

	"github.com/eddy-stream/eddy/internal/prefetch"
)

// The memory backend keeps each state in a table: one group per key group,
// each a Go map from key to keyEntry, and each keyEntry a small slice of
// (namespace, value) slots, indexed by a map once a key has many namespaces.
// An access costs the KeyGroupFunc, one map lookup and a short scan, and
// allocates nothing once the slot exists.
//
// Copy-on-write: groups and entries carry the backend generation they were
// created or copied in. Snapshot increments the generation and keeps the
// groups it saw; from then on they, and every entry they hold, are frozen:
// a write first copies the group (a shallow copy of its map) and then the
// entry (its slots, values copied with the descriptor's Copy function), so
// the snapshot can be encoded on another goroutine while the task writes.
// Once the snapshot is released, what only it shared is written in place
// again, and so is a key group that it has written and let go of
// (WriteAndRelease) while no other snapshot lives. Reads never copy. The
// invariant: an object whose gen is below the backend's shared (that of a
// live snapshot, plus one) is never written, unless it is in a key group
// that no live snapshot holds any more.

// nsIndexThreshold is the number of namespaces of one key above which the
// entry gets a map from namespace to slot.
const nsIndexThreshold = 8

type slot[S any] struct {
	ns string
	ts int64 // last write (or read, with OnReadAndWrite) in ms; 0 without TTL
	v  S
}

type keyEntry[S any] struct {
	gen   uint64
	mod   uint64 // the generation of its last write (incremental snapshots)
	items []slot[S]
	idx   map[string]int32 // ns -> index in items, when len(items) > nsIndexThreshold
	// one backs items while the key has one namespace (most keyed state):
	// the entry and its slot are then one allocation, next to each other in
	// memory, which an access or a snapshot's encoding reaches with one
	// cache miss less. A second namespace moves items to an array of its own.
	one [1]slot[S]
}

// newKeyEntry returns an entry of generation gen without slots.
func newKeyEntry[S any](gen uint64) *keyEntry[S] {
	e := &keyEntry[S]{gen: gen}
	e.items = e.one[:0]
	return e
}

func (e *keyEntry[S]) find(ns string) int {
	if e.idx != nil {
		if i, ok := e.idx[ns]; ok {
			return int(i)
		}
		return -1
	}
	for i := range e.items {
		if e.items[i].ns == ns {
			return i
		}
	}
	return -1
}

func (e *keyEntry[S]) add(ns string) int {
	e.items = append(e.items, slot[S]{ns: ns})
	if len(e.items) == 2 {
		// The slots may just have moved out of e.one: it must not keep
		// the first slot's value alive.
		e.one[0] = slot[S]{}
	}
	i := len(e.items) - 1
	if e.idx != nil {
		e.idx[ns] = int32(i)
	} else if len(e.items) > nsIndexThreshold {
		e.idx = make(map[string]int32, len(e.items)*2)
		for j := range e.items {
			e.idx[e.items[j].ns] = int32(j)
		}
	}
	return i
}

func (e *keyEntry[S]) removeAt(i int) {
	last := len(e.items) - 1
	if e.idx != nil {
		delete(e.idx, e.items[i].ns)
	}
	if i != last {
		e.items[i] = e.items[last]
		if e.idx != nil {
			e.idx[e.items[i].ns] = int32(i)
		}
	}
	e.items[last] = slot[S]{}
	e.items = e.items[:last]
	if e.idx != nil && len(e.items) <= nsIndexThreshold/2 {
		e.idx = nil
	}
}

func (e *keyEntry[S]) clone(gen uint64, copyFn func(S) S) *keyEntry[S] {
	c := newKeyEntry[S](gen)
	c.items = append(c.items, e.items...)
	if copyFn != nil {
		for i := range c.items {
			c.items[i].v = copyFn(c.items[i].v)
		}
	}
	if e.idx != nil {
		c.idx = maps.Clone(e.idx)
	}
	return c
}

type group[S any] struct {
	gen uint64
	mod uint64 // the generation of the last write to one of its entries
	m   map[string]*keyEntry[S]
}

// tableFuncs are the per-kind hooks of a table.
type tableFuncs[S any] struct {
	// copy deep-copies a value when an entry shared with a snapshot is
	// copied; nil copies by assignment.
	copy func(S) S
	// restored fixes a restored value (map states: the TTL times of its
	// entries) and reports whether anything is left of it; nil keeps it.
	restored func(v S, now int64) (S, bool)
	// The rest is set for map states with a TTL, whose entries expire one by
	// one inside a slot.
	count  func(v S, now int64) (alive, expired int) // entries of the map
	purge  func(v S, now int64) int                  // deletes expired entries in place
	filter func(v S, now int64) S                    // a copy without expired entries
}

// table is the memory backend's storage of one state.
type table[S any] struct {
	m       *Memory
	spec    stateSpec
	slotTTL int64 // spec.ttl, except for map states whose TTL is per map entry
	fn      tableFuncs[S]
	groups  []*group[S] // indexed by key group - start; nil until written
	// dels logs the slots deleted since the base of the next incremental
	// snapshot, in generation order (memory_delta.go).
	dels []deletion
	// appendValue encodes a value into a snapshot (valueAppender).
	appendValue func(dst []byte, v *S, enc *encoder) ([]byte, error)
}

func newTable[S any](m *Memory, spec stateSpec, fn tableFuncs[S]) *table[S] {
	t := &table[S]{m: m, spec: spec, slotTTL: spec.ttl, fn: fn, groups: make([]*group[S], m.end-m.start), appendValue: valueAppender[S]()}
	if spec.kind == KindMap {
		t.slotTTL = 0
	}
	return t
}

func (t *table[S]) Name() string { return t.spec.name }
func (t *table[S]) Kind() Kind   { return t.spec.kind }

// expired reports whether slot p's TTL has run out at now.
func (t *table[S]) expired(p *slot[S], now int64) bool {
	return t.slotTTL > 0 && now-p.ts >= t.slotTTL
}

// alive reports whether slot p holds a readable value at now.
func (t *table[S]) alive(p *slot[S], now int64) bool {
	if t.expired(p, now) {
		return false
	}
	if t.fn.count != nil {
		a, _ := t.fn.count(p.v, now)
		return a > 0
	}
	return true
}

func (t *table[S]) hasTTL() bool { return t.spec.ttl > 0 }

// now reads the clock when the state has a TTL, and returns 0 otherwise.
func (t *table[S]) now() int64 {
	if t.spec.ttl > 0 {
		return t.m.clock()
	}
	return 0
}

// lookup returns the slot of (key, ns) for reading, or nil. Never write
// through it: it may belong to a snapshot.
func (t *table[S]) lookup(key, ns string) *slot[S] {
	gi := t.m.index(key)
	if gi < 0 {
		return nil
	}
	g := t.groups[gi]
	if g == nil {
		return nil
	}
	e := g.m[key]
	if e == nil {
		return nil
	}
	i := e.find(ns)
	if i < 0 {
		return nil
	}
	return &e.items[i]
}

// writable returns key's group and entry in group index gi, copied first if
// a snapshot shares them. With create it creates the entry; without, it
// returns nil when the key has none.
func (t *table[S]) writable(gi int, key string, create bool) (*group[S], *keyEntry[S]) {
	gen, shared := t.m.gen, t.m.shared.Load()
	if shared != 0 && t.m.written[gi].Load() == shared {
		shared = 0 // the only live snapshot has written this group
	}
	g := t.groups[gi]
	var e *keyEntry[S]
	if g != nil {
		e = g.m[key]
	}
	if e == nil && !create {
		return nil, nil
	}
	if g == nil {
		g = &group[S]{gen: gen, m: make(map[string]*keyEntry[S])}
		t.groups[gi] = g
	} else if g.gen < shared {
		g = &group[S]{gen: gen, m: maps.Clone(g.m)}
		t.groups[gi] = g
	}
	if e == nil {
		e = newKeyEntry[S](gen)
		g.m[key] = e
	} else if e.gen < shared {
		e = e.clone(gen, t.fn.copy)
		g.m[key] = e
	}
	g.mod, e.mod = gen, gen
	return g, e
}

// upsert returns the writable slot of (key, ns), creating it, and stamps its
// TTL time. fresh reports a slot that is new or whose TTL had run out (its
// value is then reset to the zero value). It returns nil for a key outside
// the backend's range (the failure is recorded).
func (t *table[S]) upsert(key, ns string) (p *slot[S], fresh bool) {
	gi := t.m.index(key)
	if gi < 0 {
		return nil, false
	}
	_, e := t.writable(gi, key, true)
	i := e.find(ns)
	if i < 0 {
		i = e.add(ns)
		fresh = true
	}
	p = &e.items[i]
	if t.slotTTL > 0 {
		now := t.m.clock()
		if !fresh && now-p.ts >= t.slotTTL {
			var zero S
			p.v = zero
			fresh = true
		}
		p.ts = now
	}
	return p, fresh
}

// writableSlot returns the writable slot of an existing (key, ns), or nil.
func (t *table[S]) writableSlot(key, ns string) *slot[S] {
	if t.lookup(key, ns) == nil {
		return nil
	}
	_, e := t.writable(t.m.index(key), key, false)
	return &e.items[e.find(ns)]
}

// remove deletes (key, ns); it copies nothing when there is nothing to delete.
func (t *table[S]) remove(key, ns string) {
	if t.lookup(key, ns) == nil {
		return
	}
	gi := t.m.index(key)
	g, e := t.writable(gi, key, false)
	e.removeAt(e.find(ns))
	t.deleted(gi, key, ns)
	if len(e.items) == 0 {
		delete(g.m, key)
	}
}

// Clear deletes the value of (key, ns).
func (t *table[S]) Clear(key, ns string) { t.remove(key, ns) }

// readSlot returns the readable slot of (key, ns) at a read access: nil when
// absent or expired (an expired slot is deleted), its TTL restarted with
// OnReadAndWrite. The returned slot is valid until the next write.
func (t *table[S]) readSlot(key, ns string) *slot[S] {
	p := t.lookup(key, ns)
	if p == nil || t.slotTTL == 0 {
		return p
	}
	now := t.m.clock()
	if now-p.ts >= t.slotTTL {
		t.remove(key, ns)
		return nil
	}
	if t.spec.updateOnRead {
		p = t.writableSlot(key, ns)
		p.ts = now
	}
	return p
}

// merge folds the unexpired values of sources into target with fold (have
// says whether acc holds target's value yet) and deletes the sources.
func (t *table[S]) merge(key, target string, sources []string, fold func(acc S, have bool, src S) S) {
	gi := t.m.index(key)
	if gi < 0 {
		return
	}
	g := t.groups[gi]
	if g == nil || g.m[key] == nil {
		return
	}
	found := false
	for _, src := range sources {
		if src != target && g.m[key].find(src) >= 0 {
			found = true
			break
		}
	}
	if !found {
		return
	}
	g, e := t.writable(gi, key, false)
	now := t.now()
	var acc S
	have := false
	if i := e.find(target); i >= 0 && t.alive(&e.items[i], now) {
		acc, have = e.items[i].v, true
	}
	merged := false
	for _, src := range sources {
		if src == target {
			continue
		}
		i := e.find(src)
		if i < 0 {
			continue
		}
		if t.alive(&e.items[i], now) {
			acc = fold(acc, have, e.items[i].v)
			have, merged = true, true
		}
		e.removeAt(i)
		t.deleted(gi, key, src)
	}
	if merged {
		i := e.find(target)
		if i < 0 {
			i = e.add(target)
		}
		e.items[i].v = acc
		e.items[i].ts = now
	}
	if len(e.items) == 0 {
		delete(g.m, key)
	}
}

// entryAlive reports whether e has a readable slot at now.
func (t *table[S]) entryAlive(e *keyEntry[S], now int64) bool {
	if t.slotTTL == 0 && t.fn.count == nil {
		return len(e.items) > 0
	}
	for i := range e.items {
		if t.alive(&e.items[i], now) {
			return true
		}
	}
	return false
}

// Namespaces yields the namespaces of key with a readable value.
func (t *table[S]) Namespaces(key string) iter.Seq[string] {
	return func(yield func(string) bool) {
		gi := t.m.index(key)
		if gi < 0 || t.groups[gi] == nil {
			return
		}
		e := t.groups[gi].m[key]
		if e == nil {
			return
		}
		now := t.now()
		// Backwards, so that the body may delete the namespace it gets: a
		// deletion moves the last slot, already visited, into its place.
		for i := len(e.items) - 1; i >= 0; i-- {
			if i >= len(e.items) {
				continue
			}
			p := &e.items[i]
			if !t.alive(p, now) {
				continue
			}
			if !yield(p.ns) {
				return
			}
		}
	}
}

// Keys yields the keys of key group group with a readable value.
func (t *table[S]) Keys(group int) iter.Seq[string] {
	return func(yield func(string) bool) {
		gi := group - t.m.start
		if gi < 0 || gi >= len(t.groups) || t.groups[gi] == nil {
			return
		}
		g := t.groups[gi]
		now := t.now()
		for k, e := range g.m {
			if cur := t.groups[gi]; cur != g {
				// The body wrote to this group and copied it: skip keys
				// it deleted since.
				if e = cur.m[k]; e == nil {
					continue
				}
			}
			if !t.entryAlive(e, now) {
				continue
			}
			if !yield(k) {
				return
			}
		}
	}
}

// cleanup deletes expired slots (and expired map entries) and returns how
// many it deleted.
func (t *table[S]) cleanup(now int64) int {
	if t.slotTTL == 0 && t.fn.purge == nil {
		return 0
	}
	n := 0
	var todo []string
	for gi, g := range t.groups {
		if g == nil {
			continue
		}
		todo = todo[:0]
		for k, e := range g.m {
			for i := range e.items {
				p := &e.items[i]
				if t.expired(p, now) {
					todo = append(todo, k)
					break
				}
				if t.fn.count != nil {
					if _, x := t.fn.count(p.v, now); x > 0 {
						todo = append(todo, k)
						break
					}
				}
			}
		}
		for _, k := range todo {
			g, e := t.writable(gi, k, false)
			for i := len(e.items) - 1; i >= 0; i-- {
				p := &e.items[i]
				if t.expired(p, now) {
					t.deleted(gi, k, p.ns)
					e.removeAt(i)
					n++
					continue
				}
				if t.fn.purge != nil {
					n += t.fn.purge(p.v, now)
					if a, _ := t.fn.count(p.v, now); a == 0 {
						t.deleted(gi, k, p.ns)
						e.removeAt(i)
					}
				}
			}
			if len(e.items) == 0 {
				delete(g.m, k)
			}
		}
	}
	return n
}

// restoredSlot is one decoded entry of a blob, staged before Restore applies it.
type restoredSlot[S any] struct {
	key, ns string
	ts      int64
	v       S
}

// prepareRestore decodes the entries of key group index gi; the returned
// func writes them.
func (t *table[S]) prepareRestore(gi int, entries []wireEntry, now int64) (func(), error) {
	staged := make([]restoredSlot[S], 0, len(entries))
	decode := valueDecoder[S]()
	for _, we := range entries {
		var v S
		if err := decode(we.Value, &v); err != nil {
			return nil, errIncompatibleValue(t.spec, we.Key, err)
		}
		ts := we.TS
		switch {
		case t.slotTTL == 0:
			ts = 0
		case ts == 0:
			ts = now // written without a TTL: its TTL starts now
		case now-ts >= t.slotTTL:
			continue // expired
		}
		if t.fn.restored != nil {
			var keep bool
			if v, keep = t.fn.restored(v, now); !keep {
				continue
			}
		}
		staged = append(staged, restoredSlot[S]{key: we.Key, ns: we.NS, ts: ts, v: v})
	}
	return func() {
		for _, r := range staged {
			_, e := t.writable(gi, r.key, true)
			i := e.find(r.ns)
			if i < 0 {
				i = e.add(r.ns)
			}
			e.items[i].ts, e.items[i].v = r.ts, r.v
		}
	}, nil
}

// freeze captures the table for a snapshot; the backend's generation moves
// on right after, which freezes every group captured here.
func (t *table[S]) freeze() frozenState {
	return &frozenTable[S]{spec: t.spec, slotTTL: t.slotTTL, fn: t.fn, appendValue: t.appendValue, groups: slices.Clone(t.groups)}
}

// frozenTable is a table as a snapshot saw it; it is only read, by the
// goroutine that encodes the snapshot.
type frozenTable[S any] struct {
	spec        stateSpec
	slotTTL     int64
	fn          tableFuncs[S]
	appendValue func(dst []byte, v *S, enc *encoder) ([]byte, error)
	groups      []*group[S]
	byKey       []keyedEntry[S] // scratch of appendGroup
}

// keyedEntry is an entry of a frozen group with its key, as the encoder
// sorts and walks them.
type keyedEntry[S any] struct {
	key string
	e   *keyEntry[S]
}

func (f *frozenTable[S]) name() string { return f.spec.name }
func (f *frozenTable[S]) kind() Kind   { return f.spec.kind }

// drop forgets group index gi.
func (f *frozenTable[S]) drop(gi int) { f.groups[gi] = nil }

// appendGroup appends the unexpired entries of group index gi, sorted by
// key and namespace, to dst and returns it with their number.
func (f *frozenTable[S]) appendGroup(dst []byte, gi int, now int64, enc *encoder) ([]byte, int, error) {
	g := f.groups[gi]
	if g == nil || len(g.m) == 0 {
		return dst, 0, nil
	}
	return f.appendEntries(dst, g, nil, now, enc)
}

// groupDelta selects what a delta blob holds of a group: the entries
// written after generation since, and the tombstones tombs (sorted by key
// and namespace; slots the group does not hold).
type groupDelta struct {
	since uint64
	tombs []deletion
}

// appendEntries appends the unexpired entries of group g, sorted by key and
// namespace, to dst and returns it with their number; with d, a delta's:
// only the slots of the entries written since d.since, a tombstone for
// each that expired, and d.tombs among them.
func (f *frozenTable[S]) appendEntries(dst []byte, g *group[S], d *groupDelta, now int64, enc *encoder) ([]byte, int, error) {
	// The entries with their keys, so that each is looked up once.
	byKey := f.byKey[:0]
	for k, e := range g.m {
		if d == nil || e.mod > d.since {
			prefetch.String(k) // the sort reads it next
			byKey = append(byKey, keyedEntry[S]{key: k, e: e})
		}
	}
	slices.SortFunc(byKey, func(a, b keyedEntry[S]) int { return strings.Compare(a.key, b.key) })
	f.byKey = byKey
	// The scratch must not keep the group's entries alive once it is
	// encoded (drop, WriteAndRelease).
	defer clear(byKey)
	var tombs []deletion
	if d != nil {
		tombs = d.tombs
	}
	n, t := 0, 0
	stages := prefetchStages[S]()
	for j := range byKey {
		if prefetch.Enabled && j%prefetchBatch == 0 {
			prefetchAhead(byKey, j, stages)
		}
		k, e := byKey[j].key, byKey[j].e
		order := enc.order[:0]
		for i := range e.items {
			order = append(order, int32(i))
		}
		if len(order) > 1 {
			slices.SortFunc(order, func(a, b int32) int { return strings.Compare(e.items[a].ns, e.items[b].ns) })
		}
		enc.order = order
		for _, i := range order {
			p := &e.items[i]
			if t < len(tombs) {
				dst, t = appendTombstones(dst, tombs, t, k, p.ns)
			}
			var ok bool
			var err error
			if dst, ok, err = f.appendSlot(dst, k, p, now, enc); err != nil {
				return dst, 0, err
			}
			if ok {
				n++
			} else if d != nil {
				dst = appendTombstone(dst, k, p.ns) // the base may hold it
				n++
			}
		}
	}
	for _, tomb := range tombs[t:] {
		dst = appendTombstone(dst, tomb.key, tomb.ns)
	}
	return dst, n + len(tombs), nil
}

// A snapshot's encoder walks a key group's entries in key order, and each
// entry's memory is a chain of pointers somewhere in the heap: the entry,
// the value's object, and what the value's encoding reads behind it. Were
// each link loaded when the encoding reaches it, every one would wait for
// its cache miss; instead the encoder asks for them (package prefetch) a
// few batches of entries ahead, one link per batch, so that their misses
// are under way together while earlier entries are encoded.

// prefetchBatch is the number of entries the encoder asks the memory of at
// a time (prefetchAhead).
const prefetchBatch = 16

// valuePrefetch is how many bytes of a pointer value's object the encoder
// asks for: six cache lines, a window's accumulator box with its row and
// four aggregates (agg.NewAccsWith).
const valuePrefetch = 384

// HeldPrefetcher is an optional method of a pointer state value whose
// snapshot encoding reads memory that its object only points to (an
// aggregate's row holds the strings of last(payload) and the like). The
// encoder asks for the value's object a batch of entries before it calls
// PrefetchHeld(0), and calls PrefetchHeld(1) a batch after that: level 0
// may read the value's object and asks (package prefetch) for the memory
// its pointers point to, level 1 may read that memory and asks for what it
// points to in turn. PrefetchHeld must not write, nor fail on a nil value;
// it runs where AppendCBOR does.
type HeldPrefetcher interface {
	PrefetchHeld(level int)
}

// prefetchAhead asks for the memory that appendEntries reads in the
// batches after es[j], at stage s for the batch that many batches ahead,
// the farthest first: the entries, then, for a pointer type S, the values'
// objects, then, for a HeldPrefetcher, levels 0 and 1 of the value. At
// j == 0 it asks for every stage of the first batches at once.
func prefetchAhead[S any](es []keyedEntry[S], j, stages int) {
	for s := range stages {
		lo, hi := j+(stages-s)*prefetchBatch, min(j+(stages-s+1)*prefetchBatch, len(es))
		if j == 0 {
			lo = 0
		}
		for i := lo; i < hi; i++ {
			e := es[i].e
			switch s {
			case 0:
				prefetch.Object(e)
				continue
			case 1:
				for k := range e.items {
					prefetch.Pointee(any(e.items[k].v), valuePrefetch)
				}
			default:
				for k := range e.items {
					any(e.items[k].v).(HeldPrefetcher).PrefetchHeld(s - 2)
				}
			}
		}
	}
}

// prefetchStages returns the number of stages of prefetchAhead for values
// of type S.
func prefetchStages[S any]() int {
	switch {
	case reflect.TypeFor[S]().Kind() != reflect.Pointer:
		return 1 // the entries only
	case !reflect.TypeFor[S]().Implements(reflect.TypeFor[HeldPrefetcher]()):
		return 2
	}
	return 4
}

// appendTombstones appends the tombstones of tombs[next:] that come before
// (key, ns) and returns the index of the first one left.
func appendTombstones(dst []byte, tombs []deletion, next int, key, ns string) ([]byte, int) {
	for ; next < len(tombs); next++ {
		t := &tombs[next]
		if t.key > key || (t.key == key && t.ns > ns) {
			break
		}
		dst = appendTombstone(dst, t.key, t.ns)
	}
	return dst, next
}

// appendSlot appends the entry of slot p of key k, unless it is expired at
// now, and reports whether it did.
func (f *frozenTable[S]) appendSlot(dst []byte, k string, p *slot[S], now int64, enc *encoder) ([]byte, bool, error) {
	if f.slotTTL > 0 && now-p.ts >= f.slotTTL {
		return dst, false, nil
	}
	v := &p.v
	if f.fn.count != nil {
		alive, expired := f.fn.count(p.v, now)
		if alive == 0 {
			return dst, false, nil
		}
		if expired > 0 {
			filtered := f.fn.filter(p.v, now)
			v = &filtered
		}
	}
	dst = AppendCBORHead(dst, majorArray, 4)
	dst = appendText(dst, k)
	dst = appendText(dst, p.ns)
	dst = AppendCBORInt(dst, p.ts)
	var err error
	if dst, err = f.appendValue(dst, v, enc); err != nil {
		return dst, false, errEncodeValue(f.spec, k, err)
	}
	return dst, true, nil
}
