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

// mergeChain merges the parts of an incremental chain into the part a full
// snapshot of the newest one would have written, byte for byte: parts[0]
// is a full part (Snapshot.WriteTo's stream), parts[1:] are delta parts,
// oldest first, each a delta on the one before it. Every blob's checksum
// is verified, and the result is a new buffer.
func mergeChain(parts [][]byte) ([]byte, error) {
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
	// Key groups merge on their own: on several goroutines (decoding is
	// most of the work), then back to back in key-group order.
	merged := make([][]byte, len(groups))
	err := forEachParallel(len(groups), func(i int) error {
		kg := groups[i]
		blobs := make([][]byte, len(parts))
		size := 0
		for j := range parts {
			blobs[j] = split[j][kg]
			size += len(blobs[j])
		}
		var err error
		if merged[i], err = mergeGroup(make([]byte, 0, size), kg, blobs); err != nil {
			return fmt.Errorf("merge incremental chain: key group %d: %w", kg, err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	size := 0
	for _, m := range merged {
		size += len(m)
	}
	out := make([]byte, 0, size)
	for _, m := range merged {
		out = append(out, m...)
	}
	return out, nil
}

// mergedState is one state of a key group while a chain is merged.
type mergedState struct {
	name    string
	kind    Kind
	entries []wireEntry // sorted by (key, namespace)
}

// mergeGroup appends the merged blob of key group kg to dst: blobs[i] is
// its blob in part i of the chain, nil where the part has none.
func mergeGroup(dst []byte, kg int, blobs [][]byte) ([]byte, error) {
	var states []mergedState
	var timers []wireTimers
	for i, blob := range blobs {
		if blob == nil {
			if i > 0 {
				timers = nil // no blob in a delta part: no timers
			}
			continue
		}
		got, flags, payload, err := parseBlobFrame(blob)
		if err != nil {
			return dst, err
		}
		if got != kg {
			return dst, fmt.Errorf("%w: blob of key group %d", ErrCorrupt, got)
		}
		if want := deltaFlag(i > 0); flags != want {
			return dst, fmt.Errorf("%w: part %d of the chain has blob flags %#x, expected %#x", ErrCorrupt, i+1, flags, want)
		}
		// Keys alias the blobs, which outlive the merge: it copies them.
		var p wirePayload
		if err := decodePayload(payload, &p, true); err != nil {
			return dst, err
		}
		timers = p.Timers
		for _, ws := range p.States {
			j, found := slices.BinarySearchFunc(states, ws.Name, func(m mergedState, name string) int { return cmpString(m.name, name) })
			if !found {
				states = slices.Insert(states, j, mergedState{name: ws.Name, kind: ws.Kind})
			} else if states[j].kind != ws.Kind {
				return dst, fmt.Errorf("%w: state %q is %s in part %d of the chain, %s before", ErrCorrupt, ws.Name, ws.Kind, i+1, states[j].kind)
			}
			if i == 0 {
				states[j].entries = ws.Entries
				continue
			}
			if states[j].entries, err = applyDelta(states[j].entries, ws.Entries); err != nil {
				return dst, fmt.Errorf("state %q in part %d of the chain: %w", ws.Name, i+1, err)
			}
		}
	}
	start := len(dst)
	dst = beginBlob(dst, kg)
	dst = AppendCBORHead(dst, majorMap, 2)
	dst = AppendCBORHead(dst, majorUint, 1)
	n := 0
	for _, st := range states {
		if len(st.entries) > 0 {
			n++
		}
	}
	dst = AppendCBORHead(dst, majorArray, uint64(n))
	for _, st := range states {
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
	dst = AppendCBORHead(dst, majorArray, uint64(len(timers)))
	for _, wt := range timers {
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
	if n == 0 && len(timers) == 0 {
		return dst[:start], nil
	}
	dst, _ = endBlob(dst, start)
	return dst, nil
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
