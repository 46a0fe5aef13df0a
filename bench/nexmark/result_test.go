package nexmark

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestResultLine(t *testing.T) {
	r := Result{Query: "q5", Events: 10000000, Seconds: 12.3, CPUSeconds: 23.9, RSSMB: 210}
	require.Equal(t, "nexmark q5 events=10000000 seconds=12.300 cpu_seconds=23.900 events_per_cpu_second=418410 rss_mb=210", r.String())
	back, err := ParseResult(r.String())
	require.NoError(t, err)
	require.Equal(t, r, back)

	r.Checkpoint, r.Checkpoints = 10*time.Second, 3
	require.Equal(t, "nexmark q5 events=10000000 seconds=12.300 cpu_seconds=23.900 events_per_cpu_second=418410 rss_mb=210 checkpoint=10s checkpoints=3", r.String())
	back, err = ParseResult(r.String())
	require.NoError(t, err)
	require.Equal(t, r, back)

	r.Engine = "flink"
	back, err = ParseResult(r.String())
	require.NoError(t, err)
	require.Equal(t, r, back)
}

func TestParseResult(t *testing.T) {
	r, err := ParseResult("nexmark q1 events=5 seconds=1 cpu_seconds=2 events_per_cpu_second=2 rss_mb=3 later_key=x")
	require.NoError(t, err, "unknown keys are skipped")
	require.Equal(t, Result{Query: "q1", Events: 5, Seconds: 1, CPUSeconds: 2, RSSMB: 3}, r)
	require.InDelta(t, 2.5, r.EventsPerCPUSecond(), 1e-9)
	require.InDelta(t, 5.0, r.EventsPerSecond(), 1e-9)

	for line, msg := range map[string]string{
		"":                  "not a nexmark result line",
		"flink q1 events=5": "not a nexmark result line",
		"nexmark q1 events=5 seconds=1 cpu_seconds=2 events_per_cpu_second=2":          "has no rss_mb",
		"nexmark q1 events=x seconds=1 cpu_seconds=2 events_per_cpu_second=2 rss_mb=3": "events",
		"nexmark q1 events=5 seconds": "not key=value",
		"nexmark q1 events=5 seconds=1 cpu_seconds=2 events_per_cpu_second=2 rss_mb=3 checkpoint=ten": "checkpoint",
	} {
		_, err := ParseResult(line)
		require.ErrorContains(t, err, msg, "line %q", line)
	}
}

func TestFormatInterval(t *testing.T) {
	require.Equal(t, "10s", FormatInterval(10*time.Second))
	require.Equal(t, "2m", FormatInterval(2*time.Minute))
	require.Equal(t, "1h", FormatInterval(time.Hour))
	require.Equal(t, "90m", FormatInterval(90*time.Minute))
	require.Equal(t, "1m30s", FormatInterval(90*time.Second))
	require.Equal(t, "500ms", FormatInterval(500*time.Millisecond))
	d, err := time.ParseDuration(FormatInterval(2 * time.Minute))
	require.NoError(t, err)
	require.Equal(t, 2*time.Minute, d)
}

func TestOverhead(t *testing.T) {
	without := Result{Events: 100, Seconds: 1, CPUSeconds: 2}
	with := Result{Events: 100, Seconds: 1.25, CPUSeconds: 2.5}
	wall, cpu := Overhead(without, with)
	require.InDelta(t, 0.2, wall, 1e-9)
	require.InDelta(t, 0.2, cpu, 1e-9)
}
