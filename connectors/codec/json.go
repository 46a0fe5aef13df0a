package codec

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// maxNesting is the deepest nesting of objects and arrays a JSON line may
// have, as in encoding/json.
const maxNesting = 10000

var errJSONEnd = errors.New("unexpected end of JSON input")

// jsonParser decodes one JSON text into the values records hold: objects
// as map[string]any, arrays as []any, strings, bools, nil, and numbers as
// int64 when the literal has no fraction and no exponent and fits, float64
// otherwise. Invalid UTF-8 in a string becomes U+FFFD, one per bad byte,
// and so does an escaped lone surrogate (\ud800), as in encoding/json;
// invalid is set when either happened.
type jsonParser struct {
	b       []byte
	i       int
	depth   int
	invalid bool
}

// decodeJSONObject decodes line, which holds one JSON object and nothing
// else but whitespace. invalid tells whether a string held invalid UTF-8
// or a lone surrogate, replaced with U+FFFD.
func decodeJSONObject(line []byte) (m map[string]any, invalid bool, err error) {
	p := jsonParser{b: line}
	p.skipSpace()
	if p.i >= len(p.b) || p.b[p.i] != '{' {
		return nil, false, errors.New("a line must be a JSON object") // checked by the caller
	}
	m, err = p.object()
	if err != nil {
		return nil, false, err
	}
	p.skipSpace()
	if p.i < len(p.b) {
		return nil, false, p.unexpected("after top-level value")
	}
	return m, p.invalid, nil
}

func (p *jsonParser) skipSpace() {
	for p.i < len(p.b) {
		switch p.b[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

// unexpected returns the error for the byte at p.i, or for the end of input.
func (p *jsonParser) unexpected(context string) error {
	if p.i >= len(p.b) {
		return errJSONEnd
	}
	return fmt.Errorf("invalid character %s %s", quoteChar(p.b[p.i]), context)
}

// quoteChar formats c like encoding/json's syntax errors.
func quoteChar(c byte) string {
	switch {
	case c == '\'':
		return `'\''`
	case c == '"':
		return `'"'`
	case c < utf8.RuneSelf:
		s := strconv.Quote(string(rune(c)))
		return "'" + s[1:len(s)-1] + "'"
	}
	return fmt.Sprintf("'\\x%02x'", c)
}

func (p *jsonParser) value() (any, error) {
	p.skipSpace()
	if p.i >= len(p.b) {
		return nil, errJSONEnd
	}
	switch c := p.b[p.i]; {
	case c == '{':
		return p.object()
	case c == '[':
		return p.array()
	case c == '"':
		return p.str()
	case c == '-' || c >= '0' && c <= '9':
		return p.number()
	case c == 't':
		return true, p.literal("true")
	case c == 'f':
		return false, p.literal("false")
	case c == 'n':
		return nil, p.literal("null")
	}
	return nil, p.unexpected("looking for beginning of value")
}

func (p *jsonParser) literal(lit string) error {
	for k := 0; k < len(lit); k++ {
		if p.i >= len(p.b) {
			return errJSONEnd
		}
		if p.b[p.i] != lit[k] {
			return p.unexpected(fmt.Sprintf("in literal %s (expecting %s)", lit, quoteChar(lit[k])))
		}
		p.i++
	}
	return nil
}

func (p *jsonParser) nest() error {
	p.depth++
	if p.depth > maxNesting {
		return fmt.Errorf("exceeded max depth of %d", maxNesting)
	}
	return nil
}

// object decodes an object; p.b[p.i] is '{'. A key given twice keeps its
// last value.
func (p *jsonParser) object() (map[string]any, error) {
	if err := p.nest(); err != nil {
		return nil, err
	}
	p.i++
	m := map[string]any{}
	p.skipSpace()
	if p.i < len(p.b) && p.b[p.i] == '}' {
		p.i++
		p.depth--
		return m, nil
	}
	for {
		p.skipSpace()
		if p.i >= len(p.b) || p.b[p.i] != '"' {
			return nil, p.unexpected("looking for beginning of object key string")
		}
		k, err := p.str()
		if err != nil {
			return nil, err
		}
		p.skipSpace()
		if p.i >= len(p.b) || p.b[p.i] != ':' {
			return nil, p.unexpected("after object key")
		}
		p.i++
		v, err := p.value()
		if err != nil {
			return nil, err
		}
		m[k] = v
		p.skipSpace()
		if p.i >= len(p.b) {
			return nil, errJSONEnd
		}
		switch p.b[p.i] {
		case ',':
			p.i++
			continue
		case '}':
			p.i++
			p.depth--
			return m, nil
		}
		return nil, p.unexpected("after object key:value pair")
	}
}

// array decodes an array; p.b[p.i] is '['.
func (p *jsonParser) array() ([]any, error) {
	if err := p.nest(); err != nil {
		return nil, err
	}
	p.i++
	a := []any{}
	p.skipSpace()
	if p.i < len(p.b) && p.b[p.i] == ']' {
		p.i++
		p.depth--
		return a, nil
	}
	for {
		v, err := p.value()
		if err != nil {
			return nil, err
		}
		a = append(a, v)
		p.skipSpace()
		if p.i >= len(p.b) {
			return nil, errJSONEnd
		}
		switch p.b[p.i] {
		case ',':
			p.i++
			continue
		case ']':
			p.i++
			p.depth--
			return a, nil
		}
		return nil, p.unexpected("after array element")
	}
}

// number decodes a number; p.b[p.i] is '-' or a digit. A literal without
// fraction and exponent that fits in an int64 is an int64; any other
// number is a float64 (the nearest one: 1e400 is an error, as in
// encoding/json).
func (p *jsonParser) number() (any, error) {
	start := p.i
	if p.b[p.i] == '-' {
		p.i++
	}
	if p.i >= len(p.b) {
		return nil, errJSONEnd
	}
	switch c := p.b[p.i]; {
	case c == '0':
		p.i++
	case c >= '1' && c <= '9':
		for p.i < len(p.b) && p.b[p.i] >= '0' && p.b[p.i] <= '9' {
			p.i++
		}
	default:
		return nil, p.unexpected("in numeric literal")
	}
	integral := true
	if p.i < len(p.b) && p.b[p.i] == '.' {
		integral = false
		p.i++
		if err := p.digits(); err != nil {
			return nil, err
		}
	}
	if p.i < len(p.b) && (p.b[p.i] == 'e' || p.b[p.i] == 'E') {
		integral = false
		p.i++
		if p.i < len(p.b) && (p.b[p.i] == '+' || p.b[p.i] == '-') {
			p.i++
		}
		if err := p.digits(); err != nil {
			return nil, err
		}
	}
	lit := p.b[start:p.i]
	if integral {
		if n, ok := parseInt(lit); ok {
			return n, nil
		}
	}
	f, err := strconv.ParseFloat(string(lit), 64)
	if err != nil {
		return nil, fmt.Errorf("number %s is out of range", lit)
	}
	return f, nil
}

// digits consumes one or more digits.
func (p *jsonParser) digits() error {
	if p.i >= len(p.b) {
		return errJSONEnd
	}
	if c := p.b[p.i]; c < '0' || c > '9' {
		return p.unexpected("in numeric literal")
	}
	for p.i < len(p.b) && p.b[p.i] >= '0' && p.b[p.i] <= '9' {
		p.i++
	}
	return nil
}

// parseInt parses a JSON integer literal; ok is false when it does not fit
// in an int64.
func parseInt(lit []byte) (int64, bool) {
	neg := lit[0] == '-'
	if neg {
		lit = lit[1:]
	}
	if len(lit) > 19 {
		return 0, false
	}
	var u uint64
	for _, c := range lit {
		u = u*10 + uint64(c-'0') // 19 digits cannot overflow a uint64
	}
	if neg {
		if u > 1<<63 {
			return 0, false
		}
		return -int64(u), true // -(1<<63) wraps to MinInt64
	}
	if u > math.MaxInt64 {
		return 0, false
	}
	return int64(u), true
}

// str decodes a string; p.b[p.i] is '"'.
func (p *jsonParser) str() (string, error) {
	p.i++
	start := p.i
	// Fast path: printable ASCII without escapes.
	for p.i < len(p.b) {
		c := p.b[p.i]
		if c == '"' {
			s := string(p.b[start:p.i])
			p.i++
			return s, nil
		}
		if c == '\\' || c < 0x20 || c >= utf8.RuneSelf {
			break
		}
		p.i++
	}
	buf := make([]byte, 0, p.i-start+16)
	buf = append(buf, p.b[start:p.i]...)
	for p.i < len(p.b) {
		c := p.b[p.i]
		switch {
		case c == '"':
			p.i++
			return string(buf), nil
		case c == '\\':
			p.i++
			if p.i >= len(p.b) {
				return "", errJSONEnd
			}
			e := p.b[p.i]
			p.i++
			switch e {
			case '"', '\\', '/':
				buf = append(buf, e)
			case 'b':
				buf = append(buf, '\b')
			case 'f':
				buf = append(buf, '\f')
			case 'n':
				buf = append(buf, '\n')
			case 'r':
				buf = append(buf, '\r')
			case 't':
				buf = append(buf, '\t')
			case 'u':
				r, err := p.hex4()
				if err != nil {
					return "", err
				}
				if utf16.IsSurrogate(r) {
					// A high surrogate followed by an escaped low one is one
					// rune. A lone surrogate is U+FFFD, as in encoding/json;
					// an escape after it is decoded on its own.
					dec := utf8.RuneError
					if p.i+6 <= len(p.b) && p.b[p.i] == '\\' && p.b[p.i+1] == 'u' {
						save := p.i
						p.i += 2
						if r2, err := p.hex4(); err == nil {
							dec = utf16.DecodeRune(r, r2)
						}
						if dec == utf8.RuneError {
							p.i = save
						}
					}
					if r = dec; r == utf8.RuneError {
						p.invalid = true
					}
				}
				buf = utf8.AppendRune(buf, r)
			default:
				p.i--
				return "", p.unexpected("in string escape code")
			}
		case c < 0x20:
			return "", p.unexpected("in string literal")
		case c < utf8.RuneSelf:
			buf = append(buf, c)
			p.i++
		default:
			r, size := utf8.DecodeRune(p.b[p.i:])
			if r == utf8.RuneError && size == 1 {
				p.invalid = true
				buf = append(buf, "\uFFFD"...)
			} else {
				buf = append(buf, p.b[p.i:p.i+size]...)
			}
			p.i += size
		}
	}
	return "", errJSONEnd
}

// hex4 decodes the four hex digits of a \u escape.
func (p *jsonParser) hex4() (rune, error) {
	var r rune
	for range 4 {
		if p.i >= len(p.b) {
			return 0, errJSONEnd
		}
		c := p.b[p.i]
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c = c - 'a' + 10
		case c >= 'A' && c <= 'F':
			c = c - 'A' + 10
		default:
			return 0, p.unexpected("in \\u hexadecimal character escape")
		}
		r = r<<4 | rune(c)
		p.i++
	}
	return r, nil
}
