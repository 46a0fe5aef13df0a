package e2e_test

import (
	"bufio"
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// plan is the part of `eddy explain --format json` these tests use.
type plan struct {
	Bounded bool `json:"bounded"`
	Nodes   []struct {
		ID          string `json:"id"`
		Parallelism int    `json:"parallelism"`
	} `json:"nodes"`
	Edges []struct {
		To string `json:"to"`
	} `json:"edges"`
}

// ordered reports whether the pipeline's output order is deterministic:
// every node runs with parallelism 1 and reads one input.
func (p plan) ordered() bool {
	for _, n := range p.Nodes {
		if n.Parallelism != 1 {
			return false
		}
	}
	// A step with two inputs (a join, a union) interleaves them as they
	// arrive.
	inputs := map[string]int{}
	for _, e := range p.Edges {
		if inputs[e.To]++; inputs[e.To] > 1 {
			return false
		}
	}
	return true
}

// foldedElsewhere names the example pipelines whose output rows, not only
// their order, depend on how their inputs interleave (a regular join's
// changelog), with the test that checks their outputs folded into the
// final table; TestRunConfigs checks that they run and what they count.
var foldedElsewhere = map[string]string{
	"joins_regular": "operators.TestRegularJoinConfig",
}

func explainPlan(t *testing.T, dir, file string) plan {
	t.Helper()
	r := eddy(t, dir, nil, "explain", "--format", "json", file)
	require.Equal(t, 0, r.code, r.stderr)
	var p plan
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &p))
	return p
}

func exampleConfigs(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(repoRoot, "configs", "*.yaml"))
	require.NoError(t, err)
	require.NotEmpty(t, files)
	return files
}

// TestValidateConfigs: every example pipeline is valid.
func TestValidateConfigs(t *testing.T) {
	args := []string{"validate"}
	var want strings.Builder
	for _, f := range exampleConfigs(t) {
		rel := filepath.Join("configs", filepath.Base(f))
		args = append(args, rel)
		want.WriteString(rel + ": ok\n")
	}
	r := eddy(t, repoRoot, nil, args...)
	require.Equal(t, result{code: 0, stdout: want.String()}, r)
}

// TestValidateBroken: each file under testdata/broken is invalid; validate
// (and run, which loads the same way) print exactly its golden problems,
// one FILE:LINE:COL: message a line, on stderr and exit 2.
func TestValidateBroken(t *testing.T) {
	files, err := filepath.Glob("testdata/broken/*.yaml")
	require.NoError(t, err)
	require.NotEmpty(t, files)
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) {
			r := eddy(t, ".", nil, "validate", file)
			require.Equal(t, 2, r.code, r.stderr)
			require.Empty(t, r.stdout)
			for _, line := range strings.Split(strings.TrimSuffix(r.stderr, "\n"), "\n") {
				require.Regexp(t, `^`+file+`:\d+:\d+: \S`, line)
			}
			golden(t, strings.TrimSuffix(file, ".yaml")+".stderr", r.stderr)

			run := eddy(t, t.TempDir(), nil, "run", filepath.Join(mustAbs(t, "."), file))
			require.Equal(t, 2, run.code, run.stderr)
		})
	}
}

func mustAbs(t *testing.T, p string) string {
	t.Helper()
	abs, err := filepath.Abs(p)
	require.NoError(t, err)
	return abs
}

// TestRunConfigs runs every bounded example pipeline the way its comment
// says: from a directory holding configs/ (copied, with its data), with the
// default output paths, so relative paths resolve as they do for a user. It
// compares stdout and every file the sinks wrote with the golden files under
// testdata/run/NAME/, and checks that the summary's records_written matches
// the lines written.
func TestRunConfigs(t *testing.T) {
	ran := 0
	for _, file := range exampleConfigs(t) {
		name := strings.TrimSuffix(filepath.Base(file), ".yaml")
		t.Run(name, func(t *testing.T) {
			work := t.TempDir()
			require.NoError(t, os.CopyFS(filepath.Join(work, "configs"), os.DirFS(filepath.Join(repoRoot, "configs"))))
			rel := filepath.Join("configs", filepath.Base(file))
			p := explainPlan(t, work, rel)
			if !p.Bounded {
				t.Skipf("%s is unbounded: only validated", rel)
			}
			ran++
			env := map[string]string{"EDDY_LOG_FORMAT": "json", "EDDY_STATE_DIR": t.TempDir()}
			r := eddy(t, work, env, "run", rel)
			require.Equal(t, 0, r.code, r.stderr)

			outputs := map[string]string{} // golden name -> content
			if r.stdout != "" {
				outputs["stdout"] = r.stdout
			}
			require.NoError(t, filepath.WalkDir(work, func(path string, d fs.DirEntry, err error) error {
				if err != nil || d.IsDir() {
					if d != nil && d.IsDir() && path == filepath.Join(work, "configs") {
						return filepath.SkipDir
					}
					return err
				}
				b, err := os.ReadFile(path)
				if err != nil {
					return err
				}
				relOut, err := filepath.Rel(work, path)
				if err != nil {
					return err
				}
				outputs[filepath.ToSlash(relOut)] = string(b)
				return nil
			}))
			require.NotEmpty(t, outputs, "the pipeline wrote nothing")

			if by, ok := foldedElsewhere[name]; ok {
				lines := 0
				for _, content := range outputs {
					lines += strings.Count(content, "\n")
				}
				s := summary(t, r.stderr)
				require.Equal(t, "finished", s.status)
				require.Equal(t, int64(lines), s.written, "records_written of the summary vs lines written")
				t.Logf("%s checks the rows of %s", by, rel)
				return
			}
			dir := filepath.Join("testdata", "run", name)
			if *update {
				require.NoError(t, os.RemoveAll(dir))
			}
			lines := 0
			for out, content := range outputs {
				if !p.ordered() {
					content = sortLines(content)
				}
				lines += strings.Count(content, "\n")
				golden(t, filepath.Join(dir, filepath.FromSlash(out)), content)
			}
			// No golden file is left without an output.
			var goldens []string
			require.NoError(t, filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
				if err == nil && !d.IsDir() {
					rel, _ := filepath.Rel(dir, path)
					goldens = append(goldens, filepath.ToSlash(rel))
				}
				return err
			}))
			var got []string
			for out := range outputs {
				got = append(got, out)
			}
			slices.Sort(goldens)
			slices.Sort(got)
			require.Equal(t, goldens, got, "outputs and golden files under %s", dir)

			s := summary(t, r.stderr)
			require.Equal(t, "finished", s.status)
			require.Equal(t, int64(lines), s.written, "records_written of the summary vs lines written")
		})
	}
	require.Positive(t, ran, "no bounded example pipeline ran")
}

func sortLines(s string) string {
	lines := strings.SplitAfter(s, "\n")
	if lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	slices.Sort(lines)
	return strings.Join(lines, "")
}

// runSummary is what the run's json log says on exit.
type runSummary struct {
	status        string
	read, written int64
	// sources and sinks hold records_read and records_written per id.
	sources, sinks map[string]int64
}

// summary parses the json log lines of a run (EDDY_LOG_FORMAT=json).
func summary(t *testing.T, stderr string) runSummary {
	t.Helper()
	s := runSummary{sources: map[string]int64{}, sinks: map[string]int64{}}
	sc := bufio.NewScanner(strings.NewReader(stderr))
	final := false
	for sc.Scan() {
		var l struct {
			Msg     string `json:"msg"`
			Status  string `json:"status"`
			Source  string `json:"source"`
			Sink    string `json:"sink"`
			Read    *int64 `json:"records_read"`
			Written *int64 `json:"records_written"`
		}
		require.NoError(t, json.Unmarshal(sc.Bytes(), &l), "a log line that is not json: %s", sc.Text())
		switch {
		case l.Msg == "source summary":
			s.sources[l.Source] = *l.Read
		case l.Msg == "sink summary":
			s.sinks[l.Sink] = *l.Written
		case strings.HasPrefix(l.Msg, "pipeline ") && l.Status != "":
			s.status, s.read, s.written = l.Status, *l.Read, *l.Written
			final = true
		}
	}
	require.True(t, final, "no final summary line in:\n%s", stderr)
	return s
}

// TestDeploymentsReturnMemoryLazily: the systemd units and the container
// image set GODEBUG=madvdontneed=0, which eddy cannot set for itself (Go
// reads GODEBUG when the process starts; docs/running.md, "Memory").
func TestDeploymentsReturnMemoryLazily(t *testing.T) {
	for file, want := range map[string]string{
		"configs/eddy.service":       "\nEnvironment=GODEBUG=madvdontneed=0\n",
		"configs/eddy-serve.service": "\nEnvironment=GODEBUG=madvdontneed=0\n",
		"Dockerfile":                 "\n    GODEBUG=madvdontneed=0\n",
	} {
		b, err := os.ReadFile(filepath.Join(repoRoot, file))
		require.NoError(t, err)
		require.Contains(t, string(b), want, file)
	}
}
