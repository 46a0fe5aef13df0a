package expr

import (
	"fmt"
	"math"
	"regexp"
	"runtime/debug"
	"sync"
	"testing"
	"time"

	exprlang "github.com/expr-lang/expr"
	"github.com/expr-lang/expr/builtin"
	"github.com/expr-lang/expr/vm"
	"github.com/stretchr/testify/require"
)

// compileBuiltinExpr compiles src the way Expr.Compile does for records.
func compileBuiltinExpr(src string, extra ...exprlang.Option) (*vm.Program, error) {
	opts := append(Builtins(), exprlang.Env(map[string]any{}), exprlang.AllowUndefinedVariables())
	return exprlang.Compile(src, append(opts, extra...)...)
}

func builtinTestEnv() map[string]any {
	return map[string]any{
		"a":       1.5,
		"i":       42,
		"i64":     int64(1700000000000),
		"s":       "x",
		"n":       nil,
		"inf":     math.Inf(1),
		"nan":     math.NaN(),
		"l":       []any{1, 2},
		"m":       map[string]any{"x": map[string]any{"y": []any{10, 20}}, "k": "v"},
		"headers": map[string]string{"trace": "abc"},
	}
}

func TestBuiltinsRun(t *testing.T) {
	tests := []struct {
		src     string
		want    any
		wantErr string // substring of the run error
	}{
		// ts_parse
		{src: `ts_parse("2023-11-14T22:13:20Z")`, want: 1700000000000},
		{src: `ts_parse("2023-11-14T22:13:20.123456Z")`, want: 1700000000123},
		{src: `ts_parse("2023-11-14T23:13:20+01:00")`, want: 1700000000000},
		{src: `ts_parse("2023-11-14T22:13:20")`, want: 1700000000000},
		{src: `ts_parse("2023-11-14 22:13:20.5")`, want: 1700000000500},
		{src: `ts_parse("2023-11-14 23:13:20+01:00")`, want: 1700000000000},
		{src: `ts_parse(" 2023-11-14 ")`, want: 1699920000000},
		{src: `ts_parse("1700000000000")`, want: 1700000000000},
		{src: `ts_parse("-1")`, want: -1},
		{src: `ts_parse("14/11/2023 22:13", "02/01/2006 15:04")`, want: 1699999980000},
		{src: `ts_parse("Tue, 14 Nov 2023 22:13:20 GMT", "RFC1123")`, want: 1700000000000},
		{src: `ts_parse("2023-11-14 23:13:20", "DateTime", "Europe/Paris")`, want: 1700000000000},
		{src: `ts_parse("2023-11-14T23:13:20", "", "Europe/Paris")`, want: 1700000000000},
		{src: `ts_parse("yesterday")`, wantErr: `ts_parse: "yesterday" is not an RFC 3339 timestamp`},
		{src: `ts_parse("2023-13-14T22:13:20Z")`, wantErr: `not an RFC 3339 timestamp`},
		{src: `ts_parse("99999999999999999999")`, wantErr: `out of range`},
		{src: `ts_parse("14/11/2023", "2006-01-02")`, wantErr: `ts_parse: parsing time "14/11/2023"`},
		{src: `ts_parse("2023", "2006", "Mars/Olympus")`, wantErr: `unknown time zone Mars/Olympus`},
		{src: `ts_parse(n)`, wantErr: `ts_parse: argument 1 must be a string, got nil`},
		{src: `ts_parse(a)`, wantErr: `ts_parse: argument 1 must be a string, got float64`},

		// ts_format
		{src: `ts_format(1700000000000)`, want: "2023-11-14T22:13:20Z"},
		{src: `ts_format(i64)`, want: "2023-11-14T22:13:20Z"},
		{src: `ts_format(1700000000123.5)`, want: "2023-11-14T22:13:20.1235Z"},
		{src: `ts_format(-1)`, want: "1969-12-31T23:59:59.999Z"},
		{src: `ts_format(1700000000000, "DateOnly")`, want: "2023-11-14"},
		{src: `ts_format(1700000000000, "")`, want: "2023-11-14T22:13:20Z"},
		{src: `ts_format(1700000000000, "2006-01-02 15:04 MST", "Europe/Paris")`, want: "2023-11-14 23:13 CET"},
		{src: `ts_format(date("2023-11-14T22:13:20Z"))`, want: "2023-11-14T22:13:20Z"},
		{src: `ts_format(ts_parse("2023-11-14T22:13:20.5Z"), "15:04:05.000")`, want: "22:13:20.500"},
		{src: `ts_format(s)`, wantErr: `ts_format: want epoch milliseconds or a time, got string "x"`},
		{src: `ts_format(n)`, wantErr: `got nil`},
		{src: `ts_format(inf)`, wantErr: `not a valid epoch milliseconds value`},
		{src: `ts_format(nan)`, wantErr: `not a valid epoch milliseconds value`},
		{src: `ts_format(1, "RFC3339", "Nowhere/City")`, wantErr: `unknown time zone`},

		// to_ms
		{src: `to_ms(date("2023-11-14T22:13:20Z"))`, want: 1700000000000},
		{src: `to_ms("2023-11-14T22:13:20Z")`, want: 1700000000000},
		{src: `to_ms(1.7e12)`, want: 1700000000000},
		{src: `to_ms(12.9)`, want: 12},
		{src: `to_ms(i64)`, want: 1700000000000},
		{src: `to_ms(duration("1h30m"))`, want: 5400000},
		{src: `to_ms(n)`, wantErr: `to_ms: cannot convert nil to epoch milliseconds`},
		{src: `to_ms(true)`, wantErr: `cannot convert bool true`},
		{src: `to_ms(inf)`, wantErr: `out of range`},
		{src: `to_ms("soon")`, wantErr: `to_ms: "soon" is not an RFC 3339 timestamp`},

		// contains_any
		{src: `contains_any("hello", ["x", "ll"])`, want: true},
		{src: `contains_any("hello", ["x", "y"])`, want: false},
		{src: `contains_any("hello", [])`, want: false},
		{src: `contains_any("hello", split("a,e", ","))`, want: true},
		{src: `contains_any("hello", n)`, want: false},
		{src: `contains_any("hello", [1])`, wantErr: `contains_any: element 0 of the list must be a string, got int`},
		{src: `contains_any(n, ["a"])`, wantErr: `contains_any: argument 1 must be a string, got nil`},
		{src: `contains_any("a", m)`, wantErr: `argument 2 must be a list of strings`},

		// regular expressions
		{src: `regex_find("order-123-456", "[0-9]+")`, want: "123"},
		{src: `regex_find("order", "[0-9]+")`, want: ""},
		{src: `regex_find_all("a1b22c333", "[0-9]+")`, want: []any{"1", "22", "333"}},
		{src: `regex_find_all("abc", "[0-9]+")`, want: []any{}},
		{src: `regex_capture("2023-11-14", "(?P<y>[0-9]+)-([0-9]+)-(?P<d>[0-9]+)")`, want: map[string]any{
			"0": "2023-11-14", "1": "2023", "y": "2023", "2": "11", "3": "14", "d": "14",
		}},
		{src: `regex_capture("ab", "a(x)?b")`, want: map[string]any{"0": "ab", "1": nil}},
		{src: `regex_capture("ab", "z")`, want: nil},
		{src: `regex_capture("ab", "z")?.y ?? "none"`, want: "none"},
		{src: `regex_capture("user=bob", "user=(?P<name>[a-z]+)").name`, want: "bob"},
		{src: `regex_replace("a1b22", "[0-9]+", "<$0>")`, want: "a<1>b<22>"},
		{src: `regex_replace("John Smith", "(?P<first>[A-Za-z]+) (?P<last>[A-Za-z]+)", "${last}, ${first}")`, want: "Smith, John"},
		{src: `regex_replace("abc", "", "-")`, want: "-a-b-c-"},
		{src: `regex_replace("abc", "z", "-")`, want: "abc"},
		{src: `regex_find("a", "(")`, wantErr: `regex_find: error parsing regexp`},
		{src: `regex_replace("a", "[", "")`, wantErr: `regex_replace: error parsing regexp`},
		{src: `regex_find("a", n)`, wantErr: `regex_find: argument 2 must be a string, got nil`},

		// padding and truncation
		{src: `pad_left("7", 3, "0")`, want: "007"},
		{src: `pad_left("7", 3)`, want: "  7"},
		{src: `pad_left("é", 3)`, want: "  é"},
		{src: `pad_left("abc", 2)`, want: "abc"},
		{src: `pad_left("a", -1)`, want: "a"},
		{src: `pad_left("a", 3, "")`, want: "a"},
		{src: `pad_left("a", 4, "xy")`, want: "xyxa"},
		{src: `pad_right("ab", 5, "xy")`, want: "abxyx"},
		{src: `pad_right("ab", 4)`, want: "ab  "},
		{src: `pad_left("a", i)`, want: fmt.Sprintf("%42s", "a")},
		{src: `pad_left("a", to_int("3"))`, want: "  a"},
		{src: `pad_left("a", a)`, wantErr: `pad_left: argument 2 must be an integer, got float64 1.5`},
		{src: `pad_left("a", 2000000)`, wantErr: `pad_left: length 2000000 is over the limit`},
		{src: `truncate("hello world", 5)`, want: "hello"},
		{src: `truncate("hello world", 8, "...")`, want: "hello..."},
		{src: `truncate("héllo", 2)`, want: "hé"},
		{src: `truncate("hi", 5, "...")`, want: "hi"},
		{src: `truncate("hello", 2, "...")`, want: ".."},
		{src: `truncate("hello", 0)`, want: ""},
		{src: `truncate("x", -1)`, wantErr: `truncate: length must not be negative, got -1`},

		// sprintf, hash, uuid, to_json
		{src: `sprintf("%s=%d %.2f", "a", 3, 1.5)`, want: "a=3 1.50"},
		{src: `sprintf("no verbs")`, want: "no verbs"},
		{src: `sprintf("%d", "x")`, want: "%!d(string=x)"},
		{src: `sprintf(n)`, wantErr: `sprintf: argument 1 must be a string, got nil`},
		{src: `hash("x")`, want: 4703987501248937964}, // stable across releases
		{src: `hash("x") == hash(s)`, want: true},
		{src: `hash(3) == hash(3.0)`, want: true},
		{src: `hash(3) == hash(i64 - 1699999999997)`, want: true},
		{src: `hash(1) != hash("1")`, want: true},
		{src: `hash(nil) != hash("")`, want: true},
		{src: `hash([1, 2]) != hash([2, 1])`, want: true},
		{src: `hash({"a": 1, "b": [1, 2]}) == hash({"b": [1.0, 2], "a": 1})`, want: true},
		{src: `hash({"a": 1}) != hash({"a": 2})`, want: true},
		{src: `hash(headers) == hash({"trace": "abc"})`, want: true},
		{src: `all(["a", "b", 1.5, nil, [], {}], hash(#) >= 0)`, want: true},
		{src: `uuid_v4() != uuid_v4()`, want: true},
		{src: `len(uuid_v4())`, want: 36},
		{src: `to_json({"a": [1, "<b>"], "n": nil})`, want: `{"a":[1,"<b>"],"n":null}`},
		{src: `to_json("x")`, want: `"x"`},
		{src: `to_json(nan)`, wantErr: `to_json: json: unsupported value: NaN`},

		// coalesce and conversions
		{src: `coalesce(n, missing, "x", "y")`, want: "x"},
		{src: `coalesce(n)`, want: nil},
		{src: `coalesce(missing, 0)`, want: 0},
		{src: `coalesce(false, true)`, want: false},
		{src: `to_int("42")`, want: 42},
		{src: `to_int(" -42 ")`, want: -42},
		{src: `to_int("1e3")`, want: 1000},
		{src: `to_int(3.0)`, want: 3},
		{src: `to_int(i64)`, want: 1700000000000},
		{src: `to_int(true)`, want: 1},
		{src: `to_int(a)`, wantErr: `to_int: 1.5 is not an integer or is out of range`},
		{src: `to_int("1.5")`, wantErr: `to_int: string "1.5" is not an integer`},
		{src: `to_int("abc")`, wantErr: `to_int: string "abc" is not a number`},
		{src: `to_int(1e300)`, wantErr: `is not an integer or is out of range`},
		{src: `to_int(n)`, wantErr: `to_int: cannot convert nil to an integer`},
		{src: `to_int(l)`, wantErr: `to_int: cannot convert []interface {} to an integer`},
		{src: `to_float("1.5")`, want: 1.5},
		{src: `to_float(2)`, want: 2.0},
		{src: `to_float(false)`, want: 0.0},
		{src: `to_float("NaN")`, wantErr: `to_float: string "NaN" is not a finite number`},
		{src: `to_float(n)`, wantErr: `to_float: cannot convert nil to a float`},
		{src: `to_string(n)`, want: "null"},
		{src: `to_string(1.5)`, want: "1.5"},
		{src: `to_string(3.0)`, want: "3"},
		{src: `to_string(1e21)`, want: "1e+21"},
		{src: `to_string(0.0000001)`, want: "1e-7"},
		{src: `to_string(123456789.0)`, want: "123456789"},
		{src: `to_string(42)`, want: "42"},
		{src: `to_string(i64)`, want: "1700000000000"},
		{src: `to_string(true)`, want: "true"},
		{src: `to_string({"a": 1})`, want: `{"a":1}`},
		{src: `to_string([1, "x"])`, want: `[1,"x"]`},
		{src: `to_string(headers)`, want: `{"trace":"abc"}`},
		{src: `to_string(duration("1m"))`, want: "1m0s"},
		{src: `to_string(date("2023-11-14T22:13:20Z"))`, want: "2023-11-14T22:13:20Z"},
		{src: `to_bool("yes")`, want: true},
		{src: `to_bool(" OFF ")`, want: false},
		{src: `to_bool("1")`, want: true},
		{src: `to_bool(0)`, want: false},
		{src: `to_bool(2.5)`, want: true},
		{src: `to_bool(true)`, want: true},
		{src: `to_bool("maybe")`, wantErr: `to_bool: string "maybe" is not a boolean`},
		{src: `to_bool(nan)`, wantErr: `to_bool: NaN is not a boolean`},
		{src: `to_bool(n)`, wantErr: `to_bool: cannot convert nil to a boolean`},

		// maps
		{src: `get_path(m, "x.y.1")`, want: 20},
		{src: `get_path(m, "x.y.-1")`, want: 20},
		{src: `get_path(m, "x.y.5")`, want: nil},
		{src: `get_path(m, "x.y.z")`, want: nil},
		{src: `get_path(m, "x.z", "def")`, want: "def"},
		{src: `get_path(m, "k", "def")`, want: "v"},
		{src: `get_path(m, "k.deeper")`, want: nil},
		{src: `get_path(n, "a", 0)`, want: 0},
		{src: `get_path(headers, "trace")`, want: "abc"},
		{src: `get_path($env, "m.x.y.0")`, want: 10},
		{src: `get_path(l, "0")`, want: 1},
		{src: `get_path(l, "")`, want: []any{1, 2}},
		{src: `merge({"a": 1, "b": 2}, {"b": 3}, {"c": 4})`, want: map[string]any{"a": 1, "b": 3, "c": 4}},
		{src: `merge({"a": 1}, n)`, want: map[string]any{"a": 1}},
		{src: `merge({"a": 1}, headers)`, want: map[string]any{"a": 1, "trace": "abc"}},
		{src: `merge($env, {"s": "y"}).s + s`, want: "yx"},
		{src: `merge(s)`, wantErr: `merge: argument 1 must be a map, got string`},
		{src: `omit({"a": 1, "b": 2, "c": 3}, "a", "c")`, want: map[string]any{"b": 2}},
		{src: `omit({"a": 1})`, want: map[string]any{"a": 1}},
		{src: `omit(headers, "trace")`, want: map[string]any{}},
		{src: `pick({"a": 1, "b": 2, "c": 3}, "a", "z")`, want: map[string]any{"a": 1}},
		{src: `pick(headers, "trace")`, want: map[string]any{"trace": "abc"}},
		{src: `pick(l, "a")`, wantErr: `pick: argument 1 must be a map, got []interface {}`},
	}
	for _, tc := range tests {
		t.Run(tc.src, func(t *testing.T) {
			p, err := compileBuiltinExpr(tc.src)
			require.NoError(t, err)
			out, err := exprlang.Run(p, builtinTestEnv())
			if tc.wantErr != "" {
				require.Error(t, err)
				require.Contains(t, err.Error(), tc.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, out)
		})
	}
}

func TestBuiltinsNowMs(t *testing.T) {
	p, err := compileBuiltinExpr(`now_ms()`)
	require.NoError(t, err)
	before := time.Now().UnixMilli()
	out, err := exprlang.Run(p, nil)
	after := time.Now().UnixMilli()
	require.NoError(t, err)
	ms, ok := out.(int)
	require.True(t, ok, "now_ms returned %T", out)
	require.GreaterOrEqual(t, int64(ms), before)
	require.LessOrEqual(t, int64(ms), after)

	out, err = exprlang.Run(mustCompileBuiltin(t, `now_ms() - to_ms(now()) < 1000`), nil)
	require.NoError(t, err)
	require.Equal(t, true, out)
}

func TestBuiltinsUUID(t *testing.T) {
	re := regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)
	for range 100 {
		out, err := bUUIDv4()
		require.NoError(t, err)
		require.Regexp(t, re, out)
	}
}

func mustCompileBuiltin(t *testing.T, src string, extra ...exprlang.Option) *vm.Program {
	t.Helper()
	p, err := compileBuiltinExpr(src, extra...)
	require.NoError(t, err)
	return p
}

func TestBuiltinsCompileErrors(t *testing.T) {
	tests := []struct {
		src     string
		wantErr string
	}{
		{`now_ms(1)`, `too many arguments to call now_ms`},
		{`ts_parse()`, `not enough arguments to call ts_parse`},
		{`ts_parse(1)`, `cannot use int as argument (type string) to call ts_parse`},
		{`ts_parse("a", "b", "c", "d")`, `too many arguments to call ts_parse`},
		{`ts_format()`, `not enough arguments to call ts_format`},
		{`ts_format("x")`, `cannot use string as argument (type float64) to call ts_format`},
		{`ts_format(true)`, `cannot use bool as argument (type float64) to call ts_format`},
		{`ts_format(nil)`, `cannot use nil as argument`},
		{`ts_format(1, "a", "b", "c")`, `too many arguments to call ts_format`},
		{`to_ms()`, `not enough arguments to call to_ms`},
		{`to_ms(1, 2)`, `too many arguments to call to_ms`},
		{`contains_any("x", "y")`, `cannot use string as argument (type []interface {}) to call contains_any`},
		{`contains_any(["x"], ["y"])`, `cannot use []interface {} as argument (type string) to call contains_any`},
		{`regex_find("x")`, `not enough arguments to call regex_find`},
		{`regex_find(1, "x")`, `cannot use int as argument (type string) to call regex_find`},
		{`regex_find_all("x", 1)`, `cannot use int as argument (type string) to call regex_find_all`},
		{`regex_capture("x", "y", "z")`, `too many arguments to call regex_capture`},
		{`regex_replace("a", "b")`, `not enough arguments to call regex_replace`},
		{`pad_left("x", "3")`, `cannot use string as argument (type int) to call pad_left`},
		{`pad_left("x", 1.5)`, `cannot use float64 as argument (type int) to call pad_left`},
		{`pad_right(1, 2)`, `cannot use int as argument (type string) to call pad_right`},
		{`pad_right("x", 1, "y", "z")`, `too many arguments to call pad_right`},
		{`truncate("x")`, `not enough arguments to call truncate`},
		{`sprintf()`, `not enough arguments to call sprintf`},
		{`sprintf(1)`, `cannot use int as argument (type string) to call sprintf`},
		{`hash()`, `not enough arguments to call hash`},
		{`hash(1, 2)`, `too many arguments to call hash`},
		{`uuid_v4("x")`, `too many arguments to call uuid_v4`},
		{`to_json()`, `not enough arguments to call to_json`},
		{`coalesce()`, `not enough arguments to call coalesce`},
		{`to_int()`, `not enough arguments to call to_int`},
		{`to_float(1, 2)`, `too many arguments to call to_float`},
		{`to_string()`, `not enough arguments to call to_string`},
		{`to_bool(1, 2)`, `too many arguments to call to_bool`},
		{`get_path(m)`, `not enough arguments to call get_path`},
		{`get_path(m, 1)`, `cannot use int as argument (type string) to call get_path`},
		{`get_path(m, "a", 1, 2)`, `too many arguments to call get_path`},
		{`merge()`, `not enough arguments to call merge`},
		{`merge(1)`, `cannot use int as argument (type map[string]interface {}) to call merge`},
		{`merge({"a": 1}, "x")`, `cannot use string as argument (type map[string]interface {}) to call merge`},
		{`omit({"a": 1}, 1)`, `cannot use int as argument (type string) to call omit`},
		{`pick("x", "a")`, `cannot use string as argument (type map[string]interface {}) to call pick`},
		// Result types are known to the checker.
		{`upper(now_ms())`, `cannot use int as argument (type string) to call upper`},
		{`ts_parse("x") + "s"`, `invalid operation: + (mismatched types int and string)`},
		{`to_bool(s) + 1`, `invalid operation: + (mismatched types bool and int)`},
	}
	for _, tc := range tests {
		t.Run(tc.src, func(t *testing.T) {
			_, err := compileBuiltinExpr(tc.src)
			require.Error(t, err)
			require.Contains(t, err.Error(), tc.wantErr)
		})
	}

	// A predicate must be typed bool.
	_, err := compileBuiltinExpr(`contains_any(s, ["a"]) && to_bool(s)`, exprlang.AsBool())
	require.NoError(t, err)
	_, err = compileBuiltinExpr(`to_ms(s)`, exprlang.AsBool())
	require.ErrorContains(t, err, "expected bool, but got int")
}

func TestBuiltinsDoNotShadowExpr(t *testing.T) {
	seen := map[string]bool{}
	for _, d := range builtinDefs {
		require.NotContains(t, builtin.Index, d.name, "%s shadows an expr builtin", d.name)
		require.False(t, seen[d.name], "%s defined twice", d.name)
		seen[d.name] = true
		require.NotEmpty(t, d.types, d.name)
	}
}

func TestBuiltinsReturnsFreshSlice(t *testing.T) {
	a := Builtins()
	b := Builtins()
	require.Len(t, a, len(builtinDefs))
	a = append(a, exprlang.AsBool())
	b = append(b, exprlang.AsInt())
	require.NotSame(t, &a[len(a)-1], &b[len(b)-1])
	// Programs compiled with a's and b's extra options differ as expected.
	_, err := exprlang.Compile(`hash(1) > 0`, append(a, exprlang.Env(map[string]any{}))...)
	require.NoError(t, err)
	_, err = exprlang.Compile(`hash(1) > 0`, append(b, exprlang.Env(map[string]any{}))...)
	require.ErrorContains(t, err, "expected int")
}

// TestBuiltinsRegexReplaceMatchesStdlib checks that the bounded expansion in
// regex_replace gives what regexp.ReplaceAllString gives.
func TestBuiltinsRegexReplaceMatchesStdlib(t *testing.T) {
	cases := []struct{ s, re, repl string }{
		{"abc", "", "-"},
		{"abc", "x*", "-"},
		{"aaa", "a*", "<$0>"},
		{"banana", "a(n)?", "[$1]"},
		{"banana", "(?P<x>an)", "${x}${x}$$"},
		{"héllo wörld", "[^a-z ]", "?"},
		{"", "", "x"},
		{"a\nb\n", "(?m)^", "> "},
	}
	for _, c := range cases {
		out, err := bRegexReplace(c.s, c.re, c.repl)
		require.NoError(t, err)
		require.Equal(t, regexp.MustCompile(c.re).ReplaceAllString(c.s, c.repl), out, "%+v", c)
	}
	_, err := bRegexReplace(string(make([]byte, 1000)), "", string(make([]byte, 20000)))
	require.ErrorContains(t, err, "regex_replace: result over")
}

// TestBuiltinsOddInputs calls every builtin directly with every combination
// of odd values up to two arguments, and a sample of three: none may panic.
func TestBuiltinsOddInputs(t *testing.T) {
	pool := builtinOddValues("x")
	for _, d := range builtinDefs {
		callBuiltinNoPanic(t, d)
		for _, a := range pool {
			callBuiltinNoPanic(t, d, a)
			for _, b := range pool {
				callBuiltinNoPanic(t, d, a, b)
				callBuiltinNoPanic(t, d, a, b, a)
				callBuiltinNoPanic(t, d, "x", a, b)
			}
		}
		callBuiltinNoPanic(t, d, "s", 1, "", 4, 5)
	}
}

// builtinOddValues returns values a builtin may see at run time.
func builtinOddValues(s string) []any {
	var nilTime *time.Time
	var nilMap map[string]any
	return []any{
		nil, s, "", "2023-11-14T22:13:20Z", "(", "[a-", "$0$0", "%v%d%!", "a.b.0", "RFC3339", "Europe/Paris",
		"../../etc/passwd", "\xff\xfe", 0, -1, 3, 1 << 20, math.MaxInt, math.MinInt, int64(math.MinInt64),
		uint64(math.MaxUint64), int8(-3), uint8(7), float32(1.5), 1.5, -0.0, math.NaN(), math.Inf(1), math.Inf(-1),
		1e300, true, false, []any{s, 1, nil}, []any{}, []string{s}, []int{1, 2},
		map[string]any{s: s, "a": map[string]any{"b": []any{1}}}, map[string]string{s: s}, map[int]string{1: s},
		map[any]any{s: 1}, nilMap, time.Time{}, time.Unix(1e12, 0), nilTime, time.Duration(-1), []byte(s),
		struct{ A int }{1}, func() {}, make(chan int), new(int), fmt.Errorf("e"), builtinPanicStringer{},
	}
}

type builtinPanicStringer struct{}

func (builtinPanicStringer) String() string { panic("boom") }

func (builtinPanicStringer) MarshalJSON() ([]byte, error) { panic("boom") }

func callBuiltinNoPanic(t testing.TB, d builtinDef, args ...any) {
	t.Helper()
	defer func() {
		if r := recover(); r != nil {
			t.Fatalf("%s(%#v) panicked: %v", d.name, args, r)
		}
	}()
	_, _ = d.fn(args...)
}

// TestBuiltinsConcurrent runs the cached builtins from many goroutines, with
// more distinct patterns than the cache holds (run with -race).
func TestBuiltinsConcurrent(t *testing.T) {
	p := mustCompileBuiltin(t, `regex_find(s, "x" + string(i % 700)) + ts_format(i, "RFC3339", i % 2 == 0 ? "Europe/Paris" : "UTC") + string(hash(i))`)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := range 8 {
		wg.Go(func() {
			var m vm.VM
			for i := range 1000 {
				if _, err := m.Run(p, map[string]any{"s": "ax1b", "i": g*1000 + i}); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	m := biRegexCache.m.Load()
	require.NotNil(t, m)
	require.LessOrEqual(t, len(*m), maxCacheEntries)
}

func TestBuiltinsAllocs(t *testing.T) {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "-race" && s.Value == "true" {
				t.Skip("the race detector allocates")
			}
		}
	}
	// Warm the caches.
	_, _ = bRegexFind("order-123", "[0-9]+")
	_, _ = bTsFormat(1700000000000, "RFC3339", "Europe/Paris")
	record := map[string]any{"a": map[string]any{"b": "c"}, "l": []any{"x", 1.5}}
	tests := map[string]struct {
		fn  func() (any, error)
		max float64
	}{
		"regex_find (cached pattern)": {func() (any, error) { return bRegexFind("order-123", "[0-9]+") }, 1},
		"hash string":                 {func() (any, error) { return bHash("some-key") }, 1},
		"hash map":                    {func() (any, error) { return bHash(record) }, 1},
		"to_int":                      {func() (any, error) { return bToInt(float64(3)) }, 0},
		"get_path":                    {func() (any, error) { return bGetPath(record, "a.b") }, 0},
		"coalesce":                    {func() (any, error) { return bCoalesce(nil, "x") }, 0},
		"ts_format (cached zone)":     {func() (any, error) { return bTsFormat(1700000000000, "RFC3339", "Europe/Paris") }, 2},
	}
	for name, tc := range tests {
		allocs := testing.AllocsPerRun(100, func() {
			if _, err := tc.fn(); err != nil {
				t.Fatal(err)
			}
		})
		require.LessOrEqual(t, allocs, tc.max, name)
	}
}
