package statestore

import (
	"errors"
	"testing"

	"github.com/fxamacker/cbor/v2"
	"github.com/stretchr/testify/require"
)

// checkedUint decodes from a CBOR unsigned integer below 100 only (not
// from null), and counts the calls of its CheckCBOR.
type checkedUint struct{ v uint64 }

var checkCalls int

func (c *checkedUint) UnmarshalCBOR(data []byte) error {
	if len(data) == 0 || data[0]>>5 != 0 {
		return errors.New("not an unsigned integer")
	}
	if err := cbor.Unmarshal(data, &c.v); err != nil {
		return err
	}
	if c.v >= 100 {
		return errors.New("too large")
	}
	return nil
}

func (*checkedUint) CheckCBOR(data []byte) error {
	checkCalls++
	return new(checkedUint).UnmarshalCBOR(data)
}

// valueChecker accepts exactly what decoding into the type accepts: the
// decoder's checks (well-formedness, trailing bytes, tags, null into a
// pointer) stay its own, and only the value's part goes to CheckCBOR.
func TestValueChecker(t *testing.T) {
	inputs := [][]byte{
		{0x01}, {0x18, 0x63}, {0x18, 0x64}, {0x20}, {0x61, 0x61}, {0xf6}, {0xf7}, {0xf5},
		{}, {0x18}, {0x01, 0x01}, // truncated, trailing bytes
		{0xd9, 0xd9, 0xf7, 0x05},       // self-described 5
		{0xd9, 0xd9, 0xf7, 0xf6},       // self-described null
		{0xd9, 0xd9, 0xf7, 0x18, 0x64}, // self-described 100
		{0xc1, 0x05},                   // epoch time tag
		{0x81, 0x01}, {0xa0}, {0xfb, 0, 0, 0, 0, 0, 0, 0, 0},
	}
	check := valueChecker[*checkedUint]()
	checkCalls = 0
	accepted, rejected := 0, 0
	for _, in := range inputs {
		var v *checkedUint
		derr := decMode.Unmarshal(in, &v)
		cerr := check(in)
		require.Equal(t, derr == nil, cerr == nil, "input %x: decoding %v, check %v", in, derr, cerr)
		if derr == nil {
			accepted++
		} else {
			rejected++
		}
	}
	require.Positive(t, accepted)
	require.Positive(t, rejected)
	require.Positive(t, checkCalls, "CheckCBOR was not used")

	// A type without CheckCBOR is decoded.
	plain := valueChecker[uint8]()
	require.NoError(t, plain([]byte{0x18, 0xff}))
	require.Error(t, plain([]byte{0x19, 0x01, 0x00}))
}
