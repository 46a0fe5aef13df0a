package expr

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// A record expression that is a field path, and only such one, is looked
// up directly.
func TestFieldPathDetected(t *testing.T) {
	for src, want := range map[string][]string{
		"date_time":              {"date_time"},
		"bid.auction":            {"bid", "auction"},
		`bid["auction"]`:         {"bid", "auction"},
		"a.b.c":                  {"a", "b", "c"},
		"bid.price * 908 / 1000": nil,
		"event_type == 2":        nil,
		"a[0]":                   nil,
		"a.b[1]":                 nil,
		"a?.b":                   nil,
		"_key":                   nil, // source metadata
		"_headers.h":             nil,
		`"date_time"`:            nil,
		"1":                      nil,
		"upper(name)":            nil,
		"a.b.c + 0":              nil,
		"len(a)":                 nil,
		"now().Unix()":           nil,
		`{"a": 1}.a`:             nil,
		"nil":                    nil,
		"true":                   nil,
		"a ?? b":                 nil,
		"a.b == nil ? 1 : a.b":   nil,
		"bid.auction.toString":   {"bid", "auction", "toString"},
		"$env":                   nil,
		"$env.x":                 nil,
	} {
		e := &Expr{Source: src}
		require.NoError(t, e.Compile(nil, ""), src)
		require.Equal(t, want, e.path, src)
	}
	// Nor in an environment that is not a record's.
	e := &Expr{Source: "a.b"}
	require.NoError(t, e.Compile(map[string]any{"a": map[string]any{"b": 1}}, ""))
	require.Nil(t, e.path)
}

// The direct lookup gives what the program gives, value and failure, on
// records of every shape the path may meet.
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
		{"a": map[string]any{"b": nil}},
		{"a": map[string]any{"b": 2.5}},
		{"a": map[string]any{"b": map[string]any{"c": "deep"}}},
		{"a": map[string]any{"b": map[string]any{"c": []any{1, 2}}}},
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
	for _, src := range []string{"a", "a.b", `a["b"]`, "a.b.c", "a.X", "a.b.X"} {
		e := &Expr{Source: src}
		require.NoError(t, e.Compile(nil, ""), src)
		require.NotNil(t, e.path, src)
		for _, r := range records {
			want, wantErr := m.vm.Run(e.program, r)
			got, gotErr := m.evalRecord(e, r, nil)
			require.Equal(t, wantErr != nil, gotErr != nil, "%s over %v: %v, %v", src, r, wantErr, gotErr)
			if wantErr == nil {
				require.Equal(t, want, got, "%s over %v", src, r)
			} else {
				require.Equal(t, wantErr.Error(), gotErr.Error(), "%s over %v", src, r)
			}
		}
	}
}
