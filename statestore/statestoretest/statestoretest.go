// Package statestoretest holds the state fixtures that the tests and
// benchmarks of several packages share: a window accumulator with its
// descriptor, the window state of the checkpoint benchmarks, and an
// incremental chain of checkpoint parts. Production code never imports it.
package statestoretest

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"testing"

	"github.com/fxamacker/cbor/v2"
	"github.com/stretchr/testify/require"

	"github.com/eddy-stream/eddy/statestore"
)

// BenchBox is a window accumulator as the window operator keeps one per key
// and window: a count, a sum and the latest payload, encoded by hand in one
// pass (as operators.accBox is) into [[version, count, sum, payload],
// max time]; a statestore.CBORAppender.
type BenchBox struct {
	N       int64
	Sum     float64
	Last    string
	MaxTime int64
}

func (b *BenchBox) MarshalCBOR() ([]byte, error) {
	return b.AppendCBOR(make([]byte, 0, 64+len(b.Last)))
}

func (b *BenchBox) AppendCBOR(dst []byte) ([]byte, error) {
	dst = append(dst, 0x82, 0x84, 0x01)
	dst = statestore.AppendCBORInt(dst, b.N)
	dst = binary.BigEndian.AppendUint64(append(dst, 0xfb), math.Float64bits(b.Sum))
	dst = append(statestore.AppendCBORHead(dst, 3, uint64(len(b.Last))), b.Last...)
	return statestore.AppendCBORInt(dst, b.MaxTime), nil
}

func (b *BenchBox) UnmarshalCBOR(data []byte) error {
	var w struct {
		_       struct{} `cbor:",toarray"`
		Row     []any
		MaxTime int64
	}
	if err := cbor.Unmarshal(data, &w); err != nil {
		return err
	}
	if len(w.Row) != 4 {
		return fmt.Errorf("BenchBox: a row of %d items", len(w.Row))
	}
	n, _ := w.Row[1].(uint64)
	sum, _ := w.Row[2].(float64)
	last, _ := w.Row[3].(string)
	*b = BenchBox{N: int64(n), Sum: sum, Last: last, MaxTime: w.MaxTime}
	return nil
}

// BenchBoxDescriptor describes the aggregating state "window" of
// BenchBoxes: each Add counts the payload, adds its length to the sum and
// keeps it as the latest.
func BenchBoxDescriptor() statestore.AggregatingDescriptor[string, *BenchBox, *BenchBox] {
	return statestore.AggregatingDescriptor[string, *BenchBox, *BenchBox]{
		Name:   "window",
		Create: func() *BenchBox { return &BenchBox{} },
		Add: func(b *BenchBox, payload string) *BenchBox {
			b.N++
			b.Sum += float64(len(payload))
			b.Last = payload
			b.MaxTime = b.N
			return b
		},
		Merge:  func(a, b *BenchBox) *BenchBox { return a },
		Result: func(b *BenchBox) *BenchBox { return b },
		Copy:   func(b *BenchBox) *BenchBox { c := *b; return &c },
	}
}

// IntKeys returns n keys as key_by encodes the ints 0 ... n-1: a type byte
// and 8 bytes, big-endian (pipeline.EncodeKey; statestore may not import
// it), so most hold zero bytes, which the bbolt backend escapes.
func IntKeys(n int) []string {
	ks := make([]string, n)
	for i := range ks {
		ks[i] = string(binary.BigEndian.AppendUint64([]byte{'i'}, uint64(i)))
	}
	return ks
}

// FillWindowState gives be the checkpoint benchmark's window state in
// small: n int keys with one BenchBox each holding a 1 KiB payload, and
// one timer per key. It returns the window's namespace.
func FillWindowState(tb testing.TB, be statestore.Backend, n int) string {
	tb.Helper()
	acc, err := statestore.RegisterAggregating(be, BenchBoxDescriptor())
	require.NoError(tb, err)
	timers := be.TimerService("window")
	ns := "[0,10000)"
	payload := make([]byte, 1024)
	for i, k := range IntKeys(n) {
		for j := range payload {
			payload[j] = 'a' + byte((i+j)%26)
		}
		acc.Add(k, ns, string(payload))
		timers.RegisterEventTimer(k, ns, 86_400_000)
	}
	return ns
}

// ChainParts returns the parts of an incremental chain of n checkpoints
// (ids 1..n) of a bbolt backend: a full part, then n-1 delta parts, each
// written after some keys were written, some deleted and some timers
// changed; and the full snapshot of the state at the last checkpoint,
// which statestore.MergeChain(parts) must equal.
func ChainParts(tb testing.TB, n int) (parts [][]byte, want []byte) {
	tb.Helper()
	kg := func(key string) int { return int(key[len(key)-1]) % 8 }
	b, err := statestore.NewBolt(statestore.BoltOptions{Options: statestore.Options{KeyGroup: kg, KeyGroups: [2]int{0, 8}, Incremental: true}, Dir: tb.TempDir()})
	require.NoError(tb, err)
	defer b.Close()
	val, err := statestore.RegisterValue(b, statestore.ValueDescriptor[int64]{Name: "val"})
	require.NoError(tb, err)
	tm := b.TimerService("timers")
	for i := range 200 {
		val.Put(fmt.Sprintf("key%d", i), "", int64(i))
		if i%10 == 0 {
			tm.RegisterEventTimer(fmt.Sprintf("key%d", i), "", int64(i))
		}
	}
	for id := int64(1); id <= int64(n); id++ {
		if id > 1 {
			for i := 0; i < 200; i += 20 {
				val.Put(fmt.Sprintf("key%d", i), "", id*1000+int64(i)) // changed
				val.Put(fmt.Sprintf("new%d-%d", id, i), "ns", id)      // added
				val.Delete(fmt.Sprintf("key%d", i+int(id)), "")        // deleted
				tm.DeleteEventTimer(fmt.Sprintf("key%d", i), "", int64(i))
			}
		}
		snap, err := b.SnapshotCheckpoint(id)
		require.NoError(tb, err)
		full, err := b.Snapshot()
		require.NoError(tb, err)
		var fb bytes.Buffer
		_, err = full.WriteAndRelease(&fb)
		require.NoError(tb, err)
		want = fb.Bytes()
		if id > 1 {
			require.Equal(tb, id-1, snap.(statestore.DeltaSnapshot).Base(), "checkpoint %d", id)
		}
		var buf bytes.Buffer
		_, err = snap.WriteAndRelease(&buf)
		require.NoError(tb, err)
		parts = append(parts, buf.Bytes())
		b.CheckpointCompleted(id)
	}
	return parts, want
}

// Blobs encodes s with WriteTo and splits the stream with SplitBlobs: the
// blobs of the key groups that hold state, in key-group order, with their
// groups; what Restore takes.
func Blobs(s statestore.Snapshot) (groups []int, blobs [][]byte, err error) {
	var buf bytes.Buffer
	if _, err := s.WriteTo(&buf); err != nil {
		return nil, nil, err
	}
	err = statestore.SplitBlobs(buf.Bytes(), func(g int, blob []byte) error {
		groups, blobs = append(groups, g), append(blobs, blob)
		return nil
	})
	return groups, blobs, err
}
