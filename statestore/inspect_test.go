package statestore_test

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"math"
	"math/big"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fxamacker/cbor/v2"
	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"

	"github.com/eddy-stream/eddy/statestore"
)

func TestInspectState(t *testing.T) {
	const maxPar = 4
	now := int64(5_000)
	b, err := statestore.NewMemory(statestore.Options{
		KeyGroup:  func(k string) int { return keyGroupOf(k, maxPar) },
		KeyGroups: [2]int{0, maxPar},
		Clock:     func() int64 { return now },
	})
	require.NoError(t, err)
	defer func() { require.NoError(t, b.Close()) }()

	count, err := statestore.RegisterValue(b, statestore.ValueDescriptor[int64]{Name: "count"})
	require.NoError(t, err)
	seen, err := statestore.RegisterValue(b, statestore.ValueDescriptor[int64]{Name: "seen", TTL: time.Hour})
	require.NoError(t, err)
	names, err := statestore.RegisterList(b, statestore.ListDescriptor[string]{Name: "names"})
	require.NoError(t, err)
	byID, err := statestore.RegisterMap(b, statestore.MapDescriptor[int, string]{Name: "by_id"})
	require.NoError(t, err)
	timers := b.TimerService("win")

	keys := []string{"k1", "k2", "k3", "k4", "k5", "k6"}
	for i, k := range keys {
		count.Put(k, "", int64(10*i))
		count.Put(k, "w1", int64(10*i+1))
		seen.Put(k, "", int64(i))
		names.Add(k, "", "a"+k)
		names.Add(k, "", "b"+k)
		byID.Put(k, "", i, "id-"+k)
		timers.RegisterEventTimer(k, "w1", int64(100+i))
		timers.RegisterProcessingTimer(k, "", int64(200+i))
	}
	stream := writeSnapshot(t, b)

	groups, err := statestore.InspectState(stream)
	require.NoError(t, err)
	type entry struct {
		state, ns string
		kind      statestore.Kind
		ttl       int64
		value     any
	}
	got := map[string][]entry{}
	gotTimers := map[string][]statestore.InspectedTimer{}
	var order []int
	for _, g := range groups {
		order = append(order, g.KeyGroup)
		for _, st := range g.States {
			for _, e := range st.Entries {
				require.Equal(t, g.KeyGroup, keyGroupOf(e.Key, maxPar), "key %q in the wrong key group", e.Key)
				require.NoError(t, e.ValueErr)
				got[e.Key] = append(got[e.Key], entry{state: st.Name, ns: e.Namespace, kind: st.Kind, ttl: e.TTLTime, value: e.Value})
			}
		}
		for _, ts := range g.Timers {
			require.Equal(t, "win", ts.Name)
			for _, tm := range ts.Timers {
				require.Equal(t, g.KeyGroup, keyGroupOf(tm.Key, maxPar))
				gotTimers[tm.Key] = append(gotTimers[tm.Key], tm)
			}
		}
	}
	require.True(t, slices.IsSorted(order), "key groups in order: %v", order)
	require.Len(t, got, len(keys))
	for i, k := range keys {
		require.ElementsMatch(t, []entry{
			{state: "by_id", kind: statestore.KindMap, value: map[string]any{fmtInt(i): []any{"id-" + k, int64(0)}}},
			{state: "count", kind: statestore.KindValue, value: int64(10 * i)},
			{state: "count", ns: "w1", kind: statestore.KindValue, value: int64(10*i + 1)},
			{state: "names", kind: statestore.KindList, value: []any{"a" + k, "b" + k}},
			{state: "seen", kind: statestore.KindValue, ttl: now, value: int64(i)},
		}, got[k], k)
		require.ElementsMatch(t, []statestore.InspectedTimer{
			{Domain: statestore.EventTime, Timer: statestore.Timer{Key: k, Namespace: "w1", Timestamp: int64(100 + i)}},
			{Domain: statestore.ProcessingTime, Timer: statestore.Timer{Key: k, Timestamp: int64(200 + i)}},
		}, gotTimers[k], k)
	}

	// A flipped byte in the last blob: the key groups before it are
	// returned with the error.
	bad := slices.Clone(stream)
	bad[len(bad)-6] ^= 0xff
	partial, err := statestore.InspectState(bad)
	require.ErrorIs(t, err, statestore.ErrCorrupt)
	require.ErrorContains(t, err, "decode keyed state")
	require.Len(t, partial, len(groups)-1)
	require.Equal(t, groups[:len(groups)-1], partial)

	empty, err := statestore.InspectState(nil)
	require.NoError(t, err)
	require.Empty(t, empty)
}

func fmtInt(i int) string { return big.NewInt(int64(i)).String() }

func TestDecodeCBOR(t *testing.T) {
	at := time.Date(2024, 5, 1, 12, 0, 0, 0, time.UTC)
	huge, _ := new(big.Int).SetString("18446744073709551615", 10)
	tests := []struct {
		name string
		in   any
		want any
	}{
		{"int", 42, int64(42)},
		{"negative", -7, int64(-7)},
		{"beyond int64", uint64(math.MaxUint64), huge},
		{"float", 1.5, 1.5},
		{"NaN", math.NaN(), "NaN"},
		{"+Inf", math.Inf(1), "+Inf"},
		{"-Inf", math.Inf(-1), "-Inf"},
		{"text", "héllo", "héllo"},
		{"bytes", []byte{1, 2, 3}, []byte{1, 2, 3}},
		{"null", nil, nil},
		{"bool", true, true},
		{"list", []any{1, "a", []any{2.5}}, []any{int64(1), "a", []any{2.5}}},
		{"text keys", map[string]any{"n": 1, "m": map[string]any{"x": nil}}, map[string]any{"n": int64(1), "m": map[string]any{"x": nil}}},
		{"int keys", map[int]string{1: "one", -2: "minus two"}, map[string]any{"1": "one", "-2": "minus two"}},
		{"tag", cbor.Tag{Number: 99, Content: "x"}, map[string]any{"tag": uint64(99), "value": "x"}},
		{"time", cbor.Tag{Number: 0, Content: at.Format(time.RFC3339)}, at},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			data, err := cbor.Marshal(tt.in)
			require.NoError(t, err)
			got, err := statestore.DecodeCBOR(data)
			require.NoError(t, err)
			if tm, ok := got.(time.Time); ok {
				require.True(t, at.Equal(tm), "%v", tm)
				return
			}
			require.Equal(t, tt.want, got)
		})
	}

	_, err := statestore.DecodeCBOR([]byte{0x01, 0x02})
	require.ErrorContains(t, err, "decode CBOR")
	_, err = statestore.DecodeCBOR(nil)
	require.Error(t, err)
}

// storeDigest is the sha256 of a file, to check that inspection changes
// nothing.
func storeDigest(t *testing.T, path string) [32]byte {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	return sha256.Sum256(b)
}

func TestCheckpointFile(t *testing.T) {
	dir := t.TempDir()
	storePath := filepath.Join(dir, statestore.CheckpointFileName)
	sp := filepath.Join(t.TempDir(), "sp.db")
	s, err := statestore.OpenCheckpointStore(dir, statestore.CheckpointStoreOptions{Retain: 5})
	require.NoError(t, err)
	writeCheckpoint(t, s, 1)
	writeCheckpoint(t, s, 2)
	require.NoError(t, s.ExportSavepoint(1, sp))
	p, err := s.Begin(3, statestore.CheckpointMeta{Pipeline: "test"})
	require.NoError(t, err)
	require.NoError(t, p.Put("op/agg/0", []byte("half")))

	// A running pipeline holds the store.
	_, err = statestore.OpenCheckpointFile(storePath, 50*time.Millisecond)
	require.ErrorIs(t, err, statestore.ErrStateDirLocked)
	require.ErrorContains(t, err, "in use by another eddy (pid ")
	require.NoError(t, s.Close(context.Background()))

	before := storeDigest(t, storePath)
	f, err := statestore.OpenCheckpointFile(storePath, 0)
	require.NoError(t, err)
	require.False(t, f.Savepoint())
	require.Equal(t, storePath, f.Path())
	list, err := f.List()
	require.NoError(t, err)
	require.Len(t, list, 3)
	for i, want := range []struct {
		id       int64
		complete bool
	}{{3, false}, {2, true}, {1, true}} {
		require.Equal(t, want.id, list[i].ID)
		require.Equal(t, want.complete, list[i].Complete)
		require.Equal(t, "test", list[i].Pipeline)
	}

	cp, err := f.Checkpoint(2)
	require.NoError(t, err)
	require.Equal(t, int64(2), cp.ID())
	require.Equal(t, "sha256:2", cp.Meta().FileHash)
	require.Equal(t, []byte("txn-2"), cp.Meta().Committables["sink/out/0"])
	require.False(t, cp.CompletedAt().Before(cp.Meta().Time))
	var names []string
	for i, pi := range cp.Parts() {
		names = append(names, pi.Name)
		blob, err := cp.Get(pi.Name)
		require.NoError(t, err)
		require.Equal(t, partBlob(2, pi.Name, partSize(slices.Index(testParts, pi.Name))), blob, "part %d", i)
	}
	require.Equal(t, slices.Sorted(slices.Values(testParts)), names)
	_, err = cp.Get("op/nope/0")
	require.ErrorIs(t, err, statestore.ErrPartNotFound)

	_, err = f.Checkpoint(3)
	require.ErrorIs(t, err, statestore.ErrNoCheckpoint)
	require.ErrorContains(t, err, "incomplete")
	_, err = f.Checkpoint(7)
	require.ErrorIs(t, err, statestore.ErrNoCheckpoint)
	require.NoError(t, f.Close())
	// Inspection deleted nothing (the store would delete the incomplete
	// checkpoint 3 on open) and wrote nothing.
	require.Equal(t, before, storeDigest(t, storePath))

	// One corrupt part: reading it fails, the others still read.
	db, err := bolt.Open(storePath, 0o600, nil)
	require.NoError(t, err)
	require.NoError(t, db.Update(func(tx *bolt.Tx) error {
		parts := tx.Bucket([]byte("checkpoints")).Bucket(binary.BigEndian.AppendUint64(nil, 2)).Bucket([]byte("parts"))
		v := slices.Clone(parts.Get([]byte("src/in/1")))
		v[3] ^= 0xff
		return parts.Put([]byte("src/in/1"), v)
	}))
	require.NoError(t, db.Close())
	f, err = statestore.OpenCheckpointFile(storePath, 0)
	require.NoError(t, err)
	defer func() { require.NoError(t, f.Close()) }()
	cp, err = f.Checkpoint(2)
	require.NoError(t, err)
	_, err = cp.Get("src/in/1")
	require.ErrorIs(t, err, statestore.ErrCheckpointCorrupt)
	require.Regexp(t, `^checkpoint 2: part "src/in/1": corrupt checkpoint: part "src/in/1": checksum [0-9a-f]{8}, stored [0-9a-f]{8}$`, err.Error())
	blob, err := cp.Get("src/in/0")
	require.NoError(t, err)
	require.Equal(t, partBlob(2, "src/in/0", partSize(slices.Index(testParts, "src/in/0"))), blob)

	// The savepoint.
	spf, err := statestore.OpenCheckpointFile(sp, 0)
	require.NoError(t, err)
	defer func() { require.NoError(t, spf.Close()) }()
	require.True(t, spf.Savepoint())
	list, err = spf.List()
	require.NoError(t, err)
	require.Len(t, list, 1)
	require.Equal(t, int64(1), list[0].ID)
	cp, err = spf.Checkpoint(1)
	require.NoError(t, err)
	blob, err = cp.Get("op/agg/1")
	require.NoError(t, err)
	require.Equal(t, partBlob(1, "op/agg/1", partSize(slices.Index(testParts, "op/agg/1"))), blob)
}

func TestCheckpointFileNotACheckpointFile(t *testing.T) {
	dir := t.TempDir()
	text := filepath.Join(dir, "pipeline.yaml")
	require.NoError(t, os.WriteFile(text, []byte(strings.Repeat("version: 1\n", 2000)), 0o644))
	other := filepath.Join(dir, "other.db")
	db, err := bolt.Open(other, 0o600, nil)
	require.NoError(t, err)
	require.NoError(t, db.Update(func(tx *bolt.Tx) error {
		_, err := tx.CreateBucket([]byte("x"))
		return err
	}))
	require.NoError(t, db.Close())

	empty := filepath.Join(dir, "empty.db")
	require.NoError(t, os.WriteFile(empty, nil, 0o644))
	tiny := filepath.Join(dir, "tiny.db")
	require.NoError(t, os.WriteFile(tiny, []byte("x"), 0o644))

	for _, path := range []string{text, other, dir, empty, tiny} {
		_, err := statestore.OpenCheckpointFile(path, 0)
		require.ErrorIs(t, err, statestore.ErrCheckpointFormat, path)
		require.ErrorContains(t, err, "open "+path+" for inspection")
	}
	_, err = statestore.OpenCheckpointFile(filepath.Join(dir, "missing.db"), 0)
	require.ErrorIs(t, err, os.ErrNotExist)
}
