package statestore

import (
	"slices"
	"sync/atomic"
)

// Incremental checkpoints (Options.Incremental; docs/state.md,
// "Incremental checkpoints"), what both backends share: which snapshot a
// checkpoint's snapshot is a delta on.
//
// When a checkpoint completes (CheckpointCompleted), its snapshot becomes
// the base: the next checkpoint's snapshot is a delta on it, holding only
// what changed since. How a backend knows what changed is its own: the
// bbolt backend records the keys that its flushes write (bolt_delta.go),
// the memory backend stamps its entries with the generation of their last
// write and logs its deletions (memory_delta.go).
//
// A snapshot is full instead when there is no base yet, when the states
// changed otherwise than by writes since the base (a state registered, a
// restore: the layout), while restored states wait to be registered, when
// the base's chain holds maxDeltaChain deltas, or when the deltas since the
// chain's full snapshot add up to its size: a restore reads the whole
// chain (unless the deltas go to a changelog, Options.Changelog).

// maxDeltaChain bounds the deltas in a chain.
const maxDeltaChain = 16

// maxTableChanges bounds the changes a table records: past it the backend
// stops recording and forgets its base (the next snapshot is full). A
// variable for the tests.
var maxTableChanges = 1 << 20

// maxChangeSets bounds the checkpoint snapshots remembered after the base:
// when checkpoints stop completing, the backend forgets its base and what
// it recorded (the snapshots are full until one completes).
const maxChangeSets = 64

// snapRecord is a checkpoint's snapshot, as the backend remembers it.
type snapRecord struct {
	id     int64  // checkpoint
	seq    uint64 // the backend's snapshot sequence when it was taken
	layout uint64
	// base is the record this one is a delta on (nil: a full snapshot),
	// until the checkpoint completes; baseID is its checkpoint.
	base   *snapRecord
	baseID int64
	// written is the size of the part, set once it is written; full is set
	// when the snapshot, taken as a delta, was written in full (Full).
	written atomic.Int64
	full    atomic.Bool
	// Set when the checkpoint completed: deltas since the chain's full
	// snapshot, their bytes, and the full snapshot's bytes.
	chain                 int
	deltaBytes, fullBytes int64
}

// deltaChain is what an incremental backend remembers of its checkpoint
// snapshots: the base, and the snapshots taken after it that may still
// complete. The task goroutine uses it.
type deltaChain struct {
	base    *snapRecord   // the last completed one
	records []*snapRecord // checkpoint snapshots not completed yet
	// unbounded lifts the bounds on the chain (Options.Changelog): no
	// restore reads it.
	unbounded bool
}

// snapshot takes checkpoint id's snapshot with take, given its record:
// taken at sequence seq with the states' layout, a delta on the base
// (rec.base) when one is allowed. pending tells that restored states wait
// to be registered. The record is remembered once take succeeds.
func (c *deltaChain) snapshot(id int64, seq, layout uint64, pending bool, take func(rec *snapRecord) (Snapshot, error)) (Snapshot, error) {
	rec := &snapRecord{id: id, seq: seq, layout: layout}
	if base := c.base; base != nil && base.layout == layout && !pending &&
		(c.unbounded || base.chain < maxDeltaChain && base.deltaBytes < base.fullBytes) {
		rec.base, rec.baseID = base, base.id
	}
	s, err := take(rec)
	if err != nil {
		return nil, err
	}
	c.records = append(c.records, rec)
	return s, nil
}

// forget drops the base and every record: the next snapshots are full.
func (c *deltaChain) forget() { c.base, c.records = nil, nil }

// complete makes the snapshot of checkpoint id the base and returns it;
// nil when no remembered snapshot is id's, or when the base is newer.
// The records up to id are dropped: those older can no longer complete
// (the coordinator subsumes the checkpoints still in flight when a newer
// one completes).
func (c *deltaChain) complete(id int64) *snapRecord {
	i := slices.IndexFunc(c.records, func(r *snapRecord) bool { return r.id == id })
	if i < 0 {
		return nil
	}
	rec := c.records[i]
	c.records = slices.Delete(c.records, 0, i+1)
	if rec.full.Load() {
		rec.base = nil
	}
	if rec.base == nil {
		rec.fullBytes = rec.written.Load()
	} else {
		rec.chain = rec.base.chain + 1
		rec.fullBytes = rec.base.fullBytes
		rec.deltaBytes = rec.base.deltaBytes + rec.written.Load()
		rec.base = nil // the chain's sizes are what later deltas need
	}
	if c.base != nil && c.base.seq >= rec.seq {
		return nil
	}
	c.base = rec
	return rec
}
