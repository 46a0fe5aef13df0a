//go:build !windows

package e2e_test

import (
	"net"
	"os"
	"path/filepath"
	"regexp"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestContainerHealthcheck runs eddy the way the Dockerfile sets it up: the
// admin endpoint on every interface (EDDY_ADMIN_ADDR), which needs
// EDDY_ADMIN_TOKEN, and the HEALTHCHECK's `eddy health` reading the same
// variable (reading needs no token). The run's port is
// a free one here instead of the image's fixed one.
func TestContainerHealthcheck(t *testing.T) {
	dockerfile, err := os.ReadFile(filepath.Join(repoRoot, "Dockerfile"))
	require.NoError(t, err)
	env := regexp.MustCompile(`(?m)^\s*EDDY_ADMIN_ADDR=(\S+?)(?: \\)?$`).FindSubmatch(dockerfile)
	require.NotNil(t, env, "the Dockerfile sets no EDDY_ADMIN_ADDR")
	host, port, err := net.SplitHostPort(string(env[1]))
	require.NoError(t, err)
	require.Equal(t, "0.0.0.0", host, "probes and Prometheus reach the container's endpoint only on all interfaces")
	require.Regexp(t, `(?m)^EXPOSE `+port+`$`, string(dockerfile), "the image exposes the admin endpoint's port")
	require.Regexp(t, `(?m)^\s*CMD \["/eddy", "health"\]$`, string(dockerfile), "the HEALTHCHECK runs eddy health")

	runEnv := map[string]string{"EDDY_OUT": t.TempDir(), "EDDY_LOG_FORMAT": "json", "EDDY_STATE_DIR": t.TempDir(),
		"EDDY_ADMIN_ADDR": net.JoinHostPort(host, "0")}
	// On every interface the run needs a token, as the Dockerfile says.
	require.Regexp(t, `(?m)^#.*-e EDDY_ADMIN_TOKEN=`, string(dockerfile), "the Dockerfile shows how to pass the token")
	r := eddy(t, ".", runEnv, "run", "testdata/unbounded.yaml")
	require.Equal(t, 2, r.code, "no token: refused; stderr:\n%s", r.stderr)
	require.Contains(t, r.stderr, "set EDDY_ADMIN_TOKEN to a secret")
	runEnv["EDDY_ADMIN_TOKEN"] = "container-token"
	p := startEddy(t, ".", runEnv, "run", "testdata/unbounded.yaml")
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	var addr string
	for addr == "" {
		if l := p.log.find("admin endpoint listening"); len(l) > 0 {
			addr = l[0].Addr
			break
		}
		select {
		case <-tick.C:
		case <-p.done:
			t.Fatalf("eddy run ended before its admin endpoint listened; stderr:\n%s", p.log.text())
		}
	}
	_, port, err = net.SplitHostPort(addr)
	require.NoError(t, err)

	// As the HEALTHCHECK would, until the run is up: 1 while it starts.
	healthEnv := map[string]string{"EDDY_ADMIN_ADDR": net.JoinHostPort(host, port)}
	for {
		r := eddy(t, ".", healthEnv, "health")
		if r.code == 0 {
			require.Equal(t, "running\n", r.stdout)
			break
		}
		require.Equal(t, 1, r.code, r.stderr)
		require.Contains(t, r.stderr, "the run is starting")
		select {
		case <-tick.C:
		case <-p.done:
			t.Fatalf("eddy run ended before it was healthy; stderr:\n%s", p.log.text())
		}
	}
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	require.Equal(t, 0, p.wait(t).code, p.log.text())
	r = eddy(t, ".", healthEnv, "health")
	require.Equal(t, 1, r.code, "no run answers: unhealthy")
}
