package cmd

import (
	"context"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"github.com/spf13/viper"

	"github.com/eddy-stream/eddy/admin"
	"github.com/eddy-stream/eddy/internal/memlimit"
)

const (
	keyDataDir = "data-dir"
	// defaultServeAdminAddr is a fixed port, so that the REST interface
	// has a known address.
	defaultServeAdminAddr = "127.0.0.1:9249"
)

// serveOptions are the flags of `eddy serve`. Its settings have a viper
// of their own: viper binds a setting to one flag, and run's --state-dir
// and --admin-addr (whose default differs) are bound to the global one.
type serveOptions struct {
	global *globalOptions
	v      *viper.Viper
	dir    string
	poll   time.Duration
}

// AddFlags adds serve's flags and binds the settings among them to o.v.
func (o *serveOptions) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.dir, "dir", "", "the folder of pipeline files (*.yaml, *.yml) to run; NAME.yaml holds the pipeline named NAME (required)")
	fs.String(keyStateDir, defaultStateDir, "directory for checkpoints and state, a sub-directory per pipeline name (env "+envName(keyStateDir)+")")
	bindFlag(o.v, fs, keyStateDir)
	fs.String(keyDataDir, "", "the folder an uploaded pipeline's files (file sources and sinks) must be in; empty: an upload may name no file (env "+envName(keyDataDir)+")")
	bindFlag(o.v, fs, keyDataDir)
	fs.Int(keyGCPercent, memlimit.DefaultGCPercent, "Go GC percent while running, unless GOGC is set (env "+envName(keyGCPercent)+")")
	bindFlag(o.v, fs, keyGCPercent)
	addAdminFlags(fs, o.v, defaultServeAdminAddr)
	fs.DurationVar(&o.poll, "poll", admin.DefaultPoll, "how often to look at the folder for files added, changed or removed")
}

// newServeCommand returns `eddy serve`.
func newServeCommand(g *globalOptions) *cobra.Command {
	o := &serveOptions{global: g, v: newViper()}
	c := &cobra.Command{
		Use:   "serve --dir DIR",
		Short: "Run every pipeline file of a folder, with a REST interface to manage them",
		Long: `Serve runs every pipeline file (*.yaml, *.yml) of --dir in one process, each
as eddy run would: its own state dir (<state dir>/<name>), checkpoints,
restarts and metrics. A file must hold the pipeline its name names
(orders.yaml: name: orders).

Serve follows the folder (every --poll): a file added starts its pipeline; a
file removed stops it with a savepoint; a file changed replaces it, from a
savepoint of the running one when the new file can restore it (its steps
with state and its committing sinks are still there), and otherwise leaves
the running one alone and reports why. An invalid file, or a pipeline that
fails, is reported and touches no other.

The admin endpoint (--admin-addr, 127.0.0.1:9249 by default) serves
` + admin.ServeEndpointList("  ") + `
With EDDY_ADMIN_TOKEN set, every POST and DELETE needs the header
"Authorization: Bearer $EDDY_ADMIN_TOKEN"; on an address other than a
loopback one serve refuses to start without it (exit 2). An uploaded file
is at most 1 MiB, validated before it is written, and the files it reads
and writes must be in --data-dir (its state.dir, if any, in --state-dir).

SIGINT or SIGTERM stop every pipeline as eddy run does (with a savepoint,
unless its checkpoint.on_sigterm says otherwise); a second signal cancels
them. SIGHUP reads the --env-file again and sets the log level anew, as
for eddy run, and looks at the folder at once. Under systemd (Type=notify:
the environment has NOTIFY_SOCKET) serve reports READY=1 once every
pipeline of the folder started (restored and running, or failed), STATUS=
lines ("3 pipelines: 2 running, 1 failed (orders)"), RELOADING=1 and
READY=1 around a reload, STOPPING=1, and pings the watchdog (WatchdogSec)
while it follows its folder (docs/running.md, "systemd").
Exit codes: 0 stopped, 1 the admin endpoint failed, 2 invalid flags.`,
		Args: exactArgs(0, "no arguments (the folder is --dir)"),
		RunE: func(c *cobra.Command, _ []string) error {
			return o.run(c)
		},
	}
	o.AddFlags(c.Flags())
	_ = c.MarkFlagDirname("dir")
	return c
}

// folder checks that path names a directory and returns it absolute.
func folder(flag, path string) (string, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", usageError("--%s %q: %v", flag, path, err)
	}
	st, err := os.Stat(abs)
	if err != nil {
		return "", invalidInput("--%s: %w", flag, err)
	}
	if !st.IsDir() {
		return "", invalidInput("--%s %s: not a directory", flag, path)
	}
	return abs, nil
}

// run checks the flags, then serves the folder's pipelines until a signal
// stops them.
func (o *serveOptions) run(c *cobra.Command) error {
	logger, err := o.global.newLogger(c.ErrOrStderr())
	if err != nil {
		return err
	}
	if strings.TrimSpace(o.dir) == "" {
		return usageError("eddy serve needs --dir, the folder of pipeline files")
	}
	dir, err := folder("dir", o.dir)
	if err != nil {
		return err
	}
	dataDir := strings.TrimSpace(o.v.GetString(keyDataDir))
	if dataDir != "" {
		if dataDir, err = folder(keyDataDir, dataDir); err != nil {
			return err
		}
	}
	stateDir, err := filepath.Abs(o.v.GetString(keyStateDir))
	if err != nil {
		return usageError("--%s: %v", keyStateDir, err)
	}
	if o.poll <= 0 {
		return usageError("--poll %s: want a positive duration", o.poll)
	}
	adminSet, err := readAdminSettings(o.v)
	if err != nil {
		return err
	}
	memlimit.Apply(logger, o.v.GetInt(keyGCPercent))
	m, err := admin.NewManager(admin.ServeOptions{Dir: dir, StateDir: stateDir, DataDir: dataDir,
		MaxCheckpointAge: adminSet.maxCheckpointAge, Poll: o.poll, Logger: logger})
	if err != nil {
		return invalidInput("%w", err)
	}

	// Install the handler before anything starts, so that no signal kills
	// the process without a graceful stop.
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	svc := newServeService(logger, o.global, m, o.poll)
	defer svc.close()

	if adminEnabled(adminSet.addr) {
		srv, err := listenAdmin(logger, adminSet, m.Handler())
		if err != nil {
			logger.Error("cannot start", "err", err)
			return reported(exitFailure)
		}
		m.SetBaseURL(admin.LocalURL(srv.Addr()))
		defer func() {
			if err := srv.Close(context.WithoutCancel(c.Context())); err != nil {
				logger.Warn("admin endpoint", "err", err.Error())
			}
		}()
	}
	ctx, cancel := context.WithCancel(c.Context())
	defer cancel()
	done := make(chan struct{})
	defer close(done)
	go serveSignals(logger, m, sigs, cancel, done)
	svc.readyWhen(func() bool { return m.WaitStarted(ctx) })
	logger.Info("serving the pipelines of a folder", "dir", dir, "state_dir", stateDir, "data_dir", dataDir)
	m.Run(ctx)
	logger.Info("every pipeline stopped")
	return nil
}

// serveSignals stops every pipeline on the first SIGINT or SIGTERM
// (cancel ends Manager.Run, which stops them) and cancels them on the
// next, until done is closed.
func serveSignals(logger *slog.Logger, m *admin.Manager, sigs <-chan os.Signal, cancel func(), done <-chan struct{}) {
	select {
	case sig := <-sigs:
		logger.Info("stopping every pipeline: sources stop, in-flight records drain, sinks flush; signal again to cancel", "signal", sig.String())
		cancel()
	case <-done:
		return
	}
	select {
	case sig := <-sigs:
		logger.Warn("cancelling every pipeline: records in flight are dropped", "signal", sig.String())
		m.Cancel()
	case <-done:
	}
}
