package codec

import (
	"bytes"
	"encoding/binary"
	stdjson "encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"unicode/utf8"
)

// Encoder turns a record's fields into one line of output.
type Encoder interface {
	// Header returns what starts a new, empty output (the csv header line),
	// or nil.
	Header() []byte
	// Append appends the line of one record, ending in '\n', to dst. On
	// error dst is returned unchanged.
	Append(dst []byte, fields map[string]any) ([]byte, error)
}

// JSONEncoder writes one compact JSON object per line with its keys sorted
// at every level, byte for byte what encoding/json writes with
// SetEscapeHTML(false) (so '<', '>' and '&' are not escaped). Values of types
// other than the ones records usually hold are encoded by encoding/json.
// NaN and infinities are errors, as in encoding/json; an error names the
// field (a *FieldError). An encoder is not safe for concurrent use.
type JSONEncoder struct {
	keys [][]string // per nesting depth, reused
}

// Header returns nil.
func (*JSONEncoder) Header() []byte { return nil }

// Append appends the JSON object of fields and a newline.
func (e *JSONEncoder) Append(dst []byte, fields map[string]any) ([]byte, error) {
	n := len(dst)
	dst, err := e.appendMap(dst, fields, 0)
	if err != nil {
		return dst[:n], err
	}
	return append(dst, '\n'), nil
}

// AppendValue appends the JSON encoding of v.
func (e *JSONEncoder) AppendValue(dst []byte, v any) ([]byte, error) {
	return e.appendValue(dst, v, 0)
}

func (e *JSONEncoder) appendMap(dst []byte, m map[string]any, depth int) ([]byte, error) {
	if m == nil {
		return append(dst, "null"...), nil
	}
	if depth >= len(e.keys) {
		e.keys = append(e.keys, nil)
	}
	keys := e.keys[depth][:0]
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	e.keys[depth] = keys
	dst = append(dst, '{')
	for i, k := range keys {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = appendString(dst, k)
		dst = append(dst, ':')
		var err error
		if dst, err = e.appendValue(dst, m[k], depth+1); err != nil {
			clear(keys)
			return dst, inField(k, err)
		}
	}
	clear(keys) // drop references to the strings
	return append(dst, '}'), nil
}

const maxDepth = 1000

func (e *JSONEncoder) appendValue(dst []byte, v any, depth int) ([]byte, error) {
	if depth > maxDepth {
		return dst, fmt.Errorf("json: value nested more than %d levels deep", maxDepth)
	}
	switch x := v.(type) {
	case nil:
		return append(dst, "null"...), nil
	case string:
		return appendString(dst, x), nil
	case float64:
		return appendFloat(dst, x, 64)
	case int:
		return strconv.AppendInt(dst, int64(x), 10), nil
	case int64:
		return strconv.AppendInt(dst, x, 10), nil
	case bool:
		return strconv.AppendBool(dst, x), nil
	case map[string]any:
		return e.appendMap(dst, x, depth)
	case []any:
		if x == nil {
			return append(dst, "null"...), nil
		}
		dst = append(dst, '[')
		for i, el := range x {
			if i > 0 {
				dst = append(dst, ',')
			}
			var err error
			if dst, err = e.appendValue(dst, el, depth+1); err != nil {
				return dst, inField("["+strconv.Itoa(i)+"]", err)
			}
		}
		return append(dst, ']'), nil
	case float32:
		return appendFloat(dst, float64(x), 32)
	case int32:
		return strconv.AppendInt(dst, int64(x), 10), nil
	case int16:
		return strconv.AppendInt(dst, int64(x), 10), nil
	case int8:
		return strconv.AppendInt(dst, int64(x), 10), nil
	case uint:
		return strconv.AppendUint(dst, uint64(x), 10), nil
	case uint64:
		return strconv.AppendUint(dst, x, 10), nil
	case uint32:
		return strconv.AppendUint(dst, uint64(x), 10), nil
	case uint16:
		return strconv.AppendUint(dst, uint64(x), 10), nil
	case uint8:
		return strconv.AppendUint(dst, uint64(x), 10), nil
	case []string:
		if x == nil {
			return append(dst, "null"...), nil
		}
		dst = append(dst, '[')
		for i, s := range x {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = appendString(dst, s)
		}
		return append(dst, ']'), nil
	}
	return appendStd(dst, v)
}

// FieldError is the error of a value that cannot be encoded, with the path
// of the field that holds it: "temp", "a.b", "list[2].x".
type FieldError struct {
	Path string
	Err  error
}

func (e *FieldError) Error() string { return fmt.Sprintf("field %q: %v", e.Path, e.Err) }

func (e *FieldError) Unwrap() error { return e.Err }

// inField puts err, of the value under name (a key, or "[i]" of a list),
// in that field's path.
func inField(name string, err error) error {
	fe, ok := err.(*FieldError)
	if !ok {
		return &FieldError{Path: name, Err: err}
	}
	if fe.Path[0] == '[' {
		fe.Path = name + fe.Path
	} else {
		fe.Path = name + "." + fe.Path
	}
	return fe
}

// appendStd encodes anything else with encoding/json.
func appendStd(dst []byte, v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := stdjson.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return dst, err
	}
	return append(dst, bytes.TrimSuffix(buf.Bytes(), []byte{'\n'})...), nil
}

// appendFloat formats like encoding/json: 'f' between 1e-6 and 1e21, else
// the shortest 'e' form with a one-digit exponent when it fits (1e-7, 1e+21).
func appendFloat(dst []byte, f float64, bits int) ([]byte, error) {
	if math.IsInf(f, 0) || math.IsNaN(f) {
		return dst, fmt.Errorf("json: unsupported value: %s", strconv.FormatFloat(f, 'g', -1, bits))
	}
	abs := math.Abs(f)
	format := byte('f')
	if abs != 0 {
		if bits == 64 && (abs < 1e-6 || abs >= 1e21) || bits == 32 && (float32(abs) < 1e-6 || float32(abs) >= 1e21) {
			format = 'e'
		}
	}
	dst = strconv.AppendFloat(dst, f, format, -1, bits)
	if format == 'e' {
		n := len(dst)
		if n >= 4 && dst[n-4] == 'e' && dst[n-3] == '-' && dst[n-2] == '0' {
			dst[n-2] = dst[n-1]
			dst = dst[:n-1]
		}
	}
	return dst, nil
}

const hexDigits = "0123456789abcdef"

// appendString quotes s like encoding/json without HTML escaping: invalid
// UTF-8 becomes \ufffd, U+2028 and U+2029 are escaped.
// plain8 tells whether none of the eight bytes of x needs escaping or
// UTF-8 checking: each is in [0x20, 0x80) and is neither '"' nor '\\'
// (the usual SWAR tests for a zero or small byte).
func plain8(x uint64) bool {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	hasLess := func(v uint64, n uint64) uint64 { return (v - ones*n) & ^v & highs }
	return (x&highs)|hasLess(x, 0x20)|hasLess(x^(ones*'"'), 1)|hasLess(x^(ones*'\\'), 1) == 0
}

func appendString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		// Eight bytes at a time while none needs a look: no control
		// character, quote, backslash or non-ASCII byte.
		for i+8 <= len(s) && plain8(binary.LittleEndian.Uint64([]byte(s[i:i+8]))) {
			i += 8
		}
		if i == len(s) {
			break
		}
		b := s[i]
		if b < utf8.RuneSelf {
			if b >= 0x20 && b != '"' && b != '\\' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch b {
			case '\\', '"':
				dst = append(dst, '\\', b)
			case '\b':
				dst = append(dst, '\\', 'b')
			case '\f':
				dst = append(dst, '\\', 'f')
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[b>>4], hexDigits[b&0xF])
			}
			i++
			start = i
			continue
		}
		c, size := utf8.DecodeRuneInString(s[i:])
		if c == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if c == '\u2028' || c == '\u2029' {
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hexDigits[c&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// CSVEncoder writes the listed columns of each record, RFC 4180 quoted.
// Strings are written as they are, numbers like JSON numbers, nil (or a
// missing field) as an empty field, lists and maps as JSON.
type CSVEncoder struct {
	Columns []string
	Comma   byte
	json    JSONEncoder
}

// Header returns the header line.
func (e *CSVEncoder) Header() []byte {
	var dst []byte
	for i, c := range e.Columns {
		if i > 0 {
			dst = append(dst, e.Comma)
		}
		dst = e.appendField(dst, c)
	}
	return append(dst, '\n')
}

// Append appends one CSV row.
func (e *CSVEncoder) Append(dst []byte, fields map[string]any) ([]byte, error) {
	n := len(dst)
	var scratch [64]byte
	for i, c := range e.Columns {
		if i > 0 {
			dst = append(dst, e.Comma)
		}
		switch v := fields[c].(type) {
		case nil:
		case string:
			dst = e.appendField(dst, v)
		default:
			b, err := e.json.AppendValue(scratch[:0], v)
			if err != nil {
				return dst[:n], fmt.Errorf("column %q: %w", c, err)
			}
			dst = e.appendField(dst, string(b))
		}
	}
	return append(dst, '\n'), nil
}

func (e *CSVEncoder) appendField(dst []byte, s string) []byte {
	if !e.needsQuotes(s) {
		return append(dst, s...)
	}
	dst = append(dst, '"')
	for i := 0; i < len(s); i++ {
		if s[i] == '"' {
			dst = append(dst, '"')
		}
		dst = append(dst, s[i])
	}
	return append(dst, '"')
}

// needsQuotes follows encoding/csv: quote fields holding the delimiter, a
// quote, a line break, or starting with a space, and the field `\.`.
func (e *CSVEncoder) needsQuotes(s string) bool {
	if s == "" {
		return false
	}
	if s == `\.` || s[0] == ' ' || s[0] == '\t' {
		return true
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c == e.Comma || c == '"' || c == '\n' || c == '\r' {
			return true
		}
	}
	return false
}
