package statestore_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"maps"
	"math"
	"slices"
	"strconv"
	"sync"
	"testing"

	"github.com/fxamacker/cbor/v2"
	"github.com/stretchr/testify/require"

	"github.com/eddy-stream/eddy/statestore"
)

// restoreAll restores into b every blob of streams (WriteTo output) that
// belongs to b's key groups, as a rescaled subtask does.
func restoreAll(t testing.TB, b statestore.Backend, streams ...[]byte) {
	t.Helper()
	start, end := b.KeyGroupRange()
	var mine [][]byte
	for _, s := range streams {
		require.NoError(t, statestore.SplitBlobs(s, func(g int, blob []byte) error {
			if g >= start && g < end {
				mine = append(mine, blob)
			}
			return nil
		}))
	}
	require.NoError(t, b.Restore(mine...))
}

func writeSnapshot(t testing.TB, b statestore.Backend) []byte {
	t.Helper()
	s, err := b.Snapshot()
	require.NoError(t, err)
	var buf bytes.Buffer
	n, err := s.WriteTo(&buf)
	require.NoError(t, err)
	require.Equal(t, int64(buf.Len()), n)
	s.Release()
	return buf.Bytes()
}

func TestSnapshotRoundTrip(t *testing.T) {
	forEachBackend(t, func(t *testing.T, o *opener) {
		for _, registerFirst := range []bool{true, false} {
			t.Run("register-before-restore="+strconv.FormatBool(registerFirst), func(t *testing.T) {
				b := o.all()
				f := registerAll(t, b)
				for i, k := range keys(200) {
					f.fill(k, i)
					f.fill(k, i+1)
				}
				want := dumpAll(t, b, f)
				stream := writeSnapshot(t, b)

				r := o.all()
				// Restore keeps nothing that points into its blobs (they are
				// slices of the stream): the stream is overwritten after it.
				restore := func() {
					in := slices.Clone(stream)
					restoreAll(t, r, in)
					clear(in)
				}
				var g *fixture
				if registerFirst {
					g = registerAll(t, r)
					restore()
				} else {
					restore()
					// Unregistered states are kept as CBOR and written as
					// they are by a snapshot taken before registration.
					require.Equal(t, stream, writeSnapshot(t, r))
					g = registerAll(t, r)
				}
				require.Equal(t, want, dumpAll(t, r, g))
				// Same state, same bytes.
				require.Equal(t, stream, writeSnapshot(t, r))
				require.NoError(t, r.Err())
			})
		}
	})
}

func TestSnapshotIsolation(t *testing.T) {
	// Whatever the task does after Snapshot returns, the snapshot encodes the
	// state as it was.
	forEachBackend(t, func(t *testing.T, o *opener) {
		b := o.all()
		f := filled(t, b, 100)
		ks := keys(100)
		want := dumpAll(t, b, f)
		s, err := b.Snapshot()
		require.NoError(t, err)
		for i, k := range ks {
			switch i % 4 {
			case 0:
				b.Clear(k, "w0")
				f.mp.Delete(k, "", "f0")
			case 1:
				f.fill(k, i+7)
				f.list.Update(k, "w1", []int64{-1})
			case 2:
				f.list.MergeNamespaces(k, "w0", "w1", "w2")
				f.agg.MergeNamespaces(k, "w9", "w2")
				f.tm.DeleteEventTimer(k, "w2", int64(1000+i%7))
			case 3:
				f.fill(k+"new", i)
			}
		}
		require.NoError(t, f.tm.AdvanceWatermark(1003, func(statestore.Timer) error { return nil }))
		var buf bytes.Buffer
		_, err = s.WriteTo(&buf)
		require.NoError(t, err)

		r := o.all()
		g := registerAll(t, r)
		restoreAll(t, r, buf.Bytes())
		require.Equal(t, want, dumpAll(t, r, g))
	})
}

func TestSnapshotConcurrentWithMutation(t *testing.T) {
	// Run with -race: encoding runs on another goroutine while the task
	// goroutine keeps writing, reading (TTL restarts on read) and firing;
	// the snapshot is released there as soon as it is encoded, from when on
	// the memory backend writes in place what only it shared.
	forEachBackend(t, func(t *testing.T, o *opener) {
		b := o.all()
		f := filled(t, b, 500)
		ks := keys(500)
		for round := range 4 {
			want := dumpAll(t, b, f)
			s, err := b.Snapshot()
			require.NoError(t, err)
			var (
				wg   sync.WaitGroup
				buf  bytes.Buffer
				werr error
			)
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, werr = s.WriteTo(&buf)
				s.Release()
			}()
			for i := range 3000 {
				k := ks[(i*7+round)%len(ks)]
				switch i % 5 {
				case 0, 1:
					f.fill(k, i)
				case 2:
					b.Clear(k, "w"+strconv.Itoa(i%3))
				case 3:
					f.ttl.Get(k, "")
					f.list.MergeNamespaces(k, "w0", "w1")
				case 4:
					f.mp.Put(k, "", "x", 1)
					f.tm.DeleteProcessingTimer(k, "", int64(2000+i%11))
				}
			}
			require.NoError(t, f.tm.AdvanceWatermark(int64(1000+round), func(statestore.Timer) error { return nil }))
			_, err = b.Cleanup()
			require.NoError(t, err)
			wg.Wait()
			require.NoError(t, werr)

			r := o.all()
			g := registerAll(t, r)
			restoreAll(t, r, buf.Bytes())
			require.Equal(t, want, dumpAll(t, r, g), "round %d", round)
		}
	})
}

func TestRescale(t *testing.T) {
	cases := []struct{ from, to int }{{2, 3}, {3, 1}, {1, 4}, {4, 2}}
	forEachBackend(t, func(t *testing.T, o *opener) {
		for _, tc := range cases {
			t.Run(strconv.Itoa(tc.from)+"->"+strconv.Itoa(tc.to), func(t *testing.T) {
				ks := keys(300)
				// The reference: one backend holding every key group.
				ref := o.all()
				rf := registerAll(t, ref)
				for i, k := range ks {
					rf.fill(k, i)
				}
				want := dumpAll(t, ref, rf)

				// The old job: each key written on the subtask that owns it.
				old := make([]statestore.Backend, tc.from)
				oldF := make([]*fixture, tc.from)
				for sub := range old {
					old[sub] = o.subtask(sub, tc.from)
					oldF[sub] = registerAll(t, old[sub])
				}
				for i, k := range ks {
					sub := o.keyGroup(k) * tc.from / o.maxPar
					oldF[sub].fill(k, i)
				}
				var streams [][]byte
				for _, b := range old {
					streams = append(streams, writeSnapshot(t, b))
				}

				// The new job: each subtask restores the blobs of its range.
				got := map[string]string{}
				var fired []string
				for sub := range tc.to {
					b := o.subtask(sub, tc.to)
					var f *fixture
					if sub%2 == 0 { // both ways: registered before and after Restore
						f = registerAll(t, b)
						restoreAll(t, b, streams...)
					} else {
						restoreAll(t, b, streams...)
						f = registerAll(t, b)
					}
					part := dumpAll(t, b, f)
					start, end := b.KeyGroupRange()
					for id := range part {
						for _, k := range ks {
							if bytes.Contains([]byte(id), []byte("/"+k+"/")) {
								g := o.keyGroup(k)
								require.True(t, g >= start && g < end, "%s in subtask %d [%d,%d)", id, sub, start, end)
							}
						}
					}
					for id, v := range part {
						_, dup := got[id]
						require.False(t, dup, id)
						got[id] = v
					}
					require.NoError(t, f.tm.AdvanceWatermark(math.MaxInt64, func(tm statestore.Timer) error {
						fired = append(fired, tm.Key+"/"+tm.Namespace+"/"+strconv.FormatInt(tm.Timestamp, 10))
						return nil
					}))
					require.NoError(t, b.Err())
				}
				require.Equal(t, want, got)
				var wantFired []string
				for tm := range rf.tm.Timers(statestore.EventTime) {
					wantFired = append(wantFired, tm.Key+"/"+tm.Namespace+"/"+strconv.FormatInt(tm.Timestamp, 10))
				}
				require.ElementsMatch(t, wantFired, fired)
			})
		}
	})
}

func TestRestoreErrors(t *testing.T) {
	forEachBackend(t, func(t *testing.T, o *opener) {
		src := o.all()
		filled(t, src, 50)
		blobs := snapshotBlobs(t, src)
		require.Greater(t, len(blobs), 2)
		all := inRange(blobs, 0, o.maxPar)
		one := all[0]

		t.Run("corrupt byte", func(t *testing.T) {
			for _, pos := range []int{0, 4, 9, 13, 20, len(one) / 2, len(one) - 5, len(one) - 1} {
				bad := slices.Clone(one)
				bad[pos] ^= 0x40
				b := o.all()
				g := registerAll(t, b)
				err := b.Restore(all[1], bad)
				require.ErrorIs(t, err, statestore.ErrCorrupt, "byte %d", pos)
				require.Empty(t, dumpAll(t, b, g), "a failed restore changes nothing")
				_, err = statestore.BlobKeyGroup(bad)
				require.ErrorIs(t, err, statestore.ErrCorrupt)
			}
		})
		t.Run("truncated", func(t *testing.T) {
			for _, n := range []int{0, 10, 19, len(one) - 1} {
				require.ErrorIs(t, o.all().Restore(one[:n]), statestore.ErrCorrupt, "%d bytes", n)
			}
			var stream []byte
			for _, bl := range all {
				stream = append(stream, bl...)
			}
			err := statestore.SplitBlobs(stream[:len(stream)-3], func(int, []byte) error { return nil })
			require.ErrorIs(t, err, statestore.ErrCorrupt)
		})
		t.Run("bad CBOR under a good checksum", func(t *testing.T) {
			bad := slices.Clone(one)
			bad[16] = 0xff // a break code where the payload map starts
			binary.BigEndian.PutUint32(bad[len(bad)-4:], crc32.Checksum(bad[:len(bad)-4], crc32.MakeTable(crc32.Castagnoli)))
			require.ErrorIs(t, o.all().Restore(bad), statestore.ErrCorrupt)
		})
		t.Run("newer version", func(t *testing.T) {
			bad := slices.Clone(one)
			bad[4] = 2
			binary.BigEndian.PutUint32(bad[len(bad)-4:], crc32.Checksum(bad[:len(bad)-4], crc32.MakeTable(crc32.Castagnoli)))
			require.ErrorIs(t, o.all().Restore(bad), statestore.ErrUnsupportedVersion)
		})
		t.Run("key group outside range", func(t *testing.T) {
			g, err := statestore.BlobKeyGroup(one)
			require.NoError(t, err)
			b := o.rng(g+1, o.maxPar)
			require.ErrorIs(t, b.Restore(one), statestore.ErrKeyGroupRange)
		})
		t.Run("other key-group function", func(t *testing.T) {
			b := o.open(t, statestore.Options{KeyGroup: func(string) int { return 0 }, KeyGroups: [2]int{0, o.maxPar}})
			require.ErrorIs(t, b.Restore(all[1]), statestore.ErrKeyGroupRange)
		})
		t.Run("duplicate key group", func(t *testing.T) {
			b := o.all()
			require.ErrorIs(t, b.Restore(one, one), statestore.ErrDuplicateKeyGroup)
			require.NoError(t, b.Restore(one))
			require.ErrorIs(t, b.Restore(one), statestore.ErrDuplicateKeyGroup)
		})
		t.Run("other type", func(t *testing.T) {
			b := o.all()
			require.NoError(t, b.Restore(all...))
			_, err := statestore.RegisterValue(b, statestore.ValueDescriptor[int]{Name: "val"}) // was string
			require.ErrorIs(t, err, statestore.ErrIncompatibleState)
			_, err = statestore.RegisterList(b, statestore.ListDescriptor[string]{Name: "val"}) // was value
			require.ErrorIs(t, err, statestore.ErrIncompatibleState)
			_, err = statestore.RegisterValue(b, statestore.ValueDescriptor[string]{Name: "val"})
			require.NoError(t, err, "the right type still decodes")

			b = o.all()
			_, err = statestore.RegisterValue(b, statestore.ValueDescriptor[int]{Name: "val"})
			require.NoError(t, err)
			require.ErrorIs(t, b.Restore(all...), statestore.ErrIncompatibleState)
			b = o.all()
			_, err = statestore.RegisterMap(b, statestore.MapDescriptor[string, string]{Name: "val"})
			require.NoError(t, err)
			require.ErrorIs(t, b.Restore(all...), statestore.ErrIncompatibleState)
		})
	})
}

func TestBlobLayout(t *testing.T) {
	// The byte layout that docs/state.md specifies.
	forEachBackend(t, func(t *testing.T, o *opener) {
		b := o.all()
		v, err := statestore.RegisterValue(b, statestore.ValueDescriptor[int]{Name: "count"})
		require.NoError(t, err)
		v.Put("k", "ns", 7)
		b.TimerService("win").RegisterEventTimer("k", "ns", -5)
		blobs := snapshotBlobs(t, b)
		require.Len(t, blobs, 1)
		kg := o.keyGroup("k")
		blob := blobs[kg]
		require.Equal(t, []byte("edkg"), blob[:4])
		require.Equal(t, byte(1), blob[4])
		require.Equal(t, []byte{0, 0, 0}, blob[5:8])
		require.Equal(t, uint32(kg), binary.BigEndian.Uint32(blob[8:]))
		n := binary.BigEndian.Uint32(blob[12:])
		require.Len(t, blob, 16+int(n)+4)
		require.Equal(t, crc32.Checksum(blob[:16+n], crc32.MakeTable(crc32.Castagnoli)), binary.BigEndian.Uint32(blob[16+n:]))

		var payload map[uint64]any
		require.NoError(t, cbor.Unmarshal(blob[16:16+n], &payload))
		require.Equal(t, map[uint64]any{
			1: []any{[]any{"count", uint64(statestore.KindValue), []any{[]any{"k", "ns", uint64(0), uint64(7)}}}},
			2: []any{[]any{"win", []any{[]any{uint64(statestore.EventTime), int64(-5), "k", "ns"}}}},
		}, payload)
		// Core Deterministic Encoding: re-encoding gives the same bytes.
		em, err := cbor.CoreDetEncOptions().EncMode()
		require.NoError(t, err)
		again, err := em.Marshal(payload)
		require.NoError(t, err)
		require.Equal(t, blob[16:16+n], again)
	})
}

func TestAnyValuesRoundTrip(t *testing.T) {
	// Record-like values (map[string]any) restore with eddy's types.
	forEachBackend(t, func(t *testing.T, o *opener) {
		b := o.all()
		v, err := statestore.RegisterValue(b, statestore.ValueDescriptor[any]{Name: "rec"})
		require.NoError(t, err)
		in := map[string]any{"id": "s1", "n": int64(-3), "big": int64(1 << 40), "temp": 21.5, "ok": true, "tags": []any{"a", int64(1)}, "nil": nil}
		v.Put("k", "", in)
		r := o.all()
		require.NoError(t, r.Restore(inRange(snapshotBlobs(t, b), 0, o.maxPar)...))
		v2, err := statestore.RegisterValue(r, statestore.ValueDescriptor[any]{Name: "rec"})
		require.NoError(t, err)
		got, ok := v2.Get("k", "")
		require.True(t, ok)
		require.Equal(t, in, got)
	})
}

func TestEmptySnapshot(t *testing.T) {
	forEachBackend(t, func(t *testing.T, o *opener) {
		b := o.all()
		registerAll(t, b)
		require.Empty(t, snapshotBlobs(t, b))
		require.Empty(t, writeSnapshot(t, b))
		require.NoError(t, o.all().Restore())
	})
}

func TestRestoreInPartsAndClearBeforeRegistration(t *testing.T) {
	forEachBackend(t, func(t *testing.T, o *opener) {
		b := o.all()
		f := filled(t, b, 100)
		ks := keys(100)
		want := dumpAll(t, b, f)
		blobs := snapshotBlobs(t, b)

		r := o.all()
		require.NoError(t, r.Restore(inRange(blobs, 0, o.maxPar/2)...))
		require.NoError(t, r.Restore(inRange(blobs, o.maxPar/2, o.maxPar)...))
		// Clear reaches states restored but not registered yet.
		r.Clear(ks[0], "w0")
		r.Clear(ks[0], "")
		g := registerAll(t, r)
		got := dumpAll(t, r, g)
		for id := range want {
			for _, ns := range []string{"w0", ""} {
				if len(id) > 0 && bytes.HasSuffix([]byte(id), []byte("/"+ks[0]+"/"+ns)) && !bytes.HasPrefix([]byte(id), []byte("timer/")) {
					delete(want, id)
				}
			}
		}
		require.Equal(t, want, got)
	})
}

// blobRecorder records the Writes of a snapshot's WriteTo.
type blobRecorder struct {
	buf    bytes.Buffer
	writes int
	bad    []error // Writes that are not one whole blob
}

func (w *blobRecorder) Write(b []byte) (int, error) {
	if _, err := statestore.BlobKeyGroup(b); err != nil {
		w.bad = append(w.bad, err)
	}
	w.writes++
	return w.buf.Write(b)
}

// WriteTo writes each key group's blob, checksum included, with one Write,
// and nothing else: SplitBlobs and a part's readers rely on it.
func TestWriteToOneWritePerBlob(t *testing.T) {
	forEachBackend(t, func(t *testing.T, o *opener) {
		b := o.all()
		filled(t, b, 300)
		s, err := b.Snapshot()
		require.NoError(t, err)
		var w blobRecorder
		n, err := s.WriteTo(&w)
		require.NoError(t, err)
		s.Release()
		require.Equal(t, int64(w.buf.Len()), n)
		require.Empty(t, w.bad, "Writes that are not a whole blob")
		require.Equal(t, o.maxPar, w.writes, "one Write per key group")
		require.Equal(t, writeSnapshot(t, b), w.buf.Bytes())
	})
}

func TestSplitBlobs(t *testing.T) {
	forEachBackend(t, func(t *testing.T, o *opener) {
		b := o.all()
		filled(t, b, 100)
		want := snapshotBlobs(t, b)
		stream := writeSnapshot(t, b)
		got := map[int][]byte{}
		last := -1
		require.NoError(t, statestore.SplitBlobs(stream, func(g int, blob []byte) error {
			require.Greater(t, g, last, "key groups in order, each once")
			last = g
			got[g] = blob
			return nil
		}))
		require.Equal(t, want, got)
		// The blobs are the stream's bytes, not copies.
		clear(stream)
		for g, blob := range got {
			require.Equal(t, make([]byte, len(blob)), blob, "key group %d", g)
		}

		stream = writeSnapshot(t, b)
		first := len(want[slices.Min(slices.Collect(maps.Keys(want)))])
		t.Run("bad magic in the second blob", func(t *testing.T) {
			bad := slices.Clone(stream)
			bad[first] = 'x'
			calls := 0
			err := statestore.SplitBlobs(bad, func(int, []byte) error { calls++; return nil })
			require.ErrorIs(t, err, statestore.ErrCorrupt)
			require.Equal(t, 1, calls)
		})
		t.Run("length past the end", func(t *testing.T) {
			bad := slices.Clone(stream)
			binary.BigEndian.PutUint32(bad[first+12:], uint32(len(bad)))
			require.ErrorIs(t, statestore.SplitBlobs(bad, func(int, []byte) error { return nil }), statestore.ErrCorrupt)
		})
		t.Run("checksums are left to Restore", func(t *testing.T) {
			bad := slices.Clone(stream)
			bad[first+16] ^= 1
			var blobs [][]byte
			require.NoError(t, statestore.SplitBlobs(bad, func(_ int, blob []byte) error { blobs = append(blobs, blob); return nil }))
			require.ErrorIs(t, o.all().Restore(blobs...), statestore.ErrCorrupt)
		})
		t.Run("fn's error", func(t *testing.T) {
			stop := errors.New("stop")
			require.ErrorIs(t, statestore.SplitBlobs(stream, func(int, []byte) error { return stop }), stop)
		})
	})
}
