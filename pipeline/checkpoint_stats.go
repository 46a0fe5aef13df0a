package pipeline

import (
	"cmp"
	"slices"
	"sync"
	"time"
)

// The checkpoints of a run as its metrics (eddy_checkpoints_total, ...)
// and as the recent history that GET /checkpoints of eddy run's admin
// endpoint serves (Flink's checkpoint statistics). The coordinator reports
// each event here, before it logs it; the history outlives the job's
// restarts, as the metrics do.

// checkpointHistorySize is how many ended checkpoints the history keeps.
const checkpointHistorySize = 10

// The kinds and results of checkpoints: the labels of
// eddy_checkpoints_total, and a CheckpointRecord's Kind and Status.
const (
	kindCheckpoint = "checkpoint"
	kindSavepoint  = "savepoint"

	resultInProgress = "in_progress"
	resultCompleted  = "completed"
	resultFailed     = "failed"
	resultSubsumed   = "subsumed"
	// resultAborted: in flight when its job ended (failed, cancelled or
	// stopped). Not counted in eddy_checkpoints_total.
	resultAborted = "aborted"
)

// CheckpointRecord is one checkpoint or savepoint of a run.
type CheckpointRecord struct {
	ID   int64  `json:"id"`
	Kind string `json:"kind"` // checkpoint or savepoint
	// Status is in_progress, completed, failed, subsumed or aborted.
	Status    string    `json:"status"`
	Final     bool      `json:"final,omitempty"`
	Triggered time.Time `json:"triggered"`
	// DurationMS is from the trigger to the end, or until now while in
	// progress.
	DurationMS int64 `json:"duration_ms"`
	// Acknowledged of Tasks tasks took their snapshot.
	Acknowledged int `json:"acknowledged"`
	Tasks        int `json:"tasks"`
	// AlignmentMS is the longest barrier alignment of the tasks that
	// acknowledged: how long one held an input back.
	AlignmentMS int64 `json:"alignment_ms"`
	// StateBytes and DeltaParts are the keyed state written, once every
	// part is.
	StateBytes int64  `json:"state_bytes"`
	DeltaParts int    `json:"delta_parts,omitempty"`
	Error      string `json:"error,omitempty"`
}

// CheckpointRestore is the checkpoint or savepoint a job started from.
type CheckpointRestore struct {
	ID int64     `json:"id"`
	At time.Time `json:"at"`
}

// CheckpointStats are a run's recent checkpoints, newest first.
type CheckpointStats struct {
	// Restored is what the newest job of the run started from, or nil.
	Restored   *CheckpointRestore `json:"restored"`
	InProgress []CheckpointRecord `json:"in_progress"`
	// History holds the last checkpointHistorySize that ended.
	History         []CheckpointRecord `json:"history"`
	LatestCompleted *CheckpointRecord  `json:"latest_completed"`
	LatestFailed    *CheckpointRecord  `json:"latest_failed"`
}

// checkpointHistory is the state behind CheckpointStats.
type checkpointHistory struct {
	mu              sync.Mutex
	inProgress      map[int64]*CheckpointRecord
	ended           []CheckpointRecord // oldest first
	latestCompleted *CheckpointRecord
	latestFailed    *CheckpointRecord
	restored        *CheckpointRestore
}

// initCheckpoints makes every series of eddy_checkpoints_total exist from
// the start, at 0, so that a rate or an alert sees the first failure.
func (m *Metrics) initCheckpoints() {
	for _, r := range []string{resultCompleted, resultFailed, resultSubsumed} {
		m.checkpoints.WithLabelValues(kindCheckpoint, r)
		m.checkpoints.WithLabelValues(kindSavepoint, r)
	}
}

// checkpointTriggered records checkpoint id, of kind, triggered at at
// for tasks tasks.
func (m *Metrics) checkpointTriggered(id int64, kind string, final bool, at time.Time, tasks int) {
	h := &m.history
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.inProgress == nil {
		h.inProgress = map[int64]*CheckpointRecord{}
	}
	h.inProgress[id] = &CheckpointRecord{ID: id, Kind: kind, Status: resultInProgress, Final: final, Triggered: at, Tasks: tasks}
	m.checkpointsInFlight.Set(float64(len(h.inProgress)))
}

// checkpointAcked records a task's acknowledgement of checkpoint id,
// after it aligned its barriers for alignment.
func (m *Metrics) checkpointAcked(id int64, alignment time.Duration) {
	h := &m.history
	h.mu.Lock()
	defer h.mu.Unlock()
	if r := h.inProgress[id]; r != nil {
		r.Acknowledged++
		r.AlignmentMS = max(r.AlignmentMS, alignment.Milliseconds())
	}
}

// checkpointStored records checkpoint id complete in the store at at,
// with the keyed state it wrote: the one a restart restores. A savepoint
// stays in progress until its file is written.
func (m *Metrics) checkpointStored(id int64, at time.Time, stateBytes int64, deltaParts int) {
	m.lastCheckpointID.Set(float64(id))
	m.lastCheckpointTime.Set(float64(at.UnixNano()) / 1e9)
	m.lastCheckpointBytes.Set(float64(stateBytes))
	h := &m.history
	h.mu.Lock()
	defer h.mu.Unlock()
	if r := h.inProgress[id]; r != nil {
		r.StateBytes, r.DeltaParts = stateBytes, deltaParts
	}
}

// checkpointEnded records that checkpoint id ended at at with result
// (completed, failed, subsumed or aborted) and, unless completed, err.
func (m *Metrics) checkpointEnded(id int64, result string, at time.Time, err error) {
	h := &m.history
	h.mu.Lock()
	defer h.mu.Unlock()
	r := h.inProgress[id]
	if r == nil {
		return
	}
	delete(h.inProgress, id)
	m.checkpointsInFlight.Set(float64(len(h.inProgress)))
	d := at.Sub(r.Triggered)
	r.Status, r.DurationMS = result, d.Milliseconds()
	if err != nil {
		r.Error = err.Error()
	}
	switch result {
	case resultCompleted:
		m.checkpointDuration.WithLabelValues(r.Kind).Observe(d.Seconds())
		h.latestCompleted = r
	case resultFailed:
		h.latestFailed = r
	}
	if result != resultAborted {
		m.checkpoints.WithLabelValues(r.Kind, result).Inc()
	}
	h.ended = append(h.ended, *r)
	if len(h.ended) > checkpointHistorySize {
		h.ended = slices.Delete(h.ended, 0, len(h.ended)-checkpointHistorySize)
	}
}

// checkpointRestored records that a job started at at from checkpoint id
// (0: from nothing).
func (m *Metrics) checkpointRestored(id int64, at time.Time) {
	m.restoredID.Set(float64(id))
	h := &m.history
	h.mu.Lock()
	defer h.mu.Unlock()
	h.restored = nil
	if id != 0 {
		h.restored = &CheckpointRestore{ID: id, At: at}
	}
}

// CheckpointStats returns the run's recent checkpoints as of now.
func (m *Metrics) CheckpointStats() CheckpointStats {
	h := &m.history
	h.mu.Lock()
	defer h.mu.Unlock()
	now := time.Now()
	s := CheckpointStats{InProgress: []CheckpointRecord{}, History: make([]CheckpointRecord, 0, len(h.ended))}
	for _, r := range h.inProgress {
		c := *r
		c.DurationMS = now.Sub(c.Triggered).Milliseconds()
		s.InProgress = append(s.InProgress, c)
	}
	slices.SortFunc(s.InProgress, func(a, b CheckpointRecord) int { return cmp.Compare(b.ID, a.ID) })
	for i := len(h.ended) - 1; i >= 0; i-- {
		s.History = append(s.History, h.ended[i])
	}
	if h.latestCompleted != nil {
		c := *h.latestCompleted
		s.LatestCompleted = &c
	}
	if h.latestFailed != nil {
		c := *h.latestFailed
		s.LatestFailed = &c
	}
	if h.restored != nil {
		c := *h.restored
		s.Restored = &c
	}
	return s
}
