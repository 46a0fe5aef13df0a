package codec

import (
	"bytes"
	stdjson "encoding/json"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// stdEncode is the reference: encoding/json without HTML escaping.
func stdEncode(t testing.TB, v any) string {
	var buf bytes.Buffer
	enc := stdjson.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	require.NoError(t, enc.Encode(v))
	return buf.String()
}

func TestJSONEncoderMatchesEncodingJSON(t *testing.T) {
	tests := []struct {
		name   string
		fields map[string]any
		want   string // empty: only compare with encoding/json
	}{
		{"floats", map[string]any{"a": 21.5, "b": 1e21, "c": 1e-7, "d": 0.000001, "e": 100.0, "f": math.Copysign(0, -1), "g": 123456789012345680.0, "h": 1e20, "i": 5e-324, "j": math.MaxFloat64},
			`{"a":21.5,"b":1e+21,"c":1e-7,"d":0.000001,"e":100,"f":-0,"g":123456789012345680,"h":100000000000000000000,"i":5e-324,"j":1.7976931348623157e+308}` + "\n"},
		{"sorted nested keys", map[string]any{"z": 1, "a": map[string]any{"y": []any{1, "x", nil, true}, "b": map[string]any{}}, "m": []any{}},
			`{"a":{"b":{},"y":[1,"x",null,true]},"m":[],"z":1}` + "\n"},
		{"strings", map[string]any{"s": "a<b>&\u2028\u2029\x01\x7f\xff\b\f\n\r\t\"\\é😀", "k\"ey": "v"}, ""},
		{"ints", map[string]any{"a": int64(math.MinInt64), "b": uint64(math.MaxUint64), "c": int8(-3), "d": uint8(7), "e": int32(9), "f": float32(0.1), "g": float32(1e-7)}, ""},
		{"other types via encoding/json", map[string]any{"t": time.Date(2024, 1, 2, 3, 4, 5, 0, time.UTC), "b": []byte("hi"), "ss": []string{"a", "<"}, "fs": []float64{1.5, 1e21}, "mm": map[string]string{"b": "1", "a": "2"}, "n": stdjson.Number("12.50")}, ""},
		{"nil map and list", map[string]any{"m": map[string]any(nil), "l": []any(nil), "s": []string(nil)}, `{"l":null,"m":null,"s":null}` + "\n"},
		{"empty", map[string]any{}, "{}\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var e JSONEncoder
			got, err := e.Append(nil, tt.fields)
			require.NoError(t, err)
			require.Equal(t, stdEncode(t, tt.fields), string(got))
			if tt.want != "" {
				require.Equal(t, tt.want, string(got))
			}
		})
	}
}

func TestJSONEncoderErrors(t *testing.T) {
	var e JSONEncoder
	for _, v := range []any{math.NaN(), math.Inf(1), map[string]any{"x": math.Inf(-1)}, func() {}} {
		got, err := e.Append([]byte("keep"), map[string]any{"v": v})
		require.Error(t, err)
		require.Equal(t, "keep", string(got), "dst is unchanged on error")
	}
	tests := []struct {
		fields map[string]any
		want   string
	}{
		{map[string]any{"a": 1, "v": math.NaN()}, `field "v": json: unsupported value: NaN`},
		{map[string]any{"m": map[string]any{"ok": 1, "x": math.Inf(1)}}, `field "m.x": json: unsupported value: +Inf`},
		{map[string]any{"l": []any{1, map[string]any{"y": []any{math.Inf(-1)}}}}, `field "l[1].y[0]": json: unsupported value: -Inf`},
	}
	for _, tt := range tests {
		_, err := e.Append(nil, tt.fields)
		require.EqualError(t, err, tt.want)
		var fe *FieldError
		require.ErrorAs(t, err, &fe)
	}
	// The encoder is reusable after an error.
	got, err := e.Append(nil, map[string]any{"b": 2, "a": map[string]any{"d": 1, "c": 0}})
	require.NoError(t, err)
	require.Equal(t, `{"a":{"c":0,"d":1},"b":2}`+"\n", string(got))
}

// TestJSONEncoderEveryByte puts each byte value at each position of a
// string long enough for the eight-byte fast path, and at its end.
func TestJSONEncoderEveryByte(t *testing.T) {
	var e JSONEncoder
	for b := range 256 {
		for pos := range 17 {
			s := []byte("abcdefghijklmnopq")
			s[pos] = byte(b)
			fields := map[string]any{"s": string(s)}
			got, err := e.Append(nil, fields)
			require.NoError(t, err)
			require.Equal(t, stdEncode(t, fields), string(got), "byte %#x at %d", b, pos)
		}
	}
}

func FuzzJSONEncoder(f *testing.F) {
	f.Add("héllo\x00<\u2028", 1.5, int64(3))
	f.Add("\xff\xfe", 1e-7, int64(-1))
	f.Fuzz(func(t *testing.T, s string, x float64, n int64) {
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return
		}
		fields := map[string]any{s: x, "n": n, "s": s, "l": []any{s, x}}
		var e JSONEncoder
		got, err := e.Append(nil, fields)
		require.NoError(t, err)
		require.Equal(t, stdEncode(t, fields), string(got))
	})
}

func TestCSVEncoder(t *testing.T) {
	e := (&EncodeOptions{Format: CSV, Columns: []string{"id", "name", "temp", "tags", "missing"}, CSVDelimiter: ","}).NewEncoder()
	require.Equal(t, "id,name,temp,tags,missing\n", string(e.Header()))
	var out []byte
	rows := []map[string]any{
		{"id": 1.0, "name": "plain", "temp": 21.5, "tags": []any{"a", "b"}},
		{"id": "x", "name": `has "quotes", commas`, "temp": 1e21, "tags": nil},
		{"id": int64(3), "name": "multi\nline", "temp": true},
		{"id": "", "name": " leading space", "temp": `\.`},
	}
	for _, r := range rows {
		var err error
		out, err = e.Append(out, r)
		require.NoError(t, err)
	}
	require.Equal(t, strings.Join([]string{
		`1,plain,21.5,"[""a"",""b""]",`,
		`x,"has ""quotes"", commas",1e+21,,`,
		`3,"multi` + "\n" + `line",true,,`,
		`," leading space","\.",,`,
	}, "\n")+"\n", string(out))

	_, err := e.Append(nil, map[string]any{"temp": math.NaN()})
	require.ErrorContains(t, err, `column "temp"`)

	semi := (&EncodeOptions{Format: CSV, Columns: []string{"a", "b"}, CSVDelimiter: ";"}).NewEncoder()
	out, err = semi.Append(nil, map[string]any{"a": "x;y", "b": "x,y"})
	require.NoError(t, err)
	require.Equal(t, "\"x;y\";x,y\n", string(out))
}

func BenchmarkJSONEncoder(b *testing.B) {
	for name, fields := range map[string]map[string]any{
		"numbers":    {"id": 12345.0, "ts": 1700000000000.0, "temp": 21.5, "temp_c": -5.833333333333333},
		"string_1KB": {"id": 12345.0, "pad": strings.Repeat("abcdefghij", 100)},
	} {
		b.Run(name+"/eddy", func(b *testing.B) {
			var e JSONEncoder
			var buf []byte
			b.ReportAllocs()
			for b.Loop() {
				buf, _ = e.Append(buf[:0], fields)
			}
		})
		b.Run(name+"/encoding_json", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_, _ = stdjson.Marshal(fields)
			}
		})
	}
}
