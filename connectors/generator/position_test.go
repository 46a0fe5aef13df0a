package generator

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/eddy-stream/eddy/connectors/internal/conntest"
	"github.com/eddy-stream/eddy/pipeline"
)

// subtask is one open generator subtask of a run and the position a
// checkpoint would store for it now.
type subtask struct {
	src pipeline.Source
	pos []byte
}

// openRun opens every subtask of parallelism p as the runtime does from
// the positions of a checkpoint taken at parallelism len(prev) (none: a
// fresh start): each its own at the same parallelism, all of them at
// another. A subtask's position before its first read is the one its Open
// set, else the one it restored.
func openRun(t *testing.T, cfg *Config, p int, prev [][]byte) []*subtask {
	t.Helper()
	run := make([]*subtask, p)
	for k := range p {
		src, err := cfg.NewSource()
		require.NoError(t, err)
		sc := &pipeline.SourceContext{SubtaskInfo: conntest.Info("g", k, p)}
		switch {
		case prev == nil:
		case len(prev) == p:
			sc.Restored = prev[k]
		default:
			sc.RestoredAll = prev
		}
		require.NoError(t, src.Open(context.Background(), sc))
		t.Cleanup(func() { _ = src.Close(context.Background()) })
		run[k] = &subtask{src: src, pos: sc.Restored}
		if sc.Position != nil {
			run[k].pos = sc.Position
		}
	}
	return run
}

// read reads n batches of s (fewer at the end) and returns the counters.
func (s *subtask) read(t *testing.T, n int) []int {
	t.Helper()
	var out []int
	for range n {
		b := conntest.ReadOnce(t, s.src, 5*time.Second)
		if b.Err != nil && !errors.Is(b.Err, io.EOF) {
			require.NoError(t, b.Err)
		}
		for _, f := range conntest.Fields([]conntest.Batch{b}) {
			out = append(out, f["i"].(int))
		}
		if b.Position != nil {
			s.pos = b.Position
		}
		if errors.Is(b.Err, io.EOF) {
			break
		}
	}
	return out
}

// TestRescaleGeneratesEachCounterOnce restarts a bounded generator many
// times, at random parallelisms (the same one too), its subtasks getting
// ahead of each other by random numbers of batches. Each run's output up
// to its checkpoint counts; what a subtask generates after it is lost, as
// in a crash. Over all runs every counter is generated exactly once.
func TestRescaleGeneratesEachCounterOnce(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, 1))
	t.Logf("seed %d", seed)
	for round := range 20 {
		count := 1 + rng.IntN(40*maxBatch)
		cfg := load(t, fmt.Sprintf("count: %d\nfields:\n  i: i\n", count))
		seen := make([]int, count)
		var prev [][]byte
		var trail []int
		for restart := range 6 {
			p := 1 + rng.IntN(5)
			trail = append(trail, p)
			run := openRun(t, cfg, p, prev)
			last := restart == 5
			prev = make([][]byte, p)
			for k, s := range run {
				n := rng.IntN(4)
				if last {
					n = count // to the end
				}
				for _, i := range s.read(t, n) {
					seen[i]++
				}
				prev[k] = s.pos
				if !last {
					s.read(t, rng.IntN(2)) // after the checkpoint: lost
				}
			}
		}
		for i, n := range seen {
			if n != 1 {
				require.Failf(t, "counter generated other than once", "round %d (count %d, parallelisms %v, seed %d): counter %d generated %d times", round, count, trail, seed, i, n)
			}
		}
	}
}

// A restore at another parallelism of an unbounded generator goes on from
// where the slowest old subtask was, skipping what the others did.
func TestRescaleUnbounded(t *testing.T) {
	cfg := load(t, "fields:\n  i: i\n")
	run := openRun(t, cfg, 2, nil)
	require.Len(t, run[0].read(t, 3), 3*maxBatch) // 0, 2, ..., up to 6142
	require.Len(t, run[1].read(t, 1), maxBatch)   // 1, 3, ..., up to 2047
	next := openRun(t, cfg, 3, [][]byte{run[0].pos, run[1].pos})
	pos, err := DecodePosition(next[0].pos)
	require.NoError(t, err)
	require.Equal(t, Position{Subtask: 0, Parallelism: 3, Base: 2049, Next: 2049, Produced: []Run{{Step: 2, Residue: 0, From: 2049, To: 6144}}}, pos)
	got := next[1].read(t, 1)      // counters 1 mod 3 from 2049 on, the even ones below 6144 left out
	require.Equal(t, 2053, got[0]) // 2050 is even
	require.Equal(t, 2059, got[1])
	for _, i := range got {
		require.True(t, i%3 == 1 && (i%2 == 1 || i >= 6144), "counter %d", i)
	}
}

func TestPositionRoundTrip(t *testing.T) {
	for _, p := range []Position{
		{Subtask: 0, Parallelism: 1, Next: 0},
		{Subtask: 2, Parallelism: 3, Base: 1 << 40, Next: 1<<40 + 2, Produced: []Run{{Step: 2, Residue: 1, From: 1 << 40, To: 1<<40 + 9}, {Step: 5, Residue: 0, From: 1<<40 + 1, To: 1<<40 + 1}}},
	} {
		got, err := DecodePosition(EncodePosition(p))
		require.NoError(t, err)
		require.Equal(t, p, got)
	}
	good := EncodePosition(Position{Subtask: 1, Parallelism: 2, Base: 4, Next: 5, Produced: []Run{{Step: 3, Residue: 2, From: 4, To: 20}}})
	for name, b := range map[string][]byte{
		"truncated":              good[:len(good)-1],
		"trailing bytes":         append(append([]byte(nil), good...), 0),
		"unknown version":        {positionMagic, 3, 0, 1, 0, 0, 0},
		"subtask out of range":   EncodePosition(Position{Subtask: 2, Parallelism: 2}),
		"next below base":        EncodePosition(Position{Subtask: 0, Parallelism: 1, Base: 5, Next: 4}),
		"run below base":         EncodePosition(Position{Subtask: 0, Parallelism: 1, Base: 5, Next: 5, Produced: []Run{{Step: 1, From: 4, To: 6}}}),
		"residue out of its run": EncodePosition(Position{Subtask: 0, Parallelism: 1, Next: 0, Produced: []Run{{Step: 2, Residue: 2, To: 6}}}),
		"empty":                  {},
	} {
		_, err := DecodePosition(b)
		require.Error(t, err, name)
	}
}

func TestRescaleErrors(t *testing.T) {
	a := EncodePosition(Position{Subtask: 0, Parallelism: 2, Next: 4})
	b := EncodePosition(Position{Subtask: 1, Parallelism: 2, Next: 5})
	other := EncodePosition(Position{Subtask: 1, Parallelism: 2, Base: 2, Next: 5})
	for name, tc := range map[string]struct {
		all  [][]byte
		want string
	}{
		"subtasks swapped":   {[][]byte{b, a}, "does not belong"},
		"another run's base": {[][]byte{a, other}, "does not belong"},
		"too few positions":  {[][]byte{a}, "does not belong"},
		"corrupt":            {[][]byte{a, {positionMagic}}, "not one"},
	} {
		_, err := rescale(tc.all, 0, 3)
		require.ErrorContains(t, err, tc.want, name)
	}
	p, err := rescale([][]byte{nil, b}, 1, 3)
	require.NoError(t, err, "a subtask that generated nothing is at its first counter")
	require.Equal(t, Position{Subtask: 1, Parallelism: 3, Base: 0, Next: 1, Produced: []Run{{Step: 2, Residue: 1, From: 0, To: 5}}}, p)
	p, err = rescale([][]byte{nil, nil}, 2, 3)
	require.NoError(t, err)
	require.Equal(t, Position{Subtask: 2, Parallelism: 3, Next: 2}, p, "nothing generated: a fresh start")
}
