package cmd

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/eddy-stream/eddy/admin"
)

// TestServeStatusText: eddy serve's STATUS= line counts the pipelines by
// state, in a fixed order, and names those that failed (three at most).
func TestServeStatusText(t *testing.T) {
	for _, tt := range []struct {
		summary admin.Summary
		want    string
	}{
		{admin.Summary{}, "starting: reading the pipelines folder"},
		{admin.Summary{Scanned: true}, "no pipeline files in the folder"},
		{admin.Summary{Scanned: true, States: map[string]string{"a": "running"}}, "1 pipeline: 1 running"},
		{admin.Summary{Scanned: true, States: map[string]string{"orders": "failed", "a": "running", "b": "running"}},
			"3 pipelines: 2 running, 1 failed (orders)"},
		{admin.Summary{Scanned: true, States: map[string]string{"a": "restoring", "b": "running", "c": "invalid", "d": "pending", "e": "restarting"}},
			"5 pipelines: 1 running, 1 restoring, 1 pending, 1 restarting (e), 1 invalid (c)"},
		{admin.Summary{Scanned: true, States: map[string]string{"e": "failed", "d": "failed", "c": "failed", "b": "failed", "a": "failed", "x": "odd"}},
			"6 pipelines: 5 failed (a, b, c and 2 more), 1 odd"},
		{admin.Summary{Scanned: true, Closing: true, States: map[string]string{"a": "stopping", "b": "stopped"}},
			"stopping: 2 pipelines: 1 stopping, 1 stopped"},
		{admin.Summary{Scanned: true, Closing: true}, "stopping: no pipeline files in the folder"},
	} {
		require.Equal(t, tt.want, serveStatusText(tt.summary), "%+v", tt.summary)
	}
}

// TestScanFresh: serve is healthy while a scan of its folder ended within
// two polls; not before the first.
func TestScanFresh(t *testing.T) {
	t0 := time.Unix(1000, 0)
	require.False(t, scanFresh(time.Time{}, t0, time.Second), "no scan yet")
	require.True(t, scanFresh(t0, t0, time.Second))
	require.True(t, scanFresh(t0, t0.Add(2*time.Second), time.Second))
	require.False(t, scanFresh(t0, t0.Add(2*time.Second+time.Millisecond), time.Second), "no scan for more than two polls")
}
