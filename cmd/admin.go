package cmd

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"github.com/spf13/viper"

	"github.com/eddy-stream/eddy/admin"
	"github.com/eddy-stream/eddy/pipeline"
)

// The admin endpoint's flags (docs/running.md, "The admin endpoint"); the
// endpoint itself is package admin. `eddy run` writes its address to
// <state dir>/<pipeline>/admin.addr, where `eddy savepoint trigger`
// finds it.

const (
	keyAdminAddr     = "admin-addr"
	defaultAdminAddr = "127.0.0.1:0"
	// keyReadyMaxCheckpointAge bounds the age of the newest checkpoint for
	// GET /readyz.
	keyReadyMaxCheckpointAge = "ready-max-checkpoint-age"
	// adminAddrFile is the file in the pipeline's state dir that holds the
	// admin endpoint's address while the run lasts.
	adminAddrFile = admin.AddrFile
	// savepointsDir is the directory of savepoint files in the pipeline's
	// state dir.
	savepointsDir = admin.SavepointsDir
)

// addAdminFlags adds --admin-addr (default def) and
// --ready-max-checkpoint-age to fs and binds them to v.
func addAdminFlags(fs *pflag.FlagSet, v *viper.Viper, def string) {
	fs.String(keyAdminAddr, def, "address of the admin endpoint (savepoints, /healthz, /readyz, /metrics); port 0 picks a free one, off disables it; a non-loopback address needs "+admin.TokenEnv+" (env "+envName(keyAdminAddr)+")")
	bindFlag(v, fs, keyAdminAddr)
	fs.Duration(keyReadyMaxCheckpointAge, 0, "GET /readyz answers not ready when no checkpoint completed for this long (pipelines with a checkpoint block); 0 turns the check off (env "+envName(keyReadyMaxCheckpointAge)+")")
	bindFlag(v, fs, keyReadyMaxCheckpointAge)
}

// adminSettings are the admin endpoint's settings as read from viper.
type adminSettings struct {
	addr             string
	maxCheckpointAge time.Duration
	token            string
}

// readAdminSettings reads and checks the admin endpoint's settings: an
// address that is neither off nor HOST:PORT, a negative bound, or a
// non-loopback address without EDDY_ADMIN_TOKEN are invalid input.
func readAdminSettings(v *viper.Viper) (adminSettings, error) {
	s := adminSettings{
		addr:             strings.TrimSpace(v.GetString(keyAdminAddr)),
		maxCheckpointAge: v.GetDuration(keyReadyMaxCheckpointAge),
		token:            strings.TrimSpace(os.Getenv(admin.TokenEnv)),
	}
	if s.maxCheckpointAge < 0 {
		return s, usageError("--%s %s: want a positive duration, or 0 (off)", keyReadyMaxCheckpointAge, s.maxCheckpointAge)
	}
	if !adminEnabled(s.addr) {
		return s, nil
	}
	if _, _, err := net.SplitHostPort(s.addr); err != nil {
		return s, usageError("--%s %q: want HOST:PORT (port 0 picks a free one), or off (%v)", keyAdminAddr, s.addr, err)
	}
	if err := admin.CheckAddr(s.addr, s.token); err != nil {
		return s, invalidInput("--%s: %w", keyAdminAddr, err)
	}
	return s, nil
}

// adminEnabled reports whether --admin-addr asks for an endpoint.
func adminEnabled(addr string) bool {
	addr = strings.TrimSpace(addr)
	return addr != "" && !strings.EqualFold(addr, "off")
}

// listenAdmin listens on the admin endpoint's address and serves h.
func listenAdmin(logger *slog.Logger, s adminSettings, h http.Handler) (*admin.Server, error) {
	srv, err := admin.Listen(logger, s.addr, h, s.token)
	if err != nil {
		return nil, fmt.Errorf("%w (choose another --%s or %s, or turn it off with %q)", err, keyAdminAddr, envName(keyAdminAddr), "off")
	}
	return srv, nil
}

// adminServer is the running admin endpoint of `eddy run`.
type adminServer struct {
	srv       *admin.Server
	pipeline  *admin.Pipeline
	unpublish func() // removes the address file; nil when not written
}

// startAdmin listens on the admin endpoint's address and serves it for
// the run r of spec: savepoints go to spDir unless a request names another
// directory, and /metrics and /checkpoints serve m. Called by the run
// before its first job starts; publish then tells `eddy savepoint` where
// it is.
func startAdmin(logger *slog.Logger, s adminSettings, r *pipeline.Runner, m *pipeline.Metrics, spec *pipeline.Spec, spDir string) (*adminServer, error) {
	p := admin.NewPipeline(admin.PipelineOptions{Name: spec.Name, Target: r, Metrics: m, SavepointDir: spDir,
		Checkpoints: spec.Checkpoint != nil, MaxCheckpointAge: s.maxCheckpointAge, Logger: logger})
	srv, err := listenAdmin(logger, s, p.Handler())
	if err != nil {
		return nil, err
	}
	return &adminServer{srv: srv, pipeline: p}, nil
}

// jobStarted tells readiness that a job started (the runner's OnStart).
func (a *adminServer) jobStarted() { a.pipeline.JobStarted() }

// publish writes the endpoint's address to path, where `eddy savepoint
// trigger` looks for it; close removes it. The run calls it once its first
// job started, so that a request it lets in finds a job.
func (a *adminServer) publish(path string) error {
	unpublish, err := admin.PublishAddr(path, a.srv.Addr())
	if err != nil {
		return err
	}
	a.unpublish = unpublish
	return nil
}

// close removes the address file, then shuts the server down, waiting for
// the requests in flight. Called by the run once its job ended.
func (a *adminServer) close(ctx context.Context) error {
	if a.unpublish != nil {
		a.unpublish()
	}
	return a.srv.Close(ctx)
}

// adminEndpointList lists the admin endpoint's requests, each line
// indented by indent.
func adminEndpointList(indent string) string { return admin.EndpointList(indent) }
