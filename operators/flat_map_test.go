package operators

import (
	"testing"

	"github.com/eddy-stream/eddy/expr"
	"github.com/eddy-stream/eddy/pipeline"
	"github.com/stretchr/testify/require"
)

func TestFlatMap(t *testing.T) {
	meta := &expr.Meta{Partition: 2, Offset: 40}
	runCases(t, []opCase{
		{
			name: "map elements become fields, others become value",
			step: "flat_map: items",
			in: []pipeline.Record{
				rec(fields{"items": []any{map[string]any{"sku": "a"}, 7, "x", nil}}),
				rec(fields{"items": []any{map[string]any{"sku": "b", "n": 2}}}),
			},
			want: []pipeline.Record{
				rec(fields{"sku": "a"}), rec(fields{"value": 7}), rec(fields{"value": "x"}), rec(fields{"value": nil}),
				rec(fields{"sku": "b", "n": 2}),
			},
		},
		{
			name: "outputs keep time key and meta",
			step: `flat_map: 'map(items, ({"v": # * 2}))'`,
			in:   []pipeline.Record{{Fields: fields{"items": []any{1, 2}}, Time: 11, Key: "k", Meta: meta}},
			want: []pipeline.Record{
				{Fields: fields{"v": 2}, Time: 11, Key: "k", Meta: meta},
				{Fields: fields{"v": 4}, Time: 11, Key: "k", Meta: meta},
			},
		},
		{
			name: "typed slices",
			step: `flat_map: 'split(s, ",")'`,
			in:   []pipeline.Record{rec(fields{"s": "a,b"})},
			want: []pipeline.Record{rec(fields{"value": "a"}), rec(fields{"value": "b"})},
		},
		{
			name: "range",
			step: "flat_map: 1..3",
			in:   []pipeline.Record{rec(fields{})},
			want: []pipeline.Record{rec(fields{"value": 1}), rec(fields{"value": 2}), rec(fields{"value": 3})},
		},
		{
			name: "nil and empty lists emit nothing",
			step: "flat_map: items",
			in:   []pipeline.Record{rec(fields{}), rec(fields{"items": []any{}}), rec(fields{"items": nil})},
		},
		{
			name: "non-list is a record error",
			step: "flat_map: items\n    on_error: skip",
			in:   []pipeline.Record{rec(fields{"items": 3}), rec(fields{"items": []any{1}}), rec(fields{"items": map[string]any{"a": 1}})},
			want: []pipeline.Record{rec(fields{"value": 1})},
			errs: 2,
		},
	})
}

// Element maps are copied: changing an output record leaves the input's list alone.
func TestFlatMapCopiesElements(t *testing.T) {
	h := newHarness(t, stepYAML("flat_map: items"))
	elem := map[string]any{"a": 1}
	out, err := h.process(rec(fields{"items": []any{elem}}))
	require.NoError(t, err)
	require.Len(t, out.records, 1)
	out.records[0].Fields["a"] = 2
	require.Equal(t, map[string]any{"a": 1}, elem)
}

// The scratch output slice is reused: a second batch emits only its own records.
func TestFlatMapReusesScratch(t *testing.T) {
	h := newHarness(t, stepYAML("flat_map: items"))
	out, err := h.process(rec(fields{"items": []any{1, 2, 3}}))
	require.NoError(t, err)
	require.Len(t, out.records, 3)
	out, err = h.process(rec(fields{"items": []any{4}}))
	require.NoError(t, err)
	require.Equal(t, []pipeline.Record{rec(fields{"value": 4})}, out.records)
}

func TestFlatMapNotListError(t *testing.T) {
	h := newHarness(t, stepYAML("flat_map: items\n    on_error: fail"))
	_, err := h.process(rec(fields{"items": "abc"}))
	require.ErrorIs(t, err, pipeline.ErrRecordFailed)
	require.ErrorIs(t, err, ErrResultType)
	require.EqualError(t, err, `record failed in "s": expression returned the wrong type: flat_map expression "items" returned string, not a list`)
}
