package operators_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
)

// An outer interval join's padded rows carry their record's time but come
// out only once the watermark passed the record's close; the join holds
// its output watermark back by its bound (WatermarkHolder), so a tumbling
// window after it counts them instead of dropping them as late. Every
// left record here is unmatched but the even ones: each 1s window holds
// one padded row per odd record and one joined row per even record.
func TestIntervalOuterJoinRowsAreNotLateDownstream(t *testing.T) {
	dir := t.TempDir()
	var left, right []string
	for i := range 40 {
		left = append(left, fmt.Sprintf(`{"k":%d,"ts":%d}`, i, 1000*i))
		if i%2 == 0 {
			right = append(right, fmt.Sprintf(`{"k":%d,"ts":%d}`, i, 1000*i+500))
		}
	}
	reset("hold_windows", "hold_late")
	runPipeline(t, `version: 1
name: hold
sources:
  - id: l
    type: file
    path: `+writeLines(t, dir, "l.jsonl", left...)+`
    event_time: ts
    watermark: {interval: 0}
  - id: r
    type: file
    path: `+writeLines(t, dir, "r.jsonl", right...)+`
    event_time: ts
    watermark: {interval: 0}
steps:
  - id: j
    join:
      left: l
      right: r
      on: {left: k, right: k}
      type: left
      between: {lower: 0s, upper: 5s}
      select: {k: left.k, matched: right != nil}
  - id: per_second
    from: j
    key_by: matched
    window: {type: tumbling, size: 10s}
    late_output: late_rows
    aggregate: {n: count()}
sinks:
  - id: windows
    from: per_second
    type: window_test_collect
    name: hold_windows
  - id: late
    from: late_rows
    type: window_test_collect
    name: hold_late
`)
	require.Empty(t, results("hold_late"), "no join row is late for the window after the join")
	counts := map[string]int64{}
	for _, r := range collectedRecords("hold_windows") {
		counts[fmt.Sprint(r.Fields["matched"])] += r.Fields["n"].(int64)
	}
	require.Equal(t, map[string]int64{"true": 20, "false": 20}, counts)
}
