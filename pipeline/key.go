package pipeline

import (
	"encoding/binary"
	"fmt"
	"math"
	"strconv"

	"github.com/cespare/xxhash/v2"
)

// Key encodings start with a type byte so that keys of different types never collide.
const (
	keyNil    = 'n'
	keyString = 's'
	keyInt    = 'i'
	keyFloat  = 'f'
	keyBool   = 'b'
	keyList   = 'l'
)

// EncodeKey appends the canonical encoding of a key value to buf. Integral
// floats encode like ints, so 3 and 3.0 are the same key (JSON numbers decode
// as float64, generated ones as int). Maps are not keys.
func EncodeKey(buf []byte, v any) ([]byte, error) {
	switch x := v.(type) {
	case nil:
		return append(buf, keyNil), nil
	case string:
		buf = append(buf, keyString)
		buf = binary.AppendUvarint(buf, uint64(len(x)))
		return append(buf, x...), nil
	case bool:
		if x {
			return append(buf, keyBool, 1), nil
		}
		return append(buf, keyBool, 0), nil
	case int:
		return appendIntKey(buf, int64(x)), nil
	case int8:
		return appendIntKey(buf, int64(x)), nil
	case int16:
		return appendIntKey(buf, int64(x)), nil
	case int32:
		return appendIntKey(buf, int64(x)), nil
	case int64:
		return appendIntKey(buf, x), nil
	case uint:
		return appendIntKey(buf, int64(x)), nil
	case uint8:
		return appendIntKey(buf, int64(x)), nil
	case uint16:
		return appendIntKey(buf, int64(x)), nil
	case uint32:
		return appendIntKey(buf, int64(x)), nil
	case uint64:
		return appendIntKey(buf, int64(x)), nil
	case float32:
		return appendFloatKey(buf, float64(x)), nil
	case float64:
		return appendFloatKey(buf, x), nil
	case []any:
		buf = append(buf, keyList)
		buf = binary.AppendUvarint(buf, uint64(len(x)))
		var err error
		for _, e := range x {
			if buf, err = EncodeKey(buf, e); err != nil {
				return buf, err
			}
		}
		return buf, nil
	}
	return buf, fmt.Errorf("%w: a key must be a string, number, bool, null or list of those, got %T", ErrBadKey, v)
}

func appendIntKey(buf []byte, v int64) []byte {
	buf = append(buf, keyInt)
	return binary.BigEndian.AppendUint64(buf, uint64(v))
}

func appendFloatKey(buf []byte, f float64) []byte {
	if f == math.Trunc(f) && math.Abs(f) < 1<<63 {
		return appendIntKey(buf, int64(f))
	}
	buf = append(buf, keyFloat)
	return binary.BigEndian.AppendUint64(buf, math.Float64bits(f))
}

// DecodeKey returns the value of a canonical key encoding (ints as int64).
func DecodeKey(key string) (any, error) {
	v, rest, err := decodeKey(key)
	if err == nil && rest != "" {
		err = fmt.Errorf("%w: %d trailing bytes", ErrBadKey, len(rest))
	}
	return v, err
}

func decodeKey(s string) (any, string, error) {
	if s == "" {
		return nil, "", fmt.Errorf("%w: empty encoding", ErrBadKey)
	}
	switch s[0] {
	case keyNil:
		return nil, s[1:], nil
	case keyBool:
		if len(s) < 2 {
			break
		}
		return s[1] == 1, s[2:], nil
	case keyInt:
		if len(s) < 9 {
			break
		}
		return int64(binary.BigEndian.Uint64([]byte(s[1:9]))), s[9:], nil
	case keyFloat:
		if len(s) < 9 {
			break
		}
		return math.Float64frombits(binary.BigEndian.Uint64([]byte(s[1:9]))), s[9:], nil
	case keyString:
		n, w := binary.Uvarint([]byte(s[1:min(len(s), 11)]))
		if w <= 0 || uint64(len(s)-1-w) < n {
			break
		}
		start := 1 + w
		return s[start : start+int(n)], s[start+int(n):], nil
	case keyList:
		n, w := binary.Uvarint([]byte(s[1:min(len(s), 11)]))
		if w <= 0 || n > uint64(len(s)) {
			break
		}
		rest := s[1+w:]
		out := make([]any, 0, n)
		for range n {
			var v any
			var err error
			if v, rest, err = decodeKey(rest); err != nil {
				return nil, "", err
			}
			out = append(out, v)
		}
		return out, rest, nil
	}
	return nil, "", fmt.Errorf("%w: malformed encoding", ErrBadKey)
}

// FormatKey renders a canonical key for logs and explain output.
func FormatKey(key string) string {
	v, err := DecodeKey(key)
	if err != nil {
		return strconv.Quote(key)
	}
	return fmt.Sprint(v)
}

// KeyGroup returns the key group of a canonical key: hash(key) mod
// maxParallelism. Key groups are the unit of state redistribution.
func KeyGroup(key string, maxParallelism int) int {
	return int(xxhash.Sum64String(key) % uint64(maxParallelism))
}

// SubtaskForKeyGroup maps a key group to the subtask that owns it:
// group * parallelism / maxParallelism, so each subtask owns a contiguous range.
func SubtaskForKeyGroup(group, parallelism, maxParallelism int) int {
	return group * parallelism / maxParallelism
}

// KeyGroupRange returns the key groups [start, end) owned by subtask.
func KeyGroupRange(subtask, parallelism, maxParallelism int) (start, end int) {
	start = (subtask*maxParallelism + parallelism - 1) / parallelism
	end = ((subtask+1)*maxParallelism + parallelism - 1) / parallelism
	return start, end
}
