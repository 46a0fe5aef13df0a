package agg

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/bits"
	"reflect"
	"slices"
	"strings"
	"time"
)

// numKind classifies a value for sum, avg, min and max.
type numKind uint8

const (
	notNum  numKind = iota
	intNum          // fits int64: every signed kind, unsigned up to MaxInt64
	uintNum         // an unsigned value above MaxInt64
	floatNum
)

// number classifies v. Integers of any Go kind are integers; float32 and
// float64 are floats even when integral (JSON numbers decode as float64).
func number(v any) (numKind, int64, uint64, float64) {
	switch x := v.(type) {
	case float64:
		return floatNum, 0, 0, x
	case int:
		return intNum, int64(x), 0, 0
	case int64:
		return intNum, x, 0, 0
	case int32:
		return intNum, int64(x), 0, 0
	case int16:
		return intNum, int64(x), 0, 0
	case int8:
		return intNum, int64(x), 0, 0
	case uint8:
		return intNum, int64(x), 0, 0
	case uint16:
		return intNum, int64(x), 0, 0
	case uint32:
		return intNum, int64(x), 0, 0
	case uint:
		if x > math.MaxInt64 {
			return uintNum, 0, uint64(x), 0
		}
		return intNum, int64(x), 0, 0
	case uint64:
		if x > math.MaxInt64 {
			return uintNum, 0, x, 0
		}
		return intNum, int64(x), 0, 0
	case float32:
		return floatNum, 0, 0, float64(x)
	}
	return notNum, 0, 0, 0
}

// int128 is an exact integer sum: two's complement, hi:lo.
type int128 struct {
	hi int64
	lo uint64
}

func (a *int128) addInt(x int64) {
	var carry uint64
	a.lo, carry = bits.Add64(a.lo, uint64(x), 0)
	a.hi += x>>63 + int64(carry)
}

func (a *int128) addUint(x uint64) {
	var carry uint64
	a.lo, carry = bits.Add64(a.lo, x, 0)
	a.hi += int64(carry)
}

func (a *int128) subInt(x int64) {
	var borrow uint64
	a.lo, borrow = bits.Sub64(a.lo, uint64(x), 0)
	a.hi -= x>>63 + int64(borrow)
}

func (a *int128) subUint(x uint64) {
	var borrow uint64
	a.lo, borrow = bits.Sub64(a.lo, x, 0)
	a.hi -= int64(borrow)
}

func (a *int128) add(b int128) {
	var carry uint64
	a.lo, carry = bits.Add64(a.lo, b.lo, 0)
	a.hi += b.hi + int64(carry)
}

// int64 returns a as an int64 when it fits.
func (a int128) int64() (int64, bool) {
	return int64(a.lo), a.hi == int64(a.lo)>>63
}

// float returns a rounded to the nearest float64.
func (a int128) float() float64 {
	if v, ok := a.int64(); ok {
		return float64(v)
	}
	neg := a.hi < 0
	hi, lo := uint64(a.hi), a.lo
	if neg { // negate: two's complement of the 128-bit value
		var borrow uint64
		lo, borrow = bits.Sub64(0, lo, 0)
		hi, _ = bits.Sub64(0, hi, borrow)
	}
	// Keep the top 64 significant bits, plus a sticky bit for the ones
	// shifted out, so float64(top) rounds like the exact value would.
	shift := 64 - bits.LeadingZeros64(hi)
	top := hi<<(64-shift) | lo>>shift
	if lo<<(64-shift) != 0 {
		top |= 1
	}
	f := math.Ldexp(float64(top), shift)
	if neg {
		return -f
	}
	return f
}

// kahan is a Neumaier-compensated float sum: s plus the running error c.
type kahan struct {
	s, c float64
}

func (k *kahan) add(x float64) {
	t := k.s + x
	var e float64
	if math.Abs(k.s) >= math.Abs(x) {
		e = (k.s - t) + x
	} else {
		e = (x - t) + k.s
	}
	if e == e { // NaN when t is infinite: the sum is t
		k.c += e
	}
	k.s = t
}

func (k *kahan) merge(o kahan) {
	k.add(o.s)
	k.c += o.c
}

func (k kahan) value() float64 { return k.s + k.c }

// compare orders the values min and max take: numbers (by value, across
// integer and float types, NaN above every other number) before strings
// (bytewise). It reports -1, 0 or +1.
func compare(a, b any) int {
	sa, aStr := a.(string)
	sb, bStr := b.(string)
	switch {
	case aStr && bStr:
		return strings.Compare(sa, sb)
	case aStr:
		return 1
	case bStr:
		return -1
	}
	ka, ia, ua, fa := number(a)
	kb, ib, ub, fb := number(b)
	switch {
	case ka == intNum && kb == intNum:
		return cmpInt(ia, ib)
	case ka == floatNum && kb == floatNum:
		return cmpFloat(fa, fb)
	case ka == uintNum && kb == uintNum:
		return cmpInt(ua, ub)
	case ka == uintNum && kb == intNum:
		return 1
	case ka == intNum && kb == uintNum:
		return -1
	case ka == floatNum:
		return -cmpIntFloat(kb, ib, ub, fa)
	}
	return cmpIntFloat(ka, ia, ua, fb)
}

func cmpInt[T int64 | uint64](a, b T) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func cmpFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	case a == b:
		return 0
	case a != a && b != b:
		return 0
	case a != a:
		return 1
	}
	return -1
}

const two63 = 9223372036854775808.0 // 2^63

// cmpIntFloat compares an integer (int64 i, or uint64 u above MaxInt64)
// with f exactly.
func cmpIntFloat(k numKind, i int64, u uint64, f float64) int {
	if f != f {
		return -1
	}
	if k == intNum {
		switch {
		case f >= two63:
			return -1
		case f < -two63:
			return 1
		}
		t := math.Trunc(f)
		if c := cmpInt(i, int64(t)); c != 0 {
			return c
		}
	} else {
		switch {
		case f >= 2*two63:
			return -1
		case f < two63:
			return 1
		}
		t := math.Trunc(f)
		if c := cmpInt(u, uint64(t)); c != 0 {
			return c
		}
	}
	frac := f - math.Trunc(f)
	switch {
	case frac > 0:
		return -1
	case frac < 0:
		return 1
	}
	return 0
}

// orderable reports whether min and max take v.
func orderable(v any) bool {
	if _, ok := v.(string); ok {
		return true
	}
	k, _, _, _ := number(v)
	return k != notNum
}

// Key encoding for count_distinct and collect's retraction: values are equal
// when their encodings are. Numbers equal in value are equal whatever their
// type (3, int64(3) and 3.0); maps compare by sorted keys.
const (
	keyNil   = 'n'
	keyFalse = 'F'
	keyTrue  = 'T'
	keyInt   = 'i'
	keyUint  = 'u'
	keyFloat = 'f'
	keyStr   = 's'
	keyBytes = 'y'
	keyTime  = 't'
	keyList  = 'l'
	keyMap   = 'm'
)

const maxKeyDepth = 1000

// appendKey appends the encoding of v to buf; it fails for values that are
// not data (functions, channels, structs) or nested too deep.
func appendKey(buf []byte, v any) ([]byte, error) { return appendKeyDepth(buf, v, 0) }

func appendKeyDepth(buf []byte, v any, depth int) ([]byte, error) {
	if depth > maxKeyDepth {
		return buf, fmt.Errorf("value nested more than %d levels deep", maxKeyDepth)
	}
	switch x := v.(type) {
	case nil:
		return append(buf, keyNil), nil
	case string:
		buf = append(buf, keyStr)
		buf = binary.AppendUvarint(buf, uint64(len(x)))
		return append(buf, x...), nil
	case bool:
		if x {
			return append(buf, keyTrue), nil
		}
		return append(buf, keyFalse), nil
	case []byte:
		buf = append(buf, keyBytes)
		buf = binary.AppendUvarint(buf, uint64(len(x)))
		return append(buf, x...), nil
	case time.Time:
		b, err := x.UTC().MarshalBinary()
		if err != nil {
			return buf, err
		}
		buf = append(buf, keyTime, byte(len(b)))
		return append(buf, b...), nil
	case []any:
		buf = append(buf, keyList)
		buf = binary.AppendUvarint(buf, uint64(len(x)))
		var err error
		for _, e := range x {
			if buf, err = appendKeyDepth(buf, e, depth+1); err != nil {
				return buf, err
			}
		}
		return buf, nil
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		buf = append(buf, keyMap)
		buf = binary.AppendUvarint(buf, uint64(len(x)))
		var err error
		for _, k := range keys {
			buf = binary.AppendUvarint(buf, uint64(len(k)))
			buf = append(buf, k...)
			if buf, err = appendKeyDepth(buf, x[k], depth+1); err != nil {
				return buf, err
			}
		}
		return buf, nil
	}
	switch k, i, u, f := number(v); k {
	case intNum:
		return binary.BigEndian.AppendUint64(append(buf, keyInt), uint64(i)), nil
	case uintNum:
		return binary.BigEndian.AppendUint64(append(buf, keyUint), u), nil
	case floatNum:
		switch {
		case f == math.Trunc(f) && f >= -two63 && f < two63:
			return binary.BigEndian.AppendUint64(append(buf, keyInt), uint64(int64(f))), nil
		case f == math.Trunc(f) && f >= two63 && f < 2*two63:
			return binary.BigEndian.AppendUint64(append(buf, keyUint), uint64(f)), nil
		case f != f:
			f = math.NaN() // one NaN
		}
		return binary.BigEndian.AppendUint64(append(buf, keyFloat), math.Float64bits(f)), nil
	}
	// Other slices and string-keyed maps (such as []string from split).
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.Slice, reflect.Array:
		l := make([]any, rv.Len())
		for i := range l {
			l[i] = rv.Index(i).Interface()
		}
		return appendKeyDepth(buf, l, depth)
	case reflect.Map:
		if rv.Type().Key().Kind() == reflect.String {
			m := make(map[string]any, rv.Len())
			for it := rv.MapRange(); it.Next(); {
				m[it.Key().String()] = it.Value().Interface()
			}
			return appendKeyDepth(buf, m, depth)
		}
	case reflect.Pointer:
		if !rv.IsNil() {
			return appendKeyDepth(buf, rv.Elem().Interface(), depth+1)
		}
		return append(buf, keyNil), nil
	}
	return buf, fmt.Errorf("cannot compare values of type %T", v)
}

// describe names v for error messages: its type and a short form.
func describe(v any) string {
	s := fmt.Sprintf("%v", v)
	if str, ok := v.(string); ok {
		s = fmt.Sprintf("%q", str)
	}
	if len(s) > 40 {
		s = s[:37] + "..."
	}
	return fmt.Sprintf("%s %s", typeName(v), s)
}

func typeName(v any) string {
	switch v.(type) {
	case map[string]any:
		return "map"
	case []any:
		return "list"
	}
	return fmt.Sprintf("%T", v)
}
