package pipeline

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// Record expressions read source metadata as _key, _headers, _partition,
// _offset and _timestamp; the record's fields are as before afterwards.
func TestEvalRecordMetadata(t *testing.T) {
	var vm VM
	r := Record{
		Fields: map[string]any{"n": 1, "_offset": "a field"},
		Meta: &Meta{Key: []byte("k1"), Headers: map[string]string{"trace": "t-9"},
			Partition: 3, Offset: 42, Timestamp: 1700000000123},
	}
	cases := map[string]any{
		`_key`:                            "k1",
		`_headers.trace`:                  "t-9",
		`_partition * 10 + n`:             31,
		`_offset`:                         42,
		`_timestamp`:                      1700000000123,
		`n + 1`:                           2,
		`_key + "/" + string(_partition)`: "k1/3",
	}
	for src, want := range cases {
		got, err := vm.EvalRecord(MustExpr(src), &r)
		require.NoError(t, err, src)
		require.Equal(t, want, got, src)
	}
	require.Equal(t, map[string]any{"n": 1, "_offset": "a field"}, r.Fields, "metadata must not stay in the fields")

	// Without metadata the names are missing fields (nil), or the record's
	// own fields.
	plain := Record{Fields: map[string]any{"_offset": 7}}
	got, err := vm.EvalRecord(MustExpr(`_offset`), &plain)
	require.NoError(t, err)
	require.Equal(t, 7, got)
	got, err = vm.EvalRecord(MustExpr(`_key`), &plain)
	require.NoError(t, err)
	require.Nil(t, got)

	// A record without a key gives nil, not "".
	nokey := Record{Fields: map[string]any{}, Meta: &Meta{Partition: 1}}
	got, err = vm.EvalRecord(MustExpr(`_key == nil`), &nokey)
	require.NoError(t, err)
	require.Equal(t, true, got)
}
