package cmd

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/coreos/go-systemd/v22/daemon"

	"github.com/eddy-stream/eddy/pipeline"
)

// statusInterval is how often the STATUS= line is brought up to date.
const statusInterval = 2 * time.Second

// service is eddy's side of systemd's service protocol (sd_notify, for
// Type=notify units), for `eddy run` (newService) and `eddy serve`
// (newServeService): it sends READY=1 once what it watches has started,
// STATUS= lines, WATCHDOG=1 while it is healthy, STOPPING=1 when it
// stops, and RELOADING=1 then READY=1 around a reload on SIGHUP. Without
// $NOTIFY_SOCKET nothing is sent, and SIGHUP still reloads.
//
// A reload reads the --env-file again and sets the log level anew (the
// only runner setting that changes live): --log-level, then EDDY_LOG_LEVEL
// set outside the env file, then the env file's, then info. Then what it
// watches reloads what it can (eddy serve looks at its folder).
type service struct {
	logger *slog.Logger
	global *globalOptions
	// notifying: $NOTIFY_SOCKET is set.
	notifying bool
	// watchdog is the service's WatchdogSec ($WATCHDOG_USEC); WATCHDOG=1
	// goes every half of it. 0: no watchdog.
	watchdog time.Duration

	signals chan os.Signal
	quit    chan struct{}
	wg      sync.WaitGroup

	mu sync.Mutex
	// of is what the service reports on; its methods are called with mu
	// held.
	of watched
	// pipe is of for eddy run, nil for eddy serve.
	pipe *pipelineWatch
	// ready: READY=1 was sent.
	ready bool
	// stopping: STOPPING=1 was sent.
	stopping bool
	// status is the last STATUS= sent.
	status string
}

// watched is what a service reports to systemd: eddy run's pipeline
// (pipelineWatch) or eddy serve's folder (folderWatch). The service calls
// its methods with its lock held, from its goroutines and those of the
// run's callbacks.
type watched interface {
	// statusText is the STATUS= line of how it stands now.
	statusText() string
	// readyText is the STATUS= line sent with READY=1.
	readyText() string
	// healthy tells whether the watchdog pings now (watchdogGate).
	healthy() bool
	// stopping tells whether it stops; a stop that no signal asked for
	// (the admin endpoint's) sends STOPPING=1 when the service sees it.
	stopping() bool
	// endText is the STATUS= line sent with STOPPING=1 once it ended.
	endText() string
	// reload reloads what it can after the settings were reloaded
	// (SIGHUP).
	reload()
}

// newService starts eddy run's service: it handles SIGHUP (a reload)
// and, under systemd, watches for a stop signal; close ends it. Call it
// before the run starts, so that a SIGHUP while the pipeline restores
// does not end the process; watch then follows the run.
func newService(logger *slog.Logger, g *globalOptions, checkpointing bool, m *pipeline.Metrics) *service {
	p := &pipelineWatch{checkpointing: checkpointing, metrics: m}
	s := startService(logger, g, p)
	s.pipe = p
	return s
}

// startService starts a service on of: the signal handling, and the
// first STATUS= line.
func startService(logger *slog.Logger, g *globalOptions, of watched) *service {
	s := &service{logger: logger, global: g, notifying: os.Getenv("NOTIFY_SOCKET") != "", of: of,
		signals: make(chan os.Signal, 4), quit: make(chan struct{})}
	d, err := daemon.SdWatchdogEnabled(false)
	if err != nil {
		logger.Warn("systemd watchdog: no pings", "err", err.Error())
	}
	s.watchdog = d
	signal.Notify(s.signals, syscall.SIGHUP)
	if s.notifying {
		// The command's own handler acts on these; this one only tells
		// systemd.
		signal.Notify(s.signals, os.Interrupt, syscall.SIGTERM)
		logger.Debug("telling systemd how eddy stands", "watchdog", s.watchdog)
	}
	s.mu.Lock()
	s.sendLocked("", s.of.statusText())
	s.mu.Unlock()
	s.wg.Go(s.handleSignals)
	return s
}

// watch keeps STATUS= up to date and sends WATCHDOG=1 until close, from
// the state of eddy run's r.
func (s *service) watch(r *pipeline.Runner) {
	s.mu.Lock()
	s.pipe.runner = r
	s.mu.Unlock()
	s.follow()
}

// follow keeps STATUS= up to date and sends WATCHDOG=1 until close.
func (s *service) follow() {
	if s.notifying {
		s.wg.Go(s.loop)
	}
}

// jobStarted records that the job of an attempt of eddy run started
// (OnStart).
func (s *service) jobStarted(attempt int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pipe.started = attempt
}

// jobRunning sends READY=1 once the job of an attempt of eddy run opened
// every task (OnRunning): its state restored, its sources open.
func (s *service) jobRunning(attempt int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pipe.running = attempt
	s.readyLocked()
}

// readyWhen sends READY=1 once started returns true, on a goroutine of
// the service; started must return (false) before close, when the
// command stops.
func (s *service) readyWhen(started func() bool) {
	s.wg.Go(func() {
		if started() {
			s.mu.Lock()
			defer s.mu.Unlock()
			s.readyLocked()
		}
	})
}

// readyLocked sends READY=1, unless a stop came first (systemd is told
// STOPPING=1 already); s.mu is held.
func (s *service) readyLocked() {
	if s.stopping {
		return
	}
	s.ready = true
	s.sendLocked("READY=1", s.of.readyText())
}

// close ends the signal handling and the watch, and sends STOPPING=1 with
// the state it ended in.
func (s *service) close() {
	close(s.quit)
	s.wg.Wait()
	signal.Stop(s.signals)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stopping = true
	s.sendLocked("STOPPING=1", s.of.endText())
}

// handleSignals reloads on SIGHUP and sends STOPPING=1 on the first SIGINT
// or SIGTERM, until close.
func (s *service) handleSignals() {
	for {
		select {
		case sig := <-s.signals:
			if sig == syscall.SIGHUP {
				s.reload()
			} else {
				s.stopped()
			}
		case <-s.quit:
			return
		}
	}
}

// stopped sends STOPPING=1 once.
func (s *service) stopped() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.stopping {
		s.stopping = true
		s.sendLocked("STOPPING=1", "stopping")
	}
}

// reload reads the env file again, sets the log level anew and reloads
// what the service watches; once that was ready it tells systemd
// RELOADING=1 before and READY=1 after. It holds s.mu throughout, so that
// no STATUS= comes in between.
func (s *service) reload() {
	s.mu.Lock()
	defer s.mu.Unlock()
	ready := s.ready && !s.stopping
	if ready {
		s.sendLocked("RELOADING=1\n"+strings.TrimSuffix(daemon.SdNotifyMonotonicUsec(), "\n"), "reloading")
	}
	old := s.global.level.Level()
	changed, err := s.global.reload()
	switch {
	case err != nil:
		s.logger.Error("reload failed: the settings stay as they were", "err", err.Error())
	default:
		level := s.global.level.Level()
		s.logger.Log(context.Background(), max(old, level), "settings reloaded", "log_level", strings.ToLower(level.String()),
			"env_file", envFilePath(s.global.env))
		if later := notLive(changed); len(later) > 0 {
			s.logger.Warn("the env file changed settings that apply at the next start only", "variables", strings.Join(later, ","))
		}
	}
	s.of.reload()
	if ready {
		s.sendLocked("READY=1", s.of.readyText())
	}
}

// liveVariables are the env file's variables a reload applies.
var liveVariables = []string{envName(keyLogLevel)}

// notLive returns the variables of changed that a reload does not apply.
func notLive(changed []string) []string {
	var out []string
	for _, v := range changed {
		if !slices.Contains(liveVariables, v) {
			out = append(out, v)
		}
	}
	return out
}

// reload reads the --env-file again (if any) and sets the log level from
// the settings; it returns the env file's variables that changed. On an
// error the level stays.
func (o *globalOptions) reload() ([]string, error) {
	var changed []string
	if o.env != nil {
		var err error
		if changed, err = o.env.reread(); err != nil {
			return nil, err
		}
	}
	level, err := o.logLevel()
	if err != nil {
		return changed, err
	}
	o.level.Set(level)
	return changed, nil
}

// envFilePath returns the path of f, or "" without one.
func envFilePath(f *envFile) string {
	if f == nil {
		return ""
	}
	return f.path
}

// loop brings STATUS= up to date every statusInterval, and sends
// WATCHDOG=1 every half WatchdogSec while what the service watches is
// healthy (watchdogGate), until close.
func (s *service) loop() {
	status := time.NewTicker(statusInterval)
	defer status.Stop()
	var ping <-chan time.Time
	gate := watchdogGate{interval: s.watchdog, lastHealthy: time.Now()}
	if s.watchdog > 0 {
		t := time.NewTicker(s.watchdog / 2)
		defer t.Stop()
		ping = t.C
	}
	for {
		select {
		case <-status.C:
			s.refresh()
		case now := <-ping:
			if gate.ping(now, s.healthy()) {
				s.send("WATCHDOG=1")
			}
		case <-s.quit:
			return
		}
	}
}

// healthy tells whether what the service watches is healthy.
func (s *service) healthy() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.of.healthy()
}

// refresh sends the STATUS= line when it changed, and STOPPING=1 once
// what the service watches stops (a stop from the admin endpoint).
func (s *service) refresh() {
	s.mu.Lock()
	defer s.mu.Unlock()
	text := s.of.statusText()
	switch {
	case !s.stopping && s.of.stopping():
		s.stopping = true
		s.sendLocked("STOPPING=1", text)
	case text != s.status:
		s.sendLocked("", text)
	}
}

// pipelineWatch is eddy run's pipeline as its service reports it: READY=1
// once the job opened every task, the STATUS= line of its state and
// latest checkpoint, healthy while it runs with every task open (or
// stops). Its fields are guarded by the service's lock.
type pipelineWatch struct {
	// checkpointing: the pipeline has a checkpoint block (STATUS says
	// which checkpoint it is at).
	checkpointing bool
	metrics       *pipeline.Metrics
	// runner is the run watched, nil before watch.
	runner *pipeline.Runner
	// started and running are the attempts whose job started and opened.
	started, running int
}

// state is the run's state; starting before watch.
func (p *pipelineWatch) state() pipeline.RunState {
	if p.runner == nil {
		return pipeline.RunStarting
	}
	return p.runner.State()
}

func (p *pipelineWatch) statusText() string {
	return statusText(p.state(), p.opened(), p.checkpointing, p.metrics.CheckpointStats()) + p.restartSuffix()
}

// readyText is the STATUS= line of a run whose job opened.
func (p *pipelineWatch) readyText() string {
	return statusText(pipeline.RunRunning, true, p.checkpointing, p.metrics.CheckpointStats()) + p.restartSuffix()
}

// healthy: running with every task of the current job open, or stopping.
func (p *pipelineWatch) healthy() bool {
	switch p.state() {
	case pipeline.RunRunning:
		return p.opened()
	case pipeline.RunStopping:
		return true
	}
	return false
}

func (p *pipelineWatch) stopping() bool { return p.state() == pipeline.RunStopping }

// endText is the state the run ended in; aborted when it could not start.
func (p *pipelineWatch) endText() string {
	if p.runner == nil {
		return pipeline.RunAborted.String()
	}
	return p.runner.State().String()
}

// reload: a run reloads nothing besides the settings.
func (p *pipelineWatch) reload() {}

// opened tells whether the current job opened every task.
func (p *pipelineWatch) opened() bool { return p.started > 0 && p.running == p.started }

// restartSuffix says which restart the current job is.
func (p *pipelineWatch) restartSuffix() string {
	if p.started > 1 {
		return fmt.Sprintf(" (restart %d)", p.started-1)
	}
	return ""
}

// statusText is the STATUS= line of a run in state; opened: the current
// job opened every task.
func statusText(state pipeline.RunState, opened, checkpointing bool, stats pipeline.CheckpointStats) string {
	switch state {
	case pipeline.RunStarting:
		return "starting: restoring state and opening sources"
	case pipeline.RunRestarting:
		return "restarting after a failure"
	case pipeline.RunRunning:
	default:
		return state.String()
	}
	switch {
	case !opened:
		return "starting: restoring state and opening sources"
	case !checkpointing:
		return "running"
	case stats.LatestCompleted != nil:
		return fmt.Sprintf("running, checkpoint %d", stats.LatestCompleted.ID)
	case stats.Restored != nil && stats.Restored.ID != 0:
		return fmt.Sprintf("running, restored checkpoint %d", stats.Restored.ID)
	}
	return "running, no checkpoint yet"
}

// sendLocked sends fields (newline-separated, may be empty) and the
// STATUS= line text in one message; s.mu is held.
func (s *service) sendLocked(fields, text string) {
	s.status = text
	msg := "STATUS=" + text
	if fields != "" {
		msg = fields + "\n" + msg
	}
	s.send(msg)
}

// send sends one message to $NOTIFY_SOCKET; a failure is logged at debug
// level (systemd may be gone while the process stops).
func (s *service) send(msg string) {
	if !s.notifying {
		return
	}
	if _, err := daemon.SdNotify(false, msg); err != nil {
		s.logger.Debug("sd_notify", "err", err.Error())
	}
}

// watchdogGate decides whether a watchdog tick pings systemd: it does
// while the run is healthy (running with every task open, or stopping),
// and for less than interval (WatchdogSec) after it last was: a run that
// restarts, restores or opens its sources for a whole WatchdogSec (a
// restart delay that long, a source that cannot connect, a restore that
// hangs) stops pinging, and systemd kills and restarts the service.
type watchdogGate struct {
	interval    time.Duration
	lastHealthy time.Time
}

// ping records the health at now and tells whether to ping.
func (g *watchdogGate) ping(now time.Time, healthy bool) bool {
	if healthy {
		g.lastHealthy = now
		return true
	}
	return now.Sub(g.lastHealthy) < g.interval
}
