package admin

import (
	"context"
	"time"
)

// Summary is how the pipelines of the folder stand, for those that watch
// eddy serve as a whole: GET /healthz, and the service manager (systemd's
// READY=1, STATUS= and watchdog).
type Summary struct {
	// Scanned is set once a scan read the folder.
	Scanned bool
	// LastScan is when the newest scan ended (also one that could not read
	// the folder); zero before the first.
	LastScan time.Time
	// Closing is set once Run stops every pipeline.
	Closing bool
	// States are the pipelines' states (PipelineRow.State), by name.
	States map[string]string
}

// Summary returns how the pipelines stand now.
func (m *Manager) Summary() Summary {
	m.mu.Lock()
	s := Summary{Scanned: m.scanned, LastScan: m.lastScan, Closing: m.closing, States: map[string]string{}}
	m.mu.Unlock()
	for _, name := range m.names() {
		if e := m.lookup(name); e != nil {
			row, _ := m.row(e)
			s.States[name] = row.State
		}
	}
	return s
}

// Started tells whether a scan read the folder and every pipeline found
// has started: its job restored its state and runs, or it failed (it
// waits to restart, its run ended, it could not start, or its file is
// invalid). One that is still being set up (pending), starting or
// restoring has not; one that fails never holds the others back.
func (s Summary) Started() bool {
	if !s.Scanned {
		return false
	}
	for _, state := range s.States {
		switch state {
		case statePending, "starting", "restoring":
			return false
		}
	}
	return true
}

// WaitStarted waits until every pipeline of the folder started
// (Summary.Started) and returns true, or returns false once ctx ended
// first. It looks at every change of a pipeline, and every
// ServeOptions.Poll for what no change tells of (a job that failed and
// waits to restart).
func (m *Manager) WaitStarted(ctx context.Context) bool {
	tick := time.NewTicker(m.opts.Poll)
	defer tick.Stop()
	for {
		changed := m.Changed()
		if m.Summary().Started() {
			return true
		}
		select {
		case <-changed:
		case <-tick.C:
		case <-ctx.Done():
			return false
		}
	}
}
