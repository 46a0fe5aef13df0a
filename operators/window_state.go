package operators

import (
	"fmt"
	"math"
	"slices"

	"github.com/fxamacker/cbor/v2"

	"github.com/eddy-stream/eddy/operators/agg"
	"github.com/eddy-stream/eddy/statestore"
)

// The keyed state of a window step lives in the subtask's statestore
// backend, addressed by (key, namespace). A window, pane or session
// namespace is a tag byte and an int64 in 10 bytes of 7 bits each
// (big-endian, sign bit flipped so that the bytes sort like the numbers):
// ASCII, because snapshots store namespaces as CBOR text, which must be
// valid UTF-8.
const (
	tagEvent   = 'e' // an event-time window or pane: its start
	tagProc    = 'p' // a processing-time window or pane: its start
	tagCount   = 'c' // a count window pane: its index
	tagGlobal  = 'g' // the global window (no number)
	tagCounter = 'n' // count windows: the key's record counter (no number)

	nsLen = 11
)

func encodeNS(tag byte, v int64) string {
	var b [nsLen]byte
	b[0] = tag
	u := uint64(v) ^ (1 << 63)
	for i := nsLen - 1; i >= 1; i-- {
		b[i] = byte(u & 0x7f)
		u >>= 7
	}
	return string(b[:])
}

// decodeNS splits a namespace into its tag and number (0 for the
// namespaces without one).
func decodeNS(ns string) (tag byte, v int64) {
	if ns == "" {
		return 0, 0
	}
	if len(ns) != nsLen {
		return ns[0], 0
	}
	var u uint64
	for i := 1; i < nsLen; i++ {
		u = u<<7 | uint64(ns[i])
	}
	return ns[0], int64(u ^ (1 << 63))
}

// nsCache hands out the namespace strings of one tag without allocating for
// the ones in use: records of a batch mostly fall into few windows.
type nsCache struct {
	tag   byte
	lastV int64
	lastS string
	m     map[int64]string
}

func newNSCache(tag byte) *nsCache { return &nsCache{tag: tag, m: map[int64]string{}} }

func (c *nsCache) get(v int64) string {
	if c.lastS != "" && c.lastV == v {
		return c.lastS
	}
	s, ok := c.m[v]
	if !ok {
		if len(c.m) >= 1<<14 {
			clear(c.m)
		}
		s = encodeNS(c.tag, v)
		c.m[v] = s
	}
	c.lastV, c.lastS = v, s
	return s
}

// accBox is the accumulator of one key in one window, pane or session: the
// aggregate row plus what the operator needs besides. It is the ACC of the
// window's AggregatingState, so the backend snapshots it (MarshalCBOR) and
// copies it on write after a snapshot (windowOp.copyBox).
type accBox struct {
	// row is nil after a restore until first used: raw holds its encoding,
	// which needs the step's specs to decode (windowOp.rowOf).
	row *agg.Row
	raw cbor.RawMessage
	// maxTime is the greatest event time added (pipeline.NoTime: none).
	maxTime int64
}

// MarshalCBOR encodes the box for a snapshot; see AppendCBOR.
func (b *accBox) MarshalCBOR() ([]byte, error) {
	return b.AppendCBOR(make([]byte, 0, 64+len(b.raw)))
}

// AppendCBOR appends the box's snapshot encoding, the array [row, maxTime]
// (decodeBox reads it), to dst
// in one pass (the array header, the row, the time): snapshots encode one
// box per key and window, straight into the snapshot's buffer
// (statestore.CBORAppender). It runs on the goroutine that encodes the
// snapshot, reading a box that the task no longer writes (the backend
// copies it first).
func (b *accBox) AppendCBOR(dst []byte) ([]byte, error) {
	dst = append(dst, 0x82) // an array of two items
	if b.row != nil {
		var err error
		if dst, err = b.row.AppendCBOR(dst); err != nil {
			return dst, err
		}
	} else {
		dst = append(dst, b.raw...)
	}
	return statestore.AppendCBORInt(dst, b.maxTime), nil
}

// UnmarshalCBOR keeps the row's encoding, a copy, for windowOp.rowOf.
func (b *accBox) UnmarshalCBOR(data []byte) error {
	row, maxTime, err := decodeBox(data)
	if err != nil {
		return err
	}
	b.row, b.raw, b.maxTime = nil, slices.Clone(row), maxTime
	return nil
}

// CheckCBOR fails exactly when UnmarshalCBOR fails, without copying the
// row (statestore.CBORChecker): the bbolt backend checks every restored
// accumulator with it.
func (*accBox) CheckCBOR(data []byte) error {
	_, _, err := decodeBox(data)
	return err
}

// decodeBox reads the box's encoding, as AppendCBOR writes it: an array
// of two items, any well-formed data item (the row, returned as it is,
// decoded later by the step's specs) and an integer. By hand: a restore
// decodes one box per key and window. The row may hold any number of
// values (collect, count_distinct), as the snapshot's payload may.
func decodeBox(data []byte) (row []byte, maxTime int64, err error) {
	fail := func(format string, args ...any) ([]byte, int64, error) {
		return nil, 0, fmt.Errorf("window accumulator: "+format, args...)
	}
	if len(data) == 0 || data[0] != 0x82 {
		return fail("not an array of two items")
	}
	row, rest, err := statestore.SplitCBORItem(data[1:])
	if err != nil {
		return fail("row: %w", err)
	}
	maxTime, ok := statestore.DecodeCBORInt(rest)
	if !ok {
		return fail("the max time is not one 64-bit integer, the accumulator's last item")
	}
	return row, maxTime, nil
}

// addIn is the input of the AggregatingState's Add: a record, and what the
// add reports back (the state's Add returns nothing).
type addIn struct {
	fields map[string]any
	time   int64
	// fresh is set when the add created the accumulator; box is the
	// accumulator after the add.
	fresh bool
	box   *accBox
	err   error
}

// satAdd adds without overflowing: window ends and cleanup times near the
// ends of the int64 range saturate.
func satAdd(a, b int64) int64 {
	s := a + b
	switch {
	case b > 0 && s < a:
		return math.MaxInt64
	case b < 0 && s > a:
		return math.MinInt64
	}
	return s
}

// floorMod is a mod b in [0, b) for b > 0, also for negative a.
func floorMod(a, b int64) int64 {
	m := a % b
	if m < 0 {
		m += b
	}
	return m
}

// alignedNext is the first multiple of every after now: when an early or
// periodic firing requested at now happens.
func alignedNext(now, every int64) int64 {
	return satAdd(now-floorMod(now, every), every)
}

// PrefetchHeld asks for the strings that the box's row holds
// (statestore.HeldPrefetcher); nothing for a restored row not yet decoded.
func (b *accBox) PrefetchHeld(level int) {
	if b != nil {
		b.row.PrefetchHeld(level)
	}
}

var _ statestore.HeldPrefetcher = (*accBox)(nil)
