package statestore_test

import (
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/eddy-stream/eddy/statestore"
)

// BenchmarkBoltDeltaEncode measures the asynchronous part of an
// incremental checkpoint of the bbolt backend, per changed key: 200,000
// keys with a 1 KiB value each (benchMaxPar key groups), a full checkpoint
// completed, then some keys updated, then the delta written to
// io.Discard. In run-half the first half of the keys changed, as in a
// pipeline that updates its keys in turn; in tenth every tenth key did,
// spread over the whole state.
//
//	go test -run XXX -bench BoltDeltaEncode ./statestore/
func BenchmarkBoltDeltaEncode(b *testing.B) {
	const n = 200_000
	for _, tc := range []struct {
		name    string
		changed func(i int) bool
	}{
		{"run-half", func(i int) bool { return i < n/2 }},
		{"tenth", func(i int) bool { return i%10 == 0 }},
	} {
		b.Run(tc.name, func(b *testing.B) {
			be, err := statestore.NewBolt(statestore.BoltOptions{
				Options: statestore.Options{
					KeyGroup:    func(k string) int { return keyGroupOf(k, benchMaxPar) },
					KeyGroups:   [2]int{0, benchMaxPar},
					Incremental: true,
				},
				Dir: b.TempDir(),
			})
			require.NoError(b, err)
			b.Cleanup(func() { _ = be.Close() })
			v, err := statestore.RegisterValue(be, statestore.ValueDescriptor[string]{Name: "payload"})
			require.NoError(b, err)
			ks := make([]string, n)
			for i := range ks {
				ks[i] = fmt.Sprintf("key-%07d", i)
			}
			filler := strings.Repeat("x", 1000)
			round := 0
			update := func(changed func(int) bool) {
				round++
				for i, k := range ks {
					if changed(i) {
						v.Put(k, "", fmt.Sprintf("%08d%016d", round, i)+filler)
					}
				}
			}
			update(func(int) bool { return true })
			ckpt, changedKeys := int64(0), 0
			for i := range ks {
				if tc.changed(i) {
					changedKeys++
				}
			}
			var size int64
			for b.Loop() {
				b.StopTimer()
				ckpt++
				s, err := be.SnapshotCheckpoint(ckpt)
				require.NoError(b, err)
				s.(statestore.DeltaSnapshot).Full()
				_, err = s.WriteAndRelease(io.Discard)
				require.NoError(b, err)
				be.CheckpointCompleted(ckpt)
				update(tc.changed)
				ckpt++
				s, err = be.SnapshotCheckpoint(ckpt)
				require.NoError(b, err)
				if s.(statestore.DeltaSnapshot).Base() == 0 {
					b.Fatal("not a delta")
				}
				b.StartTimer()
				size, err = s.WriteAndRelease(io.Discard)
				require.NoError(b, err)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*changedKeys), "ns/key")
			b.ReportMetric(float64(size)/float64(changedKeys), "B/key")
		})
	}
}
