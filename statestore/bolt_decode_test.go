package statestore

import (
	"errors"
	"fmt"
	"testing"

	"github.com/fxamacker/cbor/v2"
	"github.com/stretchr/testify/require"
)

// loadedBox is a state value behind a pointer with its own CBOR methods,
// as a window's accumulator is; UnmarshalCBOR counts its calls.
type loadedBox struct{ n uint64 }

var loadedBoxDecodes int

func (b *loadedBox) MarshalCBOR() ([]byte, error) { return cbor.Marshal(b.n) }

func (b *loadedBox) UnmarshalCBOR(data []byte) error {
	loadedBoxDecodes++
	if len(data) == 0 || data[0]>>5 != 0 {
		return errors.New("not an unsigned integer")
	}
	return cbor.Unmarshal(data, &b.n)
}

// The bbolt backend decodes loaded values with valueDecoder: a pointer
// type's UnmarshalCBOR for its values, the cbor package for null.
func TestBoltLoadsDecodeWithValueDecoder(t *testing.T) {
	b, err := NewBolt(BoltOptions{Options: Options{KeyGroup: func(string) int { return 0 }, KeyGroups: [2]int{0, 1}}, Dir: t.TempDir(), CacheEntries: 4})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, b.Close()) })
	v, err := RegisterValue(b, ValueDescriptor[*loadedBox]{Name: "box"})
	require.NoError(t, err)
	const keys = 40
	for i := range keys {
		box := &loadedBox{n: uint64(i)}
		if i%10 == 3 {
			box = nil
		}
		v.Put(fmt.Sprint("k", i), "", box)
	}
	loadedBoxDecodes = 0
	for i := range keys {
		got, ok := v.Get(fmt.Sprint("k", i), "")
		require.True(t, ok, i)
		if i%10 == 3 {
			require.Nil(t, got, i)
			continue
		}
		require.NotNil(t, got, i)
		require.Equal(t, uint64(i), got.n, i)
	}
	require.NoError(t, b.Err())
	// Every non-nil value was evicted and loaded again (a cache of 4).
	require.GreaterOrEqual(t, loadedBoxDecodes, keys-keys/10-4)
}
