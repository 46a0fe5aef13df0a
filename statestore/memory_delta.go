package statestore

import (
	"slices"
	"sort"
	"strings"
)

// Incremental checkpoints of the memory backend (Options.Incremental; the
// policy is incremental.go's).
//
// Every write stamps its entry and the entry's group with the backend's
// generation (table.writable), and every deletion of a slot is logged with
// the generation (table.deleted). A checkpoint snapshot remembers its
// generation (snapRecord.seq); a delta on the base holds the slots of the
// entries written after the base's generation, and tombstones for the
// slots deleted since that do not exist any more. The snapshot freezes the
// whole state as a full one does (copy-on-write): Full makes it full, and
// the delta's encoder skips unchanged groups and entries.
//
// The log is pruned to what follows the base when a checkpoint completes.

// deletion is a slot the memory backend deleted: (key, ns) in key group
// index gi, at generation gen.
type deletion struct {
	gen     uint64
	gi      int32
	key, ns string
}

// deleted logs the deletion of slot (key, ns) in group index gi, when the
// backend is incremental.
func (t *table[S]) deleted(gi int, key, ns string) {
	m := t.m
	if !m.incremental || m.lostChanges {
		return
	}
	if len(t.dels) >= maxTableChanges {
		// The log would grow without bound while checkpoints do not
		// complete: forget it, and with it the base (lostChanges).
		m.lostChanges = true
		for _, r := range m.states {
			r.tbl.pruneDeletions(^uint64(0))
		}
		return
	}
	t.dels = append(t.dels, deletion{gen: m.gen, gi: int32(gi), key: key, ns: ns})
}

// pruneDeletions drops the deletions logged up to generation gen. The rest
// moves to a new slice: a snapshot may read the old one.
func (t *table[S]) pruneDeletions(gen uint64) {
	i := sort.Search(len(t.dels), func(i int) bool { return t.dels[i].gen > gen })
	if i == len(t.dels) {
		t.dels = nil
		return
	}
	t.dels = slices.Clone(t.dels[i:])
}

// freezeDelta captures the table for a delta snapshot whose base has
// generation since, from f, the table's capture for the full snapshot.
func (t *table[S]) freezeDelta(f frozenState, since uint64) frozenState {
	i := sort.Search(len(t.dels), func(i int) bool { return t.dels[i].gen > since })
	// Appends to the log do not touch the captured elements; pruning
	// allocates a new log.
	n := len(t.dels)
	return &frozenDelta[S]{frozenTable: f.(*frozenTable[S]), since: since, dels: t.dels[i:n:n]}
}

// SnapshotCheckpoint implements IncrementalBackend: Snapshot, for
// checkpoint id, as a delta on the last completed checkpoint's snapshot
// when the backend is incremental and a delta is allowed.
func (m *Memory) SnapshotCheckpoint(id int64) (Snapshot, error) {
	if !m.incremental {
		return m.Snapshot()
	}
	if m.lostChanges || len(m.chain.records) >= maxChangeSets {
		// The snapshots taken so far cannot become bases: the deletions
		// after theirs are not all logged, or are forgotten now.
		m.chain.forget()
		for _, r := range m.states {
			r.tbl.pruneDeletions(^uint64(0))
		}
		m.lostChanges = false
	}
	return m.chain.snapshot(id, m.gen, m.layout, len(m.pending) > 0, func(rec *snapRecord) (Snapshot, error) {
		return m.snapshot(rec)
	})
}

// CheckpointCompleted implements IncrementalBackend: the snapshot of
// checkpoint id, if this backend took it, becomes the base of the next
// ones.
func (m *Memory) CheckpointCompleted(id int64) {
	if !m.incremental {
		return
	}
	if rec := m.chain.complete(id); rec != nil {
		for _, r := range m.states {
			r.tbl.pruneDeletions(rec.seq)
		}
	}
}

// frozenDelta is a table as a delta snapshot saw it: the full capture, read
// for the entries written after generation since, and the deletions logged
// after it.
type frozenDelta[S any] struct {
	*frozenTable[S]
	since  uint64
	dels   []deletion // shared with the table's log until sorted
	sorted bool
	next   int        // the first deletion of a group not written yet
	tombs  []deletion // scratch of appendGroup
}

func cmpDeletion(a, b deletion) int {
	if a.gi != b.gi {
		return int(a.gi - b.gi)
	}
	if c := strings.Compare(a.key, b.key); c != 0 {
		return c
	}
	return strings.Compare(a.ns, b.ns)
}

// appendGroup appends the changed entries of group index gi, sorted by key
// and namespace: the slots of the entries written since the base (a
// tombstone for one that expired), and a tombstone for every slot deleted
// since that the group does not hold.
func (f *frozenDelta[S]) appendGroup(dst []byte, gi int, now int64, enc *encoder) ([]byte, int, error) {
	if !f.sorted {
		f.dels = slices.Clone(f.dels)
		slices.SortFunc(f.dels, cmpDeletion)
		f.dels = slices.CompactFunc(f.dels, func(a, b deletion) bool { return cmpDeletion(a, b) == 0 })
		f.sorted = true
	}
	lo := f.next
	for lo < len(f.dels) && int(f.dels[lo].gi) < gi {
		lo++
	}
	hi := lo
	for hi < len(f.dels) && int(f.dels[hi].gi) == gi {
		hi++
	}
	f.next = hi
	g := f.groups[gi]
	if g == nil || g.mod <= f.since {
		return dst, 0, nil // a deletion is a write too: none since the base
	}
	tombs := f.tombs[:0]
	for _, d := range f.dels[lo:hi] {
		if e := g.m[d.key]; e == nil || e.find(d.ns) < 0 {
			tombs = append(tombs, d) // not written again since
		}
	}
	f.tombs = tombs
	return f.appendEntries(dst, g, &groupDelta{since: f.since, tombs: tombs}, now, enc)
}
