package cmd

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/eddy-stream/eddy/admin"
	"github.com/eddy-stream/eddy/pipeline"
)

// stateTarget is an admin.Target in a given state that takes no savepoints.
type stateTarget struct{ s atomic.Value }

func newStateTarget(s string) *stateTarget {
	t := &stateTarget{}
	t.s.Store(s)
	return t
}

// State returns the RunState whose name the target holds.
func (t *stateTarget) State() pipeline.RunState {
	name := t.s.Load().(string)
	for s := pipeline.RunStarting; s <= pipeline.RunAborted; s++ {
		if s.String() == name {
			return s
		}
	}
	panic("no run state " + name)
}

func (t *stateTarget) TriggerSavepoint(context.Context, string) (pipeline.Savepoint, error) {
	return pipeline.Savepoint{}, errors.New("no savepoints here")
}

func (t *stateTarget) StopWithSavepoint(context.Context, string) error {
	return errors.New("no savepoints here")
}

func (t *stateTarget) FinalSavepoint(context.Context) (pipeline.Savepoint, error) {
	return pipeline.Savepoint{}, errors.New("no savepoints here")
}

// TestRunHelpListsAdminEndpoints: `eddy run --help` lists every request
// of the admin endpoint.
func TestRunHelpListsAdminEndpoints(t *testing.T) {
	help := execute(t, nil, "run", "--help")
	require.Equal(t, 0, help.code, help.stderr)
	for _, e := range admin.Endpoints {
		require.Contains(t, help.stdout, "  "+e.Pattern+" ", "eddy run --help does not list %s", e.Pattern)
	}
	for _, want := range []string{"/healthz", "/readyz", "/metrics", "/checkpoints", "/savepoints", "/debug/pprof/", "EDDY_ADMIN_TOKEN"} {
		require.Contains(t, help.stdout, want)
	}
}

// adminHandler is the admin endpoint of pipeline name run by target.
func adminHandler(t *testing.T, target admin.Target, name string) http.Handler {
	return admin.NewPipeline(admin.PipelineOptions{Name: name, Target: target, Metrics: pipeline.NewMetrics(),
		SavepointDir: t.TempDir(), Logger: slog.Default()}).Handler()
}

func TestProbeAddr(t *testing.T) {
	tests := []struct {
		in, want string
		code     int // of the error; 0: none
	}{
		{in: "127.0.0.1:9249", want: "127.0.0.1:9249"},
		{in: "0.0.0.0:9249", want: "127.0.0.1:9249"},
		{in: ":9249", want: "127.0.0.1:9249"},
		{in: "[::]:9249", want: "[::1]:9249"},
		{in: "eddy.internal:80", want: "eddy.internal:80"},
		{in: "127.0.0.1:0", code: exitInvalid},
		{in: "off", code: exitInvalid},
		{in: "", code: exitInvalid},
		{in: "9249", code: exitInvalid},
		{in: "127.0.0.1:http", code: exitInvalid},
		{in: "127.0.0.1:65536", code: exitInvalid},
	}
	for _, tt := range tests {
		got, err := probeAddr(tt.in)
		require.Equal(t, tt.code, exitCode(err), "%q: %v", tt.in, err)
		require.Equal(t, tt.want, got, tt.in)
	}
}

func TestHealthCommand(t *testing.T) {
	target := newStateTarget("running")
	srv := httptest.NewServer(adminHandler(t, target, "h"))
	defer srv.Close()
	addr := srv.Listener.Addr().String()
	_, port, err := net.SplitHostPort(addr)
	require.NoError(t, err)
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	gone := closed.Addr().String()
	require.NoError(t, closed.Close())

	tests := []struct {
		name  string
		state string
		args  []string
		env   map[string]string
		code  int
		// stdout is exact; stderr a substring.
		stdout, stderr string
	}{
		{name: "running", state: "running", args: []string{"health", "--admin-addr", addr}, stdout: "running\n"},
		{name: "stopping is healthy", state: "stopping", args: []string{"health", "--admin-addr", addr}, stdout: "stopping\n"},
		{name: "starting", state: "starting", args: []string{"health", "--admin-addr", addr}, code: 1,
			stderr: "eddy: unhealthy: the run is starting (GET http://" + addr + "/healthz: 503 Service Unavailable)\n"},
		{name: "restarting", state: "restarting", args: []string{"health", "--admin-addr", addr}, code: 1, stderr: "the run is restarting"},
		{name: "from the environment, all interfaces probed on loopback", state: "running", args: []string{"health"},
			env: map[string]string{"EDDY_ADMIN_ADDR": "0.0.0.0:" + port}, stdout: "running\n"},
		{name: "the flag wins", state: "running", args: []string{"health", "--admin-addr", addr},
			env: map[string]string{"EDDY_ADMIN_ADDR": "off"}, stdout: "running\n"},
		{name: "no run answers", state: "running", args: []string{"health", "--admin-addr", gone}, code: 1,
			stderr: "eddy: unhealthy: GET http://" + gone + "/healthz: "},
		{name: "not an address", state: "running", args: []string{"health", "--admin-addr", addr + "/metrics"}, code: 2,
			stderr: "the port a number"},
		{name: "the default port 0", state: "running", args: []string{"health"}, code: 2,
			stderr: `eddy: --admin-addr "127.0.0.1:0": the run chose its port when it started`},
		{name: "off", state: "running", args: []string{"health"}, env: map[string]string{"EDDY_ADMIN_ADDR": "off"}, code: 2,
			stderr: "the admin endpoint is off"},
		{name: "arguments", state: "running", args: []string{"health", "x"}, code: 2,
			stderr: "eddy: eddy health takes no arguments, got 1 argument(s)\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			target.s.Store(tt.state)
			got := execute(t, tt.env, tt.args...)
			require.Equal(t, tt.code, got.code, got.stderr)
			require.Equal(t, tt.stdout, got.stdout)
			require.Contains(t, got.stderr, tt.stderr)
		})
	}
}
