package statestore_test

import (
	"errors"
	"maps"
	"slices"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/eddy-stream/eddy/statestore"
)

func TestValueState(t *testing.T) {
	type step func(s statestore.ValueState[string], b statestore.Backend)
	put := func(k, ns, v string) step {
		return func(s statestore.ValueState[string], _ statestore.Backend) { s.Put(k, ns, v) }
	}
	del := func(k, ns string) step {
		return func(s statestore.ValueState[string], _ statestore.Backend) { s.Delete(k, ns) }
	}
	cases := []struct {
		name  string
		steps []step
		want  map[[2]string]string // (key, ns) -> value; the rest must be absent
	}{
		{name: "empty"},
		{name: "put", steps: []step{put("a", "", "1")}, want: map[[2]string]string{{"a", ""}: "1"}},
		{name: "overwrite", steps: []step{put("a", "", "1"), put("a", "", "2")}, want: map[[2]string]string{{"a", ""}: "2"}},
		{name: "namespaces are separate", steps: []step{put("a", "x", "1"), put("a", "y", "2"), put("b", "x", "3")},
			want: map[[2]string]string{{"a", "x"}: "1", {"a", "y"}: "2", {"b", "x"}: "3"}},
		{name: "delete", steps: []step{put("a", "x", "1"), put("a", "y", "2"), del("a", "x")},
			want: map[[2]string]string{{"a", "y"}: "2"}},
		{name: "delete absent", steps: []step{put("a", "x", "1"), del("a", "z"), del("zz", "x")},
			want: map[[2]string]string{{"a", "x"}: "1"}},
		{name: "state clear", steps: []step{put("a", "x", "1"), func(s statestore.ValueState[string], _ statestore.Backend) { s.Clear("a", "x") }}},
		{name: "backend clear", steps: []step{put("a", "x", "1"), put("a", "y", "2"), func(_ statestore.ValueState[string], b statestore.Backend) { b.Clear("a", "x") }},
			want: map[[2]string]string{{"a", "y"}: "2"}},
		{name: "put after delete", steps: []step{put("a", "", "1"), del("a", ""), put("a", "", "3")}, want: map[[2]string]string{{"a", ""}: "3"}},
	}
	forEachBackend(t, func(t *testing.T, o *opener) {
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				b := o.all()
				s, err := statestore.RegisterValue(b, statestore.ValueDescriptor[string]{Name: "v"})
				require.NoError(t, err)
				for _, st := range tc.steps {
					st(s, b)
				}
				for _, k := range []string{"a", "b", "zz"} {
					for _, ns := range []string{"", "x", "y", "z"} {
						v, ok := s.Get(k, ns)
						want, wantOK := tc.want[[2]string{k, ns}]
						require.Equal(t, wantOK, ok, "%s/%s", k, ns)
						require.Equal(t, want, v, "%s/%s", k, ns)
					}
				}
				require.NoError(t, b.Err())
			})
		}
	})
}

func TestManyNamespacesPerKey(t *testing.T) {
	// Past a threshold a key's namespaces get an index; deletions must keep
	// it right on the way up and down.
	forEachBackend(t, func(t *testing.T, o *opener) {
		b := o.all()
		s, err := statestore.RegisterValue(b, statestore.ValueDescriptor[int]{Name: "v"})
		require.NoError(t, err)
		want := map[string]int{}
		for i := range 40 {
			ns := "ns" + strconv.Itoa(i)
			s.Put("k", ns, i)
			want[ns] = i
		}
		for i := 0; i < 40; i += 3 {
			ns := "ns" + strconv.Itoa(i)
			s.Delete("k", ns)
			delete(want, ns)
		}
		for i := 0; i < 40; i += 2 {
			ns := "ns" + strconv.Itoa(i)
			s.Put("k", ns, -i)
			want[ns] = -i
		}
		got := map[string]int{}
		for ns := range s.Namespaces("k") {
			v, ok := s.Get("k", ns)
			require.True(t, ok)
			got[ns] = v
		}
		require.Equal(t, want, got)
		// Down below the threshold again.
		for ns := range want {
			if ns != "ns1" && ns != "ns2" {
				s.Delete("k", ns)
			}
		}
		require.ElementsMatch(t, []string{"ns1", "ns2"}, slices.Collect(s.Namespaces("k")))
		v, ok := s.Get("k", "ns2")
		require.True(t, ok)
		require.Equal(t, -2, v)
	})
}

func TestKeysByKeyGroup(t *testing.T) {
	forEachBackend(t, func(t *testing.T, o *opener) {
		b := o.rng(4, 12)
		s, err := statestore.RegisterValue(b, statestore.ValueDescriptor[int]{Name: "v"})
		require.NoError(t, err)
		want := map[string]bool{}
		for i, k := range keys(2000) {
			if g := o.keyGroup(k); g >= 4 && g < 12 {
				s.Put(k, "ns"+strconv.Itoa(i%2), i)
				want[k] = true
			}
		}
		got := map[string]bool{}
		for g := 0; g < o.maxPar; g++ {
			for k := range s.Keys(g) {
				require.Equal(t, g, o.keyGroup(k))
				require.False(t, got[k], "key %q twice", k)
				got[k] = true
			}
		}
		require.Equal(t, want, got)
		require.NoError(t, b.Err())
	})
}

func TestModifyDuringIteration(t *testing.T) {
	forEachBackend(t, func(t *testing.T, o *opener) {
		for _, snapFirst := range []bool{false, true} {
			t.Run("snapshot="+strconv.FormatBool(snapFirst), func(t *testing.T) {
				b := o.all()
				s, err := statestore.RegisterValue(b, statestore.ValueDescriptor[int]{Name: "v"})
				require.NoError(t, err)
				for i, k := range keys(300) {
					for j := range 12 {
						s.Put(k, "ns"+strconv.Itoa(j), i)
					}
				}
				if snapFirst { // iterations then run over groups shared with the snapshot
					_, err := b.Snapshot()
					require.NoError(t, err)
				}
				// Delete every namespace while iterating them.
				for g := 0; g < o.maxPar; g++ {
					for k := range s.Keys(g) {
						n := 0
						for ns := range s.Namespaces(k) {
							s.Delete(k, ns)
							n++
						}
						require.Equal(t, 12, n)
					}
				}
				for g := 0; g < o.maxPar; g++ {
					require.Empty(t, slices.Collect(s.Keys(g)))
				}
			})
		}
	})
}

func TestListState(t *testing.T) {
	type step func(s statestore.ListState[int])
	cases := []struct {
		name  string
		steps []step
		want  map[string][]int // ns of key "k" -> list
	}{
		{name: "empty"},
		{name: "add", steps: []step{func(s statestore.ListState[int]) { s.Add("k", "a", 1); s.Add("k", "a", 2) }},
			want: map[string][]int{"a": {1, 2}}},
		{name: "add all", steps: []step{func(s statestore.ListState[int]) {
			s.Add("k", "a", 1)
			s.AddAll("k", "a", []int{2, 3})
			s.AddAll("k", "b", nil)
		}},
			want: map[string][]int{"a": {1, 2, 3}}},
		{name: "update", steps: []step{func(s statestore.ListState[int]) { s.Add("k", "a", 1); s.Update("k", "a", []int{7, 8}) }},
			want: map[string][]int{"a": {7, 8}}},
		{name: "update empty clears", steps: []step{func(s statestore.ListState[int]) { s.Add("k", "a", 1); s.Update("k", "a", nil) }}},
		{name: "clear", steps: []step{func(s statestore.ListState[int]) { s.Add("k", "a", 1); s.Add("k", "b", 2); s.Clear("k", "a") }},
			want: map[string][]int{"b": {2}}},
		{name: "merge", steps: []step{func(s statestore.ListState[int]) {
			s.Add("k", "t", 1)
			s.AddAll("k", "s1", []int{2, 3})
			s.Add("k", "s2", 4)
			s.Add("k", "other", 9)
			s.MergeNamespaces("k", "t", "s1", "s2", "absent", "t")
		}}, want: map[string][]int{"t": {1, 2, 3, 4}, "other": {9}}},
		{name: "merge into absent target", steps: []step{func(s statestore.ListState[int]) {
			s.Add("k", "s1", 1)
			s.Add("k", "s2", 2)
			s.MergeNamespaces("k", "t", "s1", "s2")
		}}, want: map[string][]int{"t": {1, 2}}},
		{name: "merge nothing", steps: []step{func(s statestore.ListState[int]) { s.MergeNamespaces("k", "t", "s1") }}},
	}
	forEachBackend(t, func(t *testing.T, o *opener) {
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				b := o.all()
				s, err := statestore.RegisterList(b, statestore.ListDescriptor[int]{Name: "l"})
				require.NoError(t, err)
				for _, st := range tc.steps {
					st(s)
				}
				got := map[string][]int{}
				for ns := range s.Namespaces("k") {
					got[ns] = s.Get("k", ns)
				}
				if tc.want == nil {
					tc.want = map[string][]int{}
				}
				require.Equal(t, tc.want, got)
			})
		}
	})
}

func TestListGetIsSafeToAppend(t *testing.T) {
	forEachBackend(t, func(t *testing.T, o *opener) {
		b := o.all()
		s, err := statestore.RegisterList(b, statestore.ListDescriptor[int]{Name: "l"})
		require.NoError(t, err)
		s.AddAll("k", "", []int{1, 2, 3})
		l := s.Get("k", "")
		_ = append(l, 99)
		s.Add("k", "", 4)
		_ = append(l, 100)
		require.Equal(t, []int{1, 2, 3, 4}, s.Get("k", ""))
		in := []int{5, 6}
		s.Update("k", "", in)
		in[0] = 0
		require.Equal(t, []int{5, 6}, s.Get("k", ""))
	})
}

func TestMapState(t *testing.T) {
	type step func(s statestore.MapState[string, int])
	cases := []struct {
		name  string
		steps []step
		want  map[string]map[string]int // ns of key "k" -> map
	}{
		{name: "empty"},
		{name: "put", steps: []step{func(s statestore.MapState[string, int]) { s.Put("k", "a", "x", 1); s.Put("k", "a", "y", 2) }},
			want: map[string]map[string]int{"a": {"x": 1, "y": 2}}},
		{name: "overwrite", steps: []step{func(s statestore.MapState[string, int]) { s.Put("k", "a", "x", 1); s.Put("k", "a", "x", 2) }},
			want: map[string]map[string]int{"a": {"x": 2}}},
		{name: "delete", steps: []step{func(s statestore.MapState[string, int]) {
			s.Put("k", "a", "x", 1)
			s.Put("k", "a", "y", 2)
			s.Delete("k", "a", "x")
			s.Delete("k", "a", "nope")
		}}, want: map[string]map[string]int{"a": {"y": 2}}},
		{name: "delete last removes namespace", steps: []step{func(s statestore.MapState[string, int]) {
			s.Put("k", "a", "x", 1)
			s.Put("k", "b", "x", 1)
			s.Delete("k", "a", "x")
		}}, want: map[string]map[string]int{"b": {"x": 1}}},
		{name: "clear", steps: []step{func(s statestore.MapState[string, int]) { s.Put("k", "a", "x", 1); s.Clear("k", "a") }}},
		{name: "delete while iterating", steps: []step{func(s statestore.MapState[string, int]) {
			for i := range 10 {
				s.Put("k", "a", strconv.Itoa(i), i)
			}
			for k, v := range s.Iterate("k", "a") {
				if v%2 == 1 {
					s.Delete("k", "a", k)
				}
			}
		}}, want: map[string]map[string]int{"a": {"0": 0, "2": 2, "4": 4, "6": 6, "8": 8}}},
	}
	forEachBackend(t, func(t *testing.T, o *opener) {
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				b := o.all()
				s, err := statestore.RegisterMap(b, statestore.MapDescriptor[string, int]{Name: "m"})
				require.NoError(t, err)
				for _, st := range tc.steps {
					st(s)
				}
				got := map[string]map[string]int{}
				for ns := range s.Namespaces("k") {
					m := maps.Collect(s.Iterate("k", ns))
					require.Equal(t, len(m), s.Len("k", ns))
					for uk, v := range m {
						require.True(t, s.Contains("k", ns, uk))
						gv, ok := s.Get("k", ns, uk)
						require.True(t, ok)
						require.Equal(t, v, gv)
					}
					got[ns] = m
				}
				if tc.want == nil {
					tc.want = map[string]map[string]int{}
				}
				require.Equal(t, tc.want, got)
				require.False(t, s.Contains("k", "zz", "x"))
				require.Zero(t, s.Len("k", "zz"))
			})
		}
	})
}

func TestReducingState(t *testing.T) {
	cases := []struct {
		name string
		do   func(s statestore.ReducingState[int])
		want map[string]int
	}{
		{name: "empty", do: func(s statestore.ReducingState[int]) {}},
		{name: "add", do: func(s statestore.ReducingState[int]) { s.Add("k", "a", 3); s.Add("k", "a", 4) }, want: map[string]int{"a": 7}},
		{name: "first value is kept as is", do: func(s statestore.ReducingState[int]) { s.Add("k", "a", -5) }, want: map[string]int{"a": -5}},
		{name: "clear", do: func(s statestore.ReducingState[int]) { s.Add("k", "a", 3); s.Clear("k", "a"); s.Add("k", "a", 1) }, want: map[string]int{"a": 1}},
		{name: "merge", do: func(s statestore.ReducingState[int]) {
			s.Add("k", "t", 1)
			s.Add("k", "s1", 10)
			s.Add("k", "s2", 100)
			s.MergeNamespaces("k", "t", "s1", "s2")
		}, want: map[string]int{"t": 111}},
		{name: "merge into absent target", do: func(s statestore.ReducingState[int]) {
			s.Add("k", "s1", 10)
			s.Add("k", "s2", 100)
			s.MergeNamespaces("k", "t", "s1", "s2")
		}, want: map[string]int{"t": 110}},
	}
	forEachBackend(t, func(t *testing.T, o *opener) {
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				b := o.all()
				s, err := statestore.RegisterReducing(b, statestore.ReducingDescriptor[int]{Name: "r", Reduce: func(a, b int) int { return a + b }})
				require.NoError(t, err)
				tc.do(s)
				got := map[string]int{}
				for ns := range s.Namespaces("k") {
					v, ok := s.Get("k", ns)
					require.True(t, ok)
					got[ns] = v
				}
				if tc.want == nil {
					tc.want = map[string]int{}
				}
				require.Equal(t, tc.want, got)
			})
		}
	})
}

func TestAggregatingState(t *testing.T) {
	cases := []struct {
		name string
		do   func(s statestore.AggregatingState[float64, avgAcc, float64])
		want map[string]float64
	}{
		{name: "empty", do: func(s statestore.AggregatingState[float64, avgAcc, float64]) {}},
		{name: "add", do: func(s statestore.AggregatingState[float64, avgAcc, float64]) {
			s.Add("k", "w1", 1)
			s.Add("k", "w1", 2)
			s.Add("k", "w2", 10)
		}, want: map[string]float64{"w1": 1.5, "w2": 10}},
		{name: "session merge", do: func(s statestore.AggregatingState[float64, avgAcc, float64]) {
			s.Add("k", "[0,10)", 1)
			s.Add("k", "[5,15)", 2)
			s.Add("k", "[12,22)", 6)
			s.Add("k", "[40,50)", 100)
			s.MergeNamespaces("k", "[0,22)", "[0,10)", "[5,15)", "[12,22)")
		}, want: map[string]float64{"[0,22)": 3, "[40,50)": 100}},
		{name: "merge into existing target", do: func(s statestore.AggregatingState[float64, avgAcc, float64]) {
			s.Add("k", "t", 4)
			s.Add("k", "s", 8)
			s.MergeNamespaces("k", "t", "s")
		}, want: map[string]float64{"t": 6}},
	}
	forEachBackend(t, func(t *testing.T, o *opener) {
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				b := o.all()
				s, err := statestore.RegisterAggregating(b, avgDescriptor("a"))
				require.NoError(t, err)
				tc.do(s)
				got := map[string]float64{}
				for ns := range s.Namespaces("k") {
					v, ok := s.Get("k", ns)
					require.True(t, ok)
					got[ns] = v
				}
				if tc.want == nil {
					tc.want = map[string]float64{}
				}
				require.Equal(t, tc.want, got)
			})
		}
	})
}

func TestAggregatingCreateAndCopy(t *testing.T) {
	// An accumulator changed in place (a pointer) needs Copy so that a
	// snapshot keeps the value it saw.
	type acc struct{ Vals []int }
	forEachBackend(t, func(t *testing.T, o *opener) {
		b := o.all()
		created := 0
		s, err := statestore.RegisterAggregating(b, statestore.AggregatingDescriptor[int, *acc, int]{
			Name:   "a",
			Create: func() *acc { created++; return &acc{} },
			Add:    func(a *acc, v int) *acc { a.Vals = append(a.Vals, v); return a },
			Merge:  func(a, b *acc) *acc { a.Vals = append(a.Vals, b.Vals...); return a },
			Result: func(a *acc) int { return len(a.Vals) },
			Copy:   func(a *acc) *acc { return &acc{Vals: slices.Clone(a.Vals)} },
		})
		require.NoError(t, err)
		s.Add("k", "", 1)
		s.Add("k", "", 2)
		require.Equal(t, 1, created)
		blobs := snapshotBlobs(t, b)
		s.Add("k", "", 3)
		n, _ := s.Get("k", "")
		require.Equal(t, 3, n)

		b2 := o.all()
		s2, err := statestore.RegisterAggregating(b2, statestore.AggregatingDescriptor[int, *acc, int]{
			Name: "a", Add: func(a *acc, v int) *acc { return a }, Merge: func(a, b *acc) *acc { return a },
			Result: func(a *acc) int { return len(a.Vals) },
		})
		require.NoError(t, err)
		require.NoError(t, b2.Restore(inRange(blobs, 0, o.maxPar)...))
		a, ok := s2.Accumulator("k", "")
		require.True(t, ok)
		require.Equal(t, []int{1, 2}, a.Vals)
	})
}

func TestRegister(t *testing.T) {
	forEachBackend(t, func(t *testing.T, o *opener) {
		b := o.all()
		v1, err := statestore.RegisterValue(b, statestore.ValueDescriptor[int]{Name: "x"})
		require.NoError(t, err)
		v2, err := statestore.RegisterValue(b, statestore.ValueDescriptor[int]{Name: "x"})
		require.NoError(t, err)
		v1.Put("k", "", 5)
		got, ok := v2.Get("k", "")
		require.True(t, ok)
		require.Equal(t, 5, got, "same name, same handle")

		_, err = statestore.RegisterValue(b, statestore.ValueDescriptor[string]{Name: "x"})
		require.ErrorIs(t, err, statestore.ErrIncompatibleState)
		_, err = statestore.RegisterList(b, statestore.ListDescriptor[int]{Name: "x"})
		require.ErrorIs(t, err, statestore.ErrIncompatibleState)

		_, err = statestore.RegisterValue(b, statestore.ValueDescriptor[int]{})
		require.ErrorIs(t, err, statestore.ErrInvalidDescriptor)
		_, err = statestore.RegisterReducing(b, statestore.ReducingDescriptor[int]{Name: "r"})
		require.ErrorIs(t, err, statestore.ErrInvalidDescriptor)
		_, err = statestore.RegisterAggregating(b, statestore.AggregatingDescriptor[int, int, int]{Name: "a", Add: func(a, b int) int { return a }})
		require.ErrorIs(t, err, statestore.ErrInvalidDescriptor)
		_, err = statestore.RegisterValue(b, statestore.ValueDescriptor[int]{Name: "neg", TTL: -1})
		require.ErrorIs(t, err, statestore.ErrInvalidDescriptor)

		st, err := b.State("x")
		require.NoError(t, err)
		require.Equal(t, "x", st.Name())
		require.Equal(t, statestore.KindValue, st.Kind())
		_, err = b.State("nope")
		require.ErrorIs(t, err, statestore.ErrUnknownState)
		require.Equal(t, []string{"x"}, b.StateNames())

		require.NoError(t, b.Close())
		_, err = statestore.RegisterValue(b, statestore.ValueDescriptor[int]{Name: "y"})
		require.ErrorIs(t, err, statestore.ErrClosed)
		_, err = b.Snapshot()
		require.ErrorIs(t, err, statestore.ErrClosed)
	})
}

func TestInvalidOptions(t *testing.T) {
	for _, opts := range []statestore.Options{
		{KeyGroups: [2]int{0, 4}},
		{KeyGroup: func(string) int { return 0 }, KeyGroups: [2]int{3, 3}},
		{KeyGroup: func(string) int { return 0 }, KeyGroups: [2]int{-1, 3}},
	} {
		_, err := statestore.NewMemory(opts)
		require.ErrorIs(t, err, statestore.ErrInvalidOptions)
	}
}

func TestKeyOutsideRangeIsSticky(t *testing.T) {
	forEachBackend(t, func(t *testing.T, o *opener) {
		b := o.rng(0, 8)
		s, err := statestore.RegisterValue(b, statestore.ValueDescriptor[int]{Name: "v"})
		require.NoError(t, err)
		var inside, outside string
		for _, k := range keys(100) {
			if o.keyGroup(k) < 8 {
				inside = k
			} else {
				outside = k
			}
		}
		s.Put(inside, "", 1)
		require.NoError(t, b.Err())
		s.Put(outside, "", 1)
		_, ok := s.Get(outside, "")
		require.False(t, ok)
		b.TimerService("t").RegisterEventTimer(outside, "", 5)
		require.ErrorIs(t, b.Err(), statestore.ErrKeyGroupRange)
		_, err = b.Snapshot()
		require.True(t, errors.Is(err, statestore.ErrKeyGroupRange))
	})
}
