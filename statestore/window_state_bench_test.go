package statestore_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/eddy-stream/eddy/statestore"
	"github.com/eddy-stream/eddy/statestore/statestoretest"
)

// BenchmarkRestore is a window subtask's restart: Restore the blobs of a
// snapshot of the checkpoint benchmark's window state in small (statestoretest.FillWindowState)
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
			ns := statestoretest.FillWindowState(b, src, nKeys)
			snap, err := src.Snapshot()
			require.NoError(b, err)
			_, blobs, err := statestoretest.Blobs(snap)
			require.NoError(b, err)
			size := 0
			for _, blob := range blobs {
				size += len(blob)
			}
			snap.Release()
			b.SetBytes(int64(size))
			b.ReportAllocs()
			for b.Loop() {
				b.StopTimer()
				be := benchBackend(b, bk.open)
				b.StartTimer()
				require.NoError(b, be.Restore(blobs...))
				restored, err := statestore.RegisterAggregating(be, statestoretest.BenchBoxDescriptor())
				require.NoError(b, err)
				b.StopTimer()
				got, ok := restored.Get(statestoretest.IntKeys(1)[0], ns)
				require.True(b, ok)
				require.Equal(b, int64(1), got.N)
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
	ns := statestoretest.FillWindowState(b, m, nKeys)
	acc, err := statestore.RegisterAggregating(m, statestoretest.BenchBoxDescriptor())
	require.NoError(b, err)
	var parts [][]byte
	size := 0
	for id := int64(1); id <= 2; id++ {
		if id == 2 {
			for _, k := range statestoretest.IntKeys(nKeys)[:nKeys/10] {
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
