package statestore_test

import (
	"math"
	"math/big"
	"slices"
	"testing"
	"time"

	"github.com/fxamacker/cbor/v2"
	"github.com/stretchr/testify/require"

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
