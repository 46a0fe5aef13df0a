package pipeline

import (
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"
)

// TestGroupRestoreStatus: a restore reports the records read from the
// changelogs and those taken from the local copy apart, in the status
// and as counters over the generations; a new generation's restore starts
// from zero in the status.
func TestGroupRestoreStatus(t *testing.T) {
	report := newGroupReport(NewMetrics(), "g", "p")
	run := &GroupRun{report: report}
	run.Generation(GroupGenerationInfo{Generation: 1})
	run.RestoreStarted(8)
	run.RestoreLocal(6, 1000)
	run.RestoreRead(40)
	run.RestoreDone()
	st := report.status().Restore
	require.True(t, st.Done)
	require.Equal(t, 8, st.Partitions)
	require.Equal(t, int64(40), st.Records)
	require.Equal(t, 6, st.LocalPartitions)
	require.Equal(t, int64(1000), st.LocalRecords)

	run.Generation(GroupGenerationInfo{Generation: 2})
	run.RestoreStarted(4)
	run.RestoreLocal(4, 500)
	st = report.status().Restore
	require.False(t, st.Done)
	require.Equal(t, 4, st.LocalPartitions)
	require.Equal(t, int64(500), st.LocalRecords)
	require.Zero(t, st.Records)
	require.Equal(t, 1500.0, counterOf(t, report.restoreLocal))
	require.Equal(t, 40.0, counterOf(t, report.restoreRecords))
}

// counterOf returns a counter's value.
func counterOf(t *testing.T, c interface{ Write(*dto.Metric) error }) float64 {
	var m dto.Metric
	require.NoError(t, c.Write(&m))
	return m.GetCounter().GetValue()
}
