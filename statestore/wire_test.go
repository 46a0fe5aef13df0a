package statestore

import (
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// goldenPayloads returns the payloads of the golden snapshot's blobs: every
// kind of state, value types with and without a hand-written encoding, and
// timers.
func goldenPayloads(t testing.TB) [][]byte {
	t.Helper()
	stream, err := os.ReadFile(filepath.FromSlash("testdata/snapshot-v1.golden"))
	require.NoError(t, err)
	var payloads [][]byte
	require.NoError(t, SplitBlobs(stream, func(_ int, blob []byte) error {
		_, payload, err := parseBlob(blob)
		payloads = append(payloads, payload)
		return err
	}))
	require.NotEmpty(t, payloads)
	return payloads
}

// decodeWithCBOR is how payloads were decoded before decodePayload: with
// the struct tags of wirePayload.
func decodeWithCBOR(payload []byte) (wirePayload, error) {
	var p wirePayload
	err := decMode.Unmarshal(payload, &p)
	return p, err
}

// requireSamePayload compares what decodePayload and the CBOR library
// decoded, with nil and empty slices alike.
func requireSamePayload(t *testing.T, want, got wirePayload, msg string) {
	t.Helper()
	require.Len(t, got.States, len(want.States), msg)
	for i, ws := range want.States {
		gs := got.States[i]
		require.Equal(t, ws.Name, gs.Name, msg)
		require.Equal(t, ws.Kind, gs.Kind, msg)
		require.Len(t, gs.Entries, len(ws.Entries), msg)
		for j, we := range ws.Entries {
			ge := gs.Entries[j]
			require.Equal(t, we.Key, ge.Key, msg)
			require.Equal(t, we.NS, ge.NS, msg)
			require.Equal(t, we.TS, ge.TS, msg)
			require.Equal(t, []byte(we.Value), []byte(ge.Value), msg)
		}
	}
	require.Len(t, got.Timers, len(want.Timers), msg)
	for i, wt := range want.Timers {
		require.Equal(t, wt.Name, got.Timers[i].Name, msg)
		require.Len(t, got.Timers[i].Timers, len(wt.Timers), msg)
		for j := range wt.Timers {
			require.Equal(t, wt.Timers[j], got.Timers[i].Timers[j], msg)
		}
	}
}

// TestDecodePayloadMatchesCBOR: the hand-written decoder reads the golden
// snapshot's payloads as the CBOR library does, with and without aliasing
// keys, and copies keys when it does not alias.
func TestDecodePayloadMatchesCBOR(t *testing.T) {
	entries, timers := 0, 0
	for _, payload := range goldenPayloads(t) {
		want, err := decodeWithCBOR(payload)
		require.NoError(t, err)
		for _, alias := range []bool{false, true} {
			var got wirePayload
			require.NoError(t, decodePayload(payload, &got, alias))
			requireSamePayload(t, want, got, "")
		}
		for _, s := range want.States {
			entries += len(s.Entries)
		}
		for _, ts := range want.Timers {
			timers += len(ts.Timers)
		}
	}
	require.Greater(t, entries, 3000)
	require.Greater(t, timers, 0)

	// Without alias, a key does not point into the payload.
	payload := append([]byte(nil), goldenPayloads(t)[1]...)
	var p wirePayload
	require.NoError(t, decodePayload(payload, &p, false))
	key := p.States[0].Entries[0].Key
	clear(payload)
	require.NotEmpty(t, key)
	require.NotEqual(t, byte(0), key[0]|key[len(key)-1])
}

// TestDecodePayloadRejectsWhatCBORRejects: damaged payloads (bytes changed,
// dropped, inserted, cut short) never crash the decoder, and whatever it
// accepts the CBOR library decodes the same (it is never more lenient).
func TestDecodePayloadRejectsWhatCBORRejects(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 5))
	payloads := goldenPayloads(t)
	rejected, accepted := 0, 0
	for i := range 20_000 {
		src := payloads[r.IntN(len(payloads))]
		b := append([]byte(nil), src...)
		// Damage within the first bytes too, where the structure is.
		at := r.IntN(len(b))
		if r.IntN(2) == 0 {
			at = r.IntN(min(len(b), 64))
		}
		switch i % 4 {
		case 0:
			b[at] ^= byte(1 + r.IntN(255))
		case 1:
			b = append(b[:at], b[at+1:]...)
		case 2:
			b = append(b[:at], append([]byte{byte(r.Uint32())}, b[at:]...)...)
		default:
			b = b[:at]
		}
		var got wirePayload
		if err := decodePayload(b, &got, i%2 == 0); err != nil {
			require.ErrorIs(t, err, ErrCorrupt)
			require.Equal(t, wirePayload{}, got)
			rejected++
			continue
		}
		want, err := decodeWithCBOR(b)
		require.NoError(t, err, "decodePayload accepted what the CBOR library rejects: % x", b)
		requireSamePayload(t, want, got, "")
		accepted++
	}
	require.Greater(t, rejected, 5000)
	require.Greater(t, accepted, 1000) // changed values, keys, timestamps
}

// TestDecodePayloadItems: values may be any well-formed data item, those of
// indefinite length and tagged ones included; the structure must be as
// written, and nesting is bounded.
func TestDecodePayloadItems(t *testing.T) {
	// {1: [["s", 1, [[key, ns, ts, value]]]]}
	payload := func(value ...byte) []byte {
		b := []byte{0xa1, 0x01, 0x81, 0x83, 0x61, 's', 0x01, 0x81, 0x84, 0x61, 'k', 0x60, 0x20}
		return append(b, value...)
	}
	deep := func(n int) []byte {
		var v []byte
		for range n {
			v = append(v, 0x81)
		}
		return append(v, 0x00)
	}
	for _, c := range []struct {
		name  string
		b     []byte
		valid bool
	}{
		{"definite", payload(0x82, 0x01, 0x62, 'a', 'b'), true},
		{"indefinite array", payload(0x9f, 0x01, 0x02, 0xff), true},
		{"indefinite map", payload(0xbf, 0x01, 0x02, 0xff), true},
		{"indefinite string", payload(0x7f, 0x61, 'a', 0x62, 'b', 'c', 0xff), true},
		{"tag", payload(0xc1, 0x1a, 0, 0, 0, 1), true},
		{"bignum", payload(0xc2, 0x41, 0x01), true},
		{"bignum of an array", payload(0xc2, 0x81, 0x01), false},
		{"epoch time of a string", payload(0xc1, 0x61, '1'), false},
		{"date of a number", payload(0xc0, 0x01), false},
		{"float", payload(0xfb, 0x3f, 0xf0, 0, 0, 0, 0, 0, 0), true},
		{"tombstone", payload(0xf7), true},
		{"nested as deep as the CBOR library allows", payload(deep(251)...), true},
		{"unknown payload key", append([]byte{0xa2, 0x03, 0x82, 0x01, 0x02}, payload(0x00)[1:]...), true},
		{"nested too deep", payload(deep(252)...), false},
		{"payload key that is not an integer", append([]byte{0xa2, 0x61, 'x', 0x00}, payload(0x00)[1:]...), false},
		{"indefinite map without a value", payload(0xbf, 0x01, 0xff), false},
		{"string chunk of another type", payload(0x7f, 0x41, 'a', 0xff), false},
		{"break outside an indefinite item", payload(0xff), false},
		{"reserved head", payload(0x1c), false},
		{"simple value in two bytes below 32", payload(0xf8, 0x10), false},
		{"trailing bytes", payload(0x00, 0x00), false},
		{"truncated value", payload(0x62, 'a'), false},
		{"entry of three items", []byte{0xa1, 0x01, 0x81, 0x83, 0x61, 's', 0x01, 0x81, 0x83, 0x61, 'k', 0x60, 0x20}, false},
		{"entries of indefinite length", []byte{0xa1, 0x01, 0x81, 0x83, 0x61, 's', 0x01, 0x9f, 0x84, 0x61, 'k', 0x60, 0x20, 0x00, 0xff}, false},
		{"kind out of range", []byte{0xa1, 0x01, 0x81, 0x83, 0x61, 's', 0x19, 0x01, 0x00, 0x80}, false},
		{"count beyond the payload", []byte{0xa1, 0x01, 0x9a, 0xff, 0xff, 0xff, 0xff}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			var got wirePayload
			err := decodePayload(c.b, &got, false)
			want, cerr := decodeWithCBOR(c.b)
			if !c.valid {
				require.ErrorIs(t, err, ErrCorrupt)
				return
			}
			require.NoError(t, err)
			require.NoError(t, cerr)
			requireSamePayload(t, want, got, c.name)
		})
	}
}

// FuzzDecodePayload: whatever decodePayload accepts, the CBOR library
// decodes the same. The seeds are the golden snapshot's payloads.
func FuzzDecodePayload(f *testing.F) {
	for _, p := range goldenPayloads(f) {
		f.Add(p)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var got wirePayload
		if decodePayload(b, &got, true) != nil {
			return
		}
		want, err := decodeWithCBOR(b)
		require.NoError(t, err)
		requireSamePayload(t, want, got, "")
	})
}

// TestHeadSizes: the sizes a merge computes are those of what the encoder
// appends, at every boundary of the head's forms.
func TestHeadSizes(t *testing.T) {
	for _, n := range []uint64{0, 23, 24, 255, 256, 65535, 65536, 1<<32 - 1, 1 << 32, 1<<64 - 1} {
		require.Len(t, AppendCBORHead(nil, majorArray, n), headSize(n), "%d", n)
		if n <= 1<<63-1 {
			v := int64(n)
			require.Len(t, AppendCBORInt(nil, v), intSize(v), "%d", v)
			require.Len(t, AppendCBORInt(nil, -v-1), intSize(-v-1), "%d", -v-1)
		}
	}
	for _, s := range []string{"", "k", string(make([]byte, 300))} {
		require.Len(t, appendText(nil, s), textSize(s))
	}
}

// TestSplitCBORItem: an item and what follows it; a truncated or
// malformed item is ErrCorrupt.
func TestSplitCBORItem(t *testing.T) {
	item, rest, err := SplitCBORItem([]byte{0x82, 0x01, 0x61, 'a', 0x07, 0x08})
	require.NoError(t, err)
	require.Equal(t, []byte{0x82, 0x01, 0x61, 'a'}, item)
	require.Equal(t, []byte{0x07, 0x08}, rest)
	for _, bad := range [][]byte{nil, {0x82, 0x01}, {0xff}, {0x1c}, {0x9f, 0x01}} {
		_, _, err := SplitCBORItem(bad)
		require.ErrorIs(t, err, ErrCorrupt, "% x", bad)
	}
}

// unmarshalProbe records what its UnmarshalCBOR was given, and refuses 0.
type unmarshalProbe struct{ data []byte }

func (u *unmarshalProbe) UnmarshalCBOR(b []byte) error {
	if len(b) == 1 && b[0] == 0x00 {
		return errors.New("zero")
	}
	u.data = append([]byte(nil), b...)
	return nil
}

// TestValueDecoder: calling a value's UnmarshalCBOR directly gives what
// decMode gives, for plain, tagged, null and undefined items, and fails
// where it fails (a restore then fails, whatever the value holds).
func TestValueDecoder(t *testing.T) {
	decode := valueDecoder[*unmarshalProbe]()
	for _, in := range [][]byte{{0x01}, {0x82, 0x01, 0x61, 'a'}, {0xf6}, {0xf7}, {0xd9, 0xd9, 0xf7, 0x01}, {0xc1, 0x01}, {0x00}} {
		var want, got *unmarshalProbe
		werr := decMode.Unmarshal(in, &want)
		gerr := decode(in, &got)
		require.Equal(t, werr == nil, gerr == nil, "% x: %v against %v", in, werr, gerr)
		if werr == nil {
			require.Equal(t, want, got, "% x", in)
		}
	}
	var n int64
	require.NoError(t, valueDecoder[int64]()([]byte{0x18, 0x2a}, &n))
	require.Equal(t, int64(42), n)
}
