package kafka

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/maphash"
	"maps"
	"slices"
	"sync"

	"github.com/IBM/sarama"

	"github.com/eddy-stream/eddy/pipeline"
	"github.com/eddy-stream/eddy/statestore"
)

// The changelog of a stateful step (docs/group.md, "Changelogs"): one
// record per state entry and per timer of each key group, in the key
// group's partition, so that compaction keeps the last value of each and a
// tombstone removes one. The items are the statestore's (BlobItems):
//
//	key   = key group (uint32, big-endian) ‖ piece (uvarint) ‖ item key
//	value = pieces (uvarint) ‖ the piece's bytes of the item's value
//	        (absent: a tombstone)
//
// A value longer than changelogChunk is cut into pieces 0, 1, ... of that
// size; most items have one piece, piece 0.
//
// A checkpoint's snapshot is a delta on the last commit's (the backends
// run incremental in group mode) or full (the first of a generation, or
// when the backend cannot take a delta). Either way the writer sends only
// the items whose value differs from what the changelog holds, which the
// generation keeps (changelogHeld): each item's key, a digest of its
// value and its pieces, read by the restore and kept up to date by every
// checkpoint. A full snapshot also deletes the items it does not hold;
// a delta deletes the entries it names as deleted, and the timers of the
// key groups whose timers it replaces (all the key groups it holds; the
// others have none).

// changelogChunk is the largest piece of an item's value in one changelog
// record, below the default record size limits of brokers and producers
// (1 MiB).
const changelogChunk = 512 << 10

// changelogHeld is what the changelogs hold of a generation's key groups,
// per stateful step, and the last checkpoint the generation committed.
type changelogHeld struct {
	mu    sync.Mutex
	steps map[string]*heldStep
	last  int64
}

// heldStep is what a step's changelog holds, by key group. One goroutine
// uses it at a time: the restore, then each checkpoint's changelogWriter
// (a step has one subtask in a generation, and one checkpoint is in
// flight at a time).
type heldStep struct {
	groups map[int]*heldGroup
	// mark is the number of the last write: the items it saw carry it.
	mark uint32
}

// heldGroup is what a changelog holds of a key group: its entries and its
// timers, by item key.
type heldGroup struct {
	entries, timers map[string]heldItem
}

// heldItem is an item as the changelog holds it.
type heldItem struct {
	sum    [2]uint64 // digest of its value
	pieces uint32
	mark   uint32 // the write that last saw it
}

// step returns what the changelog of step holds.
func (h *changelogHeld) step(name string) *heldStep {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.steps == nil {
		h.steps = map[string]*heldStep{}
	}
	s := h.steps[name]
	if s == nil {
		s = &heldStep{groups: map[int]*heldGroup{}}
		h.steps[name] = s
	}
	return s
}

// committed records that checkpoint id committed.
func (h *changelogHeld) committed(id int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.last = max(h.last, id)
}

// lastCommitted returns the last checkpoint the generation committed.
func (h *changelogHeld) lastCommitted() int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.last
}

// group returns key group kg's items, created empty.
func (s *heldStep) group(kg int) *heldGroup {
	g := s.groups[kg]
	if g == nil {
		g = &heldGroup{entries: map[string]heldItem{}, timers: map[string]heldItem{}}
		s.groups[kg] = g
	}
	return g
}

// of returns the map that holds the item of key.
func (g *heldGroup) of(key []byte) map[string]heldItem {
	if statestore.IsTimerItem(key) {
		return g.timers
	}
	return g.entries
}

// digestSeeds make the digests of item values, 128 bits: equal digests
// are taken for equal values.
var digestSeeds = [2]maphash.Seed{maphash.MakeSeed(), maphash.MakeSeed()}

func digest(v []byte) [2]uint64 {
	return [2]uint64{maphash.Bytes(digestSeeds[0], v), maphash.Bytes(digestSeeds[1], v)}
}

// changelogKey returns the key of piece piece of item key in key group kg.
func changelogKey(kg, piece int, key string) []byte {
	b := binary.BigEndian.AppendUint32(make([]byte, 0, 4+binary.MaxVarintLen32+len(key)), uint32(kg))
	b = binary.AppendUvarint(b, uint64(piece))
	return append(b, key...)
}

var errChangelogRecord = errors.New("not a changelog record of this version of eddy")

// parseChangelogKey returns the key group, piece and item key of a
// changelog record's key.
func parseChangelogKey(b []byte) (kg, piece int, key []byte, err error) {
	if len(b) < 5 {
		return 0, 0, nil, fmt.Errorf("%w: a key of %d bytes", errChangelogRecord, len(b))
	}
	p, n := binary.Uvarint(b[4:])
	if n <= 0 || p >= 1<<31 || len(b) == 4+n {
		return 0, 0, nil, fmt.Errorf("%w: a key without a piece and an item", errChangelogRecord)
	}
	return int(binary.BigEndian.Uint32(b)), int(p), b[4+n:], nil
}

// parseChangelogValue returns the number of pieces of a changelog
// record's item and the piece's bytes.
func parseChangelogValue(v []byte) (pieces int, data []byte, err error) {
	p, n := binary.Uvarint(v)
	if n <= 0 || p == 0 || p >= 1<<31 {
		return 0, nil, fmt.Errorf("%w: a value without its number of pieces", errChangelogRecord)
	}
	return int(p), v[n:], nil
}

// changelogWriter receives a step's snapshot stream and, when closed,
// writes to its changelog what differs from what the changelog holds.
type changelogWriter struct {
	gen   *generation
	topic *pipeline.InternalTopic
	step  string
	delta bool // a delta part: its blobs are delta blobs
	buf   bytes.Buffer
	// sent counts the records sent (tombstones included), bytes their
	// keys and values.
	sent, bytes int
}

func (c *changelogWriter) Write(b []byte) (int, error) { return c.buf.Write(b) }

// Abort drops what was written.
func (c *changelogWriter) Abort() { c.buf.Reset() }

// Close sends the records into the open transaction: the items whose
// value differs from what the changelog holds, and tombstones for the
// items the changelog holds that the state no longer has.
func (c *changelogWriter) Close() error {
	held := c.gen.held.step(c.step)
	held.mark++
	inPart := map[int]bool{}
	err := statestore.SplitBlobs(c.buf.Bytes(), func(kg int, blob []byte) error {
		inPart[kg] = true
		g := held.group(kg)
		_, delta, err := statestore.BlobItems(blob, func(it statestore.BlobItem) error { return c.item(g, kg, it, held.mark) })
		if err != nil {
			return fmt.Errorf("key group %d: %w", kg, err)
		}
		if delta != c.delta {
			return fmt.Errorf("key group %d: a blob with delta %t in a part with delta %t", kg, delta, c.delta)
		}
		return c.sweep(held, kg)
	})
	for _, kg := range slices.Sorted(maps.Keys(held.groups)) {
		if err == nil && !inPart[kg] {
			err = c.sweep(held, kg)
		}
	}
	if err != nil {
		return fmt.Errorf("changelog of step %q: %w", c.step, err)
	}
	return c.gen.g.out.failure()
}

// item writes an item of key group kg's blob, unless the changelog holds
// it already: an upsert, or a delta's deletion.
func (c *changelogWriter) item(g *heldGroup, kg int, it statestore.BlobItem, mark uint32) error {
	m, key := g.of(it.Key), string(it.Key)
	h, had := m[key]
	if it.Value == nil {
		if !had {
			return nil // written and deleted since the last commit
		}
		delete(m, key)
		return c.tombstones(kg, key, 0, int(h.pieces))
	}
	sum := digest(it.Value)
	if had && h.sum == sum {
		h.mark = mark
		m[key] = h
		return nil
	}
	n := max(1, (len(it.Value)+changelogChunk-1)/changelogChunk)
	for i := range n {
		piece := it.Value[i*changelogChunk : min(len(it.Value), (i+1)*changelogChunk)]
		if err := c.send(kg, i, key, n, piece); err != nil {
			return err
		}
	}
	m[key] = heldItem{sum: sum, pieces: uint32(n), mark: mark}
	return c.tombstones(kg, key, n, int(h.pieces))
}

// sweep deletes the items of key group kg that the changelog holds and
// the write did not see: its timers (a blob's timers replace the key
// group's; without a blob it has none), and in a full snapshot its
// entries too.
func (c *changelogWriter) sweep(held *heldStep, kg int) error {
	g := held.groups[kg]
	swept := []map[string]heldItem{g.timers}
	if !c.delta {
		swept = append(swept, g.entries)
	}
	for _, m := range swept {
		for k, h := range m {
			if h.mark == held.mark {
				continue
			}
			delete(m, k)
			if err := c.tombstones(kg, k, 0, int(h.pieces)); err != nil {
				return err
			}
		}
	}
	if len(g.entries) == 0 && len(g.timers) == 0 {
		delete(held.groups, kg)
	}
	return nil
}

// tombstones deletes pieces [from, to) of item key.
func (c *changelogWriter) tombstones(kg int, key string, from, to int) error {
	for i := from; i < to; i++ {
		if err := c.send(kg, i, key, 0, nil); err != nil {
			return err
		}
	}
	return nil
}

// send writes piece piece of n of item key of key group kg (n 0: a
// tombstone) to the key group's partition.
func (c *changelogWriter) send(kg, piece int, key string, n int, data []byte) error {
	o := c.gen.g.out
	msg := o.newMessage()
	msg.Topic = c.topic.Name
	msg.Partition = int32(pipeline.KeyGroupPartition(kg, c.gen.g.run.Plan.MaxParallelism, c.topic.Partitions))
	msg.Key = sarama.ByteEncoder(changelogKey(kg, piece, key))
	if rec := c.gen.recording(); rec != nil {
		msg.Metadata = rec // the local copy takes the record once committed
	}
	if n > 0 {
		v := binary.AppendUvarint(make([]byte, 0, binary.MaxVarintLen32+len(data)), uint64(n))
		msg.Value = sarama.ByteEncoder(append(v, data...))
	}
	c.sent++
	c.bytes += msg.Key.Length()
	if msg.Value != nil {
		c.bytes += msg.Value.Length()
	}
	return o.send(context.Background(), msg)
}

// restoreItems returns each key group's full blob from the last record of
// each key of a changelog partition (nil: a tombstone), and records what
// the changelog holds in held. An item whose pieces are not all there is
// an error, not a silently shorter value.
func restoreItems(last map[string][]byte, held *heldStep) (map[int][]byte, error) {
	items := map[int][]statestore.BlobItem{}
	for k, v := range last {
		if v == nil {
			continue
		}
		kg, piece, key, err := parseChangelogKey([]byte(k))
		if err != nil {
			return nil, err
		}
		if piece != 0 {
			continue // read with piece 0
		}
		n, value, err := parseChangelogValue(v)
		if err != nil {
			return nil, fmt.Errorf("key group %d: %w", kg, err)
		}
		if n > 1 {
			value = slices.Clone(value)
			for i := 1; i < n; i++ {
				pn, data, err := parseChangelogValue(last[string(changelogKey(kg, i, string(key)))])
				if err != nil || pn != n {
					return nil, fmt.Errorf("key group %d: piece %d of %d of an item is missing from the changelog", kg, i, n)
				}
				value = append(value, data...)
			}
		}
		items[kg] = append(items[kg], statestore.BlobItem{Key: key, Value: value})
		held.group(kg).of(key)[string(key)] = heldItem{sum: digest(value), pieces: uint32(n)}
	}
	blobs := make(map[int][]byte, len(items))
	for kg, its := range items {
		blob, err := statestore.ItemsBlob(kg, its)
		if err != nil {
			return nil, err
		}
		blobs[kg] = blob
	}
	return blobs, nil
}
