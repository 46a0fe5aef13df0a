package cmd

import (
	"bytes"
	"encoding/json"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/eddy-stream/eddy/admin"
	"github.com/eddy-stream/eddy/checkpoint"
	"github.com/eddy-stream/eddy/pipeline"
)

// savepointPipeline is an unbounded pipeline with a checkpoint block: it
// runs until it is stopped.
const savepointPipeline = `version: 1
name: sp-cmd
checkpoint:
  interval: 1h
sources:
  - id: numbers
    type: generator
    count: 0
    rate: 2000
    fields:
      n: i
steps:
  - id: totals
    key_by: n % 4
    aggregate:
      c: count()
sinks:
  - id: out
    type: file
    path: OUT/
    changelog: upsert
`

// background is an `eddy run` executing on a goroutine of the test.
type background struct {
	done           chan int
	stdout, stderr bytes.Buffer
}

// runInBackground starts `eddy args...` as main would, with the settings
// of the environment cleared; the caller waits with wait.
func runInBackground(t *testing.T, args ...string) *background {
	t.Helper()
	for _, k := range settings {
		t.Setenv(k, "")
	}
	b := &background{done: make(chan int, 1)}
	root := NewRootCommand()
	root.SetArgs(args)
	root.SetIn(strings.NewReader(""))
	root.SetOut(&b.stdout)
	root.SetErr(&b.stderr)
	go func() { b.done <- ExecuteCommand(root) }()
	return b
}

func (b *background) wait(t *testing.T) int {
	t.Helper()
	code := <-b.done
	b.done <- code
	return code
}

// waitForFile polls for path, which the run writes, and fails the test
// when the run ends first.
func (b *background) waitForFile(t *testing.T, path string) {
	t.Helper()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		if _, err := os.Stat(path); err == nil {
			return
		}
		select {
		case code := <-b.done:
			b.done <- code
			t.Fatalf("eddy run ended with %d before %s appeared; stderr:\n%s", code, path, b.stderr.String())
		case <-tick.C:
		}
	}
}

type savepointFixture struct {
	dir, file, state, pipelineDir string
}

func newSavepointFixture(t *testing.T) savepointFixture {
	t.Helper()
	dir := t.TempDir()
	f := savepointFixture{dir: dir, file: filepath.Join(dir, "sp.yaml"), state: filepath.Join(dir, "state")}
	f.pipelineDir = filepath.Join(f.state, "sp-cmd")
	require.NoError(t, os.WriteFile(f.file, []byte(strings.ReplaceAll(savepointPipeline, "OUT", filepath.Join(dir, "out"))), 0o644))
	return f
}

// TestSavepointCommand runs a pipeline, takes savepoints of it through
// `eddy savepoint trigger` and the admin endpoint, lists them, and stops
// it with a savepoint.
func TestSavepointCommand(t *testing.T) {
	f := newSavepointFixture(t)
	run := runInBackground(t, "run", "--log-level", "info", "--state-dir", f.state, f.file)
	addrFile := filepath.Join(f.pipelineDir, adminAddrFile)
	run.waitForFile(t, addrFile)
	b, err := os.ReadFile(addrFile)
	require.NoError(t, err)
	addr := strings.TrimSpace(string(b))
	require.Regexp(t, `^127\.0\.0\.1:\d+$`, addr)

	defaultDir := filepath.Join(f.pipelineDir, savepointsDir)
	other := filepath.Join(f.dir, "elsewhere")
	noCheckpoints := filepath.Join(f.dir, "plain.yaml")
	require.NoError(t, os.WriteFile(noCheckpoints, []byte("version: 1\nname: plain\nsources:\n  - id: s\n    type: generator\n    count: 1\n    fields: {n: i}\nsinks:\n  - id: o\n    type: blackhole\n"), 0o644))

	var paths []string
	tests := []struct {
		name string
		args []string
		env  map[string]string
		code int
		// stdout and stderr are regular expressions the output must match;
		// empty: the output must be empty.
		stdout, stderr string
		// check looks further at stdout.
		check func(t *testing.T, stdout string)
	}{
		{
			name:   "trigger by file",
			args:   []string{"savepoint", "trigger", "--state-dir", f.state, f.file},
			stdout: `^` + quote(defaultDir) + `/savepoint-1-\d{8}T\d{6}Z\.db\n$`,
			check:  func(t *testing.T, out string) { paths = append(paths, strings.TrimSpace(out)) },
		},
		{
			name:   "trigger by name into another directory, the state dir from the environment",
			args:   []string{"savepoint", "trigger", "--pipeline", "sp-cmd", "--dir", other},
			env:    map[string]string{"EDDY_STATE_DIR": f.state},
			stdout: `^` + quote(other) + `/savepoint-2-\d{8}T\d{6}Z\.db\n$`,
			check:  func(t *testing.T, out string) { paths = append(paths, strings.TrimSpace(out)) },
		},
		{
			name:   "list the default directory",
			args:   []string{"savepoint", "list", "--state-dir", f.state, f.file},
			stdout: `(?s)^savepoints of pipeline sp-cmd in ` + quote(defaultDir) + `, newest first:\n\nID\s+TIME\s+PIPELINE\s+FILE HASH\s+PATH\s+STATUS\n1\s+\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z\s+sp-cmd\s+[0-9a-f]{12}\s+` + quote(defaultDir) + `/savepoint-1-\S+\.db\s+ok\n$`,
		},
		{
			name: "list as json",
			args: []string{"savepoint", "list", "-f", "json", "--pipeline", "sp-cmd", "--state-dir", f.state},
			check: func(t *testing.T, out string) {
				var l admin.SavepointList
				require.NoError(t, json.Unmarshal([]byte(out), &l))
				require.Equal(t, "sp-cmd", l.Pipeline)
				require.Equal(t, defaultDir, l.Dir)
				require.Len(t, l.Savepoints, 1)
				row := l.Savepoints[0]
				require.Equal(t, int64(1), row.ID)
				require.Equal(t, paths[0], row.Path)
				require.Equal(t, statusOK, row.Status)
				require.Equal(t, fileHash(t, f.file), row.FileHash)
				require.False(t, row.Final)
				require.Equal(t, fileSize(t, paths[0]), row.Size)
			},
			stdout: `^\{`,
		},
		{
			name:   "checkpoints status of the running pipeline",
			args:   []string{"checkpoints", "status", "--state-dir", f.state, f.file},
			stdout: `^pipeline sp-cmd: running\nstarted without a checkpoint\n\nrecent, newest first:\nID\s+KIND\s+STATUS\s+TRIGGERED\s+DURATION\s+ACKNOWLEDGED\s+STATE\s+ERROR\n2\s+savepoint\s+completed\s+\S+Z\s+\S+s\s+2/2\s+\d+(\.\d)? [KM]?i?B\s*\n1\s+savepoint\s+completed\s.*\n$`,
		},
		{
			name:   "checkpoints status as json",
			args:   []string{"checkpoints", "status", "-f", "json", f.file},
			env:    map[string]string{"EDDY_STATE_DIR": f.state},
			stdout: `^\{`,
			check: func(t *testing.T, out string) {
				var s runStatus
				require.NoError(t, json.Unmarshal([]byte(out), &s))
				require.Equal(t, "sp-cmd", s.Pipeline)
				require.Equal(t, "running", s.Status)
				require.Nil(t, s.Restored)
				require.Empty(t, s.InProgress)
				require.Len(t, s.History, 2)
				for i, r := range s.History {
					require.Equal(t, int64(2-i), r.ID)
					require.Equal(t, "savepoint", r.Kind)
					require.Equal(t, "completed", r.Status)
					require.Equal(t, r.Tasks, r.Acknowledged)
					require.Positive(t, r.StateBytes)
				}
				require.Equal(t, s.History[0], *s.LatestCompleted)
				require.Nil(t, s.LatestFailed)
			},
		},
		{
			name:   "checkpoints status without a running process",
			args:   []string{"checkpoints", "status", "--state-dir", t.TempDir(), f.file},
			code:   1,
			stderr: `^eddy: no running eddy of pipeline "sp-cmd": .*/sp-cmd/admin.addr does not exist`,
		},
		{
			name:   "list a state dir without savepoints",
			args:   []string{"savepoint", "list", "--state-dir", t.TempDir(), f.file},
			stdout: `^no savepoints of pipeline sp-cmd in .*/sp-cmd/savepoints\n$`,
		},
		{
			name:   "trigger without a running process",
			args:   []string{"savepoint", "trigger", "--state-dir", t.TempDir(), f.file},
			code:   1,
			stderr: `^eddy: no running eddy of pipeline "sp-cmd": .*/sp-cmd/admin.addr does not exist \(eddy run writes it while it runs with its admin endpoint on; check the state dir\)\n$`,
		},
		{
			name:   "trigger a pipeline without a checkpoint block",
			args:   []string{"savepoint", "trigger", noCheckpoints},
			code:   2,
			stderr: `^eddy: .*plain.yaml: pipeline "plain" has no checkpoint block, so it takes no savepoints\n`,
		},
		{
			name:   "trigger with a file and a name",
			args:   []string{"savepoint", "trigger", "--pipeline", "sp-cmd", f.file},
			code:   2,
			stderr: `^eddy: eddy savepoint trigger takes a pipeline file or --pipeline NAME, not both\n`,
		},
		{
			name:   "list without a pipeline",
			args:   []string{"savepoint", "list"},
			code:   2,
			stderr: `^eddy: eddy savepoint list takes a pipeline file or --pipeline NAME\n`,
		},
		{
			name:   "list with a path for a name",
			args:   []string{"savepoint", "list", "--pipeline", "../x"},
			code:   2,
			stderr: `^eddy: --pipeline "../x": want the pipeline's name \(its file's name: key\), not a path\n`,
		},
		{
			name:   "list with an unknown format",
			args:   []string{"savepoint", "list", "-f", "yaml", f.file},
			code:   2,
			stderr: `^eddy: --format "yaml": want text or json\n`,
		},
		{
			name:   "list an invalid file",
			args:   []string{"savepoint", "list", "testdata/broken.yaml"},
			code:   2,
			stderr: `^testdata/broken.yaml:7:5: unknown key "colour"`,
		},
		{
			name:   "savepoint without a subcommand prints the help",
			args:   []string{"savepoint"},
			stdout: `eddy savepoint trigger --stop pipeline.yaml`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := execute(t, tt.env, tt.args...)
			require.Equal(t, tt.code, got.code, "stdout:\n%s\nstderr:\n%s", got.stdout, got.stderr)
			for _, o := range []struct{ name, want, got string }{{"stdout", tt.stdout, got.stdout}, {"stderr", tt.stderr, got.stderr}} {
				if o.want == "" {
					require.Empty(t, o.got, o.name)
					continue
				}
				require.Regexp(t, o.want, o.got, o.name)
			}
			if tt.check != nil {
				tt.check(t, got.stdout)
			}
		})
	}
	require.Len(t, paths, 2)
	for i, p := range paths {
		cp, err := checkpoint.OpenSavepoint(p)
		require.NoError(t, err)
		require.Equal(t, int64(i+1), cp.ID())
		require.Equal(t, "sp-cmd", cp.Meta().Pipeline)
		require.NoError(t, cp.Close())
	}

	// The admin endpoint itself.
	base := "http://" + addr
	code, body := httpDo(t, http.MethodGet, base+"/healthz", nil)
	require.Equal(t, http.StatusOK, code)
	require.JSONEq(t, `{"status": "running"}`, body)
	code, body = httpDo(t, http.MethodGet, base+"/metrics", nil)
	require.Equal(t, http.StatusOK, code)
	require.Regexp(t, `(?m)^eddy_records_out_total\{id="numbers",subtask="0"\} [1-9]`, body)
	code, body = httpDo(t, http.MethodGet, base+"/debug/pprof/goroutine?debug=1", nil)
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, "goroutine profile: total")
	code, body = httpDo(t, http.MethodGet, base+"/savepoints", nil)
	require.Equal(t, http.StatusOK, code)
	var l admin.SavepointList
	require.NoError(t, json.Unmarshal([]byte(body), &l))
	require.Len(t, l.Savepoints, 1)
	require.Equal(t, paths[0], l.Savepoints[0].Path)
	code, body = httpDo(t, http.MethodPost, base+"/savepoints", map[string]string{"Origin": "http://example.invalid"})
	require.Equal(t, http.StatusForbidden, code, body)
	code, body = httpDo(t, http.MethodPost, base+"/savepoints?stop=maybe", nil)
	require.Equal(t, http.StatusBadRequest, code, body)
	require.JSONEq(t, `{"error": "stop=\"maybe\": want true or false"}`, body)
	code, _ = httpDo(t, http.MethodDelete, base+"/savepoints", nil)
	require.Equal(t, http.StatusMethodNotAllowed, code)

	// Stop with a savepoint: the run ends, its address file goes.
	r := execute(t, nil, "savepoint", "trigger", "--stop", "--state-dir", f.state, f.file)
	require.Equal(t, 0, r.code, r.stderr)
	final := strings.TrimSpace(r.stdout)
	require.Regexp(t, `^`+quote(defaultDir)+`/savepoint-3-\S+\.db$`, final)
	require.Equal(t, 0, run.wait(t), run.stderr.String())
	stderr := normaliseLog(run.stderr.String())
	require.Contains(t, stderr, `level=INFO msg="stopped with a savepoint" pipeline=sp-cmd checkpoint=3 path=`+final+"\n")
	require.Contains(t, stderr, `msg="pipeline stopped" pipeline=sp-cmd status=stopped`)
	_, err = os.Stat(addrFile)
	require.ErrorIs(t, err, fs.ErrNotExist, "the run removes its address file")
	r = execute(t, nil, "savepoint", "list", "-f", "json", "--state-dir", f.state, f.file)
	require.Equal(t, 0, r.code, r.stderr)
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &l))
	require.Len(t, l.Savepoints, 2)
	require.Equal(t, final, l.Savepoints[0].Path, "newest first")
	require.True(t, l.Savepoints[0].Final)
	r = execute(t, nil, "savepoint", "trigger", "--state-dir", f.state, f.file)
	require.Equal(t, 1, r.code)
	require.Contains(t, r.stderr, "no running eddy of pipeline")

	// The restored run starts from the final savepoint (3), imported into
	// its store as checkpoint 4, then is stopped the same way: ids go on
	// after it.
	state2 := t.TempDir()
	run = runInBackground(t, "run", "--log-level", "info", "--state-dir", state2, "--from-savepoint", final, f.file)
	run.waitForFile(t, filepath.Join(state2, "sp-cmd", adminAddrFile))
	r = execute(t, nil, "checkpoints", "status", "--state-dir", state2, f.file)
	require.Equal(t, 0, r.code, r.stderr)
	require.Regexp(t, `^pipeline sp-cmd: running\nstarted from checkpoint 4 at \S+Z\n\nno checkpoint has ended yet\n$`, r.stdout)
	r = execute(t, nil, "savepoint", "trigger", "--stop", "--state-dir", state2, f.file)
	require.Equal(t, 0, r.code, r.stderr)
	require.Regexp(t, `/savepoint-5-\S+\.db\n$`, r.stdout)
	require.Equal(t, 0, run.wait(t), run.stderr.String())
	require.Contains(t, run.stderr.String(), `msg="restoring from savepoint"`)
}

// TestSavepointCorruptFile: list shows a damaged savepoint file and why,
// and keeps listing the others.
func TestSavepointCorruptFile(t *testing.T) {
	f := newCheckpointFixture(t)
	dir := filepath.Join(f.state, "cp-cmd", savepointsDir)
	require.NoError(t, os.MkdirAll(dir, 0o755))
	good := filepath.Join(dir, "good.db")
	r := execute(t, map[string]string{"EDDY_STATE_DIR": f.state}, "checkpoints", "export", f.file, "latest", good)
	require.Equal(t, 0, r.code, r.stderr)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "junk.db"), []byte("not a savepoint"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("ignored"), 0o644))

	r = execute(t, map[string]string{"EDDY_STATE_DIR": f.state}, "savepoint", "list", f.file)
	require.Equal(t, 0, r.code, r.stderr)
	require.Regexp(t, `(?m)^2\s+\S+\s+cp-cmd\s+[0-9a-f]{12}\s+`+quote(good)+`\s+ok$`, r.stdout)
	require.Regexp(t, `(?m)^-\s+-\s+-\s+-\s+`+quote(filepath.Join(dir, "junk.db"))+`\s+corrupt: open savepoint .*junk.db: `, r.stdout)
	require.NotContains(t, r.stdout, "notes.txt")
}

func quote(s string) string { return regexp.QuoteMeta(s) }

func fileHash(t *testing.T, file string) string {
	t.Helper()
	spec, err := pipeline.LoadFile(pipeline.Default, file)
	require.NoError(t, err)
	return spec.Hash
}

func httpDo(t *testing.T, method, url string, header map[string]string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	require.NoError(t, err)
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer func() { require.NoError(t, resp.Body.Close()) }()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(b)
}

// TestAdminAddrSetting: --admin-addr and EDDY_ADMIN_ADDR turn the admin
// endpoint off, move it, or reject an address.
func TestAdminAddrSetting(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer func() { require.NoError(t, busy.Close()) }()
	tests := []struct {
		name string
		args []string
		env  map[string]string
		code int
		// stderr must match; absent must not be in it.
		stderr, absent string
	}{
		{
			name:   "off from the environment",
			args:   []string{"run", "testdata/ok.yaml"},
			env:    map[string]string{"EDDY_ADMIN_ADDR": "off"},
			absent: "admin endpoint",
		},
		{
			name:   "the flag wins over the environment",
			args:   []string{"run", "--admin-addr", "127.0.0.1:0", "testdata/ok.yaml"},
			env:    map[string]string{"EDDY_ADMIN_ADDR": "off"},
			stderr: `(?m)^level=INFO msg="admin endpoint listening" pipeline=ok addr=127\.0\.0\.1:PORT$`,
		},
		{
			name:   "empty flag",
			args:   []string{"run", "--admin-addr", "", "testdata/ok.yaml"},
			absent: "admin endpoint",
		},
		{
			name:   "not an address",
			args:   []string{"run", "--admin-addr", "8080", "testdata/ok.yaml"},
			code:   2,
			stderr: `^eddy: --admin-addr "8080": want HOST:PORT \(port 0 picks a free one\), or off \(address 8080: missing port in address\)\n`,
		},
		{
			name:   "a port in use",
			args:   []string{"run", "--admin-addr", busy.Addr().String(), "testdata/ok.yaml"},
			code:   1,
			stderr: `level=ERROR msg="cannot start" pipeline=ok err="admin endpoint: listen tcp 127\.0\.0\.1:\d+: bind: address already in use \(choose another --admin-addr or EDDY_ADMIN_ADDR, or turn it off with \\"off\\"\)"`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := execute(t, tt.env, tt.args...)
			require.Equal(t, tt.code, got.code, got.stderr)
			stderr := normaliseLog(got.stderr)
			if tt.stderr != "" {
				require.Regexp(t, tt.stderr, stderr)
			}
			if tt.absent != "" {
				require.NotContains(t, stderr, tt.absent)
			}
		})
	}
}
