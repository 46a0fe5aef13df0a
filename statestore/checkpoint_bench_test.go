package statestore_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"

	"github.com/eddy-stream/eddy/statestore"
)

// Checkpoint storage benchmarks: writing a whole checkpoint (Begin, the
// parts from `writers` goroutines, Complete with retention 2), on the disk
// that holds $TMPDIR (fsync is real there unless it is a tmpfs).
//
//	go test -run XXX -bench Checkpoint ./statestore/
//	EDDY_BENCH_LARGE=1 go test -run XXX -bench 'Checkpoint.*1GiB' -benchtime 3x ./statestore/
//
// MB/s is checkpoint bytes per second.

type ckptBenchCase struct {
	name  string
	parts int
	size  int
	large bool
}

var ckptBenchCases = []ckptBenchCase{
	{name: "128x64KiB", parts: 128, size: 64 << 10},
	{name: "1GiB=256x4MiB", parts: 256, size: 4 << 20, large: true},
}

func benchBlobs(n, size int) [][]byte {
	r := rand.New(rand.NewPCG(1, 2))
	blobs := make([][]byte, n)
	for i := range blobs {
		blobs[i] = make([]byte, size)
		for j := 0; j+8 <= size; j += 8 {
			binary.LittleEndian.PutUint64(blobs[i][j:], r.Uint64())
		}
	}
	return blobs
}

func skipLarge(b *testing.B, c ckptBenchCase) {
	if c.large && os.Getenv("EDDY_BENCH_LARGE") != "1" {
		b.Skip("set EDDY_BENCH_LARGE=1 to write 1 GiB checkpoints")
	}
}

// putAll puts blobs as parts from `writers` goroutines.
func putAll(b *testing.B, writers int, blobs [][]byte, put func(part string, blob []byte) error) {
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for range writers {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= len(blobs) {
					return
				}
				if err := put(fmt.Sprintf("op/step/%d", i), blobs[i]); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
}

// BenchmarkCheckpointWrite writes checkpoints through CheckpointStore: its
// writer goroutine group-commits the Puts that queue up while it commits.
func BenchmarkCheckpointWrite(b *testing.B) {
	for _, c := range ckptBenchCases {
		for _, writers := range []int{1, 8} {
			b.Run(fmt.Sprintf("%s/writers=%d", c.name, writers), func(b *testing.B) {
				skipLarge(b, c)
				blobs := benchBlobs(c.parts, c.size)
				s := openStore(b, b.TempDir(), statestore.CheckpointStoreOptions{Retain: 2})
				b.SetBytes(int64(c.parts * c.size))
				b.ResetTimer()
				for i := range b.N {
					p, err := s.Begin(int64(i+1), statestore.CheckpointMeta{Pipeline: "bench"})
					require.NoError(b, err)
					putAll(b, writers, blobs, p.Put)
					require.NoError(b, p.Complete(context.Background()))
				}
				b.StopTimer()
				st, err := os.Stat(s.Path())
				require.NoError(b, err)
				b.ReportMetric(float64(st.Size())/(1<<20), "file-MiB")
			})
		}
	}
}

// BenchmarkCheckpointWriteBoltBatch is the alternative design, for
// comparison: each Put a db.Batch call (bbolt coalesces concurrent calls,
// after waiting up to MaxBatchDelay = 10ms for more), the same values and
// metadata write.
func BenchmarkCheckpointWriteBoltBatch(b *testing.B) {
	for _, c := range ckptBenchCases {
		for _, writers := range []int{1, 8} {
			b.Run(fmt.Sprintf("%s/writers=%d", c.name, writers), func(b *testing.B) {
				skipLarge(b, c)
				blobs := benchBlobs(c.parts, c.size)
				db, err := bolt.Open(filepath.Join(b.TempDir(), "batch.db"), 0o600, &bolt.Options{FreelistType: bolt.FreelistMapType})
				require.NoError(b, err)
				defer db.Close()
				table := crc32.MakeTable(crc32.Castagnoli)
				key := func(id int) []byte { return binary.BigEndian.AppendUint64(nil, uint64(id)) }
				b.SetBytes(int64(c.parts * c.size))
				b.ResetTimer()
				for i := range b.N {
					id := i + 1
					require.NoError(b, db.Update(func(tx *bolt.Tx) error {
						cb, err := tx.CreateBucket(key(id))
						if err != nil {
							return err
						}
						_, err = cb.CreateBucket([]byte("parts"))
						return err
					}))
					putAll(b, writers, blobs, func(part string, blob []byte) error {
						v := binary.BigEndian.AppendUint32(append(make([]byte, 0, len(blob)+4), blob...), crc32.Checksum(blob, table))
						return db.Batch(func(tx *bolt.Tx) error {
							return tx.Bucket(key(id)).Bucket([]byte("parts")).Put([]byte(part), v)
						})
					})
					require.NoError(b, db.Update(func(tx *bolt.Tx) error {
						return tx.Bucket(key(id)).Put([]byte("meta"), make([]byte, 12*c.parts))
					}))
					if id > 2 {
						require.NoError(b, db.Update(func(tx *bolt.Tx) error { return tx.DeleteBucket(key(id - 2)) }))
					}
				}
			})
		}
	}
}

// BenchmarkCheckpointLatest reads and verifies (every CRC32-C) the newest
// checkpoint, as a restore does first.
func BenchmarkCheckpointLatest(b *testing.B) {
	for _, c := range ckptBenchCases {
		b.Run(c.name, func(b *testing.B) {
			skipLarge(b, c)
			blobs := benchBlobs(c.parts, c.size)
			s := openStore(b, b.TempDir(), statestore.CheckpointStoreOptions{})
			p, err := s.Begin(1, statestore.CheckpointMeta{})
			require.NoError(b, err)
			putAll(b, 8, blobs, p.Put)
			require.NoError(b, p.Complete(context.Background()))
			b.SetBytes(int64(c.parts * c.size))
			b.ResetTimer()
			for range b.N {
				cp, err := s.Latest(context.Background())
				require.NoError(b, err)
				require.NoError(b, cp.Close())
			}
		})
	}
}

// BenchmarkCheckpointPutLatency measures one small Put (a source offset) on
// its own: one transaction, two fsyncs.
func BenchmarkCheckpointPutLatency(b *testing.B) {
	s := openStore(b, b.TempDir(), statestore.CheckpointStoreOptions{})
	p, err := s.Begin(1, statestore.CheckpointMeta{})
	require.NoError(b, err)
	blob := make([]byte, 64)
	start := time.Now()
	b.ResetTimer()
	for i := range b.N {
		require.NoError(b, p.Put(fmt.Sprintf("src/in/%d", i), blob))
	}
	b.ReportMetric(float64(time.Since(start).Microseconds())/float64(b.N), "µs/put")
	require.NoError(b, p.Abort())
}
