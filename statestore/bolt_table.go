package statestore

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"iter"
	"slices"
	"strings"

	bolt "go.etcd.io/bbolt"
)

// The live file of the bbolt backend has one bucket per state, named after
// it, and one record per (key, namespace):
//
//	bbolt key   = key group (uint32, big-endian) || escape(key) || 0x00 0x00 || ns
//	bbolt value = varint ts || v
//
// where escape writes a 0x00 byte of the key as 0x00 0xFF, ts is the
// entry's TTL time (as in a snapshot) and v the value's CBOR in Core
// Deterministic Encoding, the bytes a snapshot holds. The escape keeps the
// byte order of the keys, so records sort as the snapshot format wants its
// entries: by key group, key, then namespace; a snapshot copies them without
// decoding (except map states with a TTL, whose expired map entries it
// leaves out). A state restored but not registered yet holds its snapshot
// entries unchanged in the same layout.
//
// A cached key holds every namespace of the key, their values decoded on
// first use; a flush writes the namespaces written since the previous one
// and deletes those deleted, so a key with many windows costs a write per
// window changed, not per window.

// errRecord marks a record of the live file that does not parse.
var errRecord = fmt.Errorf("%w: malformed record in the live state file", ErrCorrupt)

// appendKeyPrefix appends the part of the bbolt keys of (group, key) that
// precedes the namespace.
func appendKeyPrefix(dst []byte, group int, key string) []byte {
	dst = binary.BigEndian.AppendUint32(dst, uint32(group))
	for {
		i := strings.IndexByte(key, 0)
		if i < 0 {
			break
		}
		dst = append(append(dst, key[:i]...), 0, 0xff)
		key = key[i+1:]
	}
	return append(append(dst, key...), 0, 0)
}

// keySuccessor appends the smallest bbolt key above every record of (group,
// key).
func keySuccessor(dst []byte, group int, key string) []byte {
	dst = appendKeyPrefix(dst, group, key)
	dst[len(dst)-1] = 1
	return dst
}

// splitKey splits a bbolt key into the escaped key and the namespace.
func splitKey(k []byte) (esc, ns []byte, err error) {
	if len(k) < 4 {
		return nil, nil, errRecord
	}
	for i := 4; ; {
		j := bytes.IndexByte(k[i:], 0)
		if j < 0 || i+j+1 >= len(k) {
			return nil, nil, errRecord
		}
		j += i
		switch k[j+1] {
		case 0:
			return k[4:j], k[j+2:], nil
		case 0xff:
			i = j + 2
		default:
			return nil, nil, errRecord
		}
	}
}

// unescape returns the key of an escaped key.
func unescape(esc []byte) string {
	if bytes.IndexByte(esc, 0) < 0 {
		return string(esc)
	}
	var buf [64]byte
	return string(appendUnescaped(buf[:0], esc))
}

// appendUnescaped appends the key of escaped key esc (as splitKey returns
// it: each 0 followed by 0xff) to dst.
func appendUnescaped(dst, esc []byte) []byte {
	for {
		i := bytes.IndexByte(esc, 0)
		if i < 0 || i+1 >= len(esc) {
			return append(dst, esc...)
		}
		dst = append(dst, esc[:i+1]...)
		esc = esc[i+1:]
		if esc[0] == 0xff {
			esc = esc[1:]
		}
	}
}

// splitValue splits a record's value into its TTL time and CBOR.
func splitValue(v []byte) (ts int64, cbor []byte, err error) {
	ts, w := binary.Varint(v)
	if w <= 0 {
		return 0, nil, errRecord
	}
	return ts, v[w:], nil
}

func appendValue(dst []byte, ts int64, v []byte) []byte {
	return append(binary.AppendVarint(dst, ts), v...)
}

// rewriteBucket calls fn with every record of bkt, in key order; fn returns
// the record's new value (nil: delete it) and whether it changed. Changes
// are written in batches, the cursor positioned again after each (a write
// invalidates bbolt cursors). New values must stay valid until the
// transaction ends.
func rewriteBucket(bkt *bolt.Bucket, fn func(k, v []byte) (nv []byte, changed bool, err error)) error {
	type change struct{ k, v []byte }
	var (
		batch []change
		after []byte
	)
	for {
		c := bkt.Cursor()
		var k, v []byte
		if after == nil {
			k, v = c.First()
		} else if k, v = c.Seek(after); bytes.Equal(k, after) {
			k, v = c.Next()
		}
		batch = batch[:0]
		for ; k != nil && len(batch) < 512; k, v = c.Next() {
			nv, changed, err := fn(k, v)
			if err != nil {
				return err
			}
			if changed {
				batch = append(batch, change{bytes.Clone(k), nv})
			}
			after = append(after[:0], k...)
		}
		for _, ch := range batch {
			var err error
			if ch.v == nil {
				err = bkt.Delete(ch.k)
			} else {
				err = bkt.Put(ch.k, ch.v)
			}
			if err != nil {
				return err
			}
		}
		if k == nil {
			return nil
		}
	}
}

// boltSlot is one namespace of a cached key.
type boltSlot[S any] struct {
	ns      string
	ts      int64 // TTL time, as slot.ts
	v       S     // valid when decoded
	raw     []byte
	decoded bool // v holds the value; else raw holds its CBOR
	dirty   bool // written since the last flush
	stored  bool // the file holds a record of the namespace
}

// boltEntry is the cached state of one key: every namespace of it, in a
// slice indexed by a map once there are many, as the memory backend's
// keyEntry.
type boltEntry[S any] struct {
	key     string
	group   int
	items   []boltSlot[S]
	idx     map[string]int32
	removed []string // stored namespaces deleted since the last flush
	dirty   bool     // listed in the table's dirty list
	flying  bool     // written by the flush in flight: not evicted
	used    bool     // read or written since the last eviction sweep
	pins    int      // iterations running over the entry: it is not evicted
}

func (e *boltEntry[S]) find(ns string) int {
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

func (e *boltEntry[S]) add(s boltSlot[S]) int {
	e.items = append(e.items, s)
	i := len(e.items) - 1
	if e.idx != nil {
		e.idx[s.ns] = int32(i)
	} else if len(e.items) > nsIndexThreshold {
		e.idx = make(map[string]int32, len(e.items)*2)
		for j := range e.items {
			e.idx[e.items[j].ns] = int32(j)
		}
	}
	return i
}

func (e *boltEntry[S]) removeAt(i int) {
	if e.items[i].stored {
		e.removed = append(e.removed, e.items[i].ns)
	}
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
	e.items[last] = boltSlot[S]{}
	e.items = e.items[:last]
	if e.idx != nil && len(e.items) <= nsIndexThreshold/2 {
		e.idx = nil
	}
}

// boltTable is the bbolt backend's storage of one state: its bucket and the
// cached entries of its keys. Its methods mirror table's (the memory
// backend's): the handles reach either through slots (handles.go). Values
// live in the cache, which snapshots never share (they read the file), so
// nothing is copied on write; a method marks an entry dirty whenever it
// takes a slot for writing (upsert, writableSlot, remove, merge).
type boltTable[S any] struct {
	b       *Bolt
	spec    stateSpec
	slotTTL int64 // spec.ttl, except for map states whose TTL is per map entry
	fn      tableFuncs[S]
	bucket  []byte
	cache   map[string]*boltEntry[S]
	dirty   []*boltEntry[S]
	flight  []*boltEntry[S] // the entries of the flush in flight
	val     []byte          // scratch: one value's CBOR
	rec     []byte          // scratch: one record (adopt)
	enc     encoder
	// appendValue encodes a value (valueAppender).
	appendValue func(dst []byte, v *S, enc *encoder) ([]byte, error)
	// checkValue reports whether a record value decodes into S
	// (valueChecker), on the task goroutine.
	checkValue func(data []byte) error
	// decodeValue decodes a loaded record value (valueDecoder): the live
	// file holds only this process's encodings and restored values that
	// were checked, each one well-formed data item, as valueDecoder needs.
	decodeValue func(data []byte, v *S) error
	// changed holds the records written or deleted since the last
	// checkpoint's snapshot (the bbolt keys, repeats included), when the
	// backend is incremental.
	changed []string
}

func newBoltTable[S any](b *Bolt, spec stateSpec, fn tableFuncs[S]) *boltTable[S] {
	t := &boltTable[S]{b: b, spec: spec, slotTTL: spec.ttl, fn: fn, bucket: []byte(spec.name), cache: map[string]*boltEntry[S]{},
		appendValue: valueAppender[S](), checkValue: valueChecker[S](), decodeValue: valueDecoder[S]()}
	if spec.kind == KindMap {
		t.slotTTL = 0
	}
	return t
}

func (t *boltTable[S]) Name() string { return t.spec.name }
func (t *boltTable[S]) Kind() Kind   { return t.spec.kind }

// value returns slot i of e with its value decoded. A value that does not
// decode (a damaged file) is recorded as the backend's failure and reads as
// the zero value.
func (t *boltTable[S]) value(e *boltEntry[S], i int) *boltSlot[S] {
	p := &e.items[i]
	if !p.decoded {
		if err := t.decodeValue(p.raw, &p.v); err != nil {
			t.b.fail(fmt.Errorf("read state %q of key %q from %s: %w", t.spec.name, e.key, t.b.path, errIncompatibleValue(t.spec, e.key, err)))
		}
		p.raw, p.decoded = nil, true
	}
	return p
}

func (t *boltTable[S]) expired(p *boltSlot[S], now int64) bool {
	return t.slotTTL > 0 && now-p.ts >= t.slotTTL
}

// alive reports whether slot i of e holds a readable value at now.
func (t *boltTable[S]) alive(e *boltEntry[S], i int, now int64) bool {
	if t.expired(&e.items[i], now) {
		return false
	}
	if t.fn.count != nil {
		a, _ := t.fn.count(t.value(e, i).v, now)
		return a > 0
	}
	return true
}

func (t *boltTable[S]) now() int64 {
	if t.spec.ttl > 0 {
		return t.b.clock()
	}
	return 0
}

// entry returns key's cached entry, loading its namespaces from the file on
// a miss (an empty entry when the key has no state). It returns nil for a
// key outside the backend's range or when the load failed (the failure is
// recorded). Only a miss evicts, and never the entry it returns.
func (t *boltTable[S]) entry(key string) *boltEntry[S] {
	gi := t.b.index(key)
	if gi < 0 {
		return nil
	}
	if e := t.cache[key]; e != nil {
		e.used = true
		return e
	}
	if t.b.closed {
		t.b.fail(ErrClosed)
		return nil
	}
	t.b.makeRoom()
	e := &boltEntry[S]{key: key, group: t.b.start + gi}
	prefix := appendKeyPrefix(t.b.keyBuf[:0], e.group, key)
	t.b.keyBuf = prefix
	err := t.b.view(func(tx *bolt.Tx) error {
		bkt := tx.Bucket(t.bucket)
		if bkt == nil {
			return fmt.Errorf("%w: no bucket", errRecord)
		}
		var buf []byte // the raw values, copied out of the transaction
		c := bkt.Cursor()
		for k, v := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
			ts, raw, err := splitValue(v)
			if err != nil {
				return err
			}
			start := len(buf)
			buf = append(buf, raw...)
			e.add(boltSlot[S]{ns: string(k[len(prefix):]), ts: ts, raw: buf[start:len(buf):len(buf)], stored: true})
		}
		return nil
	})
	if err != nil {
		t.b.fail(fmt.Errorf("read state %q of key %q from %s: %w", t.spec.name, key, t.b.path, err))
		return nil
	}
	t.cache[key] = e
	t.b.cached++
	return e
}

// markDirty marks slot p of e (nil: none) to be written at the next flush.
func (t *boltTable[S]) markDirty(e *boltEntry[S], p *boltSlot[S]) {
	if p != nil {
		p.dirty = true
	}
	if !e.dirty {
		e.dirty = true
		t.dirty = append(t.dirty, e)
	}
}

// lookup returns the slot of (key, ns) for reading, or nil.
func (t *boltTable[S]) lookup(key, ns string) *boltSlot[S] {
	e := t.entry(key)
	if e == nil {
		return nil
	}
	i := e.find(ns)
	if i < 0 {
		return nil
	}
	return t.value(e, i)
}

// upsert returns the writable slot of (key, ns), creating it, and stamps
// its TTL time; see table.upsert.
func (t *boltTable[S]) upsert(key, ns string) (p *boltSlot[S], fresh bool) {
	e := t.entry(key)
	if e == nil {
		return nil, false
	}
	i := e.find(ns)
	if i < 0 {
		i = e.add(boltSlot[S]{ns: ns, decoded: true})
		fresh = true
	}
	p = t.value(e, i)
	t.markDirty(e, p)
	if t.slotTTL > 0 {
		now := t.b.clock()
		if !fresh && now-p.ts >= t.slotTTL {
			var zero S
			p.v = zero
			fresh = true
		}
		p.ts = now
	}
	return p, fresh
}

// writableSlot returns the slot of an existing (key, ns) for writing, or nil.
func (t *boltTable[S]) writableSlot(key, ns string) *boltSlot[S] {
	e := t.entry(key)
	if e == nil {
		return nil
	}
	i := e.find(ns)
	if i < 0 {
		return nil
	}
	p := t.value(e, i)
	t.markDirty(e, p)
	return p
}

// pin returns the value of (key, ns) for an iteration over it, or nil, and
// pins key's entry: the cache keeps it until the pin is released, so that
// the value ranged over is the one the body's writes change.
func (t *boltTable[S]) pin(key, ns string) (*S, pinned) {
	e := t.entry(key)
	if e == nil {
		return nil, pinned{}
	}
	i := e.find(ns)
	if i < 0 {
		return nil, pinned{}
	}
	e.pins++
	return &t.value(e, i).v, pinned{&e.pins}
}

// remove deletes (key, ns).
func (t *boltTable[S]) remove(key, ns string) {
	e := t.entry(key)
	if e == nil {
		return
	}
	if i := e.find(ns); i >= 0 {
		e.removeAt(i)
		t.markDirty(e, nil)
	}
}

// Clear deletes the value of (key, ns).
func (t *boltTable[S]) Clear(key, ns string) { t.remove(key, ns) }

// readSlot returns the readable slot of (key, ns); see table.readSlot.
func (t *boltTable[S]) readSlot(key, ns string) *boltSlot[S] {
	p := t.lookup(key, ns)
	if p == nil || t.slotTTL == 0 {
		return p
	}
	now := t.b.clock()
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

// merge folds the unexpired values of sources into target; see table.merge.
func (t *boltTable[S]) merge(key, target string, sources []string, fold func(acc S, have bool, src S) S) {
	e := t.entry(key)
	if e == nil {
		return
	}
	if !slices.ContainsFunc(sources, func(src string) bool { return src != target && e.find(src) >= 0 }) {
		return
	}
	t.markDirty(e, nil)
	now := t.now()
	var acc S
	have := false
	if i := e.find(target); i >= 0 && t.alive(e, i, now) {
		acc, have = t.value(e, i).v, true
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
		if t.alive(e, i, now) {
			acc = fold(acc, have, t.value(e, i).v)
			have, merged = true, true
		}
		e.removeAt(i)
	}
	if merged {
		i := e.find(target)
		if i < 0 {
			i = e.add(boltSlot[S]{ns: target, decoded: true})
		}
		p := t.value(e, i)
		p.v, p.ts, p.dirty = acc, now, true
	}
}

func (t *boltTable[S]) entryAlive(e *boltEntry[S], now int64) bool {
	if t.slotTTL == 0 && t.fn.count == nil {
		return len(e.items) > 0
	}
	for i := range e.items {
		if t.alive(e, i, now) {
			return true
		}
	}
	return false
}

// Namespaces yields the namespaces of key with a readable value. The entry
// is pinned while the loop runs.
func (t *boltTable[S]) Namespaces(key string) iter.Seq[string] {
	return func(yield func(string) bool) {
		e := t.entry(key)
		if e == nil {
			return
		}
		e.pins++
		defer func() { e.pins-- }()
		now := t.now()
		// Backwards, so that the body may delete the namespace it gets.
		for i := len(e.items) - 1; i >= 0; i-- {
			if i >= len(e.items) {
				continue
			}
			if !t.alive(e, i, now) {
				continue
			}
			if !yield(e.items[i].ns) {
				return
			}
		}
	}
}

// keysBatch is how many keys Keys reads from the file at a time.
const keysBatch = 256

// Keys yields the keys of key group group with a readable value. It writes
// the cache first, so that the file lists every key, then reads the keys in
// batches (none is read while the body runs, which may write), and checks
// each against the cache before yielding it.
func (t *boltTable[S]) Keys(group int) iter.Seq[string] {
	return func(yield func(string) bool) {
		if group < t.b.start || group >= t.b.end {
			return
		}
		if err := t.b.flush(); err != nil {
			t.b.fail(err)
			return
		}
		seek := binary.BigEndian.AppendUint32(nil, uint32(group))
		prefix := slices.Clone(seek)
		batch := make([]string, 0, keysBatch)
		now := t.now()
		for {
			batch = batch[:0]
			err := t.b.view(func(tx *bolt.Tx) error {
				bkt := tx.Bucket(t.bucket)
				if bkt == nil {
					return nil
				}
				c := bkt.Cursor()
				var last []byte
				for k, _ := c.Seek(seek); k != nil && bytes.HasPrefix(k, prefix) && len(batch) < keysBatch; k, _ = c.Next() {
					esc, _, err := splitKey(k)
					if err != nil {
						return err
					}
					if last != nil && bytes.Equal(esc, last) {
						continue // another namespace of the key
					}
					last = esc
					batch = append(batch, unescape(esc))
				}
				return nil
			})
			if err != nil {
				t.b.fail(fmt.Errorf("read keys of state %q from %s: %w", t.spec.name, t.b.path, err))
				return
			}
			for _, k := range batch {
				e := t.entry(k)
				if e == nil || !t.entryAlive(e, now) {
					continue // deleted by the body, or expired
				}
				if !yield(k) {
					return
				}
			}
			if len(batch) < keysBatch {
				return
			}
			seek = keySuccessor(seek[:0], group, batch[len(batch)-1])
		}
	}
}

// encodeValue returns v's CBOR in t.val.
func (t *boltTable[S]) encodeValue(v *S, key string) ([]byte, error) {
	b, err := t.appendValue(t.val[:0], v, &t.enc)
	if err != nil {
		return nil, errEncodeValue(t.spec, key, err)
	}
	t.val = b
	return b, nil
}

// encodeDirty implements boltTableOps: the writes of the dirty entries, in
// key order, so that bbolt walks its pages once, front to back.
func (t *boltTable[S]) encodeDirty(ops *[]boltOp, arena *[]byte) error {
	if len(t.dirty) == 0 {
		return nil
	}
	slices.SortFunc(t.dirty, func(x, y *boltEntry[S]) int {
		if x.group != y.group {
			return x.group - y.group
		}
		return strings.Compare(x.key, y.key)
	})
	a := *arena
	defer func() { *arena = a }()
	// key returns the bbolt key of (e, ns) in the arena.
	key := func(e *boltEntry[S], ns string) []byte {
		s := len(a)
		a = append(appendKeyPrefix(a, e.group, e.key), ns...)
		return a[s:len(a):len(a)]
	}
	for _, e := range t.dirty {
		for _, ns := range e.removed {
			k := key(e, ns)
			*ops = append(*ops, boltOp{bucket: t.bucket, name: e.key, key: k, del: true})
			t.recordChange(k)
		}
		for i := range e.items {
			p := &e.items[i]
			if !p.dirty {
				continue
			}
			k := key(e, p.ns)
			s := len(a)
			if p.decoded {
				// appendValue's layout, the value encoded in place.
				var err error
				if a, err = t.appendValue(binary.AppendVarint(a, p.ts), &p.v, &t.enc); err != nil {
					return errEncodeValue(t.spec, e.key, err)
				}
			} else {
				a = appendValue(a, p.ts, p.raw)
			}
			*ops = append(*ops, boltOp{bucket: t.bucket, name: e.key, key: k, val: a[s:len(a):len(a)]})
			t.recordChange(k)
		}
	}
	return nil
}

// handedOff implements boltTableOps. The dirty list becomes the flight list
// (which landed emptied).
func (t *boltTable[S]) handedOff() {
	for _, e := range t.dirty {
		e.dirty, e.flying = false, true
		clear(e.removed)
		e.removed = e.removed[:0]
		for i := range e.items {
			if p := &e.items[i]; p.dirty {
				p.dirty, p.stored = false, true
			}
		}
	}
	t.dirty, t.flight = t.flight[:0], t.dirty
}

// landed implements boltTableOps.
func (t *boltTable[S]) landed() {
	for _, e := range t.flight {
		e.flying = false
	}
	clear(t.flight)
	t.flight = t.flight[:0]
}

func (t *boltTable[S]) evict(n int, all bool) int {
	dropped := 0
	for k, e := range t.cache {
		if dropped >= n {
			break
		}
		if e.dirty || e.flying || e.pins > 0 {
			continue
		}
		if e.used && !all {
			e.used = false
			continue
		}
		delete(t.cache, k)
		dropped++
	}
	return dropped
}

func (t *boltTable[S]) dropCache() int {
	return t.evict(len(t.cache), true)
}

// restoredSlot applies the restore rules to a decoded entry (see
// table.prepareRestore): the TTL time it gets, its fixed value, and whether
// it is kept.
func (t *boltTable[S]) restoredSlot(ts int64, v S, now int64) (int64, S, bool) {
	switch {
	case t.slotTTL == 0:
		ts = 0
	case ts == 0:
		ts = now // written without a TTL: its TTL starts now
	case now-ts >= t.slotTTL:
		return 0, v, false
	}
	if t.fn.restored != nil {
		var keep bool
		if v, keep = t.fn.restored(v, now); !keep {
			return 0, v, false
		}
	}
	return ts, v, true
}

// restoreValue decodes a snapshot entry's value, applies the restore rules
// and returns the entry's new record value appended to dst, or nil when
// the entry is left out. Unless the rules fix values (map states), the
// value is only checked (checkValue, as adopt does): the record keeps raw.
func (t *boltTable[S]) restoreValue(dst []byte, key string, ts int64, raw []byte, now int64) ([]byte, error) {
	if t.fn.restored == nil {
		if err := t.checkValue(raw); err != nil {
			return nil, errIncompatibleValue(t.spec, key, err)
		}
		ts, _, keep := t.restoredSlot(ts, *new(S), now)
		if !keep {
			return nil, nil
		}
		return appendValue(dst, ts, raw), nil
	}
	var v S
	if err := decMode.Unmarshal(raw, &v); err != nil {
		return nil, errIncompatibleValue(t.spec, key, err)
	}
	ts, v, keep := t.restoredSlot(ts, v, now)
	if !keep {
		return nil, nil
	}
	b, err := t.encodeValue(&v, key)
	if err != nil {
		return nil, err
	}
	return appendValue(dst, ts, b), nil
}

// restoreFill is the bbolt FillPercent of a restore's writes. A restore
// puts records in key order (key group by key group, each sorted), which
// bbolt's default of 0.5 splits into half-full pages; 0.9 leaves room for
// values to grow. Records of 300 bytes so fill their leaf pages to 83%
// instead of 49% (TestBoltRestoreFillsPages); 48 MiB of 1000-byte values
// made a file of 65 instead of 99 MiB, which the restore writes.
const restoreFill = 0.9

// restoreGroup writes the decoded entries of key group group into the
// file, in Restore's transaction.
func (t *boltTable[S]) restoreGroup(tx *bolt.Tx, group int, entries []wireEntry, now int64) error {
	bkt := tx.Bucket(t.bucket)
	if bkt == nil {
		return fmt.Errorf("state %q: %w: no bucket", t.spec.name, errRecord)
	}
	bkt.FillPercent = restoreFill
	for _, e := range entries {
		v, err := t.restoreValue(nil, e.Key, e.TS, e.Value, now) // Put keeps it until the commit
		if err != nil {
			return err
		}
		if v == nil {
			continue
		}
		if err := bkt.Put(append(appendKeyPrefix(nil, group, e.Key), e.NS...), v); err != nil {
			return fmt.Errorf("state %q, key %q: %w", t.spec.name, e.Key, err)
		}
	}
	return nil
}

// adopt decodes the restored entries of a state registered after Restore,
// with the descriptor's type and TTL, in the registration's transaction.
// A record whose value encodes as it was restored (the usual case: the
// snapshot's encoding is the file's) is not written again.
func (t *boltTable[S]) adopt(bkt *bolt.Bucket, now int64) error {
	// Unless the restore rules fix values (map states), a value is only
	// decoded to check it: all are checked first, on several goroutines,
	// and then only TTL times can change a record.
	checked := t.fn.restored == nil
	if checked {
		if err := t.checkValues(bkt); err != nil {
			return err
		}
	}
	return rewriteBucket(bkt, func(k, rec []byte) ([]byte, bool, error) {
		esc, _, err := splitKey(k)
		if err != nil {
			return nil, false, err
		}
		ts, raw, err := splitValue(rec)
		if err != nil {
			return nil, false, err
		}
		if checked {
			nts, _, keep := t.restoredSlot(ts, *new(S), now)
			switch {
			case !keep:
				return nil, true, nil
			case nts == ts:
				return nil, false, nil
			}
			return appendValue(nil, nts, raw), true, nil
		}
		// Encoded into a reused buffer: most records come out the same
		// and are not written; a changed one is copied for the write.
		v, err := t.restoreValue(t.rec[:0], unescape(esc), ts, raw, now)
		if err != nil || v == nil {
			return nil, true, err
		}
		t.rec = v
		if bytes.Equal(v, rec) {
			return nil, false, nil
		}
		return bytes.Clone(v), true, nil
	})
}

// checkValues checks that the value of every record of bkt decodes into
// S (ErrIncompatibleState; with CheckCBOR where S has it), batch by batch
// on several goroutines: the records are read in a transaction that writes
// nothing meanwhile.
func (t *boltTable[S]) checkValues(bkt *bolt.Bucket) error {
	const batch, chunk = 8192, 256
	keys := make([][]byte, 0, batch)
	raws := make([][]byte, 0, batch)
	check := func() error {
		err := forEachParallel((len(raws)+chunk-1)/chunk, func(c int) error {
			decodes := valueChecker[S]()
			for i := c * chunk; i < min((c+1)*chunk, len(raws)); i++ {
				if err := decodes(raws[i]); err != nil {
					esc, _, kerr := splitKey(keys[i])
					if kerr != nil {
						return kerr
					}
					return errIncompatibleValue(t.spec, unescape(esc), err)
				}
			}
			return nil
		})
		keys, raws = keys[:0], raws[:0]
		return err
	}
	c := bkt.Cursor()
	for k, rec := c.First(); k != nil; k, rec = c.Next() {
		_, raw, err := splitValue(rec)
		if err != nil {
			return err
		}
		keys, raws = append(keys, k), append(raws, raw)
		if len(raws) == batch {
			if err := check(); err != nil {
				return err
			}
		}
	}
	return check()
}

// cleanup deletes the expired slots and map entries of the cached keys (in
// the cache) and of the others (in the file), and returns how many.
func (t *boltTable[S]) cleanup(now int64) (int, error) {
	if t.slotTTL == 0 && t.fn.purge == nil {
		return 0, nil
	}
	n := 0
	for _, e := range t.cache {
		for i := len(e.items) - 1; i >= 0; i-- {
			if t.expired(&e.items[i], now) {
				e.removeAt(i)
				t.markDirty(e, nil)
				n++
				continue
			}
			if t.fn.purge != nil {
				p := t.value(e, i)
				if _, x := t.fn.count(p.v, now); x == 0 {
					continue
				}
				n += t.fn.purge(p.v, now)
				t.markDirty(e, p)
				if a, _ := t.fn.count(p.v, now); a == 0 {
					e.removeAt(i)
				}
			}
		}
	}
	err := t.b.update(func(tx *bolt.Tx) error {
		bkt := tx.Bucket(t.bucket)
		if bkt == nil {
			return nil
		}
		return rewriteBucket(bkt, func(k, rec []byte) ([]byte, bool, error) {
			esc, _, err := splitKey(k)
			if err != nil {
				return nil, false, err
			}
			key := unescape(esc)
			if _, cached := t.cache[key]; cached {
				return nil, false, nil
			}
			ts, raw, err := splitValue(rec)
			if err != nil {
				return nil, false, err
			}
			if t.slotTTL > 0 && now-ts >= t.slotTTL {
				n++
				t.recordChange(k)
				return nil, true, nil
			}
			if t.fn.purge == nil {
				return nil, false, nil
			}
			var v S
			if err := decMode.Unmarshal(raw, &v); err != nil {
				return nil, false, errIncompatibleValue(t.spec, key, err)
			}
			if _, x := t.fn.count(v, now); x == 0 {
				return nil, false, nil
			}
			n += t.fn.purge(v, now)
			t.recordChange(k)
			if a, _ := t.fn.count(v, now); a == 0 {
				return nil, true, nil
			}
			nv, err := t.encodeValue(&v, key)
			return appendValue(nil, ts, nv), true, err
		})
	})
	return n, err
}

// freeze captures the table for a snapshot: the snapshot's transaction.
func (t *boltTable[S]) freeze(tx *bolt.Tx, start int) frozenState {
	return &boltFrozen[S]{spec: t.spec, slotTTL: t.slotTTL, fn: t.fn, tx: tx, start: start}
}

// boltFrozen is a state as a snapshot saw it: its bucket in the snapshot's
// read transaction. It is used by the goroutine that encodes the snapshot.
type boltFrozen[S any] struct {
	spec    stateSpec
	slotTTL int64
	fn      tableFuncs[S]
	tx      *bolt.Tx
	start   int
	val     bytes.Buffer
}

func (f *boltFrozen[S]) name() string { return f.spec.name }
func (f *boltFrozen[S]) kind() Kind   { return f.spec.kind }
func (f *boltFrozen[S]) drop(int)     {} // the transaction holds the group, not the heap

func (f *boltFrozen[S]) appendGroup(dst []byte, gi int, now int64, _ *encoder) ([]byte, int, error) {
	return appendBucketGroup(dst, f.tx, f.spec.name, f.start+gi, func(key []byte, ts int64, v []byte) ([]byte, bool, error) {
		return f.value(key, ts, v, now)
	})
}

// value returns the snapshot's CBOR of a record's value, or false when it
// expired at now.
func (f *boltFrozen[S]) value(key []byte, ts int64, v []byte, now int64) ([]byte, bool, error) {
	if f.slotTTL > 0 && now-ts >= f.slotTTL {
		return nil, false, nil
	}
	if f.fn.count == nil {
		return v, true, nil
	}
	var val S
	if err := decMode.Unmarshal(v, &val); err != nil {
		return nil, false, errIncompatibleValue(f.spec, string(key), err)
	}
	alive, expired := f.fn.count(val, now)
	switch {
	case alive == 0:
		return nil, false, nil
	case expired == 0:
		return v, true, nil
	}
	filtered := f.fn.filter(val, now)
	f.val.Reset()
	if err := encMode.MarshalToBuffer(&filtered, &f.val); err != nil {
		return nil, false, errEncodeValue(f.spec, string(key), err)
	}
	return f.val.Bytes(), true, nil
}

// boltFrozenPending is a state restored but not registered: its entries go
// into snapshots as they were restored.
type boltFrozenPending struct {
	name_ string
	kind_ Kind
	tx    *bolt.Tx
	start int
}

func (f *boltFrozenPending) name() string { return f.name_ }
func (f *boltFrozenPending) kind() Kind   { return f.kind_ }
func (f *boltFrozenPending) drop(int)     {}

func (f *boltFrozenPending) appendGroup(dst []byte, gi int, _ int64, _ *encoder) ([]byte, int, error) {
	return appendBucketGroup(dst, f.tx, f.name_, f.start+gi, func(_ []byte, _ int64, v []byte) ([]byte, bool, error) {
		return v, true, nil
	})
}

// appendBucketGroup appends the entries of key group group of bucket name
// to dst, in the order of the records (the snapshot format's); value
// returns an entry's CBOR, or false to leave it out. It returns dst and the
// number of entries.
func appendBucketGroup(dst []byte, tx *bolt.Tx, name string, group int, value func(key []byte, ts int64, v []byte) ([]byte, bool, error)) ([]byte, int, error) {
	bkt := tx.Bucket([]byte(name))
	if bkt == nil {
		return dst, 0, nil
	}
	var prefix [4]byte
	binary.BigEndian.PutUint32(prefix[:], uint32(group))
	c := bkt.Cursor()
	n := 0
	var esc, key []byte
	for k, rec := c.Seek(prefix[:]); k != nil && bytes.HasPrefix(k, prefix[:]); k, rec = c.Next() {
		e, ns, err := splitKey(k)
		if err == nil && !bytes.Equal(e, esc) {
			esc = append(esc[:0], e...)
			key = appendUnescaped(key[:0], e)
		}
		var ts int64
		var raw []byte
		if err == nil {
			ts, raw, err = splitValue(rec)
		}
		if err == nil {
			var keep bool
			if raw, keep, err = value(key, ts, raw); err == nil && !keep {
				continue
			}
		}
		if err != nil {
			return dst, 0, fmt.Errorf("state %q, record %q: %w", name, k, err)
		}
		dst = AppendCBORHead(dst, majorArray, 4)
		dst = append(AppendCBORHead(dst, majorText, uint64(len(key))), key...)
		dst = append(AppendCBORHead(dst, majorText, uint64(len(ns))), ns...)
		dst = AppendCBORInt(dst, ts)
		dst = append(dst, raw...)
		n++
	}
	return dst, n, nil
}
