package operators

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"

	"github.com/eddy-stream/eddy/pipeline"
	"github.com/eddy-stream/eddy/statestore"
)

// BenchmarkWindowCheckpointState measures what a checkpoint costs the
// memory backend holding the state of BenchmarkCheckpointOverhead's window (count, avg
// and the latest 1 KiB payload per key, one open 24h window each), per key:
//
//   - encode-delta/all and encode-delta/tenth: Snapshot and WriteTo (the
//     asynchronous part) of an incremental checkpoint's delta after every
//     key, or a tenth of them, changed (per changed key); a whole snapshot's
//     encoding is BenchmarkCheckpointEncode;
//   - update-after-snapshot: one record per key right after a snapshot,
//     so that every update copies its entry first (copy-on-write);
//   - update-after-release: the same after the snapshot was encoded and
//     released: nothing is copied any more;
//   - update: one record per key without snapshots (the baseline of the
//     previous ones);
//   - update-while-written: the task updating every key, over and over,
//     while a snapshot is written on another goroutine (WriteTo and then
//     Release, or WriteAndRelease, which lets go of each key group once it
//     is written, so that its updates stop copying), per update;
//   - restore-memory, restore-bbolt: restoring a snapshot into a new
//     backend and opening a window operator on it, which registers
//     (adopts) the state: the memory backend decodes every accumulator
//     then, the bbolt backend checks each (CheckCBOR).
//
// 200,000 keys (about 200 MiB); EDDY_BENCH_LARGE=1: 1,000,000 (1 GiB).
//
//	go test -run XXX -bench WindowCheckpointState ./operators/
func BenchmarkWindowCheckpointState(b *testing.B) {
	keys := 200_000
	if os.Getenv("EDDY_BENCH_LARGE") != "" {
		keys = 1_000_000
	}
	const body = "key_by: id\n    window: {type: tumbling, size: 24h}\n    aggregate:\n      n: count()\n      avg_v: avg(v)\n      last: last(payload)"
	op, backend := openWindowBenchWith(b, body, true)
	out := io.Discard
	// Two records per key with distinct payloads, alternated: each update
	// replaces the payload the key holds.
	filler := strings.Repeat("x", 1000)
	recs := make([][]pipeline.Record, 2)
	for r := range recs {
		recs[r] = make([]pipeline.Record, keys)
		for i := range recs[r] {
			id := int64(i)
			key, _ := pipeline.EncodeKey(nil, id)
			recs[r][i] = pipeline.Record{Key: string(key), Time: 1000, Fields: map[string]any{
				"id": id, "v": int64(i % 100), "payload": fmt.Sprintf("%024d", i*2+r) + filler}}
		}
	}
	discard := pipeline.EmitterFunc(func([]pipeline.Record) error { return nil })
	round := 0
	update := func(n int) {
		rs := recs[round%2][:n]
		round++
		for i := 0; i < len(rs); i += benchBatch {
			if err := op.Process(rs[i:min(i+benchBatch, len(rs))], discard); err != nil {
				b.Fatal(err)
			}
		}
	}
	updateAll := func() { update(keys) }
	updateAll()
	perKey := func(b *testing.B) {
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*keys), "ns/key")
	}
	ckpt := int64(0)
	for _, changed := range []struct {
		name string
		keys int
	}{{"all", keys}, {"tenth", keys / 10}} {
		b.Run("encode-delta/"+changed.name, func(b *testing.B) {
			var n int64
			for b.Loop() {
				b.StopTimer()
				// A full base, completed; then the changes; then the delta.
				ckpt++
				s, err := backend.SnapshotCheckpoint(ckpt)
				if err != nil {
					b.Fatal(err)
				}
				s.(statestore.DeltaSnapshot).Full()
				if _, err := s.WriteAndRelease(out); err != nil {
					b.Fatal(err)
				}
				backend.CheckpointCompleted(ckpt)
				update(changed.keys)
				ckpt++
				if s, err = backend.SnapshotCheckpoint(ckpt); err != nil {
					b.Fatal(err)
				}
				if s.(statestore.DeltaSnapshot).Base() == 0 {
					b.Fatal("not a delta")
				}
				b.StartTimer()
				if n, err = s.WriteTo(out); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				s.Release()
				b.StartTimer()
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*changed.keys), "ns/key")
			b.ReportMetric(float64(n)/float64(changed.keys), "B/key")
		})
	}
	b.Run("update-after-snapshot", func(b *testing.B) {
		for b.Loop() {
			b.StopTimer()
			s, err := backend.Snapshot()
			if err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
			updateAll()
			b.StopTimer()
			s.Release()
			b.StartTimer()
		}
		perKey(b)
	})
	b.Run("update-after-release", func(b *testing.B) {
		for b.Loop() {
			b.StopTimer()
			s, err := backend.Snapshot()
			if err != nil {
				b.Fatal(err)
			}
			if _, err := s.WriteTo(out); err != nil {
				b.Fatal(err)
			}
			s.Release()
			b.StartTimer()
			updateAll()
		}
		perKey(b)
	})
	b.Run("update", func(b *testing.B) {
		for b.Loop() {
			updateAll()
		}
		perKey(b)
	})
	for _, release := range []bool{false, true} {
		name := "update-while-written/WriteTo"
		if release {
			name = "update-while-written/WriteAndRelease"
		}
		b.Run(name, func(b *testing.B) {
			updated := 0
			for b.Loop() {
				b.StopTimer()
				s, err := backend.Snapshot()
				if err != nil {
					b.Fatal(err)
				}
				done := make(chan error, 1)
				b.StartTimer()
				go func() {
					var err error
					if release {
						_, err = s.WriteAndRelease(out)
					} else {
						_, err = s.WriteTo(out)
						s.Release()
					}
					done <- err
				}()
				for written := false; !written; {
					updateAll()
					updated++
					select {
					case err := <-done:
						if err != nil {
							b.Fatal(err)
						}
						written = true
					default:
					}
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(updated*keys), "ns/update")
		})
	}
	s, err := backend.Snapshot()
	if err != nil {
		b.Fatal(err)
	}
	var stream bytes.Buffer
	if _, err := s.WriteAndRelease(&stream); err != nil {
		b.Fatal(err)
	}
	var blobs [][]byte
	if err := statestore.SplitBlobs(stream.Bytes(), func(_ int, blob []byte) error {
		blobs = append(blobs, blob)
		return nil
	}); err != nil {
		b.Fatal(err)
	}
	opts := statestore.Options{KeyGroup: func(key string) int { return pipeline.KeyGroup(key, 128) }, KeyGroups: [2]int{0, 128}}
	for _, name := range []string{"memory", "bbolt"} {
		b.Run("restore-"+name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				b.StopTimer()
				var be statestore.Backend
				var err error
				if name == "memory" {
					be, err = statestore.NewMemory(opts)
				} else {
					be, err = statestore.NewBolt(statestore.BoltOptions{Options: opts, Dir: b.TempDir()})
				}
				if err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				if err := be.Restore(blobs...); err != nil {
					b.Fatal(err)
				}
				op := openWindowOn(b, body, be)
				b.StopTimer()
				if err := op.Close(); err != nil {
					b.Fatal(err)
				}
				if err := be.Close(); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
			perKey(b)
		})
	}
}
