package statestore

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"unsafe"
)

// decodePayload decodes a blob's payload (wirePayload) into p: its
// structure by hand, each value as the raw bytes of its data item
// (rawItem, pointing into payload), as decMode did with the struct tags,
// without its reflection and its checks on every value's bytes twice
// (once for well-formedness, once to decode). With alias, keys and
// namespaces point into payload too (a merge, which only compares and
// copies them); without, they are copied (a restore keeps them).
//
// It accepts what this package writes and rejects, as ErrCorrupt, what is
// not well-formed CBOR of that shape: arrays and strings of definite
// length, entries of four items, unsigned integers as the payload's keys
// (1 and 2; others are skipped, with their values). Values may be any
// well-formed data item, nested no deeper than decMode allows.
func decodePayload(payload []byte, p *wirePayload, alias bool) error {
	d := wireDecoder{b: payload, alias: alias}
	*p = wirePayload{}
	n := d.count(majorMap)
	for i := uint64(0); i < n && d.err == nil; i++ {
		switch d.uint() {
		case 1:
			p.States = d.states()
		case 2:
			p.Timers = d.timers()
		default:
			d.skip(1)
		}
	}
	if d.err == nil && len(d.b) > 0 {
		d.fail("%d bytes after the payload", len(d.b))
	}
	if d.err != nil {
		*p = wirePayload{}
		return fmt.Errorf("%w: payload at byte %d: %v", ErrCorrupt, len(payload)-len(d.b), d.err)
	}
	return nil
}

// maxWireNesting bounds the nesting of data items, counted from the
// payload's map, as decMode's MaxNestedLevels does.
const maxWireNesting = 256

// wireDecoder reads a payload; the first error sticks, and later reads
// return zeros.
type wireDecoder struct {
	b     []byte
	alias bool
	err   error
}

func (d *wireDecoder) fail(format string, args ...any) {
	if d.err == nil {
		d.err = fmt.Errorf(format, args...)
	}
}

var errWireTruncated = errors.New("truncated")

// ReadCBORHead reads the head of the CBOR data item that b starts with: its
// major type, additional info (31: of indefinite length, or a break, with
// argument 0), argument, and the bytes after the head. It fails when b is
// empty or ends within the head, and on reserved additional info (28–30).
// For the hand-written decoders of snapshots, aggregate rows and
// write-ahead committables. Pure.
func ReadCBORHead(b []byte) (major, info byte, arg uint64, rest []byte, err error) {
	if len(b) == 0 {
		return 0, 0, 0, b, errWireTruncated
	}
	major, info = b[0]>>5, b[0]&31
	size := 0
	switch {
	case info < 24:
		return major, info, uint64(info), b[1:], nil
	case info <= 27:
		size = 1 << (info - 24)
	case info == 31:
		return major, info, 0, b[1:], nil
	default:
		return 0, 0, 0, b, fmt.Errorf("reserved CBOR head 0x%02x", b[0])
	}
	if len(b) < 1+size {
		return 0, 0, 0, b, errWireTruncated
	}
	switch size {
	case 1:
		arg = uint64(b[1])
	case 2:
		arg = uint64(binary.BigEndian.Uint16(b[1:]))
	case 4:
		arg = uint64(binary.BigEndian.Uint32(b[1:]))
	default:
		arg = binary.BigEndian.Uint64(b[1:])
	}
	return major, info, arg, b[1+size:], nil
}

// head reads a data item's head: major type, additional info (31: a
// string, array or map of indefinite length) and argument.
func (d *wireDecoder) head() (major, info byte, arg uint64) {
	if d.err != nil {
		return 0, 0, 0
	}
	major, info, arg, rest, err := ReadCBORHead(d.b)
	switch {
	case err != nil:
		d.err = err
		return 0, 0, 0
	case info == 31 && (major < majorBytes || major > majorMap):
		d.fail("malformed head 0x%02x", d.b[0])
		return 0, 0, 0
	}
	d.b = rest
	return major, info, arg
}

// count reads the head of an array or map of definite length and returns
// its number of items (of pairs, for a map); each takes a byte at least.
func (d *wireDecoder) count(want byte) uint64 {
	major, info, n := d.head()
	switch {
	case d.err != nil:
		return 0
	case major != want || info == 31:
		d.fail("expected a %s of definite length, found major type %d", majorName(want), major)
		return 0
	case n > uint64(len(d.b)):
		d.err = errWireTruncated
		return 0
	}
	return n
}

func majorName(major byte) string {
	if major == majorMap {
		return "map"
	}
	return "array"
}

// items reads an array's head and checks that it holds n items.
func (d *wireDecoder) items(what string, n uint64) {
	if got := d.count(majorArray); d.err == nil && got != n {
		d.fail("%s of %d items, expected %d", what, got, n)
	}
}

func (d *wireDecoder) uint() uint64 {
	major, _, n := d.head()
	if d.err == nil && major != majorUint {
		d.fail("expected an unsigned integer, found major type %d", major)
	}
	return n
}

func (d *wireDecoder) int() int64 {
	major, _, n := d.head()
	switch {
	case d.err != nil:
		return 0
	case (major != majorUint && major != majorNeg) || n > math.MaxInt64:
		d.fail("expected a 64-bit integer")
		return 0
	case major == majorNeg:
		return -1 - int64(n)
	}
	return int64(n)
}

// small reads an unsigned integer of at most 255 (a Kind, a Domain).
func (d *wireDecoder) small() uint8 {
	n := d.uint()
	if d.err == nil && n > math.MaxUint8 {
		d.fail("%d is out of range", n)
	}
	return uint8(n)
}

// str reads a text string of definite length, not checked for UTF-8
// (keys are bytes): a copy, or with alias, a string that points into the
// payload.
func (d *wireDecoder) str(alias bool) string {
	major, info, n := d.head()
	switch {
	case d.err != nil:
		return ""
	case major != majorText || info == 31:
		d.fail("expected a text string of definite length, found major type %d", major)
		return ""
	case n > uint64(len(d.b)):
		d.err = errWireTruncated
		return ""
	case n == 0:
		return ""
	}
	b := d.b[:n]
	d.b = d.b[n:]
	if alias {
		return unsafe.String(&b[0], len(b))
	}
	return string(b)
}

// raw reads a well-formed data item and returns its bytes.
func (d *wireDecoder) raw() rawItem {
	start := d.b
	d.skip(5) // in the payload's map, states, a state, its entries, an entry
	if d.err != nil {
		return nil
	}
	n := len(start) - len(d.b)
	return rawItem(start[:n:n])
}

// skip reads a well-formed data item nested depth levels deep.
func (d *wireDecoder) skip(depth int) {
	if depth > maxWireNesting {
		d.fail("data items nested more than %d levels deep", maxWireNesting)
		return
	}
	major, info, n := d.head()
	if d.err != nil {
		return
	}
	if info == 31 {
		d.indefinite(major, depth)
		return
	}
	switch major {
	case majorBytes, majorText:
		if n > uint64(len(d.b)) {
			d.err = errWireTruncated
			return
		}
		d.b = d.b[n:]
	case majorArray, majorMap:
		if major == majorMap {
			if n > math.MaxUint64/2 {
				d.err = errWireTruncated
				return
			}
			n *= 2
		}
		for i := uint64(0); i < n && d.err == nil; i++ {
			d.skip(depth + 1)
		}
	case majorTag:
		d.tagContent(n)
		d.skip(depth + 1)
	case majorSimple:
		if info == 24 && n < 32 {
			d.fail("malformed simple value %d", n)
		}
	}
}

// tagContent checks the type of the content of a tag that CBOR defines
// for one type (RFC 8949 3.4): a date string, an epoch time, a bignum.
func (d *wireDecoder) tagContent(tag uint64) {
	if len(d.b) == 0 || tag > 3 {
		return
	}
	c := d.b[0]
	var ok bool
	switch tag {
	case 0:
		ok = c>>5 == majorText
	case 1:
		ok = c>>5 == majorUint || c>>5 == majorNeg || (c >= 0xf9 && c <= 0xfb)
	default:
		ok = c>>5 == majorBytes
	}
	if !ok {
		d.fail("tag %d with content of major type %d", tag, c>>5)
	}
}

// indefinite reads the rest of a string, array or map of indefinite
// length, up to its break.
func (d *wireDecoder) indefinite(major byte, depth int) {
	for items := 0; d.err == nil; items++ {
		if len(d.b) == 0 {
			d.err = errWireTruncated
			return
		}
		if d.b[0] == 0xff {
			d.b = d.b[1:]
			if major == majorMap && items%2 != 0 {
				d.fail("map of indefinite length with a key without a value")
			}
			return
		}
		if major == majorBytes || major == majorText {
			// Chunks: strings of the same type and of definite length.
			if d.b[0]>>5 != major || d.b[0]&31 == 31 {
				d.fail("malformed chunk of a string of indefinite length")
				return
			}
		}
		d.skip(depth + 1)
	}
}

// states reads a payload's [* state].
func (d *wireDecoder) states() []wireState {
	n := d.count(majorArray)
	// A state takes 4 bytes at least.
	out := make([]wireState, 0, min(n, uint64(len(d.b)/4)))
	for i := uint64(0); i < n && d.err == nil; i++ {
		var s wireState
		d.items("state", 3)
		s.Name = d.str(false)
		s.Kind = Kind(d.small())
		m := d.count(majorArray)
		// An entry takes 5 bytes at least.
		s.Entries = make([]wireEntry, 0, min(m, uint64(len(d.b)/5)))
		for j := uint64(0); j < m && d.err == nil; j++ {
			d.items("entry", 4)
			var e wireEntry
			e.Key = d.str(d.alias)
			e.NS = d.str(d.alias)
			e.TS = d.int()
			e.Value = d.raw()
			s.Entries = append(s.Entries, e)
		}
		out = append(out, s)
	}
	return out
}

// timers reads a payload's [* timers].
func (d *wireDecoder) timers() []wireTimers {
	n := d.count(majorArray)
	out := make([]wireTimers, 0, min(n, uint64(len(d.b)/3)))
	for i := uint64(0); i < n && d.err == nil; i++ {
		var ts wireTimers
		d.items("timers", 2)
		ts.Name = d.str(false)
		m := d.count(majorArray)
		ts.Timers = make([]wireTimer, 0, min(m, uint64(len(d.b)/5)))
		for j := uint64(0); j < m && d.err == nil; j++ {
			d.items("timer", 4)
			var t wireTimer
			t.Domain = Domain(d.small())
			t.TS = d.int()
			t.Key = d.str(d.alias)
			t.NS = d.str(d.alias)
			ts.Timers = append(ts.Timers, t)
		}
		out = append(out, ts)
	}
	return out
}

// SplitCBORItem returns the well-formed CBOR data item that b starts with,
// and what follows it; ErrCorrupt when b does not start with one. It
// accepts what a snapshot's payload may hold as a value (nested at most
// 256 levels deep, any number of elements), for the hand-written decoders
// of values (UnmarshalCBOR, CheckCBOR) that keep part of their encoding
// raw. Pure.
func SplitCBORItem(b []byte) (item, rest []byte, err error) {
	d := wireDecoder{b: b}
	d.skip(0)
	if d.err != nil {
		return nil, b, fmt.Errorf("%w: %v", ErrCorrupt, d.err)
	}
	n := len(b) - len(d.b)
	return b[:n:n], d.b, nil
}

// DecodeCBORInt decodes item, one CBOR integer, as an int64; false when it
// is something else, or out of range. Pure.
func DecodeCBORInt(item []byte) (int64, bool) {
	d := wireDecoder{b: item}
	v := d.int()
	return v, d.err == nil && len(d.b) == 0
}
