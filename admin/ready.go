package admin

import (
	"fmt"
	"time"

	"github.com/eddy-stream/eddy/pipeline"
)

// Readiness is the JSON answer of GET /readyz (Kubernetes' readiness
// probe, a rollout's gate): whether the run is restored and running and,
// with a bound, still checkpointing.
type Readiness struct {
	Ready bool `json:"ready"`
	// Status is the run's state (starting, restoring, running, stopping,
	// restarting, or how it ended).
	Status string `json:"status"`
	// Reason says why the run is not ready; "" when it is.
	Reason string `json:"reason,omitempty"`
	// LastCheckpoint is when the newest checkpoint (or savepoint) of the
	// run completed; nil before the first, or without a checkpoint block.
	LastCheckpoint *time.Time `json:"last_checkpoint,omitempty"`
	// CheckpointAgeSeconds is how long ago the newest checkpoint
	// completed, or the newest job started if that is later, and
	// MaxCheckpointAgeSeconds the bound; both absent when not checked.
	CheckpointAgeSeconds    *float64 `json:"checkpoint_age_seconds,omitempty"`
	MaxCheckpointAgeSeconds float64  `json:"max_checkpoint_age_seconds,omitempty"`
}

// Ready says whether the run is ready: its job started from its restore
// point and runs (not starting, restoring, restarting after a failure,
// stopping or ended) and, with PipelineOptions.MaxCheckpointAge and a
// checkpoint block, a checkpoint completed within that bound (counted
// from the newest job's start at the earliest, so that a job that just
// started has one bound's time to take its first).
func (p *Pipeline) Ready() Readiness {
	state := p.stateName()
	r := Readiness{Status: state}
	if p.opts.Checkpoints {
		if c := p.opts.Metrics.CheckpointStats().LatestCompleted; c != nil {
			at := c.Triggered.Add(time.Duration(c.DurationMS) * time.Millisecond).UTC()
			r.LastCheckpoint = &at
		}
	}
	if state != pipeline.RunRunning.String() {
		r.Reason = notRunningReason(state)
		return r
	}
	if bound := p.opts.MaxCheckpointAge; bound > 0 && p.opts.Checkpoints {
		since := p.created
		if ns := p.jobStarted.Load(); ns != 0 {
			since = time.Unix(0, ns)
		}
		if r.LastCheckpoint != nil && r.LastCheckpoint.After(since) {
			since = *r.LastCheckpoint
		}
		age := p.now().Sub(since)
		secs := age.Seconds()
		r.CheckpointAgeSeconds, r.MaxCheckpointAgeSeconds = &secs, bound.Seconds()
		if age > bound {
			what := "no checkpoint completed since the job started"
			if r.LastCheckpoint != nil && !r.LastCheckpoint.Before(since) {
				what = "the newest checkpoint completed"
			}
			r.Reason = fmt.Sprintf("checkpoints stall: %s %s ago, more than the bound of %s", what, age.Round(time.Second), bound)
			return r
		}
	}
	r.Ready = true
	return r
}

// stateName returns the run's state; a target that reports its status
// tells restoring apart from running.
func (p *Pipeline) stateName() string {
	if s, ok := p.opts.Target.(statuser); ok {
		return s.Status().State
	}
	return p.opts.Target.State().String()
}

// notRunningReason says why a run in state is not ready.
func notRunningReason(state string) string {
	switch state {
	case pipeline.RunStarting.String():
		return "the run is starting: it opens its checkpoints and starts its job"
	case "restoring":
		return "the job is restoring its state"
	case pipeline.RunRestarting.String():
		return "the job failed and waits to restart"
	case pipeline.RunStopping.String():
		return "the run is stopping"
	}
	return "the run ended: " + state
}
