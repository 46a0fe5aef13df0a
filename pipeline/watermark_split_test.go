package pipeline

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A split declared at Open holds the watermark back before its first
// record, until its idle timeout passes; an undeclared one counts only from
// its first record.
func TestDeclaredSplitHoldsTheWatermark(t *testing.T) {
	spec := WatermarkSpec{MaxOutOfOrderness: Duration(10 * time.Millisecond), IdleTimeout: Duration(time.Minute)}
	g := newWatermarks(spec)
	g.declare(0)
	g.declare(1)
	now := g.started.Add(time.Second)
	g.observe(0, 1000, now)
	wm, idle := g.current(now)
	require.False(t, idle)
	require.Equal(t, MinWatermark, wm, "split 1 has delivered nothing yet")

	wm, _ = g.current(g.started.Add(time.Minute + time.Millisecond))
	require.Equal(t, int64(1000-10-1), wm, "split 1 went idle after the idle timeout")

	u := newWatermarks(spec)
	u.observe(0, 1000, now)
	wm, _ = u.current(now)
	require.Equal(t, int64(1000-10-1), wm, "an undeclared split does not hold the watermark")
}
