package cmd

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/eddy-stream/eddy/pipeline"
)

// TestProgressMeter: the line of each sample with a fake clock: records,
// the rate over the last five seconds, the fraction and the ETA from how
// fast the fraction grew since it was first known.
func TestProgressMeter(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	var m progressMeter
	for _, tt := range []struct {
		after    time.Duration
		records  int64
		fraction float64
		known    bool
		want     string
	}{
		{0, 0, 0, false, "0 records read"},
		{500 * time.Millisecond, 1500, 0, false, "1,500 records read  3,000/s"},
		{time.Second, 4000, 0.1, true, "4,000 records read  4,000/s  10.0%"},
		{1500 * time.Millisecond, 6000, 0.15, true, "6,000 records read  4,000/s  15.0%"},
		{2 * time.Second, 8000, 0.2, true, "8,000 records read  4,000/s  20.0%  ETA 8s"},
		// Elapsed since the fraction was first known (at 1s): 4s for 0.1.
		{5 * time.Second, 8000, 0.2, true, "8,000 records read  1,600/s  20.0%  ETA 32s"},
		// The rate looks five seconds back: to 5s, 1,000,000 records ago.
		{10 * time.Second, 1008000, 0.6, true, "1,008,000 records read  200,000/s  60.0%  ETA 7s"},
		// Nothing within five seconds: no rate.
		{200 * time.Second, 1012000, 0.9, true, "1,012,000 records read  90.0%  ETA 25s"},
		{4000 * time.Second, 1012345, 0.95, true, "1,012,345 records read  95.0%  ETA 3m55s"},
		{4001 * time.Second, 1012345, 1, true, "1,012,345 records read  0/s  100.0%"},
	} {
		got := m.line(progressSample{at: t0.Add(tt.after), records: tt.records, fraction: tt.fraction, known: tt.known})
		require.Equal(t, tt.want, got, "at %s", tt.after)
	}
}

// TestFormatETA: seconds, minutes and seconds, hours and minutes.
func TestFormatETA(t *testing.T) {
	for d, want := range map[time.Duration]string{
		0: "0s", 400 * time.Millisecond: "0s", 45 * time.Second: "45s", 59600 * time.Millisecond: "1m00s",
		245 * time.Second: "4m05s", 3720 * time.Second: "1h02m", 30 * time.Hour: "30h00m",
	} {
		require.Equal(t, want, formatETA(d), "%s", d)
	}
}

// TestInputFraction: the least part of any source; not known when a
// source does not say, or there is none.
func TestInputFraction(t *testing.T) {
	f, ok := inputFraction([]pipeline.SourceProgress{{ID: "a", Done: 50, Total: 100}, {ID: "b", Done: 1, Total: 4}})
	require.True(t, ok)
	require.Equal(t, 0.25, f)
	_, ok = inputFraction([]pipeline.SourceProgress{{ID: "a", Done: 50, Total: 100}, {ID: "b", Done: 1}})
	require.False(t, ok)
	_, ok = inputFraction(nil)
	require.False(t, ok)
}

// TestProgressWanted: only a bounded run on a terminal, with text logs and
// without --quiet, draws the line.
func TestProgressWanted(t *testing.T) {
	require.True(t, progressWanted(true, true, false, "text"))
	require.True(t, progressWanted(true, true, false, " TEXT "))
	require.False(t, progressWanted(false, true, false, "text"), "unbounded")
	require.False(t, progressWanted(true, false, false, "text"), "not a terminal")
	require.False(t, progressWanted(true, true, true, "text"), "--quiet")
	require.False(t, progressWanted(true, true, false, "json"), "json logs")
}

// TestTerminalFd: a buffer, a regular file and /dev/null are no terminal.
func TestTerminalFd(t *testing.T) {
	_, ok := terminalFd(&bytes.Buffer{})
	require.False(t, ok)
	f, err := os.Create(filepath.Join(t.TempDir(), "log"))
	require.NoError(t, err)
	defer f.Close()
	_, ok = terminalFd(f)
	require.False(t, ok)
	null, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	require.NoError(t, err)
	defer null.Close()
	_, ok = terminalFd(null)
	require.False(t, ok)
	require.Equal(t, 80, terminalWidth(f), "not a terminal: 80 columns")
}

// TestProgressLine: log lines go above the progress line, which is drawn
// again under them; cleared, nothing is left of it.
func TestProgressLine(t *testing.T) {
	var out bytes.Buffer
	l := &progressLine{w: &out}
	_, err := l.Write([]byte("before\n"))
	require.NoError(t, err)
	l.set("10 records read")
	l.set("20 records read")
	_, err = l.Write([]byte("a log line\n"))
	require.NoError(t, err)
	l.clear()
	l.clear()
	_, err = l.Write([]byte("after\n"))
	require.NoError(t, err)
	require.Equal(t, "before\n"+
		"\r10 records read\x1b[K"+
		"\r20 records read\x1b[K"+
		"\r\x1b[Ka log line\n20 records read\x1b[K"+
		"\r\x1b[K"+
		"after\n", out.String())
	require.Equal(t, "12345", fit("12345", 6))
	require.Equal(t, "1234", fit("123456", 5), "one column short of the width")
}

// TestRunWithoutTerminalHasNoProgress: a bounded run whose stderr is not a
// terminal writes no control characters.
func TestRunWithoutTerminalHasNoProgress(t *testing.T) {
	res := execute(t, map[string]string{"EDDY_STATE_DIR": t.TempDir()}, "run", "testdata/ok.yaml")
	require.Equal(t, 0, res.code, res.stderr)
	require.NotContains(t, res.stderr, "\r")
	require.NotContains(t, res.stderr, "\x1b[")
	require.True(t, strings.Contains(res.stderr, "pipeline finished"), res.stderr)
}
