//go:build !windows

package e2e_test

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/eddy-stream/eddy/internal/testkit"
)

// serveGated writes into the named pipe ${SERVE_OUT}/gate.fifo: its sink's
// open blocks until the test opens the pipe for reading, so its job has
// not opened every task (it is starting) until then.
const serveGated = `version: 1
name: gated
sources:
  - id: numbers
    type: generator
    rate: 100
    fields:
      i: i
sinks:
  - id: out
    type: file
    path: ${SERVE_OUT}/gate.fifo
`

// TestServeSystemdNotify runs eddy serve as a Type=notify service with a
// watchdog, $NOTIFY_SOCKET on a socket the test reads, on a folder of
// three pipelines: steady runs, failing fails at once, gated cannot open
// its sink until the test lets it:
//   - no READY=1 while gated starts, though the others started (a STATUS=
//     line says so); READY=1 once it runs, failing not holding it back and
//     named in its STATUS=, and every pipeline has started by then;
//   - WATCHDOG=1 pings;
//   - SIGHUP: RELOADING=1 (with MONOTONIC_USEC) then READY=1, the env
//     file's log level applies, and the folder is looked at at once (a
//     file added is picked up, though --poll is an hour);
//   - SIGTERM: STOPPING=1 first, exit 0, the last STATUS=stopped.
func TestServeSystemdNotify(t *testing.T) {
	work := t.TempDir()
	dir, state, out := filepath.Join(work, "pipelines"), filepath.Join(work, "state"), filepath.Join(work, "out")
	require.NoError(t, os.Mkdir(dir, 0o755))
	require.NoError(t, os.Mkdir(out, 0o755))
	writeFile(t, filepath.Join(dir, "steady.yaml"), servePipelineText("steady"))
	writeFile(t, filepath.Join(dir, "failing.yaml"), serveFailing)
	writeFile(t, filepath.Join(dir, "gated.yaml"), serveGated)
	fifo := filepath.Join(out, "gate.fifo")
	require.NoError(t, syscall.Mkfifo(fifo, 0o600))
	envFile := filepath.Join(work, "eddy.env")
	writeFile(t, envFile, "EDDY_LOG_LEVEL=info\n")

	sock := listenNotify(t)
	env := map[string]string{"EDDY_STATE_DIR": state, "SERVE_OUT": out, "EDDY_LOG_FORMAT": "json",
		"EDDY_ENV_FILE": "-" + envFile, "EDDY_LOG_LEVEL": "info", "NOTIFY_SOCKET": sock.path, "WATCHDOG_USEC": "200000"}
	// An hour between scans: only the first scan and the reload's look at
	// the folder.
	p := startEddy(t, work, env, "serve", "--dir", dir, "--admin-addr", "127.0.0.1:0", "--poll", "1h")
	addr := waitListening(t, p)
	c := serveClient{t: t, base: "http://" + addr}

	require.Equal(t, "STATUS=starting: reading the pipelines folder", sock.next(t))
	held, before := sock.until(t, "STATUS=3 pipelines: 1 running, 1 starting, 1 failed (failing)")
	for _, m := range append(before, held) {
		require.False(t, hasField(m, "READY=1"), "READY=1 while gated starts: %q", m)
	}
	require.Equal(t, "starting", c.states()["gated"])

	// Let gated's sink open, and read what it writes until it closes.
	read := make(chan error, 1)
	go func() {
		f, err := os.Open(fifo)
		if err == nil {
			_, err = io.Copy(io.Discard, f)
			err = errors.Join(err, f.Close())
		}
		read <- err
	}()
	ready, _ := sock.until(t, "READY=1")
	require.Equal(t, "3 pipelines: 2 running, 1 failed (failing)", status(ready))
	require.Equal(t, map[string]string{"steady": "running", "gated": "running", "failing": "failed"}, c.states(),
		"every pipeline started before READY=1")
	testkit.WaitFor(t, sock.pinged, "WATCHDOG=1 with WATCHDOG_USEC set")
	require.Empty(t, p.log.find("checkpoint triggered"), "a debug line at level info")

	// A reload: the env file's level, and a file added to the folder.
	writeFile(t, envFile, "# changed\nEDDY_LOG_LEVEL=debug\n")
	writeFile(t, filepath.Join(dir, "added.yaml"), servePipelineText("added"))
	sock.reload(t, p)
	waitForLog(t, p, "checkpoint triggered")
	c.waitStates(p, map[string]string{"steady": "running", "gated": "running", "failing": "failed", "added": "running"})

	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	stopping, _ := sock.until(t, "STOPPING=1")
	require.Equal(t, "stopping", status(stopping), "the first STOPPING=1 comes with the signal")
	require.Equal(t, 0, p.wait(t).code, p.log.text())
	last, _ := sock.until(t, "STATUS=stopped")
	require.True(t, hasField(last, "STOPPING=1"), "%q", last)
	require.NoError(t, testkit.WaitFor(t, read, "gated's sink to close the pipe"))
}
