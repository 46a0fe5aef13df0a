package statestore

import (
	"fmt"
	"slices"
)

// Incremental snapshots (docs/state.md, "Incremental checkpoints").
//
// A delta part is the stream of blobs that a backend writes for a snapshot
// that is a delta on an earlier one (its base): blobs whose header flags
// hold blobDelta. A key group's delta blob has the full format, read as
// follows:
//   - each entry is an upsert of its (key, namespace), or, when its value
//     is CBOR undefined (tombstone), a deletion;
//   - its timers replace the group's timers.
//
// A key group without a blob in a delta part keeps its state entries as
// they were in the base, and has no timers: a delta part holds a blob for
// every key group with a changed entry or with timers.
const blobDelta byte = 1

// tombstone is the value of a deleted entry in a delta blob: CBOR
// undefined, which no state value encodes to.
const tombstone = 0xf7

func isTombstone(v rawItem) bool { return len(v) == 1 && v[0] == tombstone }

// appendTombstone appends the delta entry that deletes (key, ns).
func appendTombstone(dst []byte, key, ns string) []byte {
	dst = AppendCBORHead(dst, majorArray, 4)
	dst = appendText(dst, key)
	dst = appendText(dst, ns)
	dst = AppendCBORInt(dst, 0)
	return append(dst, tombstone)
}

// MergeChain merges the parts of an incremental chain into the part a full
// snapshot of the newest one would have written, byte for byte: parts[0]
// is a full part (Snapshot.WriteTo's stream), parts[1:] are delta parts,
// oldest first, each a delta on the one before it. Every blob's checksum
// is verified, and the result is a new buffer.
func MergeChain(parts [][]byte) ([]byte, error) {
	if len(parts) == 0 {
		return nil, nil
	}
	split := make([]map[int][]byte, len(parts))
	seen := map[int]bool{}
	var groups []int
	for i, part := range parts {
		split[i] = map[int][]byte{}
		last := -1
		err := SplitBlobs(part, func(kg int, blob []byte) error {
			if kg <= last {
				return fmt.Errorf("%w: key group %d after %d", ErrCorrupt, kg, last)
			}
			last = kg
			if !seen[kg] {
				seen[kg] = true
				groups = append(groups, kg)
			}
			split[i][kg] = blob
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("merge incremental chain, part %d of %d: %w", i+1, len(parts), err)
		}
	}
	slices.Sort(groups)
	// Key groups merge on their own, on several goroutines: each is
	// decoded and merged, which tells its merged size, then encoded
	// straight into its place in the result.
	merged := make([]mergedGroup, len(groups))
	err := forEachParallel(len(groups), func(i int) error {
		kg := groups[i]
		blobs := make([][]byte, len(parts))
		for j := range parts {
			blobs[j] = split[j][kg]
		}
		var err error
		if merged[i], err = mergeGroup(kg, blobs); err != nil {
			return fmt.Errorf("merge incremental chain: key group %d: %w", kg, err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	offsets := make([]int, len(merged)+1)
	for i := range merged {
		offsets[i+1] = offsets[i] + merged[i].size
	}
	out := make([]byte, offsets[len(merged)])
	err = forEachParallel(len(merged), func(i int) error {
		at := out[offsets[i]:offsets[i]:offsets[i+1]]
		if b := merged[i].appendTo(at); len(b) != merged[i].size {
			return fmt.Errorf("merge incremental chain: key group %d: encoded %d bytes, %d expected", merged[i].kg, len(b), merged[i].size)
		}
		merged[i] = mergedGroup{}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// mergedState is one state of a key group while a chain is merged.
type mergedState struct {
	name    string
	kind    Kind
	entries []wireEntry // sorted by (key, namespace)
}

// mergedGroup is a key group's state and timers merged from a chain, and
// the size of its blob; its keys and values point into the chain's parts.
type mergedGroup struct {
	kg     int
	states []mergedState
	timers []wireTimers
	size   int // of the blob that appendTo appends; 0: none
}

// mergeGroup merges key group kg: blobs[i] is its blob in part i of the
// chain, nil where the part has none.
func mergeGroup(kg int, blobs [][]byte) (mergedGroup, error) {
	g := mergedGroup{kg: kg}
	for i, blob := range blobs {
		if blob == nil {
			if i > 0 {
				g.timers = nil // no blob in a delta part: no timers
			}
			continue
		}
		got, flags, payload, err := parseBlobFrame(blob)
		if err != nil {
			return g, err
		}
		if got != kg {
			return g, fmt.Errorf("%w: blob of key group %d", ErrCorrupt, got)
		}
		if want := deltaFlag(i > 0); flags != want {
			return g, fmt.Errorf("%w: part %d of the chain has blob flags %#x, expected %#x", ErrCorrupt, i+1, flags, want)
		}
		// Keys alias the blobs, which outlive the merge: it copies them.
		var p wirePayload
		if err := decodePayload(payload, &p, true); err != nil {
			return g, err
		}
		g.timers = p.Timers
		for _, ws := range p.States {
			j, found := slices.BinarySearchFunc(g.states, ws.Name, func(m mergedState, name string) int { return cmpString(m.name, name) })
			if !found {
				g.states = slices.Insert(g.states, j, mergedState{name: ws.Name, kind: ws.Kind})
			} else if g.states[j].kind != ws.Kind {
				return g, fmt.Errorf("%w: state %q is %s in part %d of the chain, %s before", ErrCorrupt, ws.Name, ws.Kind, i+1, g.states[j].kind)
			}
			if i == 0 {
				g.states[j].entries = ws.Entries
				continue
			}
			if g.states[j].entries, err = applyDelta(g.states[j].entries, ws.Entries); err != nil {
				return g, fmt.Errorf("state %q in part %d of the chain: %w", ws.Name, i+1, err)
			}
		}
	}
	g.size = g.encodedSize()
	return g, nil
}

// nonEmpty returns the number of states with entries, which the blob holds.
func (g *mergedGroup) nonEmpty() int {
	n := 0
	for _, st := range g.states {
		if len(st.entries) > 0 {
			n++
		}
	}
	return n
}

// encodedSize returns the size of the blob appendTo appends, which it
// mirrors.
func (g *mergedGroup) encodedSize() int {
	n := g.nonEmpty()
	if n == 0 && len(g.timers) == 0 {
		return 0
	}
	size := blobHeaderSize + 2 + headSize(uint64(n)) + 1 + headSize(uint64(len(g.timers))) + blobTrailer
	for _, st := range g.states {
		if len(st.entries) == 0 {
			continue
		}
		size += 1 + textSize(st.name) + headSize(uint64(st.kind)) + headSize(uint64(len(st.entries)))
		for i := range st.entries {
			e := &st.entries[i]
			size += 1 + textSize(e.Key) + textSize(e.NS) + intSize(e.TS) + len(e.Value)
		}
	}
	for _, wt := range g.timers {
		size += 1 + textSize(wt.Name) + headSize(uint64(len(wt.Timers)))
		for i := range wt.Timers {
			t := &wt.Timers[i]
			size += 1 + headSize(uint64(t.Domain)) + intSize(t.TS) + textSize(t.Key) + textSize(t.NS)
		}
	}
	return size
}

// appendTo appends the merged blob to dst: what a full snapshot writes.
func (g *mergedGroup) appendTo(dst []byte) []byte {
	n := g.nonEmpty()
	if n == 0 && len(g.timers) == 0 {
		return dst
	}
	start := len(dst)
	dst = beginBlob(dst, g.kg)
	dst = AppendCBORHead(dst, majorMap, 2)
	dst = AppendCBORHead(dst, majorUint, 1)
	dst = AppendCBORHead(dst, majorArray, uint64(n))
	for _, st := range g.states {
		if len(st.entries) == 0 {
			continue
		}
		dst = AppendCBORHead(dst, majorArray, 3)
		dst = appendText(dst, st.name)
		dst = AppendCBORHead(dst, majorUint, uint64(st.kind))
		dst = AppendCBORHead(dst, majorArray, uint64(len(st.entries)))
		for _, e := range st.entries {
			dst = appendWireEntry(dst, e)
		}
	}
	dst = AppendCBORHead(dst, majorUint, 2)
	dst = AppendCBORHead(dst, majorArray, uint64(len(g.timers)))
	for _, wt := range g.timers {
		dst = AppendCBORHead(dst, majorArray, 2)
		dst = appendText(dst, wt.Name)
		dst = AppendCBORHead(dst, majorArray, uint64(len(wt.Timers)))
		for _, t := range wt.Timers {
			dst = AppendCBORHead(dst, majorArray, 4)
			dst = AppendCBORHead(dst, majorUint, uint64(t.Domain))
			dst = AppendCBORInt(dst, t.TS)
			dst = appendText(dst, t.Key)
			dst = appendText(dst, t.NS)
		}
	}
	dst = endBlob(dst, start)
	return dst
}

func deltaFlag(delta bool) byte {
	if delta {
		return blobDelta
	}
	return 0
}

// appendWireEntry appends an entry as snapshots encode it.
func appendWireEntry(dst []byte, e wireEntry) []byte {
	dst = AppendCBORHead(dst, majorArray, 4)
	dst = appendText(dst, e.Key)
	dst = appendText(dst, e.NS)
	dst = AppendCBORInt(dst, e.TS)
	return append(dst, e.Value...)
}

func cmpEntry(a, b *wireEntry) int {
	if c := cmpString(a.Key, b.Key); c != 0 {
		return c
	}
	return cmpString(a.NS, b.NS)
}

// applyDelta returns base, sorted by (key, namespace), with the upserts
// and tombstones of delta, sorted the same way, applied. A delta that is
// out of order, or names an entry twice, is corrupt.
func applyDelta(base, delta []wireEntry) ([]wireEntry, error) {
	for j := 1; j < len(delta); j++ {
		if cmpEntry(&delta[j-1], &delta[j]) >= 0 {
			return nil, fmt.Errorf("%w: delta entry (%q, %q) after (%q, %q)", ErrCorrupt, delta[j].Key, delta[j].NS, delta[j-1].Key, delta[j-1].NS)
		}
	}
	out := make([]wireEntry, 0, len(base)+len(delta))
	i, j := 0, 0
	for i < len(base) || j < len(delta) {
		var c int
		switch {
		case i == len(base):
			c = 1
		case j == len(delta):
			c = -1
		default:
			c = cmpEntry(&base[i], &delta[j])
		}
		if c < 0 {
			out = append(out, base[i])
			i++
			continue
		}
		if !isTombstone(delta[j].Value) {
			out = append(out, delta[j])
		}
		if c == 0 {
			i++
		}
		j++
	}
	return out, nil
}
