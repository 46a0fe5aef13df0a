package operators

import (
	"testing"

	"github.com/eddy-stream/eddy/expr"
	"github.com/eddy-stream/eddy/pipeline"
	"github.com/stretchr/testify/require"
)

func TestMap(t *testing.T) {
	runCases(t, []opCase{
		{
			name: "new record with just the fields",
			step: "map: {id: sensor, f: temp * 2}",
			in:   []pipeline.Record{rec(fields{"sensor": "a", "temp": 3, "junk": true})},
			want: []pipeline.Record{rec(fields{"id": "a", "f": 6})},
		},
		{
			name: "expressions see the old record, not each other",
			step: "map: {x: y, y: x}",
			in:   []pipeline.Record{rec(fields{"x": 1, "y": 2})},
			want: []pipeline.Record{rec(fields{"x": 2, "y": 1})},
		},
		{
			name: "missing field maps to nil",
			step: "map: {x: nope}",
			in:   []pipeline.Record{rec(fields{"y": 1})},
			want: []pipeline.Record{rec(fields{"x": nil})},
		},
		{
			name: "keeps time key and meta",
			step: "map: {y: 1}",
			in:   []pipeline.Record{{Fields: fields{"x": 1}, Time: 5, Key: "k", Meta: &expr.Meta{Offset: 9}}},
			want: []pipeline.Record{{Fields: fields{"y": 1}, Time: 5, Key: "k", Meta: &expr.Meta{Offset: 9}}},
		},
		{
			name: "failed record is dropped",
			step: "map: {n: len(s)}\n    on_error: skip",
			in:   []pipeline.Record{rec(fields{"s": "abc"}), rec(fields{"s": 5}), rec(fields{"s": "de"})},
			want: []pipeline.Record{rec(fields{"n": 3}), rec(fields{"n": 2})},
			errs: 1,
		},
	})
}

// The input map is not reused: a value that refers to it ($env) stays whole.
func TestMapNewMap(t *testing.T) {
	h := newHarness(t, stepYAML("map: {orig: $env, x: x + 1}"))
	old := fields{"x": 1}
	out, err := h.process(rec(old))
	require.NoError(t, err)
	require.Equal(t, []pipeline.Record{rec(fields{"orig": fields{"x": 1}, "x": 2})}, out.records)
	require.Equal(t, fields{"x": 1}, old)
}
