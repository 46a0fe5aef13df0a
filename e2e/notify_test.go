//go:build !windows

package e2e_test

import (
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/eddy-stream/eddy/internal/testkit"
)

// notifyPipeline is a checkpointed, unbounded pipeline for the sd_notify
// tests; its sink writes under $EDDY_OUT.
const notifyPipeline = `version: 1
name: notified
checkpoint:
  interval: 50ms
sources:
  - id: numbers
    type: generator
    rate: 2000
    fields:
      i: i
steps:
  - id: by_bucket
    key_by: i % 4
sinks:
  - id: out
    type: file
    path: ${EDDY_OUT}/numbers.jsonl
`

// notifySocket is a unix datagram socket that plays systemd's
// $NOTIFY_SOCKET: it receives the messages of one eddy run, in order, the
// watchdog pings apart.
type notifySocket struct {
	path string
	// msgs are the messages other than WATCHDOG=1.
	msgs chan string
	// pinged is closed on the first WATCHDOG=1.
	pinged chan struct{}
}

// listenNotify opens a notify socket (in a short directory: a socket path
// is limited to about 100 bytes) and reads it until the test ends.
func listenNotify(t *testing.T) *notifySocket {
	t.Helper()
	dir, err := os.MkdirTemp("", "sd")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	s := &notifySocket{path: filepath.Join(dir, "notify"), msgs: make(chan string, 1024), pinged: make(chan struct{})}
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: s.path, Net: "unixgram"})
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	go func() {
		buf := make([]byte, 4096)
		pinged := false
		for {
			n, err := conn.Read(buf)
			if err != nil {
				return
			}
			msg := string(buf[:n])
			if msg == "WATCHDOG=1" {
				if !pinged {
					close(s.pinged)
					pinged = true
				}
				continue
			}
			s.msgs <- msg
		}
	}()
	return s
}

// next returns the next message (watchdog pings aside).
func (s *notifySocket) next(t *testing.T) string {
	t.Helper()
	return testkit.WaitFor(t, s.msgs, "a message on the notify socket")
}

// until returns the first message with a line starting with field (e.g.
// READY=1), and the messages before it.
func (s *notifySocket) until(t *testing.T, field string) (msg string, before []string) {
	t.Helper()
	for {
		msg := s.next(t)
		if hasField(msg, field) {
			return msg, before
		}
		before = append(before, msg)
	}
}

// hasField tells whether an sd_notify message has a line starting with
// field.
func hasField(msg, field string) bool {
	for line := range strings.Lines(msg) {
		if strings.HasPrefix(line, field) {
			return true
		}
	}
	return false
}

// reload sends p SIGHUP and waits for RELOADING=1 (with MONOTONIC_USEC),
// then READY=1 as the next message, and the log line of the reload.
func (s *notifySocket) reload(t *testing.T, p *proc) {
	t.Helper()
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGHUP))
	reloading, _ := s.until(t, "RELOADING=1")
	require.True(t, hasField(reloading, "MONOTONIC_USEC="), "%q", reloading)
	after := s.next(t)
	require.True(t, hasField(after, "READY=1"), "after RELOADING=1 comes READY=1, not %q", after)
	// The log comes through a pipe of its own: wait for it.
	waitForLog(t, p, "settings reloaded")
}

// status returns the STATUS= value of a message.
func status(msg string) string {
	for line := range strings.Lines(msg) {
		if v, ok := strings.CutPrefix(strings.TrimSuffix(line, "\n"), "STATUS="); ok {
			return v
		}
	}
	return ""
}

// waitForLog polls the json log of p until it has a line msg: the line is
// the signal, the poll only looks for it.
func waitForLog(t *testing.T, p *proc, msg string) {
	t.Helper()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for len(p.log.find(msg)) == 0 {
		select {
		case <-tick.C:
		case <-p.done:
			t.Fatalf("eddy exited without logging %q; stderr:\n%s", msg, p.log.text())
		}
	}
}

// TestSystemdNotify runs eddy as a Type=notify service with a watchdog,
// $NOTIFY_SOCKET on a socket the test reads:
//   - STATUS=starting first, then READY=1 once the pipeline runs,
//     WATCHDOG=1 pings, STATUS= with the latest checkpoint;
//   - SIGHUP: RELOADING=1 (with MONOTONIC_USEC) then READY=1, and the log
//     level of the env file, changed from info to debug, applies (though
//     the environment had info too, as systemd's EnvironmentFile= sets
//     it): debug lines follow where there were none;
//   - SIGTERM: STOPPING=1 first, exit 0, the last STATUS=stopped;
//   - a second run on the same state: READY=1 says it restored the
//     checkpoint the first run stopped with;
//   - a run whose sink cannot open never sends READY=1, and ends with
//     STOPPING=1.
func TestSystemdNotify(t *testing.T) {
	work := t.TempDir()
	file := filepath.Join(work, "notified.yaml")
	writeFile(t, file, notifyPipeline)
	envFile := filepath.Join(work, "eddy.env")
	writeFile(t, envFile, "EDDY_LOG_LEVEL=info\n")
	state, out := t.TempDir(), t.TempDir()
	// As under the unit: systemd's EnvironmentFile= read the file too, so
	// the environment has its EDDY_LOG_LEVEL, which a reload still follows.
	env := func(sock *notifySocket, watchdogUsec string) map[string]string {
		return map[string]string{"EDDY_STATE_DIR": state, "EDDY_OUT": out, "EDDY_LOG_FORMAT": "json",
			"EDDY_ENV_FILE": "-" + envFile, "EDDY_LOG_LEVEL": "info", "NOTIFY_SOCKET": sock.path, "WATCHDOG_USEC": watchdogUsec}
	}

	sock := listenNotify(t)
	p := startEddy(t, work, env(sock, "200000"), "run", file)
	require.Equal(t, "STATUS=starting: restoring state and opening sources", sock.next(t))
	ready, before := sock.until(t, "READY=1")
	require.Empty(t, before)
	require.Equal(t, "running, no checkpoint yet", status(ready), "the first run starts from the beginning")
	testkit.WaitFor(t, sock.pinged, "WATCHDOG=1 with WATCHDOG_USEC set")
	sock.until(t, "STATUS=running, checkpoint ")
	require.Empty(t, p.log.find("checkpoint triggered"), "a debug line at level info")

	writeFile(t, envFile, "# changed\nEDDY_LOG_LEVEL=debug\n")
	sock.reload(t, p)
	require.Len(t, p.log.find("settings reloaded"), 1)
	waitForLog(t, p, "checkpoint triggered")

	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	stopping, _ := sock.until(t, "STOPPING=1")
	require.Equal(t, "stopping", status(stopping), "the first STOPPING=1 comes with the signal")
	require.Equal(t, 0, p.wait(t).code, p.log.text())
	sock.until(t, "STATUS=stopped")
	stoppedWith := p.log.lastCompleted()
	require.Positive(t, stoppedWith)

	t.Run("restored", func(t *testing.T) {
		sock := listenNotify(t)
		p := startEddy(t, work, env(sock, ""), "run", file)
		ready, _ := sock.until(t, "READY=1")
		waitForLog(t, p, "restoring from checkpoint")
		id, fresh := p.log.restore()
		require.False(t, fresh)
		require.Equal(t, stoppedWith, id, "restored the checkpoint the first run stopped with")
		// A checkpoint of this run may complete before READY=1 is sent.
		if got, ok := strings.CutPrefix(status(ready), "running, checkpoint "); ok {
			n, err := strconv.ParseInt(got, 10, 64)
			require.NoError(t, err)
			require.Greater(t, n, id)
		} else {
			require.Equal(t, "running, restored checkpoint "+strconv.FormatInt(id, 10), status(ready))
		}
		require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
		require.Equal(t, 0, p.wait(t).code, p.log.text())
	})

	t.Run("sink cannot open", func(t *testing.T) {
		sock := listenNotify(t)
		notDir := filepath.Join(work, "not-a-dir")
		writeFile(t, notDir, "")
		e := env(sock, "")
		e["EDDY_OUT"] = notDir // the sink's path is under a file
		p := startEddy(t, work, e, "run", file)
		require.Equal(t, 1, p.wait(t).code, p.log.text())
		last, before := sock.until(t, "STOPPING=1")
		require.Equal(t, "failed", status(last))
		for _, m := range before {
			require.False(t, hasField(m, "READY=1"), "READY=1 from a run that never ran: %q", before)
		}
	})
}
