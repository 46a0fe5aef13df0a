package agg

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"reflect"
	"slices"

	"github.com/fxamacker/cbor/v2"

	"github.com/eddy-stream/eddy/pipeline"
	"github.com/eddy-stream/eddy/statestore"
)

// Snapshot format (CBOR, RFC 8949), version 1:
//
//	row   = [1, rows, entry...]               one entry per spec, in order
//	entry = [func, n]                         count
//	      | [func, n, hi, lo, s, c, nf]       sum, avg: int128 hi:lo, Neumaier sum s+c
//	      | [func, n, value]                  min, max, first, last, reduce
//	      | [func, n, [value...]]             collect
//	      | [func, n, [key, mult, ...]]       count_distinct: byte-string keys, sorted
//
// func is the Func number; s and c are float64. Values are CBOR data items:
// integers, floats, strings, bools, null, byte strings, lists, maps with
// string keys (sorted), and times (tag 0, RFC 3339 with nanoseconds). The
// encoding is deterministic: equal states encode to equal bytes.
//
// The envelope, counters and scalar values are written and read here by hand
// (a snapshot is taken for every key and window, so this is hot); lists,
// maps and other values go through fxamacker/cbor.
const snapshotVersion = 1

var (
	encMode = func() cbor.UserBufferEncMode {
		opts := cbor.CoreDetEncOptions()
		opts.Time = cbor.TimeRFC3339Nano
		opts.TimeTag = cbor.EncTagRequired
		em, err := opts.UserBufferEncMode()
		if err != nil {
			panic(err)
		}
		return em
	}()
	decMode = func() cbor.DecMode {
		dm, err := cbor.DecOptions{
			DefaultMapType:   reflect.TypeFor[map[string]any](),
			UTF8:             cbor.UTF8DecodeInvalid, // record strings need not be valid UTF-8
			MaxNestedLevels:  maxKeyDepth + 16,
			MaxArrayElements: math.MaxInt32,
			MaxMapPairs:      math.MaxInt32,
		}.DecMode()
		if err != nil {
			panic(err)
		}
		return dm
	}()
)

// CBOR major types.
const (
	majUint  = 0
	majNeg   = 1
	majBytes = 2
	majText  = 3
	majArray = 4
	majOther = 7
)

// MarshalCBOR encodes the row's state (not its specs) for a snapshot; see
// AppendCBOR.
func (r *Row) MarshalCBOR() ([]byte, error) { return r.AppendCBOR(nil) }

// AppendCBOR appends the row's state to dst, so that many rows can share one
// buffer. It fails when a held value (min, max, first, last, collect,
// reduce) is not data, such as a function.
func (r *Row) AppendCBOR(dst []byte) ([]byte, error) {
	if !r.ok {
		return dst, ErrNotCompiled
	}
	b := statestore.AppendCBORHead(dst, majArray, uint64(2+len(r.accs)))
	b = statestore.AppendCBORHead(b, majUint, snapshotVersion)
	b = statestore.AppendCBORInt(b, r.rows)
	var err error
	for i := range r.accs {
		a, f := &r.accs[i], r.specs[i].Func
		switch f {
		case FuncCount:
			b = statestore.AppendCBORHead(b, majArray, 2)
		case FuncSum, FuncAvg:
			b = statestore.AppendCBORHead(b, majArray, 7)
		default:
			b = statestore.AppendCBORHead(b, majArray, 3)
		}
		b = statestore.AppendCBORHead(b, majUint, uint64(f))
		b = statestore.AppendCBORInt(b, a.n)
		switch f {
		case FuncCount:
		case FuncSum, FuncAvg:
			b = statestore.AppendCBORInt(b, a.sum.hi)
			b = statestore.AppendCBORHead(b, majUint, a.sum.lo)
			b = appendFloat(b, a.fs.s)
			b = appendFloat(b, a.fs.c)
			b = statestore.AppendCBORInt(b, a.nf)
		case FuncCollect:
			b = statestore.AppendCBORHead(b, majArray, uint64(len(a.ext.list)))
			for _, v := range a.ext.list {
				if b, err = appendValue(b, v); err != nil {
					return dst, err
				}
			}
		case FuncCountDistinct:
			keys := make([]string, 0, len(a.ext.set))
			for k := range a.ext.set {
				keys = append(keys, k)
			}
			slices.Sort(keys)
			b = statestore.AppendCBORHead(b, majArray, uint64(2*len(keys)))
			for _, k := range keys {
				b = statestore.AppendCBORHead(b, majBytes, uint64(len(k)))
				b = append(b, k...)
				b = statestore.AppendCBORInt(b, *a.ext.set[k])
			}
		case FuncReduce:
			if b, err = appendValue(b, a.v); err != nil {
				return dst, err
			}
		default:
			if b, err = appendValue(b, a.v); err != nil {
				return dst, err
			}
		}
	}
	return b, nil
}

func appendString(b []byte, s string) []byte {
	return append(statestore.AppendCBORHead(b, majText, uint64(len(s))), s...)
}

func appendFloat(b []byte, f float64) []byte {
	return binary.BigEndian.AppendUint64(append(b, majOther<<5|27), math.Float64bits(f))
}

// appendValue encodes a held value: scalars here, the rest with encMode.
func appendValue(b []byte, v any) ([]byte, error) {
	switch x := v.(type) {
	case nil:
		return append(b, 0xf6), nil
	case bool:
		if x {
			return append(b, 0xf5), nil
		}
		return append(b, 0xf4), nil
	case string:
		return appendString(b, x), nil
	case float64:
		return appendFloat(b, x), nil
	case int:
		return statestore.AppendCBORInt(b, int64(x)), nil
	case int64:
		return statestore.AppendCBORInt(b, x), nil
	}
	buf := bytes.NewBuffer(b)
	if err := encMode.MarshalToBuffer(v, buf); err != nil {
		return b, fmt.Errorf("encode aggregate state: %w", err)
	}
	return buf.Bytes(), nil
}

// UnmarshalCBOR restores a state written by MarshalCBOR into r, a row made
// by NewAccs with the same specs (same functions in the same order, else
// ErrMismatch; compare Specs.Signature to check names and arguments too).
// On an error r is unchanged. The row must not be in use meanwhile.
//
// Values come back as CBOR can tell them: integers as int (uint64 above
// MaxInt64), floats as float64, maps as map[string]any, lists as []any,
// times as time.Time.
func (r *Row) UnmarshalCBOR(data []byte) error {
	if !r.ok {
		return ErrNotCompiled
	}
	d := decoder{b: data}
	n := d.array()
	if v := d.uint(); d.err == nil && v != snapshotVersion {
		return fmt.Errorf("decode aggregate state: unknown format version %d", v)
	}
	rows := d.int()
	if d.err == nil && n != uint64(2+len(r.accs)) {
		return fmt.Errorf("%w: the snapshot holds %d aggregates, the step declares %d", ErrMismatch, int64(n)-2, len(r.accs))
	}
	accs := make([]acc, len(r.accs))
	for i := range accs {
		if d.err != nil {
			break
		}
		if err := d.acc(r.specs[i].Func, &accs[i]); err != nil {
			return fmt.Errorf("decode aggregate %s: %w", r.specs[i].Name, err)
		}
	}
	if d.err == nil && len(d.b) > 0 {
		d.err = errors.New("trailing bytes")
	}
	if d.err != nil {
		return fmt.Errorf("decode aggregate state: %w", d.err)
	}
	r.rows = rows
	copy(r.accs, accs) // r.accs may share r's allocation (allocWith)
	return nil
}

// decoder reads the hand-written parts of a snapshot. The first error
// sticks: later reads return zeros.
type decoder struct {
	b   []byte
	err error
}

var errTruncated = errors.New("truncated")

func (d *decoder) fail(format string, args ...any) {
	if d.err == nil {
		d.err = fmt.Errorf(format, args...)
	}
}

// head reads an item head of definite length: its major type, additional
// info and argument.
func (d *decoder) head() (major, info byte, arg uint64) {
	if d.err != nil {
		return 0, 0, 0
	}
	major, info, arg, rest, err := statestore.ReadCBORHead(d.b)
	switch {
	case err != nil:
		d.err = err
		return 0, 0, 0
	case info == 31:
		d.fail("unsupported CBOR item 0x%02x", d.b[0])
		return 0, 0, 0
	}
	d.b = rest
	return major, info, arg
}

func (d *decoder) want(major, got byte, what string) bool {
	if got != major && d.err == nil {
		d.fail("expected %s", what)
	}
	return d.err == nil
}

func (d *decoder) array() uint64 {
	m, _, n := d.head()
	if !d.want(majArray, m, "an array") {
		return 0
	}
	return n
}

func (d *decoder) uint() uint64 {
	m, _, n := d.head()
	if !d.want(majUint, m, "an unsigned integer") {
		return 0
	}
	return n
}

func (d *decoder) int() int64 {
	m, _, n := d.head()
	if d.err != nil {
		return 0
	}
	if m != majUint && m != majNeg || n > math.MaxInt64 {
		d.fail("expected a 64-bit integer")
		return 0
	}
	if m == majNeg {
		return ^int64(n)
	}
	return int64(n)
}

func (d *decoder) float() float64 {
	m, info, n := d.head()
	if d.err != nil {
		return 0
	}
	switch {
	case m == majOther && info == 27:
		return math.Float64frombits(n)
	case m == majOther && info == 26:
		return float64(math.Float32frombits(uint32(n)))
	case m == majOther && info == 25:
		return half(uint16(n))
	}
	d.fail("expected a float")
	return 0
}

// half converts an IEEE 754 half-precision float.
func half(h uint16) float64 {
	sign := 1.0
	if h&0x8000 != 0 {
		sign = -1
	}
	exp, frac := int(h>>10&0x1f), float64(h&0x3ff)
	switch exp {
	case 0:
		return sign * math.Ldexp(frac, -24)
	case 0x1f:
		if frac != 0 {
			return math.NaN()
		}
		return math.Inf(int(sign))
	}
	return sign * math.Ldexp(1024+frac, exp-25)
}

// value reads a held value: scalars by hand, the rest with decMode.
func (d *decoder) value() any {
	if d.err != nil {
		return nil
	}
	if len(d.b) == 0 {
		d.err = errTruncated
		return nil
	}
	switch c := d.b[0]; {
	case c == 0xf6:
		d.b = d.b[1:]
		return nil
	case c == 0xf5 || c == 0xf4:
		d.b = d.b[1:]
		return c == 0xf5
	case c>>5 == majUint:
		n := d.uint()
		if n > math.MaxInt {
			return n
		}
		return int(n)
	case c>>5 == majNeg && c&31 <= 27:
		save := d.b
		if v := d.int(); d.err == nil {
			return int(v)
		}
		d.b, d.err = save, nil // below MinInt64: let the library decode it
	case c>>5 == majText:
		_, _, n := d.head()
		if d.err == nil && uint64(len(d.b)) < n {
			d.err = errTruncated
		}
		if d.err != nil {
			return nil
		}
		s := string(d.b[:n])
		d.b = d.b[n:]
		return s
	case c == 0xfb || c == 0xfa || c == 0xf9:
		return d.float()
	}
	var v any
	rest, err := decMode.UnmarshalFirst(d.b, &v)
	if err != nil {
		d.err = err
		return nil
	}
	d.b = rest
	return pipeline.NormalizeDecoded(v)
}

func (d *decoder) acc(f Func, a *acc) error {
	parts := d.array()
	got := Func(d.uint())
	if d.err != nil {
		return d.err
	}
	if got != f {
		return fmt.Errorf("%w: the snapshot holds %s, the step declares %s", ErrMismatch, got, f)
	}
	want := uint64(3)
	switch f {
	case FuncCount:
		want = 2
	case FuncSum, FuncAvg:
		want = 7
	}
	if parts != want {
		return fmt.Errorf("%s state has %d parts, want %d", f, parts, want)
	}
	a.n = d.int()
	switch f {
	case FuncCount:
	case FuncSum, FuncAvg:
		a.sum.hi = d.int()
		a.sum.lo = d.uint()
		a.fs.s = d.float()
		a.fs.c = d.float()
		a.nf = d.int()
	case FuncCollect:
		n := d.array()
		if n > uint64(len(d.b)) {
			d.err = errTruncated
		}
		x := &extra{}
		if n > 0 && d.err == nil {
			x.list = make([]any, 0, n)
		}
		for i := uint64(0); i < n && d.err == nil; i++ {
			x.list = append(x.list, d.value())
		}
		a.ext = x
	case FuncCountDistinct:
		n := d.array()
		if n%2 != 0 || n > uint64(len(d.b)) {
			d.fail("bad count_distinct entries")
		}
		x := &extra{set: make(map[string]*int64, n/2)}
		for i := uint64(0); i < n && d.err == nil; i += 2 {
			m, _, l := d.head()
			if !d.want(majBytes, m, "a byte string") {
				break
			}
			if uint64(len(d.b)) < l {
				d.err = errTruncated
				break
			}
			k := string(d.b[:l])
			d.b = d.b[l:]
			x.mergeKey(k, d.int())
		}
		a.ext = x
	case FuncReduce:
		a.v = d.value()
	default:
		a.v = d.value()
	}
	return d.err
}
