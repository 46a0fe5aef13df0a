package codec

import (
	"bytes"
	stdjson "encoding/json"
	"io"
	"math"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
)

func TestJSONDecoderValues(t *testing.T) {
	tests := []struct {
		line        string
		want        any
		invalidUTF8 bool
	}{
		{`{"v":1}`, int64(1), false},
		{`{"v":-7}`, int64(-7), false},
		{`{"v":0}`, int64(0), false},
		{`{"v":-0}`, int64(0), false},
		{`{"v":9007199254740993}`, int64(9007199254740993), false},
		{`{"v":9223372036854775807}`, int64(math.MaxInt64), false},
		{`{"v":-9223372036854775808}`, int64(math.MinInt64), false},
		{`{"v":9223372036854775808}`, 9223372036854775808.0, false},
		{`{"v":18446744073709551616}`, 18446744073709551616.0, false},
		{`{"v":1.0}`, 1.0, false},
		{`{"v":1e3}`, 1000.0, false},
		{`{"v":1E+3}`, 1000.0, false},
		{`{"v":2.5e-3}`, 0.0025, false},
		{`{"v":-0.0}`, math.Copysign(0, -1), false},
		{`{"v":[1,1.5,{"w":2}]}`, []any{int64(1), 1.5, map[string]any{"w": int64(2)}}, false},
		{`{"v":"a\"\\\/\b\f\n\r\t\u00e9\ud83d\ude00<&>"}`, "a\"\\/\b\f\n\r\té😀<&>", false},
		{`{"v":"é ✓"}`, "é ✓", false},
		{`{"v":"\ud800"}`, "\uFFFD", true},
		{`{"v":"\ud800\u0041"}`, "\uFFFDA", true},
		{`{"v":"\udc00\ud800\udc00"}`, "\uFFFD\U00010000", true},
		{"{\"v\":\"a\xffb\"}", "a\uFFFDb", true},
		{"{\"v\":\"\xe2\x82\"}", "\uFFFD\uFFFD", true},
		{"{\"v\":[\"ok\",{\"k\xc3\":1}]}", []any{"ok", map[string]any{"k\uFFFD": int64(1)}}, true},
		{`{"v":true,"v":false}`, false, false},
		{`{"v":null}`, nil, false},
		{" \t{ \"v\" : [ ] }\r\n", []any{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.line, func(t *testing.T) {
			m, invalid, err := JSONDecoder{}.decode([]byte(tt.line))
			require.NoError(t, err)
			require.Equal(t, tt.want, m["v"])
			if f, ok := tt.want.(float64); ok {
				require.Equal(t, math.Signbit(f), math.Signbit(m["v"].(float64)))
			}
			require.Equal(t, tt.invalidUTF8, invalid)
		})
	}
}

func TestJSONDecoderErrors(t *testing.T) {
	tests := []struct{ line, wantErr string }{
		{`{"a":01}`, `invalid JSON: invalid character '1' after object key:value pair`},
		{`{"a":-}`, `invalid JSON: invalid character '}' in numeric literal`},
		{`{"a":1.}`, `invalid JSON: invalid character '}' in numeric literal`},
		{`{"a":1e}`, `invalid JSON: invalid character '}' in numeric literal`},
		{`{"a":+1}`, `invalid JSON: invalid character '+' looking for beginning of value`},
		{`{"a":1e400}`, `invalid JSON: number 1e400 is out of range`},
		{`{"a":tru}`, `invalid JSON: invalid character '}' in literal true (expecting 'e')`},
		{`{"a":NaN}`, `invalid JSON: invalid character 'N' looking for beginning of value`},
		{`{a:1}`, `invalid JSON: invalid character 'a' looking for beginning of object key string`},
		{`{"a" 1}`, `invalid JSON: invalid character '1' after object key`},
		{`{"a":[1 2]}`, `invalid JSON: invalid character '2' after array element`},
		{"{\"a\":\"x\ty\"}", `invalid JSON: invalid character '\t' in string literal`},
		{`{"a":"\x"}`, `invalid JSON: invalid character 'x' in string escape code`},
		{`{"a":"\u12G4"}`, `invalid JSON: invalid character 'G' in \u hexadecimal character escape`},
		{`{"a":"\ud800\u12`, `invalid JSON: unexpected end of JSON input`},
		{`{"a":[`, `invalid JSON: unexpected end of JSON input`},
		{`{"a":1,}`, `invalid JSON: invalid character '}' looking for beginning of object key string`},
		{"{\"a\":1}\xff", `invalid JSON: invalid character '\xff' after top-level value`},
		{strings.Repeat(`{"a":`, maxNesting+1), `invalid JSON: exceeded max depth of 10000`},
	}
	for _, tt := range tests {
		t.Run(tt.line, func(t *testing.T) {
			m, err := JSONDecoder{}.Decode([]byte(tt.line))
			require.EqualError(t, err, tt.wantErr)
			require.Nil(t, m)
		})
	}
}

// TestJSONRoundTrip checks that what the decoder reads the encoder writes
// back byte for byte: an integer stays an integer (no ".0", no exponent).
func TestJSONRoundTrip(t *testing.T) {
	for _, line := range []string{
		`{"big":9007199254740993,"f":1.5,"min":-9223372036854775808,"n":1,"neg":-42,"z":0}`,
		`{"l":[1,2.25,[3]],"m":{"k":123456789012}}`,
		`{"e":1e+21,"small":1e-7,"u":"é\u2028"}`,
	} {
		m, err := JSONDecoder{}.Decode([]byte(line))
		require.NoError(t, err)
		out, err := (&JSONEncoder{}).Append(nil, m)
		require.NoError(t, err)
		require.Equal(t, line+"\n", string(out))
	}
	// A float literal stays a float: 1.0 is written as 1, like every JSON
	// writer that keeps no literal; it decodes as float64 either way.
	m, err := JSONDecoder{}.Decode([]byte(`{"x":1.0}`))
	require.NoError(t, err)
	require.Equal(t, 1.0, m["x"])
}

// stdNumbers converts encoding/json's json.Number values the way the
// decoder types numbers.
func stdNumbers(v any) (any, bool) {
	switch x := v.(type) {
	case stdjson.Number:
		s := string(x)
		if !strings.ContainsAny(s, ".eE") {
			if n, err := strconv.ParseInt(s, 10, 64); err == nil {
				return n, true
			}
		}
		f, err := strconv.ParseFloat(s, 64)
		return f, err == nil
	case map[string]any:
		for k, e := range x {
			var ok bool
			if x[k], ok = stdNumbers(e); !ok {
				return nil, false
			}
		}
	case []any:
		for i, e := range x {
			var ok bool
			if x[i], ok = stdNumbers(e); !ok {
				return nil, false
			}
		}
	}
	return v, true
}

// FuzzJSONDecoder checks the decoder against encoding/json: the same
// lines are objects, with the same values (numbers typed as documented).
func FuzzJSONDecoder(f *testing.F) {
	for _, s := range []string{`{"a":1}`, `{"a":[1.5,"x",null,true,{"b":-0}]}`, `{"a":"\ud83d\ude00\u00e9"}`,
		"{\"a\":\"\xff\"}", `{"a":1e400}`, `{"a":01}`, `{"a":"\ud800\u0041"}`, ` { } `, `{"a":9223372036854775808}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		got, invalid, err := decodeJSONObject(line)
		var want map[string]any
		dec := stdjson.NewDecoder(bytes.NewReader(line))
		dec.UseNumber()
		stdErr := dec.Decode(&want)
		if stdErr == nil {
			if _, tokErr := dec.Token(); tokErr != io.EOF || want == nil {
				stdErr = strconv.ErrSyntax // not exactly one object
			}
		}
		var wantV any = want
		if stdErr == nil {
			var ok bool
			if wantV, ok = stdNumbers(want); !ok {
				stdErr = strconv.ErrRange
			}
		}
		if stdErr != nil {
			require.Error(t, err, "encoding/json: %v", stdErr)
			return
		}
		require.NoError(t, err)
		require.Equal(t, wantV, any(got))
		if !utf8.Valid(line) {
			require.True(t, invalid, "invalid UTF-8 not reported")
		}
	})
}
