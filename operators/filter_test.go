package operators

import (
	"testing"

	"github.com/eddy-stream/eddy/expr"
	"github.com/eddy-stream/eddy/pipeline"
	"github.com/stretchr/testify/require"
)

func TestFilter(t *testing.T) {
	runCases(t, []opCase{
		{
			name: "keeps true in order",
			step: "filter: temp > 30",
			in:   []pipeline.Record{rec(fields{"temp": 31}), rec(fields{"temp": 10}), rec(fields{"temp": 40.5}), rec(fields{"temp": 30})},
			want: []pipeline.Record{rec(fields{"temp": 31}), rec(fields{"temp": 40.5})},
		},
		{
			name: "nothing kept emits nothing",
			step: "filter: temp > 30",
			in:   []pipeline.Record{rec(fields{"temp": 1}), rec(fields{"temp": 2})},
		},
		{
			name: "empty batch",
			step: "filter: temp > 30",
		},
		{
			name: "keeps time key and meta",
			step: `filter: name == "a"`,
			in: []pipeline.Record{
				{Fields: fields{"name": "a"}, Time: 7, Key: "k", Meta: &expr.Meta{Partition: 3}},
				{Fields: fields{"name": "b"}, Time: 8},
			},
			want: []pipeline.Record{{Fields: fields{"name": "a"}, Time: 7, Key: "k", Meta: &expr.Meta{Partition: 3}}},
		},
		{
			name: "missing field in comparison is a record error",
			step: "filter: temp > 30\n    on_error: skip",
			in:   []pipeline.Record{rec(fields{"temp": 31}), rec(fields{"other": 1}), rec(fields{"temp": 32})},
			want: []pipeline.Record{rec(fields{"temp": 31}), rec(fields{"temp": 32})},
			errs: 1,
		},
		{
			// The loader compiles a filter with expr's AsBool: nil (a
			// missing field) converts to false, any other non-bool fails.
			name: "non-bool result is a record error, nil is false",
			step: "filter: flag\n    on_error: skip",
			in:   []pipeline.Record{rec(fields{"flag": true}), rec(fields{"flag": "yes"}), rec(fields{}), rec(fields{"flag": false})},
			want: []pipeline.Record{rec(fields{"flag": true})},
			errs: 1,
		},
	})
}

// The filter compacts its input in place: what it emits is a prefix of the
// batch it got, and the slots after it are cleared.
func TestFilterCompactsInPlace(t *testing.T) {
	h := newHarness(t, stepYAML("filter: x % 2 == 0"))
	in := make([]pipeline.Record, 6)
	for i := range in {
		in[i] = rec(fields{"x": i})
	}
	var got []pipeline.Record
	err := h.op.Process(in, pipeline.EmitterFunc(func(b []pipeline.Record) error {
		got = b
		return nil
	}))
	require.NoError(t, err)
	require.Len(t, got, 3)
	require.Same(t, &in[0], &got[0])
	for i, r := range got {
		require.Equal(t, 2*i, r.Fields["x"])
	}
	for _, r := range in[3:] {
		require.Nil(t, r.Fields)
	}
}

func TestFilterErrorText(t *testing.T) {
	h := newHarness(t, stepYAML("filter: flag\n    on_error: fail"))
	_, err := h.process(rec(fields{"flag": 1}))
	require.ErrorIs(t, err, pipeline.ErrRecordFailed)
	require.EqualError(t, err, `record failed in "s": filter expression "flag": invalid operation: bool(int) (1:1)`,
		"one line: no source snippet")
}

// A predicate compiled without the loader's bool check (expr.MustExpr)
// still fails a record that is not a bool, with ErrResultType.
func TestFilterResultType(t *testing.T) {
	h := newHarness(t, stepYAML("filter: flag\n    on_error: fail"))
	h.op.(*filterOp).pred = expr.MustExpr("flag")
	out, err := h.process(rec(fields{"flag": true}), rec(fields{"flag": nil}))
	require.ErrorIs(t, err, pipeline.ErrRecordFailed)
	require.ErrorIs(t, err, ErrResultType)
	require.ErrorContains(t, err, `filter expression "flag" returned nil, not a bool`)
	require.Equal(t, []pipeline.Record{rec(fields{"flag": true})}, out.records, "the record before the failing one")
}
