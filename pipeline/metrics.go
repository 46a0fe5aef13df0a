package pipeline

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// Metrics is the one registry of a run's metrics. Components resolve the
// series they update once per subtask (the *For methods) and update them per
// batch, never by label lookup per record.
type Metrics struct {
	Registry *prometheus.Registry

	recordsIn    *prometheus.CounterVec
	recordsOut   *prometheus.CounterVec
	recordErrors *prometheus.CounterVec
	lateDropped  *prometheus.CounterVec
	windowsFired *prometheus.CounterVec
	watermark    *prometheus.GaugeVec
}

// NewMetrics returns a registry with eddy's series registered.
func NewMetrics() *Metrics {
	labels := []string{"id", "subtask"}
	m := &Metrics{
		Registry: prometheus.NewRegistry(),
		recordsIn: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "eddy_records_in_total", Help: "Records received by a source, step or sink subtask.",
		}, labels),
		recordsOut: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "eddy_records_out_total", Help: "Records emitted by a source or step subtask.",
		}, labels),
		recordErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "eddy_record_errors_total", Help: "Records that failed in a step, by on_error policy applied.",
		}, append(labels, "policy")),
		lateDropped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "eddy_late_records_dropped_total", Help: "Late records dropped by a window step.",
		}, labels),
		windowsFired: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "eddy_windows_fired_total", Help: "Window firings emitted by a window step.",
		}, labels),
		watermark: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "eddy_watermark_ms", Help: "Current input watermark of a task, epoch ms.",
		}, labels),
	}
	m.Registry.MustRegister(m.recordsIn, m.recordsOut, m.recordErrors, m.lateDropped, m.windowsFired, m.watermark)
	return m
}

func (m *Metrics) labels(info SubtaskInfo) prometheus.Labels {
	return prometheus.Labels{"id": info.ID, "subtask": strconv.Itoa(info.Subtask)}
}

// RecordsIn returns the records-in counter of a subtask.
func (m *Metrics) RecordsIn(info SubtaskInfo) prometheus.Counter {
	return m.recordsIn.With(m.labels(info))
}

// RecordsOut returns the records-out counter of a subtask.
func (m *Metrics) RecordsOut(info SubtaskInfo) prometheus.Counter {
	return m.recordsOut.With(m.labels(info))
}

// RecordErrors returns the error counter of a subtask for an on_error policy.
func (m *Metrics) RecordErrors(info SubtaskInfo, policy OnError) prometheus.Counter {
	l := m.labels(info)
	l["policy"] = policy.String()
	return m.recordErrors.With(l)
}

// LateDropped returns the late-records-dropped counter of a subtask.
func (m *Metrics) LateDropped(info SubtaskInfo) prometheus.Counter {
	return m.lateDropped.With(m.labels(info))
}

// WindowsFired returns the windows-fired counter of a subtask.
func (m *Metrics) WindowsFired(info SubtaskInfo) prometheus.Counter {
	return m.windowsFired.With(m.labels(info))
}

// Watermark returns the watermark gauge of a task (labelled by its head id).
func (m *Metrics) Watermark(info SubtaskInfo) prometheus.Gauge {
	return m.watermark.With(m.labels(info))
}

// CounterValue returns the current value of a counter, for tests and summaries.
func CounterValue(c prometheus.Counter) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		return 0
	}
	return m.GetCounter().GetValue()
}
