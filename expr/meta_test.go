package expr

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// Record expressions read source metadata as _key, _headers, _partition,
// _offset and _timestamp; the record's fields are as before afterwards.
func TestEvalRecordMetadata(t *testing.T) {
	var vm VM
	fields := map[string]any{"n": 1, "_offset": "a field"}
	meta := &Meta{Key: []byte("k1"), Headers: map[string]string{"trace": "t-9"},
		Partition: 3, Offset: 42, Timestamp: 1700000000123}
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
		got, err := vm.EvalRecord(MustExpr(src), fields, meta)
		require.NoError(t, err, src)
		require.Equal(t, want, got, src)
	}
	require.Equal(t, map[string]any{"n": 1, "_offset": "a field"}, fields, "metadata must not stay in the fields")

	// Without metadata the names are missing fields (nil), or the record's
	// own fields.
	plain := map[string]any{"_offset": 7}
	got, err := vm.EvalRecord(MustExpr(`_offset`), plain, nil)
	require.NoError(t, err)
	require.Equal(t, 7, got)
	got, err = vm.EvalRecord(MustExpr(`_key`), plain, nil)
	require.NoError(t, err)
	require.Nil(t, got)

	// A record without a key gives nil, not "".
	got, err = vm.EvalRecord(MustExpr(`_key == nil`), map[string]any{}, &Meta{Partition: 1})
	require.NoError(t, err)
	require.Equal(t, true, got)

	// A record without fields still reads its metadata.
	got, err = vm.EvalRecord(MustExpr(`_partition + _offset`), nil, &Meta{Partition: 2, Offset: 40})
	require.NoError(t, err)
	require.Equal(t, 42, got)
}

// Lending metadata to a record's fields allocates nothing beyond the values
// it boxes (here none: small ints are not allocated): record expressions run
// for every record.
func TestEvalRecordMetadataDoesNotAllocate(t *testing.T) {
	var vm VM
	e := MustExpr(`_partition == 3 && n > 0`)
	fields := map[string]any{"n": 1}
	meta := &Meta{Key: []byte("k"), Partition: 3}
	allocs := testing.AllocsPerRun(100, func() {
		if v, err := vm.EvalRecord(e, fields, meta); err != nil || v != true {
			t.Fatalf("got %v, %v", v, err)
		}
	})
	require.Zero(t, allocs)
}
