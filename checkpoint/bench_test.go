package checkpoint_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"

	"github.com/eddy-stream/eddy/checkpoint"
	"github.com/eddy-stream/eddy/internal/cputime"
	"github.com/eddy-stream/eddy/statestore"
	"github.com/eddy-stream/eddy/statestore/statestoretest"
)

// Checkpoint storage benchmarks: writing a whole checkpoint (Begin, the
// parts from `writers` goroutines, Complete with retention 2), on the disk
// that holds $TMPDIR (fsync is real there unless it is a tmpfs).
//
//	go test -run XXX -bench Checkpoint ./checkpoint/
//	EDDY_BENCH_LARGE=1 go test -run XXX -bench 'Checkpoint.*1GiB' -benchtime 3x ./checkpoint/
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

// BenchmarkCheckpointWrite writes checkpoints through Store: its
// writer goroutine group-commits the Puts that queue up while it commits.
func BenchmarkCheckpointWrite(b *testing.B) {
	for _, c := range ckptBenchCases {
		for _, writers := range []int{1, 8} {
			b.Run(fmt.Sprintf("%s/writers=%d", c.name, writers), func(b *testing.B) {
				skipLarge(b, c)
				blobs := benchBlobs(c.parts, c.size)
				s := openStore(b, b.TempDir(), checkpoint.Options{Retain: 2})
				b.SetBytes(int64(c.parts * c.size))
				b.ResetTimer()
				for i := range b.N {
					p, err := s.Begin(int64(i+1), checkpoint.Meta{Pipeline: "bench"})
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
			s := openStore(b, b.TempDir(), checkpoint.Options{})
			p, err := s.Begin(1, checkpoint.Meta{})
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
	s := openStore(b, b.TempDir(), checkpoint.Options{})
	p, err := s.Begin(1, checkpoint.Meta{})
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

// benchBackends are the two backends the state-part benchmark encodes.
var benchBackends = []struct {
	name string
	open func(b *testing.B) statestore.Backend
}{
	{"memory", func(b *testing.B) statestore.Backend {
		be, err := statestore.NewMemory(benchOptions())
		require.NoError(b, err)
		return be
	}},
	{"bbolt", func(b *testing.B) statestore.Backend {
		be, err := statestore.NewBolt(statestore.BoltOptions{Options: benchOptions(), Dir: b.TempDir()})
		require.NoError(b, err)
		return be
	}},
}

func benchOptions() statestore.Options {
	return statestore.Options{
		KeyGroup:  func(k string) int { return int(xxhash.Sum64String(k) % 128) },
		KeyGroups: [2]int{0, 128},
	}
}

// BenchmarkCheckpointStatePart is the asynchronous part of a checkpoint of
// one window subtask, as the coordinator runs it: encode the keyed state's
// snapshot ("encode": WriteTo, key group by key group, into io.Discard),
// and for "encode+write" stream it into a part of a checkpoint (Create,
// WriteTo, Close: a file of its own, fsynced) and complete it (retention
// 2, fsync). The state is the
// checkpoint benchmark's in small (BenchmarkCheckpointOverhead): int keys with one
// window accumulator each holding a 1 KiB payload, and one timer per key.
// MB/s is snapshot bytes per second; CPU-s/GiB is the CPU time of the whole
// process (the store's writer goroutine and the garbage collector
// included) per GiB of snapshot.
//
//	go test -run XXX -bench CheckpointStatePart -benchmem ./checkpoint/
func BenchmarkCheckpointStatePart(b *testing.B) {
	const nKeys = 32 << 10
	for _, bk := range benchBackends {
		b.Run(bk.name, func(b *testing.B) {
			be := bk.open(b)
			b.Cleanup(func() { _ = be.Close() })
			statestoretest.FillWindowState(b, be, nKeys)
			snap, err := be.Snapshot()
			require.NoError(b, err)
			defer snap.Release()
			n, err := snap.WriteTo(io.Discard)
			require.NoError(b, err)
			size := int(n)
			for _, write := range []bool{false, true} {
				name := "encode"
				if write {
					name = "encode+write"
				}
				b.Run(name, func(b *testing.B) {
					s := openStore(b, b.TempDir(), checkpoint.Options{Retain: 2})
					b.SetBytes(int64(size))
					b.ReportAllocs()
					b.ResetTimer()
					cpu := cputime.Process()
					for i := range b.N {
						if !write {
							if _, err := snap.WriteTo(io.Discard); err != nil {
								b.Fatal(err)
							}
							continue
						}
						require.NoError(b, storeCheckpoint(s, int64(i+1), func(p checkpoint.Writer) error {
							w, err := p.Create("op/window/0", 0)
							if err != nil {
								return err
							}
							if _, err := snap.WriteTo(w); err != nil {
								return err
							}
							return w.Close()
						}))
					}
					b.StopTimer()
					b.ReportMetric((cputime.Process()-cpu).Seconds()/(float64(b.N)*float64(size)/(1<<30)), "CPU-s/GiB")
					b.ReportMetric(float64(size)/(1<<20), "MiB/part")
				})
			}
		})
	}
}

// BenchmarkLargePartStore compares three ways of storing one large state
// part durably: "store-inline" is a bbolt value of the checkpoint store
// (Begin, Put, Complete with retention 2: bbolt allocates a page buffer of
// the part's size at commit, copies the value in, writes it and fsyncs),
// "store-file" the checkpoint store's streamed part (Create, Write in 8 MiB
// pieces as a snapshot writes its key groups, Close, Complete: a file of
// its own, with direct I/O where the file system allows it),
// "store-file-buffered" the same through the page cache, and "file-chunks"
// a plain file written in 4 MiB chunks and
// fsynced, older ones removed (the floor). CPU-s/GiB includes the garbage
// collector.
//
//	go test -run XXX -bench LargePartStore -benchtime 3x ./checkpoint/
//	EDDY_BENCH_LARGE=1 go test -run XXX -bench 'LargePartStore/1GiB' -benchtime 3x ./checkpoint/
//
// With EDDY_BENCH_STALL=1 a goroutine allocates meanwhile (the garbage
// collector runs) and max-stall-ms is the longest time the whole process
// stood still during a store (see longestStall); CPU-s/GiB then includes
// that goroutine.
func BenchmarkLargePartStore(b *testing.B) {
	for _, c := range []ckptBenchCase{{name: "256MiB", size: 256 << 20}, {name: "1GiB", size: 1 << 30, large: true}} {
		var part []byte // made by the first sub-benchmark that runs
		data := func() []byte {
			if part == nil {
				part = make([]byte, c.size)
				for i := range part {
					part[i] = byte(i * 7)
				}
			}
			return part
		}
		b.Run(c.name+"/store-inline", func(b *testing.B) {
			skipLarge(b, c)
			st := openStore(b, b.TempDir(), checkpoint.Options{Retain: 2})
			part := data()
			largePartRuns(b, c.size, func(i int) error {
				return storeCheckpoint(st, int64(i+1), func(p checkpoint.Writer) error { return p.Put("op/window/0", part) })
			})
		})
		for _, direct := range []bool{true, false} {
			name := c.name + "/store-file"
			if !direct {
				name += "-buffered"
			}
			b.Run(name, func(b *testing.B) {
				skipLarge(b, c)
				defer checkpoint.SetDirectIO(checkpoint.SetDirectIO(direct))
				st := openStore(b, b.TempDir(), checkpoint.Options{Retain: 2})
				part := data()
				largePartRuns(b, c.size, func(i int) error {
					return storeCheckpoint(st, int64(i+1), func(p checkpoint.Writer) error {
						w, err := p.Create("op/window/0", 0)
						if err != nil {
							return err
						}
						for off := 0; off < len(part); off += 8 << 20 {
							if _, err := w.Write(part[off:min(off+8<<20, len(part))]); err != nil {
								return err
							}
						}
						return w.Close()
					})
				})
			})
		}
		b.Run(c.name+"/file-chunks", func(b *testing.B) {
			skipLarge(b, c)
			dir := b.TempDir()
			part := data()
			largePartRuns(b, c.size, func(i int) error {
				f, err := os.Create(filepath.Join(dir, strconv.Itoa(i)))
				if err != nil {
					return err
				}
				for off := 0; off < len(part); off += 4 << 20 {
					if _, err := f.Write(part[off:min(off+4<<20, len(part))]); err != nil {
						_ = f.Close()
						return err
					}
				}
				if err := f.Sync(); err != nil {
					_ = f.Close()
					return err
				}
				if err := f.Close(); err != nil {
					return err
				}
				if i >= 2 {
					return os.Remove(filepath.Join(dir, strconv.Itoa(i-2)))
				}
				return nil
			})
		})
	}
}

// storeCheckpoint writes checkpoint id with the parts put stores, and
// completes it.
func storeCheckpoint(st *checkpoint.Store, id int64, put func(checkpoint.Writer) error) error {
	p, err := st.Begin(id, checkpoint.Meta{Pipeline: "bench"})
	if err != nil {
		return err
	}
	if err := put(p); err != nil {
		return err
	}
	return p.Complete(context.Background())
}

func largePartRuns(b *testing.B, size int, store func(i int) error) {
	b.SetBytes(int64(size))
	measureStall := os.Getenv("EDDY_BENCH_STALL") != ""
	var stall time.Duration
	cpu, machine := cputime.Process(), cputime.Machine()
	b.ResetTimer()
	for i := range b.N {
		if !measureStall {
			require.NoError(b, store(i))
			continue
		}
		stall = max(stall, longestStall(func() { require.NoError(b, store(i)) }))
	}
	b.StopTimer()
	gib := float64(b.N) * float64(size) / (1 << 30)
	b.ReportMetric((cputime.Process()-cpu).Seconds()/gib, "CPU-s/GiB")
	if machine > 0 {
		// The kernel's write-back threads work for the process too.
		b.ReportMetric((cputime.Machine()-machine).Seconds()/gib, "machine-CPU-s/GiB")
	}
	if stall > 0 {
		b.ReportMetric(float64(stall.Microseconds())/1000, "max-stall-ms")
	}
}

var stallSink atomic.Pointer[[]byte]

// longestStall runs fn while one goroutine allocates (so that the garbage
// collector runs and stops the world now and then) and another ticks every
// millisecond, and returns the longest gap between two ticks: how long the
// process stood still. A stop-the-world waits for every goroutine, and a
// goroutine inside a long copy (runtime.memmove cannot be preempted, and
// faulting in fresh pages makes it slow) holds up all the others.
func longestStall(fn func()) time.Duration {
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var worst time.Duration
	wg.Go(func() {
		tk := time.NewTicker(time.Millisecond)
		defer tk.Stop()
		last := time.Now()
		for {
			select {
			case <-stop:
				return
			case now := <-tk.C:
				worst = max(worst, now.Sub(last))
				last = now
			}
		}
	})
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
				b := make([]byte, 64<<10)
				stallSink.Store(&b)
			}
		}
	})
	fn()
	close(stop)
	wg.Wait()
	return worst
}
