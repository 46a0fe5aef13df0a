package pipeline

import (
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// What a process of a group run reports (docs/group.md, "Operations"): its
// membership (process id, member id, generation, assignment), the
// rebalances it went through, the restores of keyed state from the
// changelogs, and the purges of consumed repartition records; on /metrics as eddy_group_* series and in the status API as
// the status's "group" object.

// GroupStatus is a group run's part of the status.
type GroupStatus struct {
	// ID is the consumer group; Process this process's id (its
	// transactional id is <id>-<process>).
	ID      string `json:"id"`
	Process string `json:"process"`
	// Member and Generation are the process's member id and the group's
	// generation; "" and 0 before the process joined.
	Member     string `json:"member"`
	Generation int32  `json:"generation"`
	// Rebalances counts the generations this process took part in after
	// its first.
	Rebalances int `json:"rebalances"`
	// Assigned is the partitions of each topic this process reads in the
	// generation.
	Assigned map[string][]int32 `json:"assigned"`
	// Restore is the restore of keyed state of the generation.
	Restore GroupRestore `json:"restore"`
	// Purge counts the purges of consumed repartition records, over the
	// generations.
	Purge GroupPurge `json:"purge"`
}

// GroupPurge counts what the purges of consumed repartition records did.
type GroupPurge struct {
	// Records is the number of records they deleted; Errors the requests
	// that failed.
	Records int64 `json:"records"`
	Errors  int64 `json:"errors"`
}

// GroupRestore is where the restore of a generation's keyed state stands.
type GroupRestore struct {
	// Done is false while the changelogs are read.
	Done bool `json:"done"`
	// Partitions is the number of changelog partitions restored; Records
	// the records read from the changelogs so far.
	Partitions int   `json:"partitions"`
	Records    int64 `json:"records"`
	// Waiting is the number of changelog partitions whose open
	// transactions the restore waits for before it reads them (a process
	// that died holds them until the group's transaction timeout).
	Waiting int `json:"waiting"`
	// LocalPartitions is the number of partitions restored from the
	// process's local copy (and the changelog's records after the copy's
	// offset); LocalRecords the records the copies held.
	LocalPartitions int   `json:"local_partitions"`
	LocalRecords    int64 `json:"local_records"`
	// DurationMS is how long the restore took, or takes so far.
	DurationMS int64 `json:"duration_ms"`
	started    time.Time
}

// groupReport keeps a group run's status and series; its methods are
// safe from any goroutine.
type groupReport struct {
	mu sync.Mutex
	st GroupStatus

	generation     prometheus.Gauge
	rebalances     prometheus.Counter
	assigned       *prometheus.GaugeVec
	restoreRecords prometheus.Counter
	restoreLocal   prometheus.Counter
	restoreSeconds prometheus.Gauge
	purgedRecords  prometheus.Counter
	purgeErrors    prometheus.Counter
	changelogRecs  prometheus.Counter
	changelogBytes prometheus.Counter
}

func newGroupReport(m *Metrics, id, process string) *groupReport {
	r := &groupReport{st: GroupStatus{ID: id, Process: process},
		generation: prometheus.NewGauge(prometheus.GaugeOpts{Name: "eddy_group_generation",
			Help: "The consumer group generation this process of a group run takes part in."}),
		rebalances: prometheus.NewCounter(prometheus.CounterOpts{Name: "eddy_group_rebalances_total",
			Help: "Generations this process of a group run took part in after its first."}),
		assigned: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "eddy_group_assigned_partitions",
			Help: "Partitions of a topic assigned to this process of a group run."}, []string{"topic"}),
		restoreRecords: prometheus.NewCounter(prometheus.CounterOpts{Name: "eddy_group_restore_records_total",
			Help: "Changelog records read to restore keyed state, over the generations."}),
		restoreLocal: prometheus.NewCounter(prometheus.CounterOpts{Name: "eddy_group_restore_local_records_total",
			Help: "Records taken from the process's local copy of the changelogs to restore keyed state, over the generations."}),
		restoreSeconds: prometheus.NewGauge(prometheus.GaugeOpts{Name: "eddy_group_restore_seconds",
			Help: "How long the last restore of keyed state from the changelogs took."}),
		purgedRecords: prometheus.NewCounter(prometheus.CounterOpts{Name: "eddy_group_purged_records_total",
			Help: "Records of the repartition topics this process read and committed that it deleted (DeleteRecords)."}),
		purgeErrors: prometheus.NewCounter(prometheus.CounterOpts{Name: "eddy_group_purge_errors_total",
			Help: "Requests to delete consumed repartition records (or to find the partitions' start first) that failed."}),
		changelogRecs: prometheus.NewCounter(prometheus.CounterOpts{Name: "eddy_group_changelog_records_total",
			Help: "Records (tombstones included) this process committed to the changelogs of keyed state."}),
		changelogBytes: prometheus.NewCounter(prometheus.CounterOpts{Name: "eddy_group_changelog_bytes_total",
			Help: "Bytes of the keys and values of the records this process committed to the changelogs of keyed state."}),
	}
	m.Registry.MustRegister(r.generation, r.rebalances, r.assigned, r.restoreRecords, r.restoreLocal, r.restoreSeconds, r.purgedRecords, r.purgeErrors,
		r.changelogRecs, r.changelogBytes)
	return r
}

// GroupGenerationInfo is a generation as the connector reports it.
type GroupGenerationInfo struct {
	Member     string
	Generation int32
	Assigned   map[string][]int32
}

// Generation reports that the process takes part in a new generation.
func (r *GroupRun) Generation(info GroupGenerationInfo) {
	if r.report == nil {
		return
	}
	g := r.report
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.st.Generation != 0 {
		g.st.Rebalances++
		g.rebalances.Inc()
	}
	g.st.Member, g.st.Generation = info.Member, info.Generation
	g.generation.Set(float64(info.Generation))
	for t := range g.st.Assigned {
		g.assigned.DeleteLabelValues(t)
	}
	g.st.Assigned = map[string][]int32{}
	for t, ps := range info.Assigned {
		g.st.Assigned[t] = slices.Clone(ps)
		g.assigned.WithLabelValues(t).Set(float64(len(ps)))
	}
	g.st.Restore = GroupRestore{}
}

// RestoreStarted reports that the generation restores partitions
// changelog partitions.
func (r *GroupRun) RestoreStarted(partitions int) {
	if r.report == nil {
		return
	}
	r.report.mu.Lock()
	defer r.report.mu.Unlock()
	r.report.st.Restore = GroupRestore{Partitions: partitions, started: time.Now()}
}

// RestoreWaiting reports that the restore waits for the transactions
// open on n changelog partitions to end (0: it waits no more).
func (r *GroupRun) RestoreWaiting(n int) {
	if r.report == nil {
		return
	}
	r.report.mu.Lock()
	defer r.report.mu.Unlock()
	r.report.st.Restore.Waiting = n
}

// RestoreRead reports n more changelog records read. Safe from the
// restore's goroutines.
func (r *GroupRun) RestoreRead(n int) {
	if r.report == nil || n == 0 {
		return
	}
	r.report.mu.Lock()
	defer r.report.mu.Unlock()
	r.report.st.Restore.Records += int64(n)
	r.report.restoreRecords.Add(float64(n))
}

// RestoreLocal reports that the restore starts partitions changelog
// partitions from the process's local copy, which holds records records.
func (r *GroupRun) RestoreLocal(partitions, records int) {
	if r.report == nil {
		return
	}
	r.report.mu.Lock()
	defer r.report.mu.Unlock()
	r.report.st.Restore.LocalPartitions = partitions
	r.report.st.Restore.LocalRecords = int64(records)
	r.report.restoreLocal.Add(float64(records))
}

// RestoreDone reports that the generation's keyed state is restored.
func (r *GroupRun) RestoreDone() {
	if r.report == nil {
		return
	}
	g := r.report
	g.mu.Lock()
	defer g.mu.Unlock()
	g.st.Restore.Done = true
	if !g.st.Restore.started.IsZero() {
		d := time.Since(g.st.Restore.started)
		g.st.Restore.DurationMS = d.Milliseconds()
		g.restoreSeconds.Set(d.Seconds())
	}
}

// Purged reports that a purge deleted n records of the repartition
// partitions this process read. Safe from any goroutine.
func (r *GroupRun) Purged(n int64) {
	if r.report == nil || n <= 0 {
		return
	}
	r.report.mu.Lock()
	defer r.report.mu.Unlock()
	r.report.st.Purge.Records += n
	r.report.purgedRecords.Add(float64(n))
}

// PurgeFailed reports that a request of a purge failed. Safe from any
// goroutine.
func (r *GroupRun) PurgeFailed() {
	if r.report == nil {
		return
	}
	r.report.mu.Lock()
	defer r.report.mu.Unlock()
	r.report.st.Purge.Errors++
	r.report.purgeErrors.Inc()
}

// ChangelogWritten reports that a transaction committed records
// changelog records of keyed state, of bytes bytes (keys and values).
func (r *GroupRun) ChangelogWritten(records, bytes int) {
	if r.report == nil || records == 0 {
		return
	}
	r.report.changelogRecs.Add(float64(records))
	r.report.changelogBytes.Add(float64(bytes))
}

// status returns a copy of the group's status.
func (g *groupReport) status() *GroupStatus {
	g.mu.Lock()
	defer g.mu.Unlock()
	st := g.st
	st.Assigned = maps.Clone(g.st.Assigned)
	if !st.Restore.Done && !st.Restore.started.IsZero() {
		st.Restore.DurationMS = time.Since(st.Restore.started).Milliseconds()
	}
	return &st
}
