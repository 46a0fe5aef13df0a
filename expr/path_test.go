package expr

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// A record expression that is a field path, and only such one, is looked
// up directly.
func TestFieldPathDetected(t *testing.T) {
	type want struct {
		names    []string
		nullSafe bool
	}
	for src, w := range map[string]want{
		"date_time":              {names: []string{"date_time"}},
		"bid.auction":            {names: []string{"bid", "auction"}},
		`bid["auction"]`:         {names: []string{"bid", "auction"}},
		"a.b.c":                  {names: []string{"a", "b", "c"}},
		"bid.auction.toString":   {names: []string{"bid", "auction", "toString"}},
		"a?.b":                   {names: []string{"a", "b"}, nullSafe: true},
		"a?.b.c":                 {}, // the chain is optional to its end
		"a?.b?.c":                {},
		"a.b?.c":                 {},
		"bid.price * 908 / 1000": {},
		"event_type == 2":        {},
		"a[0]":                   {},
		"a.b[1]":                 {},
		"_key":                   {}, // source metadata
		"_headers.h":             {},
		`"date_time"`:            {},
		"1":                      {},
		"upper(name)":            {},
		"a.b.c + 0":              {},
		"len(a)":                 {},
		"now().Unix()":           {},
		`{"a": 1}.a`:             {},
		"nil":                    {},
		"true":                   {},
		"a ?? b":                 {},
		"a.b == nil ? 1 : a.b":   {},
		"$env":                   {},
		"$env.x":                 {},
	} {
		e := &Expr{Source: src}
		require.NoError(t, e.Compile(nil, ""), src)
		if w.names == nil {
			require.Nil(t, e.path, src)
			continue
		}
		require.NotNil(t, e.path, src)
		require.Equal(t, w.names, e.path.names, src)
		require.Equal(t, w.nullSafe, e.path.nullSafe, src)
	}
	// Compiled nullsafe (a join's select), the first access is optional.
	e := &Expr{Source: "left.id"}
	require.NoError(t, e.Compile(nil, "nullsafe"))
	require.Equal(t, &fieldPath{names: []string{"left", "id"}, nullSafe: true}, e.path)
	e = &Expr{Source: "a.b.c"}
	require.NoError(t, e.Compile(nil, "nullsafe"))
	require.Equal(t, &fieldPath{names: []string{"a", "b", "c"}, nullSafe: true}, e.path)
	// Not in an environment that is not a record's.
	e = &Expr{Source: "a.b"}
	require.NoError(t, e.Compile(map[string]any{"a": map[string]any{"b": 1}}, ""))
	require.Nil(t, e.path)
}

// The direct lookup gives what the program gives, value and failure, on
// records of every shape the path may meet, through EvalRecord and Eval,
// compiled plain and nullsafe.
func TestFieldPathSameAsProgram(t *testing.T) {
	type point struct{ X, Y int }
	records := []map[string]any{
		nil,
		{},
		{"a": nil},
		{"a": 1},
		{"a": "text"},
		{"a": map[string]any{}},
		{"a": map[string]any(nil)},
		{"a": (*point)(nil)},
		{"a": []any(nil)},
		{"a": map[string]any{"b": nil}},
		{"a": map[string]any{"b": 2.5}},
		{"a": map[string]any{"b": map[string]any(nil)}},
		{"a": map[string]any{"b": []any(nil)}},
		{"a": map[string]any{"b": (*point)(nil)}},
		{"a": map[string]any{"b": map[string]any{"c": "deep"}}},
		{"a": map[string]any{"b": map[string]any{"c": []any{1, 2}}}},
		{"a": map[string]any{"b": map[string]any{"c": map[string]any(nil)}}},
		{"a": map[string]any{"b": []any{1}}},
		{"a": map[string]int{"b": 3}},
		{"a": map[string]string{"b": "s"}},
		{"a": point{X: 1}},
		{"a": &point{Y: 2}},
		{"a": []any{map[string]any{"b": 1}}},
		{"a": map[string]any{"b": map[string]any{}}},
		{"a": map[string]any{"b": point{X: 4}}},
	}
	var m VM
	for _, want := range []string{"", "nullsafe"} {
		for _, src := range []string{"a", "a.b", `a["b"]`, "a.b.c", "a.X", "a.b.X", "a?.b"} {
			e := &Expr{Source: src}
			require.NoError(t, e.Compile(nil, want), src)
			require.NotNil(t, e.path, src)
			for _, r := range records {
				wantV, wantErr := m.vm.Run(e.program, r)
				for name, eval := range map[string]func() (any, error){
					"EvalRecord": func() (any, error) { return m.evalRecord(e, r, nil) },
					"Eval":       func() (any, error) { return m.Eval(e, r) },
				} {
					got, gotErr := eval()
					require.Equal(t, wantErr != nil, gotErr != nil, "%s %s (%s) over %#v: %v, %v", name, src, want, r, wantErr, gotErr)
					if wantErr == nil {
						require.Equal(t, wantV, got, "%s %s (%s) over %#v", name, src, want, r)
					} else {
						require.Equal(t, wantErr.Error(), gotErr.Error(), "%s %s (%s) over %#v", name, src, want, r)
					}
				}
			}
		}
	}
	// Eval over an environment that is not a map: the program decides.
	e := &Expr{Source: "a.b"}
	require.NoError(t, e.Compile(nil, ""))
	_, err := m.Eval(e, point{X: 1})
	require.Error(t, err)
}

// BenchmarkFieldPath compares a nested field path looked up directly with
// the same program run by the VM.
func BenchmarkFieldPath(b *testing.B) {
	e := &Expr{Source: "bid.auction"}
	if err := e.Compile(nil, ""); err != nil {
		b.Fatal(err)
	}
	fields := map[string]any{"event_type": 2, "bid": map[string]any{"auction": int64(1000), "price": int64(123456)}}
	var m VM
	b.Run("lookup", func(b *testing.B) {
		for b.Loop() {
			if _, err := m.EvalRecord(e, fields, nil); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("program", func(b *testing.B) {
		for b.Loop() {
			if _, err := m.vm.Run(e.program, fields); err != nil {
				b.Fatal(err)
			}
		}
	})
}
