package pipeline_test

import (
	"testing"
	"time"

	"github.com/eddy-stream/eddy/pipeline"
	"github.com/stretchr/testify/require"
)

func TestRestartPolicies(t *testing.T) {
	t0 := time.Unix(0, 0)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	spec := pipeline.DefaultRestart()

	t.Run("none", func(t *testing.T) {
		_, err := pipeline.NewRestartPolicy(spec).Next(at(0))
		require.Error(t, err)
	})
	t.Run("fixed_delay", func(t *testing.T) {
		s := spec
		s.Strategy, s.Attempts, s.Delay = "fixed_delay", 2, pipeline.Duration(3*time.Second)
		p := pipeline.NewRestartPolicy(s)
		for i := range 2 {
			d, err := p.Next(at(i))
			require.NoError(t, err)
			require.Equal(t, 3*time.Second, d)
		}
		_, err := p.Next(at(2))
		require.ErrorContains(t, err, "2 restart attempts are used up")
	})
	t.Run("failure_rate", func(t *testing.T) {
		s := spec
		s.Strategy, s.MaxFailures, s.Interval, s.Delay = "failure_rate", 2, pipeline.Duration(time.Minute), pipeline.Duration(time.Second)
		p := pipeline.NewRestartPolicy(s)
		for _, sec := range []int{0, 30} {
			_, err := p.Next(at(sec))
			require.NoError(t, err)
		}
		// A third failure 50s after the first: 3 within a minute.
		_, err := p.Next(at(50))
		require.ErrorContains(t, err, "3 failures within 1m0s")
		// The first two are out of the window two minutes on.
		p = pipeline.NewRestartPolicy(s)
		for _, sec := range []int{0, 30, 100} {
			_, err := p.Next(at(sec))
			require.NoError(t, err)
		}
	})
	t.Run("exponential_delay", func(t *testing.T) {
		s := spec
		s.Strategy, s.Initial, s.Max, s.Multiplier, s.ResetAfter = "exponential_delay",
			pipeline.Duration(time.Second), pipeline.Duration(5*time.Second), 2, pipeline.Duration(time.Minute)
		p := pipeline.NewRestartPolicy(s)
		var got []time.Duration
		for _, sec := range []int{0, 1, 2, 3, 4} {
			d, err := p.Next(at(sec))
			require.NoError(t, err)
			got = append(got, d)
		}
		require.Equal(t, []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 5 * time.Second, 5 * time.Second}, got)
		d, err := p.Next(at(100)) // a minute without failures resets the delay
		require.NoError(t, err)
		require.Equal(t, time.Second, d)
	})
}

func TestRestartNeedsCheckpoints(t *testing.T) {
	_, err := pipeline.Load(testEnv(), "r.yaml", []byte("version: 1\nname: r\nrestart:\n  strategy: fixed_delay\nsources: [{type: seq}]\nsinks: [{type: collect}]\n"))
	require.EqualError(t, err, "r.yaml:4:13: restart needs a checkpoint block: without one a restart would start from the beginning and repeat the output")
}
