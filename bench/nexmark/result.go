package nexmark

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Result is what one run of one query measured.
type Result struct {
	Query  string
	Events int64
	// Seconds is the wall time of the run, CPUSeconds the process's CPU
	// time (user and system, every goroutine and the garbage collector)
	// over the same span.
	Seconds    float64
	CPUSeconds float64
	// RSSMB is the process's peak resident set size, in MiB.
	RSSMB int64
	// Checkpoint is the checkpoint interval, 0 for a run without a
	// checkpoint block; Checkpoints the checkpoints it completed (the
	// final one at the end of the input included).
	Checkpoint  time.Duration
	Checkpoints int64
	// Engine is empty for eddy, "flink" for a line of the Flink side of
	// scripts/bench-nexmark-flink.sh.
	Engine string
}

// EventsPerCPUSecond is the events the run processed per second of CPU.
func (r Result) EventsPerCPUSecond() float64 {
	if r.CPUSeconds <= 0 {
		return 0
	}
	return float64(r.Events) / r.CPUSeconds
}

// EventsPerSecond is the events the run processed per second of wall time.
func (r Result) EventsPerSecond() float64 {
	if r.Seconds <= 0 {
		return 0
	}
	return float64(r.Events) / r.Seconds
}

// String returns the result line that other tools read:
//
//	nexmark q5 events=10000000 seconds=12.300 cpu_seconds=23.900 events_per_cpu_second=418410 rss_mb=210
//
// with " checkpoint=10s checkpoints=3" added for a run with checkpoints,
// and " engine=flink" for the Flink side.
func (r Result) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "nexmark %s events=%d seconds=%.3f cpu_seconds=%.3f events_per_cpu_second=%.0f rss_mb=%d",
		r.Query, r.Events, r.Seconds, r.CPUSeconds, r.EventsPerCPUSecond(), r.RSSMB)
	if r.Checkpoint > 0 {
		fmt.Fprintf(&b, " checkpoint=%s checkpoints=%d", FormatInterval(r.Checkpoint), r.Checkpoints)
	}
	if r.Engine != "" {
		fmt.Fprintf(&b, " engine=%s", r.Engine)
	}
	return b.String()
}

// FormatInterval writes a checkpoint interval as the lines do: 10s, 2m,
// 1h, 500ms, 1m30s (time.ParseDuration reads them all).
func FormatInterval(d time.Duration) string {
	if d >= time.Hour && d%time.Hour == 0 {
		return strconv.FormatInt(int64(d/time.Hour), 10) + "h"
	}
	if d >= time.Minute && d%time.Minute == 0 {
		return strconv.FormatInt(int64(d/time.Minute), 10) + "m"
	}
	return d.String()
}

// ParseResult reads a result line (String's format). Keys it does not know
// are skipped, so that a reader of today reads the lines of a later eddy.
func ParseResult(line string) (Result, error) {
	fields := strings.Fields(line)
	if len(fields) < 2 || fields[0] != "nexmark" {
		return Result{}, fmt.Errorf("not a nexmark result line: %q", line)
	}
	r := Result{Query: fields[1]}
	seen := map[string]bool{}
	for _, f := range fields[2:] {
		k, v, ok := strings.Cut(f, "=")
		if !ok {
			return Result{}, fmt.Errorf("result line %q: %q is not key=value", line, f)
		}
		if err := r.set(k, v); err != nil {
			return Result{}, fmt.Errorf("result line %q: %s: %w", line, k, err)
		}
		seen[k] = true
	}
	for _, k := range []string{"events", "seconds", "cpu_seconds", "events_per_cpu_second", "rss_mb"} {
		if !seen[k] {
			return Result{}, fmt.Errorf("result line %q has no %s", line, k)
		}
	}
	return r, nil
}

// set sets the field of key k from its value v.
func (r *Result) set(k, v string) (err error) {
	switch k {
	case "events":
		r.Events, err = strconv.ParseInt(v, 10, 64)
	case "seconds":
		r.Seconds, err = strconv.ParseFloat(v, 64)
	case "cpu_seconds":
		r.CPUSeconds, err = strconv.ParseFloat(v, 64)
	case "events_per_cpu_second":
		_, err = strconv.ParseFloat(v, 64) // derived: events / cpu_seconds
	case "rss_mb":
		r.RSSMB, err = strconv.ParseInt(v, 10, 64)
	case "checkpoint":
		r.Checkpoint, err = time.ParseDuration(v)
	case "checkpoints":
		r.Checkpoints, err = strconv.ParseInt(v, 10, 64)
	case "engine":
		r.Engine = v
	}
	return err
}
