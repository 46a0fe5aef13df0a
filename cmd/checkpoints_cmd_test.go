package cmd

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/eddy-stream/eddy/checkpoint"
	"github.com/eddy-stream/eddy/checkpoint/checkpointtest"
)

// checkpointPipeline is a bounded pipeline with a checkpoint block: a run
// takes one checkpoint, the final one at the end of the input.
const checkpointPipeline = `version: 1
name: cp-cmd
checkpoint:
  interval: 1h
  retain: 3
sources:
  - id: numbers
    type: generator
    count: 100
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

// checkpointFixture is a pipeline file and a state dir with checkpoints 1
// and 2 of it: the first run's final checkpoint, and the final checkpoint of
// a second run that restored it.
type checkpointFixture struct {
	dir, file, state, out string
}

func newCheckpointFixture(t *testing.T) checkpointFixture {
	t.Helper()
	dir := t.TempDir()
	f := checkpointFixture{dir: dir, file: filepath.Join(dir, "cp.yaml"), state: filepath.Join(dir, "state"), out: filepath.Join(dir, "out")}
	require.NoError(t, os.WriteFile(f.file, []byte(strings.ReplaceAll(checkpointPipeline, "OUT", f.out)), 0o644))
	for range 2 {
		r := execute(t, map[string]string{"EDDY_STATE_DIR": f.state, "EDDY_LOG_LEVEL": "error"}, "run", f.file)
		require.Equal(t, 0, r.code, r.stderr)
	}
	return f
}

func (f checkpointFixture) storePath() string {
	return filepath.Join(f.state, "cp-cmd", checkpoint.FileName)
}

// committed returns the lines of the final part files.
func (f checkpointFixture) committed(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(f.out, "part-*"))
	require.NoError(t, err)
	var lines []string
	for _, p := range files {
		b, err := os.ReadFile(p)
		require.NoError(t, err)
		lines = append(lines, strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")...)
	}
	return lines
}

var listLine = regexp.MustCompile(`(?m)^(\d+)\s+(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z|-)\s+(\d+(\.\d)? [KMG]?i?B)\s+(\d+)\s+(-|[\d,]+)\s+(ok|corrupt: .*|incomplete)$`)

func TestCheckpointsCommand(t *testing.T) {
	f := newCheckpointFixture(t)
	env := map[string]string{"EDDY_STATE_DIR": f.state}
	empty := t.TempDir()
	noCheckpoints := filepath.Join(f.dir, "plain.yaml")
	require.NoError(t, os.WriteFile(noCheckpoints, []byte("version: 1\nname: plain\nsources:\n  - id: s\n    type: generator\n    count: 1\n    fields: {n: i}\nsinks:\n  - id: o\n    type: blackhole\n"), 0o644))
	existing := filepath.Join(f.dir, "existing.db")
	require.NoError(t, os.WriteFile(existing, []byte("x"), 0o644))

	tests := []struct {
		name string
		args []string
		env  map[string]string
		code int
		// stdout and stderr are regular expressions the output must match;
		// empty: the output must be empty.
		stdout, stderr string
	}{
		{
			name:   "list, state dir from the environment",
			args:   []string{"checkpoints", "list", f.file},
			env:    env,
			stdout: `(?s)^checkpoints of pipeline cp-cmd in .*/state/cp-cmd/checkpoints.db, newest first:\n\nID\s+COMPLETED\s+SIZE\s+PARTS\s+DELTA ON\s+STATUS\n2 .* ok\n1 .* ok\n\neddy run restores checkpoint 2\.\n$`,
		},
		{
			name:   "list, state dir from the flag, which wins",
			args:   []string{"checkpoints", "list", "--state-dir", f.state, f.file},
			env:    map[string]string{"EDDY_STATE_DIR": empty},
			stdout: `(?m)^eddy run restores checkpoint 2\.$`,
		},
		{
			name:   "list without checkpoints",
			args:   []string{"checkpoints", "list", f.file},
			env:    map[string]string{"EDDY_STATE_DIR": empty},
			stdout: `^no checkpoints of pipeline cp-cmd in .*/cp-cmd/checkpoints.db: eddy run starts from the beginning\n$`,
		},
		{
			name:   "list as json",
			args:   []string{"checkpoints", "list", "--format", "json", f.file},
			env:    env,
			stdout: `(?s)^\{\n  "pipeline": "cp-cmd",\n  "store": ".*",\n  "restore": 2,\n  "checkpoints": \[\n    \{\n      "id": 2,.*"status": "ok"\n    \},\n    \{\n      "id": 1,.*\]\n\}\n$`,
		},
		{
			name:   "list with an unknown format",
			args:   []string{"checkpoints", "list", "-f", "yaml", f.file},
			env:    env,
			code:   2,
			stderr: `^eddy: --format "yaml": want text or json\nRun 'eddy checkpoints list --help' for usage\.\n$`,
		},
		{
			name:   "list a pipeline without a checkpoint block",
			args:   []string{"checkpoints", "list", noCheckpoints},
			env:    env,
			code:   2,
			stderr: `^eddy: .*plain.yaml: pipeline "plain" has no checkpoint block, so eddy run takes no checkpoints of it\n`,
		},
		{
			name:   "list an invalid file",
			args:   []string{"checkpoints", "list", "testdata/broken.yaml"},
			env:    env,
			code:   2,
			stderr: `^testdata/broken.yaml:7:5: unknown key "colour"`,
		},
		{
			name:   "list two files",
			args:   []string{"checkpoints", "list", f.file, f.file},
			code:   2,
			stderr: `^eddy: eddy checkpoints list takes one pipeline file, got 2 argument\(s\)\n`,
		},
		{
			name:   "checkpoints without a subcommand prints the help",
			args:   []string{"checkpoints"},
			stdout: `eddy checkpoints export pipeline.yaml 42 sp.db`,
		},
		{
			name:   "export a checkpoint that does not exist",
			args:   []string{"checkpoints", "export", f.file, "7", filepath.Join(f.dir, "sp7.db")},
			env:    env,
			code:   2,
			stderr: `^eddy: pipeline "cp-cmd" has no completed checkpoint 7 in .*/state/cp-cmd \(eddy checkpoints list .* shows them\)\n`,
		},
		{
			name:   "export with a bad id",
			args:   []string{"checkpoints", "export", f.file, "0", filepath.Join(f.dir, "sp.db")},
			env:    env,
			code:   2,
			stderr: `^eddy: checkpoint id "0": want a positive number .* or latest\n`,
		},
		{
			name:   "export over an existing file",
			args:   []string{"checkpoints", "export", f.file, "1", existing},
			env:    env,
			code:   2,
			stderr: `^eddy: .*/existing.db exists: not overwriting it`,
		},
		{
			name:   "export without checkpoints",
			args:   []string{"checkpoints", "export", f.file, "latest", filepath.Join(f.dir, "sp.db")},
			env:    map[string]string{"EDDY_STATE_DIR": empty},
			code:   2,
			stderr: `^eddy: pipeline "cp-cmd" has no checkpoints in `,
		},
		{
			name:   "export with missing arguments",
			args:   []string{"checkpoints", "export", f.file, "1"},
			code:   2,
			stderr: `^eddy: eddy checkpoints export takes a pipeline file, a checkpoint id and a savepoint path, got 2 argument\(s\)\n`,
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
		})
	}
	_, err := os.Stat(filepath.Join(empty, "cp-cmd"))
	require.ErrorIs(t, err, os.ErrNotExist, "listing an empty state dir created the pipeline's dir")
}

func TestCheckpointsListRows(t *testing.T) {
	f := newCheckpointFixture(t)
	r := execute(t, map[string]string{"EDDY_STATE_DIR": f.state}, "checkpoints", "list", f.file)
	require.Equal(t, 0, r.code, r.stderr)
	rows := listLine.FindAllStringSubmatch(r.stdout, -1)
	require.Len(t, rows, 2, r.stdout)
	for i, row := range rows {
		require.Equal(t, []string{"2", "1"}[i], row[1])
		require.Equal(t, "-", row[6], "a full checkpoint")
		require.Equal(t, "ok", row[7])
		// The generator's position, the aggregate's state, the sink's
		// committable.
		require.Equal(t, "3", row[5], r.stdout)
	}

	r = execute(t, map[string]string{"EDDY_STATE_DIR": f.state}, "checkpoints", "list", "-f", "json", f.file)
	require.Equal(t, 0, r.code, r.stderr)
	var l checkpointList
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &l))
	require.Equal(t, "cp-cmd", l.Pipeline)
	require.Equal(t, f.storePath(), l.Store)
	require.Len(t, l.Checkpoints, 2)
	for _, c := range l.Checkpoints {
		require.NotNil(t, c.Completed)
		require.False(t, c.Completed.Before(c.Triggered))
		require.Positive(t, c.Size)
	}
}

// With checkpoint.incremental, list shows which checkpoint each builds on;
// retention keeps those bases, every listed checkpoint verifies, and the
// latest restores and exports whole.
func TestCheckpointsListDeltas(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "cp.yaml")
	// 40 keys, about 8 records between two checkpoints: a delta holds a
	// fifth of the keys, and a checkpoint is full again when its chain's
	// deltas add up to the full one's size, every fifth or so. The
	// snapshot after a full one is a delta on it, unless it is taken
	// before the full one's completion reached the task, as the final
	// checkpoint, triggered when the input ends, may be: of the three
	// retained, one is a delta.
	text := strings.Replace(strings.ReplaceAll(checkpointPipeline, "OUT", filepath.Join(dir, "out")),
		"  interval: 1h\n  retain: 3\n", "  interval: 20ms\n  retain: 3\n  incremental: true\n", 1)
	text = strings.Replace(text, "    count: 100\n", "    count: 200\n    rate: 400\n", 1)
	text = strings.Replace(text, "    key_by: n % 4\n", "    key_by: n % 40\n", 1)
	text += "state:\n  backend: bbolt\n"
	require.NoError(t, os.WriteFile(file, []byte(text), 0o644))
	env := map[string]string{"EDDY_STATE_DIR": filepath.Join(dir, "state"), "EDDY_LOG_LEVEL": "error"}
	r := execute(t, env, "run", file)
	require.Equal(t, 0, r.code, r.stderr)

	r = execute(t, env, "checkpoints", "list", "-f", "json", file)
	require.Equal(t, 0, r.code, r.stderr)
	var l checkpointList
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &l))
	ids := map[int64]bool{}
	for _, c := range l.Checkpoints {
		require.Equal(t, statusOK, c.Status, "checkpoint %d: %s", c.ID, c.Error)
		ids[c.ID] = true
	}
	require.NotNil(t, l.Restore)
	deltas := 0
	for _, c := range l.Checkpoints {
		for _, b := range c.Bases {
			require.True(t, ids[b], "checkpoint %d builds on %d, which retention deleted", c.ID, b)
			require.Less(t, b, c.ID)
		}
		if len(c.Bases) > 0 {
			deltas++
		}
	}
	require.Positive(t, deltas, r.stdout)

	r = execute(t, env, "checkpoints", "list", file)
	require.Equal(t, 0, r.code, r.stderr)
	rows := listLine.FindAllStringSubmatch(r.stdout, -1)
	require.Len(t, rows, len(l.Checkpoints), r.stdout)
	for i, row := range rows {
		want := "-"
		if bases := l.Checkpoints[i].Bases; len(bases) > 0 {
			want = strconv.FormatInt(bases[0], 10)
		}
		require.Equal(t, want, row[6], r.stdout)
	}

	// The savepoint of the latest is whole, and holds the counts.
	sp := filepath.Join(dir, "latest.savepoint")
	r = execute(t, env, "checkpoints", "export", file, "latest", sp)
	require.Equal(t, 0, r.code, r.stderr)
	cp, err := checkpoint.OpenSavepoint(sp)
	require.NoError(t, err)
	defer cp.Close()
	for _, p := range cp.Parts() {
		require.Zero(t, p.Base, "part %s of the savepoint", p.Name)
	}
	r = execute(t, env, "state", "inspect", sp, "--step", "totals")
	require.Equal(t, 0, r.code, r.stderr)
	// Each of the 40 keys counted 5 of the 200 records: its row holds 5.
	require.Equal(t, 40, strings.Count(r.stdout, `"value":[1,5,[1,5]]`), r.stdout)
}

// TestCheckpointsExportRestore: a savepoint exported from the store
// restores with run --from-savepoint, with another state dir.
func TestCheckpointsExportRestore(t *testing.T) {
	f := newCheckpointFixture(t)
	before := f.committed(t)
	require.Len(t, before, 100)
	sp := filepath.Join(f.dir, "sp.db")
	r := execute(t, map[string]string{"EDDY_STATE_DIR": f.state}, "checkpoints", "export", f.file, "latest", sp)
	require.Equal(t, 0, r.code, r.stderr)
	require.Equal(t, "exported checkpoint 2 of pipeline cp-cmd to "+sp+" ("+humanBytes(fileSize(t, sp))+")\n"+
		"restore it with: eddy run --from-savepoint "+sp+" "+f.file+"\n", r.stdout)
	require.Empty(t, r.stderr)

	cp, err := checkpoint.OpenSavepoint(sp)
	require.NoError(t, err)
	require.Equal(t, int64(2), cp.ID())
	require.NoError(t, cp.Close())

	// The restored sources are at the end of their input: nothing new.
	r = execute(t, map[string]string{"EDDY_STATE_DIR": t.TempDir(), "EDDY_LOG_FORMAT": "json"}, "run", "--from-savepoint", sp, f.file)
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stderr, `"msg":"restoring from savepoint"`)
	require.Contains(t, r.stderr, `"checkpoint":2`)
	require.ElementsMatch(t, before, f.committed(t))

	r = execute(t, map[string]string{"EDDY_STATE_DIR": f.state}, "checkpoints", "export", f.file, "1", filepath.Join(f.dir, "sp1.db"))
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "exported checkpoint 1 of pipeline cp-cmd")
}

// TestCheckpointsCorrupt: list shows a corrupt checkpoint and which one
// run restores; export refuses it, and latest falls back past it.
func TestCheckpointsCorrupt(t *testing.T) {
	f := newCheckpointFixture(t)
	checkpointtest.CorruptLargestPart(t, f.storePath(), 2)
	env := map[string]string{"EDDY_STATE_DIR": f.state}

	r := execute(t, env, "checkpoints", "list", f.file)
	require.Equal(t, 0, r.code, r.stderr)
	require.Regexp(t, `(?m)^2\s+-\s+.*corrupt: checkpoint 2 in .*: corrupt checkpoint: part "[^"]+": checksum \w+, stored \w+$`, r.stdout)
	require.Regexp(t, `(?m)^1\s+\d{4}-.*ok$`, r.stdout)
	require.Contains(t, r.stdout, "eddy run restores checkpoint 1.\n")

	r = execute(t, env, "checkpoints", "export", f.file, "2", filepath.Join(f.dir, "sp2.db"))
	require.Equal(t, 1, r.code, r.stdout)
	require.Regexp(t, `^eddy: export checkpoint 2 of .* to savepoint .*: corrupt checkpoint: part "[^"]+": checksum`, r.stderr)
	_, err := os.Stat(filepath.Join(f.dir, "sp2.db"))
	require.ErrorIs(t, err, os.ErrNotExist)

	r = execute(t, env, "checkpoints", "export", f.file, "latest", filepath.Join(f.dir, "sp.db"))
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "exported checkpoint 1 of pipeline cp-cmd")
	require.Contains(t, r.stderr, `msg="checkpoint is unreadable; falling back to the previous retained checkpoint"`)

	checkpointtest.CorruptLargestPart(t, f.storePath(), 1)
	r = execute(t, env, "checkpoints", "list", f.file)
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "no checkpoint verifies: eddy run fails rather than start from the beginning")
	r = execute(t, env, "checkpoints", "list", "-f", "json", f.file)
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, `"restore": null`)
}

// TestCheckpointsDamagedStore: a store whose bbolt pages are garbage (not
// only a part) fails the command with exit 1 and a message, not a panic.
func TestCheckpointsDamagedStore(t *testing.T) {
	f := newCheckpointFixture(t)
	st, err := os.Stat(f.storePath())
	require.NoError(t, err)
	garbage := make([]byte, st.Size()-2*int64(os.Getpagesize()))
	for i := range garbage {
		garbage[i] = byte(i*37 + 11)
	}
	file, err := os.OpenFile(f.storePath(), os.O_WRONLY, 0)
	require.NoError(t, err)
	_, err = file.WriteAt(garbage, 2*int64(os.Getpagesize()))
	require.NoError(t, err)
	require.NoError(t, file.Close())

	r := execute(t, map[string]string{"EDDY_STATE_DIR": f.state}, "checkpoints", "list", f.file)
	require.Equal(t, 1, r.code, r.stdout)
	require.Regexp(t, `^eddy: open the checkpoints of "cp-cmd": .*checkpoints.db is damaged beyond its checksums \(bbolt: .*\); restore from a savepoint, or move the state dir away`, r.stderr)
}

// TestCheckpointsLocked: a store that a running pipeline holds cannot be
// listed; the message names the holder and the command that asks it.
func TestCheckpointsLocked(t *testing.T) {
	f := newCheckpointFixture(t)
	s, err := checkpoint.Open(filepath.Dir(f.storePath()), checkpoint.Options{})
	require.NoError(t, err)
	defer func() { require.NoError(t, s.Close(context.Background())) }()
	r := execute(t, map[string]string{"EDDY_STATE_DIR": f.state}, "checkpoints", "list", f.file)
	require.Equal(t, 1, r.code, r.stdout)
	require.Regexp(t, `^eddy: open the checkpoints of "cp-cmd": state dir .* is in use by another eddy \(pid \d+ on .*\): state dir locked \(while it runs, eddy checkpoints status `+quote(f.file)+` shows its recent checkpoints\)\n$`, r.stderr)
}

func fileSize(t *testing.T, path string) int64 {
	t.Helper()
	st, err := os.Stat(path)
	require.NoError(t, err)
	return st.Size()
}

// A bounded pipeline that finished ends at once when run again: the run
// says so, and how to run it again.
func TestRunAlreadyFinished(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "cp.yaml")
	require.NoError(t, os.WriteFile(file, []byte(strings.ReplaceAll(checkpointPipeline, "OUT", filepath.Join(dir, "out"))), 0o644))
	env := map[string]string{"EDDY_STATE_DIR": filepath.Join(dir, "state"), "EDDY_LOG_LEVEL": "warn"}
	const finished = `level=WARN msg="already finished: restored from the checkpoint, the sources resumed at the end of their input and read nothing; eddy run --fresh runs it again from the beginning" pipeline=cp-cmd checkpoint=1`

	r := execute(t, env, "run", "--admin-addr", "off", file)
	require.Equal(t, 0, r.code, r.stderr)
	require.NotContains(t, r.stderr, "already finished")

	r = execute(t, env, "run", "--admin-addr", "off", file)
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, normaliseLog(r.stderr), finished+"\n")

	r = execute(t, env, "run", "--admin-addr", "off", "--fresh", "--yes", file)
	require.Equal(t, 0, r.code, r.stderr)
	require.NotContains(t, r.stderr, "already finished", "--fresh starts from the beginning")
}
