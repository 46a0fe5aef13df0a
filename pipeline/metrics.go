package pipeline

import (
	"maps"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	dto "github.com/prometheus/client_model/go"
)

// Metrics is the one registry of a run's metrics. Components resolve the
// series they update once per subtask (the *For methods) and update them per
// batch, never by label lookup per record.
type Metrics struct {
	Registry *prometheus.Registry

	// The process's: Go runtime (heap, collector, goroutines, the soft
	// memory limit) and OS process (resident memory, CPU, file
	// descriptors), as every Go exporter has them.
	runtime, process prometheus.Collector

	recordsIn    *prometheus.CounterVec
	recordsOut   *prometheus.CounterVec
	written      *prometheus.CounterVec
	invalidUTF8  *prometheus.CounterVec
	recordErrors *prometheus.CounterVec
	lateDropped  *prometheus.CounterVec
	windowsFired *prometheus.CounterVec
	watermark    *prometheus.GaugeVec
	pending      *prometheus.GaugeVec

	// Checkpoints and savepoints (the coordinator's), and the job's
	// restarts (eddy run's restart strategy).
	checkpoints         *prometheus.CounterVec
	checkpointDuration  *prometheus.HistogramVec
	checkpointsInFlight prometheus.Gauge
	lastCheckpointID    prometheus.Gauge
	lastCheckpointTime  prometheus.Gauge
	lastCheckpointBytes prometheus.Gauge
	restarts            prometheus.Counter
	restoredID          prometheus.Gauge
	// Per task, of the newest checkpoint it took.
	startDelay *prometheus.GaugeVec
	alignment  *prometheus.GaugeVec
	syncTime   *prometheus.GaugeVec
	// history is the recent checkpoints (CheckpointStats).
	history checkpointHistory

	// taskTime describes eddy_task_*_seconds_total, by phase.
	taskTime [phaseCount]*prometheus.Desc

	// The run's live numbers that the status reads (Runner.Status); like
	// the series, they outlive the job's restarts. liveMu guards the maps.
	liveMu sync.Mutex
	// tasks are the live numbers of each task subtask, by its head's id
	// and subtask.
	tasks map[seriesKey]*taskStats
	// stateSizes are the bytes of each step subtask's keyed state in the
	// newest completed checkpoint.
	stateSizes map[seriesKey]int64
	// samplers keep the last records of each sink subtask.
	samplers map[seriesKey]*sinkSampler
	// txnCommits and txnAborts count the transactions of the sinks that
	// commit per checkpoint (TransactionStatus).
	txnCommits, txnAborts atomic.Int64
}

// NewMetrics returns a registry with eddy's series registered.
func NewMetrics() *Metrics {
	labels := []string{"id", "subtask"}
	m := &Metrics{
		Registry: prometheus.NewRegistry(),
		runtime:  collectors.NewGoCollector(),
		process:  collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		recordsIn: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "eddy_records_in_total", Help: "Records received by a source, step or sink subtask.",
		}, labels),
		recordsOut: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "eddy_records_out_total", Help: "Records emitted by a source or step subtask.",
		}, labels),
		written: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "eddy_sink_records_written_total",
			Help: "Records a sink subtask wrote out: flushed, or, for a sink that commits per checkpoint, committed.",
		}, labels),
		invalidUTF8: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "eddy_source_invalid_utf8_total",
			Help: "Records a source subtask decoded from JSON whose strings held invalid UTF-8, replaced with U+FFFD.",
		}, labels),
		recordErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "eddy_record_errors_total", Help: "Records that failed in a step, by on_error policy applied.",
		}, append(labels, "policy")),
		lateDropped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "eddy_late_records_dropped_total", Help: "Late records dropped by a window or join step.",
		}, labels),
		windowsFired: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "eddy_windows_fired_total", Help: "Window firings emitted by a window step.",
		}, labels),
	}
	gauge := func(name, help string) prometheus.Gauge {
		return prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: help})
	}
	taskGauge := func(name, help string) *prometheus.GaugeVec {
		return prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help}, labels)
	}
	m.watermark = taskGauge("eddy_watermark_ms", "Current input watermark of a task, epoch ms.")
	m.pending = taskGauge("eddy_source_pending_records",
		"Records a source subtask has yet to read, where the source knows (kafka: high watermark less the next offset, over its partitions).")
	m.checkpoints = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "eddy_checkpoints_total",
		Help: "Checkpoints and savepoints triggered, by kind (checkpoint, savepoint) and how they ended (completed, failed, subsumed).",
	}, []string{"kind", "result"})
	m.checkpointDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "eddy_checkpoint_duration_seconds",
		Help:    "Time from trigger to completion of the completed checkpoints (durable in the store) and savepoints (their file written).",
		Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600},
	}, []string{"kind"})
	m.checkpointsInFlight = gauge("eddy_checkpoints_in_progress",
		"Checkpoints and savepoints triggered and not complete yet.")
	m.lastCheckpointID = gauge("eddy_checkpoint_last_completed_id",
		"Id of the newest completed checkpoint (savepoints included): the one a restart restores.")
	m.lastCheckpointTime = gauge("eddy_checkpoint_last_completed_timestamp_seconds",
		"When the newest checkpoint completed, Unix time.")
	m.lastCheckpointBytes = gauge("eddy_checkpoint_last_state_bytes",
		"Keyed state bytes the newest completed checkpoint wrote (of an incremental one, its deltas' and whole parts').")
	m.restoredID = gauge("eddy_checkpoint_restored_id",
		"Id of the checkpoint or savepoint the job last started from (0: none).")
	m.restarts = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "eddy_restarts_total", Help: "Restarts of the job from its latest checkpoint by the restart strategy.",
	})
	m.startDelay = taskGauge("eddy_checkpoint_start_delay_seconds",
		"Of the newest checkpoint a task took: from the trigger until its first barrier reached the task (a source: until the task took it).")
	m.alignment = taskGauge("eddy_checkpoint_alignment_seconds",
		"Of the newest checkpoint a task took: from its first barrier to its last (next to 0 with one input).")
	m.syncTime = taskGauge("eddy_checkpoint_sync_seconds",
		"Of the newest checkpoint a task took: its synchronous part (sinks flushed and pre-committed, state captured, barrier forwarded).")
	for p, name := range taskTimeMetrics {
		if name != "" {
			m.taskTime[p] = prometheus.NewDesc(name, taskTimeHelp[p], labels, nil)
		}
	}
	m.Registry.MustRegister(m.collectors()...)
	return m
}

// collectors returns every series family of m.
func (m *Metrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.runtime, m.process,
		m.recordsIn, m.recordsOut, m.written, m.invalidUTF8, m.recordErrors, m.lateDropped, m.windowsFired, m.watermark, m.pending,
		m.checkpoints, m.checkpointDuration, m.checkpointsInFlight, m.lastCheckpointID, m.lastCheckpointTime,
		m.lastCheckpointBytes, m.restarts, m.restoredID, m.startDelay, m.alignment, m.syncTime, taskTimeCollector{m}}
}

// TaskCheckpointGauges describe the newest checkpoint a task took.
type TaskCheckpointGauges struct {
	startDelay, alignment, sync prometheus.Gauge
}

// TaskCheckpoint returns the checkpoint gauges of a task (labelled by its
// head id).
func (m *Metrics) TaskCheckpoint(info SubtaskInfo) TaskCheckpointGauges {
	l := m.labels(info)
	return TaskCheckpointGauges{m.startDelay.With(l), m.alignment.With(l), m.syncTime.With(l)}
}

// taken sets the gauges for a checkpoint triggered at triggered whose
// first barrier reached the task at first, the last at start, and whose
// synchronous part ended at end.
func (g TaskCheckpointGauges) taken(triggered, first, start, end time.Time) {
	if !triggered.IsZero() {
		g.startDelay.Set(max(first.Sub(triggered), 0).Seconds())
	}
	g.alignment.Set(start.Sub(first).Seconds())
	g.sync.Set(end.Sub(start).Seconds())
}

// Restarted counts a restart of the job by the restart strategy.
func (m *Metrics) Restarted() { m.restarts.Inc() }

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

// RecordsWritten returns the counter of the records a sink subtask wrote
// out (the runtime's: see stage.flushed).
func (m *Metrics) RecordsWritten(info SubtaskInfo) prometheus.Counter {
	return m.written.With(m.labels(info))
}

// InvalidUTF8 returns the counter of the records a source subtask decoded
// with invalid UTF-8 replaced.
func (m *Metrics) InvalidUTF8(info SubtaskInfo) prometheus.Counter {
	return m.invalidUTF8.With(m.labels(info))
}

// RecordErrors returns the error counter of a subtask for an on_error policy.
func (m *Metrics) RecordErrors(info SubtaskInfo, policy OnError) prometheus.Counter {
	l := m.labels(info)
	l["policy"] = policy.String()
	return m.recordErrors.With(l)
}

// ErrorCounts are the records that failed in one source or step, summed over
// its subtasks, by what its on_error policy did with them.
type ErrorCounts struct {
	// Failed is 1 when a record failed the run (on_error: fail), more
	// when restarts met it again.
	Failed, Skipped, DeadLettered int64
}

// Total returns the records that failed, whatever became of them.
func (c ErrorCounts) Total() int64 { return c.Failed + c.Skipped + c.DeadLettered }

// RecordErrorCounts returns eddy_record_errors_total per source or step id
// (the id label), summed over subtasks; an id without errors is absent.
func (m *Metrics) RecordErrorCounts() map[string]ErrorCounts {
	ch := make(chan prometheus.Metric)
	go func() {
		m.recordErrors.Collect(ch)
		close(ch)
	}()
	out := map[string]ErrorCounts{}
	for metric := range ch {
		var d dto.Metric
		if err := metric.Write(&d); err != nil || d.GetCounter().GetValue() == 0 {
			continue
		}
		var id, policy string
		for _, l := range d.GetLabel() {
			switch l.GetName() {
			case "id":
				id = l.GetValue()
			case "policy":
				policy = l.GetValue()
			}
		}
		n := int64(d.GetCounter().GetValue())
		c := out[id]
		switch policy {
		case OnErrorSkip.String():
			c.Skipped += n
		case OnErrorDeadLetter.String():
			c.DeadLettered += n
		default:
			c.Failed += n
		}
		out[id] = c
	}
	return out
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

// SourcePending returns the gauge of the records a source subtask has yet
// to read (Flink's pendingRecords), for sources that know it.
func (m *Metrics) SourcePending(info SubtaskInfo) prometheus.Gauge {
	return m.pending.With(m.labels(info))
}

// CounterValue returns the current value of a counter, for tests and summaries.
func CounterValue(c prometheus.Counter) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		return 0
	}
	return m.GetCounter().GetValue()
}

// seriesKey identifies the series of one subtask: its id label (a node's
// id; of a task, its head's) and subtask.
type seriesKey struct {
	id      string
	subtask int
}

// taskPhase is what a task subtask spends its time on (Flink's busy,
// backpressured and idle time).
type taskPhase int

const (
	// phaseEnded: no job runs the task (before its start, after its end).
	phaseEnded taskPhase = iota
	// phaseBusy: the task processes input, or anything else that is not
	// waiting.
	phaseBusy
	// phaseBackpressured: the task is blocked sending a batch to a full
	// channel: a receiver is behind.
	phaseBackpressured
	// phaseIdle: the task waits for input (its mailbox, timers included).
	phaseIdle
	phaseCount
)

var taskPhases = []string{"ended", "busy", "backpressured", "idle"}

func (p taskPhase) String() string { return nameOf(p, taskPhases, "taskPhase") }

// The series of the time a task subtask spent by phase, labelled by the
// task's head id and subtask.
var (
	taskTimeMetrics = [phaseCount]string{
		phaseBusy:          "eddy_task_busy_seconds_total",
		phaseBackpressured: "eddy_task_backpressured_seconds_total",
		phaseIdle:          "eddy_task_idle_seconds_total",
	}
	taskTimeHelp = [phaseCount]string{
		phaseBusy: "Time a task subtask spent processing (neither waiting for input nor blocked on output); " +
			"labelled by the task's first step.",
		phaseBackpressured: "Time a task subtask spent blocked sending to a full channel (a receiver was behind: backpressure); " +
			"labelled by the task's first step.",
		phaseIdle: "Time a task subtask spent waiting for input; labelled by the task's first step.",
	}
)

// taskStats are the live numbers of one task subtask that the status and
// the task time series read from other goroutines: the time it spent by
// phase, the phase it is in, and its watermark. The task goroutine updates
// them per batch, not per record, and the writer only when a send blocks.
type taskStats struct {
	mu    sync.Mutex
	phase taskPhase
	since time.Time // when phase began
	spent [phaseCount]time.Duration
	// wm is the task's current watermark (MinWatermark before the first).
	wm atomic.Int64
}

// taskStats returns the live numbers of the task whose head is info's
// node, on info's subtask: the same ones across the job's restarts.
func (m *Metrics) taskStats(info SubtaskInfo) *taskStats {
	m.liveMu.Lock()
	defer m.liveMu.Unlock()
	if m.tasks == nil {
		m.tasks = map[seriesKey]*taskStats{}
	}
	k := seriesKey{info.ID, info.Subtask}
	ts := m.tasks[k]
	if ts == nil {
		ts = &taskStats{}
		ts.wm.Store(MinWatermark)
		m.tasks[k] = ts
	}
	return ts
}

// enter ends the current phase at now, counting its time, and begins p.
func (ts *taskStats) enter(p taskPhase, now time.Time) {
	ts.mu.Lock()
	if ts.phase != phaseEnded {
		ts.spent[ts.phase] += now.Sub(ts.since)
	}
	ts.phase, ts.since = p, now
	ts.mu.Unlock()
}

// read returns the time spent by phase as of now, the current phase's
// included, and the current phase. Safe from any goroutine; the times never
// decrease.
func (ts *taskStats) read(now time.Time) (spent [phaseCount]time.Duration, phase taskPhase) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	spent, phase = ts.spent, ts.phase
	if phase != phaseEnded && now.After(ts.since) {
		spent[phase] += now.Sub(ts.since)
	}
	return spent, phase
}

// taskTimeCollector exports the time of every task subtask by phase.
type taskTimeCollector struct{ m *Metrics }

// Describe sends the descriptors of the task time series.
func (c taskTimeCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.m.taskTime {
		if d != nil {
			ch <- d
		}
	}
}

// Collect sends every task subtask's time by phase as of now.
func (c taskTimeCollector) Collect(ch chan<- prometheus.Metric) {
	now := time.Now()
	for k, ts := range c.m.taskStatsAll() {
		spent, _ := ts.read(now)
		for p, d := range c.m.taskTime {
			if d != nil {
				ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, spent[p].Seconds(), k.id, strconv.Itoa(k.subtask))
			}
		}
	}
}

// taskStatsAll returns a copy of the task subtasks' live numbers by key.
func (m *Metrics) taskStatsAll() map[seriesKey]*taskStats {
	m.liveMu.Lock()
	defer m.liveMu.Unlock()
	return maps.Clone(m.tasks)
}

// stateSizesStored records the state sizes of the newest completed
// checkpoint (nil: it held no keyed state).
func (m *Metrics) stateSizesStored(sizes map[seriesKey]int64) {
	m.liveMu.Lock()
	defer m.liveMu.Unlock()
	m.stateSizes = sizes
}

// stateSizesAll returns the state sizes of the newest completed
// checkpoint; the caller must not change the map.
func (m *Metrics) stateSizesAll() map[seriesKey]int64 {
	m.liveMu.Lock()
	defer m.liveMu.Unlock()
	return m.stateSizes
}

// sinkSampler returns the sampler of a sink subtask: the same one across
// the job's restarts.
func (m *Metrics) sinkSampler(info SubtaskInfo) *sinkSampler {
	m.liveMu.Lock()
	defer m.liveMu.Unlock()
	if m.samplers == nil {
		m.samplers = map[seriesKey]*sinkSampler{}
	}
	k := seriesKey{info.ID, info.Subtask}
	if m.samplers[k] == nil {
		m.samplers[k] = &sinkSampler{}
	}
	return m.samplers[k]
}

// sinkSamplersOf returns the samplers of sink id's subtasks that exist.
func (m *Metrics) sinkSamplersOf(id string, parallelism int) []*sinkSampler {
	m.liveMu.Lock()
	defer m.liveMu.Unlock()
	var out []*sinkSampler
	for i := range parallelism {
		if s := m.samplers[seriesKey{id, i}]; s != nil {
			out = append(out, s)
		}
	}
	return out
}

// txnCommitted counts the transactions of committables that Commit made
// visible; an empty committable is no transaction (kafka without them).
func (m *Metrics) txnCommitted(cs [][]byte) {
	n := int64(0)
	for _, c := range cs {
		if len(c) > 0 {
			n++
		}
	}
	m.txnCommits.Add(n)
}
