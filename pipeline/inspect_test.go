package pipeline

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestParsePart(t *testing.T) {
	tests := []struct {
		name    string
		kind    string
		id      string
		subtask int
		ok      bool
	}{
		{name: sourcePart("readings", 0), kind: PartSource, id: "readings", subtask: 0, ok: true},
		{name: statePart("per_sensor", 3), kind: PartState, id: "per_sensor", subtask: 3, ok: true},
		{name: sinkPart("out", 12), kind: PartSink, id: "out", subtask: 12, ok: true},
		{name: "op/per_sensor"},
		{name: "op//1"},
		{name: "op/x/-1"},
		{name: "op/x/one"},
		{name: "meta/x/1"},
		{name: ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			kind, id, sub, ok := ParsePart(tt.name)
			require.Equal(t, tt.ok, ok)
			require.Equal(t, tt.kind, kind)
			require.Equal(t, tt.id, id)
			require.Equal(t, tt.subtask, sub)
		})
	}
}

func TestDecodeCommittables(t *testing.T) {
	for _, cs := range [][][]byte{
		{},
		{[]byte(`{"v":1}`)},
		{[]byte("a"), {}, make([]byte, 300)},
	} {
		got, err := DecodeCommittables(encodeCommittables(cs))
		require.NoError(t, err)
		require.Len(t, got, len(cs))
		for i := range cs {
			require.Equal(t, len(cs[i]), len(got[i]))
			require.Equal(t, string(cs[i]), string(got[i]))
		}
	}
	good := encodeCommittables([][]byte{[]byte("abc"), []byte("de")})
	for _, bad := range [][]byte{
		nil,
		good[:len(good)-1],
		append(append([]byte(nil), good...), 0),
		{5, 1, 'x'},
	} {
		_, err := DecodeCommittables(bad)
		require.ErrorIs(t, err, errCommittables, "%x", bad)
		require.ErrorContains(t, err, "decode the committables of a sink part")
	}
}
