package operators

import (
	"testing"

	"github.com/eddy-stream/eddy/expr"
	"github.com/eddy-stream/eddy/pipeline"
	"github.com/stretchr/testify/require"
)

func TestSet(t *testing.T) {
	runCases(t, []opCase{
		{
			name: "adds and overwrites, keeps the rest",
			step: "set: {temp_c: (temp - 32) * 5 / 9, unit: '\"C\"'}",
			in:   []pipeline.Record{rec(fields{"temp": 212.0, "id": "a", "unit": "F"})},
			want: []pipeline.Record{rec(fields{"temp": 212.0, "id": "a", "unit": "C", "temp_c": 100.0})},
		},
		{
			name: "later fields see earlier ones",
			step: "set: {a: x + 1, b: a * 10, x: b + a}",
			in:   []pipeline.Record{rec(fields{"x": 1}), rec(fields{"x": 2})},
			want: []pipeline.Record{rec(fields{"x": 22, "a": 2, "b": 20}), rec(fields{"x": 33, "a": 3, "b": 30})},
		},
		{
			name: "keeps time key and meta",
			step: "set: {y: 1}",
			in:   []pipeline.Record{{Fields: fields{}, Time: 5, Key: "k", Meta: &expr.Meta{Offset: 9}}},
			want: []pipeline.Record{{Fields: fields{"y": 1}, Time: 5, Key: "k", Meta: &expr.Meta{Offset: 9}}},
		},
		{
			name: "nil fields get a map",
			step: "set: {y: 1}",
			in:   []pipeline.Record{rec(nil)},
			want: []pipeline.Record{rec(fields{"y": 1})},
		},
		{
			name: "failed record is dropped, others kept",
			step: "set: {y: x + 1}\n    on_error: skip",
			in:   []pipeline.Record{rec(fields{"x": 1}), rec(fields{"x": "s"}), rec(fields{"x": 3})},
			want: []pipeline.Record{rec(fields{"x": 1, "y": 2}), rec(fields{"x": 3, "y": 4})},
			errs: 1,
		},
	})
}

// A record whose later expression fails is restored before it goes to
// on_error: the dead letter holds the input record, not a half-set one.
func TestSetRestoresFailedRecord(t *testing.T) {
	h := newHarness(t, stepYAML("set: {b: 2, a: x * 10, x: 0, c: x / y}\n    on_error: dead_letter"))
	in := []pipeline.Record{rec(fields{"x": 1, "b": "old", "y": 0.5}), rec(fields{"x": 1, "b": "old", "y": "zero"})}
	out, err := h.process(in...)
	require.NoError(t, err)
	require.Equal(t, []pipeline.Record{rec(fields{"x": 0, "b": 2, "a": 10, "y": 0.5, "c": 0.0})}, out.records)
	require.Len(t, h.dead.records, 1)
	dl := h.dead.records[0].Fields
	require.Equal(t, fields{"x": 1, "b": "old", "y": "zero"}, dl["record"])
	require.Equal(t, "s", dl["step"])
	require.Equal(t, `set field "c": expression "x / y": invalid operation: int / string (1:3)`, dl["error"])
}
