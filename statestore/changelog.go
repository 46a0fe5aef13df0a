package statestore

import (
	"cmp"
	"fmt"
	"slices"
)

// Changelog items: a key group's blob as separate items, one per state
// entry and one per timer, so that a log compacted by key (Kafka's
// changelog topics in group mode, docs/group.md) keeps each entry's last
// value and a tombstone removes one. An item's key names the entry or the
// timer within its key group; its value is the rest of the entry:
//
//	entry key   = [1, state: tstr, key: tstr, ns: tstr]
//	entry value = [kind: uint, ts: int, value: any]
//	timer key   = [2, timers: tstr, domain: uint, ts: int, key: tstr, ns: tstr]
//	timer value = null
//
// The parts are the blob format's (format.go), and 1 and 2 are the keys of
// the payload's states and timers. BlobItems yields the items of a full or
// a delta blob, and ItemsBlob encodes the full blob of a key group from its
// items again: the bytes a full snapshot of the same state writes.

// BlobItem is an entry or a timer of a key group's blob as a changelog
// holds it: Key names it within its key group, Value is its encoding, nil
// for an entry that a delta blob deletes.
type BlobItem struct {
	Key, Value []byte
}

// IsTimerItem reports whether key is the key of a timer's item (else it
// is an entry's, or no item's).
func IsTimerItem(key []byte) bool {
	return len(key) > 1 && key[0] == majorArray<<5|6 && key[1] == 2
}

// timerItemValue is the value of every timer item: a timer is its key.
var timerItemValue = []byte{0xf6}

// BlobItems calls fn with each item of blob, a full or a delta blob (one
// that Snapshot.WriteTo or SplitBlobs gave), after verifying its frame and
// checksum: its entries, sorted by state, key and namespace, then its
// timers. It returns the blob's key group and whether it is a delta blob:
// then an entry with a nil Value is deleted, an entry that it does not
// yield keeps its value, and its timers replace the key group's. Keys are
// new buffers; values alias blob. fn's error ends the iteration and is
// returned.
func BlobItems(blob []byte, fn func(BlobItem) error) (kg int, delta bool, err error) {
	kg, flags, payload, err := parseBlobFrame(blob)
	if err != nil {
		return 0, false, err
	}
	var p wirePayload
	if err := decodePayload(payload, &p, true); err != nil {
		return kg, false, fmt.Errorf("key group %d: %w", kg, err)
	}
	delta = flags&blobDelta != 0
	for _, st := range p.States {
		for _, e := range st.Entries {
			key := AppendCBORHead(nil, majorArray, 4)
			key = AppendCBORHead(key, majorUint, 1)
			key = appendText(key, st.Name)
			key = appendText(key, e.Key)
			key = appendText(key, e.NS)
			var value []byte
			if !delta || !isTombstone(e.Value) {
				value = AppendCBORHead(make([]byte, 0, 2+intSize(e.TS)+len(e.Value)), majorArray, 3)
				value = AppendCBORHead(value, majorUint, uint64(st.Kind))
				value = AppendCBORInt(value, e.TS)
				value = append(value, e.Value...)
			}
			if err := fn(BlobItem{Key: key, Value: value}); err != nil {
				return kg, delta, err
			}
		}
	}
	for _, wt := range p.Timers {
		for _, t := range wt.Timers {
			key := AppendCBORHead(nil, majorArray, 6)
			key = AppendCBORHead(key, majorUint, 2)
			key = appendText(key, wt.Name)
			key = AppendCBORHead(key, majorUint, uint64(t.Domain))
			key = AppendCBORInt(key, t.TS)
			key = appendText(key, t.Key)
			key = appendText(key, t.NS)
			if err := fn(BlobItem{Key: key, Value: timerItemValue}); err != nil {
				return kg, delta, err
			}
		}
	}
	return kg, delta, nil
}

// ItemsBlob returns the full blob of key group kg that holds items, the
// entries and timers that BlobItems yields (in any order; each named once;
// none deleted), byte for byte what a full snapshot of that state writes;
// nil when items is empty. Keys and values are checked (ErrCorrupt), and
// copied: the blob is a new buffer.
func ItemsBlob(kg int, items []BlobItem) ([]byte, error) {
	g := mergedGroup{kg: kg}
	for i, it := range items {
		if err := g.addItem(it); err != nil {
			return nil, fmt.Errorf("key group %d: item %d of %d: %w", kg, i+1, len(items), err)
		}
	}
	for i := range g.states {
		st := &g.states[i]
		slices.SortFunc(st.entries, func(a, b wireEntry) int { return cmpEntry(&a, &b) })
		for j := 1; j < len(st.entries); j++ {
			if cmpEntry(&st.entries[j-1], &st.entries[j]) == 0 {
				return nil, fmt.Errorf("key group %d: %w: entry (%q, %q) of state %q twice", kg, ErrCorrupt, st.entries[j].Key, st.entries[j].NS, st.name)
			}
		}
	}
	for _, wt := range g.timers {
		slices.SortFunc(wt.Timers, cmpTimer)
		for j := 1; j < len(wt.Timers); j++ {
			if cmpTimer(wt.Timers[j-1], wt.Timers[j]) == 0 {
				return nil, fmt.Errorf("key group %d: %w: timer of %q twice", kg, ErrCorrupt, wt.Name)
			}
		}
	}
	g.size = g.encodedSize()
	if g.size == 0 {
		return nil, nil
	}
	out := g.appendTo(make([]byte, 0, g.size))
	if len(out) != g.size {
		return nil, fmt.Errorf("key group %d: encoded %d bytes, %d expected", kg, len(out), g.size)
	}
	return out, nil
}

func cmpTimer(a, b wireTimer) int {
	if c := cmp.Compare(a.Domain, b.Domain); c != 0 {
		return c
	}
	if c := cmp.Compare(a.TS, b.TS); c != 0 {
		return c
	}
	if c := cmpString(a.Key, b.Key); c != 0 {
		return c
	}
	return cmpString(a.NS, b.NS)
}

// addItem decodes an item into the group's states or timers, unsorted.
func (g *mergedGroup) addItem(it BlobItem) error {
	d := wireDecoder{b: it.Key}
	n := d.count(majorArray)
	kind := d.uint()
	switch {
	case d.err != nil:
	case kind == 1 && n == 4:
		name, key, ns := d.str(false), d.str(false), d.str(false)
		v := wireDecoder{b: it.Value}
		v.items("entry value", 3)
		k := Kind(v.small())
		ts := v.int()
		value := v.raw()
		switch {
		case v.err != nil:
			d.fail("entry value: %v", v.err)
		case len(v.b) > 0:
			d.fail("%d bytes after the entry value", len(v.b))
		case name == "" || !k.valid():
			d.fail("state %q of kind %d", name, k)
		case isTombstone(value):
			d.fail("a deleted entry")
		}
		if d.err != nil {
			break
		}
		j, found := slices.BinarySearchFunc(g.states, name, func(m mergedState, name string) int { return cmpString(m.name, name) })
		if !found {
			g.states = slices.Insert(g.states, j, mergedState{name: name, kind: k})
		} else if g.states[j].kind != k {
			d.fail("state %q is %s in one entry, %s in another", name, k, g.states[j].kind)
			break
		}
		g.states[j].entries = append(g.states[j].entries, wireEntry{Key: key, NS: ns, TS: ts, Value: slices.Clone(value)})
	case kind == 2 && n == 6:
		name := d.str(false)
		t := wireTimer{Domain: Domain(d.small()), TS: d.int(), Key: d.str(false), NS: d.str(false)}
		if d.err == nil && t.Domain > ProcessingTime {
			d.fail("timer domain %d", t.Domain)
		}
		if d.err != nil {
			break
		}
		j, found := slices.BinarySearchFunc(g.timers, name, func(w wireTimers, name string) int { return cmpString(w.Name, name) })
		if !found {
			g.timers = slices.Insert(g.timers, j, wireTimers{Name: name})
		}
		g.timers[j].Timers = append(g.timers[j].Timers, t)
	default:
		d.fail("an item key of %d parts, kind %d", n, kind)
	}
	if d.err == nil && len(d.b) > 0 {
		d.fail("%d bytes after the item key", len(d.b))
	}
	if d.err != nil {
		return fmt.Errorf("%w: %v", ErrCorrupt, d.err)
	}
	return nil
}
