package statestore_test

import (
	"encoding/binary"
	"fmt"
	"math"
	"testing"

	"github.com/fxamacker/cbor/v2"
	"github.com/stretchr/testify/require"

	"github.com/eddy-stream/eddy/statestore"
)

// benchBox is a window accumulator as the window operator keeps one per key
// and window: a count, a sum and the latest payload, encoded by hand in one
// pass (as operators.accBox is) into [[version, count, sum, payload],
// max time]; a statestore.CBORAppender.
type benchBox struct {
	n       int64
	sum     float64
	last    string
	maxTime int64
}

func (b *benchBox) MarshalCBOR() ([]byte, error) {
	return b.AppendCBOR(make([]byte, 0, 64+len(b.last)))
}

func (b *benchBox) AppendCBOR(dst []byte) ([]byte, error) {
	dst = append(dst, 0x82, 0x84, 0x01)
	dst = statestore.AppendCBORInt(dst, b.n)
	dst = binary.BigEndian.AppendUint64(append(dst, 0xfb), math.Float64bits(b.sum))
	dst = append(statestore.AppendCBORHead(dst, 3, uint64(len(b.last))), b.last...)
	return statestore.AppendCBORInt(dst, b.maxTime), nil
}

func (b *benchBox) UnmarshalCBOR(data []byte) error {
	var w struct {
		_       struct{} `cbor:",toarray"`
		Row     []any
		MaxTime int64
	}
	if err := cbor.Unmarshal(data, &w); err != nil {
		return err
	}
	if len(w.Row) != 4 {
		return fmt.Errorf("benchBox: a row of %d items", len(w.Row))
	}
	n, _ := w.Row[1].(uint64)
	sum, _ := w.Row[2].(float64)
	last, _ := w.Row[3].(string)
	*b = benchBox{n: int64(n), sum: sum, last: last, maxTime: w.MaxTime}
	return nil
}

func benchBoxDescriptor() statestore.AggregatingDescriptor[string, *benchBox, *benchBox] {
	return statestore.AggregatingDescriptor[string, *benchBox, *benchBox]{
		Name:   "window",
		Create: func() *benchBox { return &benchBox{} },
		Add: func(b *benchBox, payload string) *benchBox {
			b.n++
			b.sum += float64(len(payload))
			b.last = payload
			b.maxTime = int64(b.n)
			return b
		},
		Merge:  func(a, b *benchBox) *benchBox { return a },
		Result: func(b *benchBox) *benchBox { return b },
		Copy:   func(b *benchBox) *benchBox { c := *b; return &c },
	}
}

// intKeys returns n keys as key_by encodes the ints 0 ... n-1: a type byte
// and 8 bytes, big-endian (pipeline.EncodeKey; statestore may not import
// it), so most hold zero bytes, which the bbolt backend escapes.
func intKeys(n int) []string {
	ks := make([]string, n)
	for i := range ks {
		ks[i] = string(binary.BigEndian.AppendUint64([]byte{'i'}, uint64(i)))
	}
	return ks
}

// fillWindowState gives be the checkpoint benchmark's window state in
// small: n int keys with one benchBox each holding a 1 KiB payload, and
// one timer per key. It returns the window's namespace.
func fillWindowState(b *testing.B, be statestore.Backend, n int) string {
	acc, err := statestore.RegisterAggregating(be, benchBoxDescriptor())
	require.NoError(b, err)
	timers := be.TimerService("window")
	ns := windowNamespaces(1)[0]
	payload := make([]byte, 1024)
	for i, k := range intKeys(n) {
		for j := range payload {
			payload[j] = 'a' + byte((i+j)%26)
		}
		acc.Add(k, ns, string(payload))
		timers.RegisterEventTimer(k, ns, 86_400_000)
	}
	return ns
}

// BenchmarkRestore is a window subtask's restart: Restore the blobs of a
// snapshot of the checkpoint benchmark's window state in small (fillWindowState)
// into a fresh backend, then register the state, which adopts the restored
// entries (the window operator registers its state after the restore).
// MB/s is snapshot bytes per second.
//
//	go test -run XXX -bench Restore -benchmem ./statestore/
func BenchmarkRestore(b *testing.B) {
	const nKeys = 64 << 10
	for _, bk := range backends[:2] {
		b.Run(bk.name, func(b *testing.B) {
			src := benchBackend(b, bk.open)
			ns := fillWindowState(b, src, nKeys)
			snap, err := src.Snapshot()
			require.NoError(b, err)
			var blobs [][]byte
			size := 0
			require.NoError(b, snap.EncodeGroups(func(_ int, blob []byte) error {
				blobs = append(blobs, blob)
				size += len(blob)
				return nil
			}))
			snap.Release()
			b.SetBytes(int64(size))
			b.ReportAllocs()
			for b.Loop() {
				b.StopTimer()
				be := benchBackend(b, bk.open)
				b.StartTimer()
				require.NoError(b, be.Restore(blobs...))
				restored, err := statestore.RegisterAggregating(be, benchBoxDescriptor())
				require.NoError(b, err)
				b.StopTimer()
				got, ok := restored.Get(intKeys(1)[0], ns)
				require.True(b, ok)
				require.Equal(b, int64(1), got.n)
				require.NoError(b, be.Close())
				b.StartTimer()
			}
		})
	}
}

// BenchmarkMergeChain is the merge of an incremental chain that a restore
// from a delta part runs (Checkpoint.Get): the window state of
// BenchmarkRestore as a whole part, and a delta on it in which a tenth of
// the keys changed. MB/s is bytes of the chain per second.
//
//	go test -run XXX -bench MergeChain -benchmem ./statestore/
func BenchmarkMergeChain(b *testing.B) {
	const nKeys = 64 << 10
	m, err := statestore.NewMemory(statestore.Options{KeyGroup: func(k string) int { return keyGroupOf(k, benchMaxPar) }, KeyGroups: [2]int{0, benchMaxPar}, Incremental: true})
	require.NoError(b, err)
	defer m.Close()
	ns := fillWindowState(b, m, nKeys)
	acc, err := statestore.RegisterAggregating(m, benchBoxDescriptor())
	require.NoError(b, err)
	var parts [][]byte
	size := 0
	for id := int64(1); id <= 2; id++ {
		if id == 2 {
			for _, k := range intKeys(nKeys)[:nKeys/10] {
				acc.Add(k, ns, "changed")
			}
		}
		part, _ := completeCheckpoint(b, m, id)
		parts = append(parts, part)
		size += len(part)
	}
	require.Less(b, len(parts[1]), len(parts[0])/5, "the second part is a delta")
	b.SetBytes(int64(size))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := statestore.MergeChain(parts); err != nil {
			b.Fatal(err)
		}
	}
}
