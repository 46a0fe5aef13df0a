package cmd

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"regexp"
	"runtime"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/stretchr/testify/require"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

// settings are the EDDY_* variables the commands read; each test run
// starts with them unset so that the caller's environment does not leak in.
var settings = []string{"EDDY_LOG_LEVEL", "EDDY_LOG_FORMAT", "EDDY_STATE_DIR", "EDDY_ADMIN_ADDR", "EDDY_GC_PERCENT", "EDDY_ADMIN_TOKEN", "EDDY_READY_MAX_CHECKPOINT_AGE", "EDDY_ENV_FILE"}

type result struct {
	code           int
	stdout, stderr string
}

// execute runs the root command with args and env the way main does.
func execute(t *testing.T, env map[string]string, args ...string) result {
	t.Helper()
	for _, k := range settings {
		t.Setenv(k, "") // empty counts as unset for viper
	}
	for k, v := range env {
		t.Setenv(k, v)
	}
	root := NewRootCommand()
	var stdout, stderr bytes.Buffer
	root.SetArgs(args)
	root.SetIn(strings.NewReader(""))
	root.SetOut(&stdout)
	root.SetErr(&stderr)
	code := ExecuteCommand(root)
	return result{code: code, stdout: stdout.String(), stderr: stderr.String()}
}

// Log lines carry the time, the run's duration and the admin endpoint's
// port; the tests compare the rest.
var (
	logTime     = regexp.MustCompile(`(?m)^time=\S+ |"time":"[^"]*",`)
	logDuration = regexp.MustCompile(`duration=\S+|"duration":\d+`)
	logPort     = regexp.MustCompile(`addr=127\.0\.0\.1:\d+`)
)

func normaliseLog(s string) string {
	s = logTime.ReplaceAllString(s, "")
	s = logPort.ReplaceAllString(s, "addr=127.0.0.1:PORT")
	return logDuration.ReplaceAllString(s, "duration=D")
}

const (
	okWarn    = `level=WARN msg="end-to-end guarantee is below exactly-once" pipeline=ok guarantee=at-most-once why="sink \"print\" (stdout) is at-least-once; no checkpoint block: state and positions are not saved, so a crash loses in-flight results"` + "\n"
	okAdmin   = `level=INFO msg="admin endpoint listening" pipeline=ok addr=127.0.0.1:PORT` + "\n"
	okSummary = `level=INFO msg="source summary" pipeline=ok source=numbers type=generator records_read=4
level=INFO msg="sink summary" pipeline=ok sink=print type=stdout records_written=2
level=INFO msg="pipeline finished" pipeline=ok status=finished duration=D records_read=4 records_written=2
`
	brokenProblems = `testdata/broken.yaml:7:5: unknown key "colour" in source "numbers" (generator)
testdata/broken.yaml:12:20: expression "n % 2 ==": unexpected token EOF
testdata/broken.yaml:15:11: sink "print": from "evnes": no source, step or side stream has that id (did you mean "evens"?)
`
	okStdout = `{"label":"n-0","n":0}` + "\n" + `{"label":"n-2","n":2}` + "\n"
)

// ratiosWarn is the guarantee warning of testdata/ratios*.yaml.
func ratiosWarn(name string) string {
	return strings.ReplaceAll(okWarn, "pipeline=ok", "pipeline="+name)
}

func startLine(stateDir string) string {
	return fmt.Sprintf(`level=INFO msg="starting pipeline" pipeline=ok file=testdata/ok.yaml tasks=1 subtasks=1 guarantee=at-most-once state_dir=%s`+"\n", stateDir)
}

func TestCommands(t *testing.T) {
	tests := []struct {
		name string
		args []string
		env  map[string]string
		want result
		// stdoutContains replaces the exact stdout check when set.
		stdoutContains string
	}{
		{
			name: "version",
			args: []string{"version"},
			want: result{code: 0, stdout: fmt.Sprintf("eddy dev\ncommit: dev\ngo: %s %s/%s\n", runtime.Version(), runtime.GOOS, runtime.GOARCH)},
		},
		{
			name: "--version prints what version does",
			args: []string{"--version"},
			want: result{code: 0, stdout: fmt.Sprintf("eddy dev\ncommit: dev\ngo: %s %s/%s\n", runtime.Version(), runtime.GOOS, runtime.GOARCH)},
		},
		{
			name: "version takes no arguments",
			args: []string{"version", "x"},
			want: result{code: 2, stderr: "eddy: eddy version takes no arguments, got 1 argument(s)\nRun 'eddy version --help' for usage.\n"},
		},
		{
			name: "validate a valid file",
			args: []string{"validate", "testdata/ok.yaml"},
			want: result{code: 0, stdout: "testdata/ok.yaml: ok\n"},
		},
		{
			name: "validate reports every problem of every file",
			args: []string{"validate", "testdata/ok.yaml", "testdata/broken.yaml", "testdata/explain/simple.yaml"},
			want: result{code: 2, stdout: "testdata/ok.yaml: ok\ntestdata/explain/simple.yaml: ok\n", stderr: brokenProblems},
		},
		{
			name: "validate an event_time that can never give a time",
			args: []string{"validate", "testdata/event_time.yaml"},
			want: result{code: 2, stderr: `testdata/event_time.yaml:9:17: source "readings": event_time "\"hello\"" can never give a time: "hello" is not an RFC 3339 timestamp, a date or epoch milliseconds (parse other layouts with ts_parse(field, layout))
testdata/event_time.yaml:15:17: source "flags": event_time "ok && true" can never give a time: it returns bool, not a time: return epoch milliseconds, a time or a timestamp string
`},
		},
		{
			name: "validate a missing file",
			args: []string{"validate", "testdata/missing.yaml"},
			want: result{code: 2, stderr: "eddy: read pipeline file: open testdata/missing.yaml: no such file or directory\n"},
		},
		{
			name: "validate what a newcomer writes",
			args: []string{"validate", "testdata/empty.yaml", "testdata/where.yaml", "testdata/commas.yaml"},
			want: result{code: 2, stderr: `testdata/empty.yaml:1:1: the file is empty: a pipeline file is a mapping with version, name, sources, steps and sinks (see docs/pipeline.md)
testdata/where.yaml:10:5: steps[0]: unknown step kind "where" (did you mean "filter"?)
testdata/commas.yaml:9:14: YAML syntax: quote an expression that contains commas inside { }: YAML ends a value at a comma inside { } (quote it, or write the mapping in block style)
`},
		},
		{
			name: "run a missing file: invalid input, not a usage error",
			args: []string{"run", "testdata/missing.yaml"},
			want: result{code: 2, stderr: "eddy: read pipeline file: open testdata/missing.yaml: no such file or directory\n"},
		},
		{
			name: "run --fresh without a checkpoint block",
			args: []string{"run", "--fresh", "testdata/ok.yaml"},
			env:  map[string]string{"EDDY_LOG_LEVEL": "error"},
			want: result{code: 2, stderr: "eddy: --fresh and --from-savepoint need a checkpoint block in testdata/ok.yaml\n"},
		},
		{
			name: "validate without files",
			args: []string{"validate"},
			want: result{code: 2, stderr: "eddy: eddy validate takes one or more pipeline files\nRun 'eddy validate --help' for usage.\n"},
		},
		{
			name: "explain an invalid file",
			args: []string{"explain", "testdata/broken.yaml"},
			want: result{code: 2, stderr: brokenProblems},
		},
		{
			name: "explain an unknown format",
			args: []string{"explain", "--format", "svg", "testdata/ok.yaml"},
			want: result{code: 2, stderr: "eddy: --format \"svg\": want text, dot or json\nRun 'eddy explain --help' for usage.\n"},
		},
		{
			name: "explain two files",
			args: []string{"explain", "testdata/ok.yaml", "testdata/ok.yaml"},
			want: result{code: 2, stderr: "eddy: eddy explain takes one pipeline file, got 2 argument(s)\nRun 'eddy explain --help' for usage.\n"},
		},
		{
			name: "run a bounded pipeline, logging errors only",
			args: []string{"run", "testdata/ok.yaml"},
			env:  map[string]string{"EDDY_LOG_LEVEL": "error"},
			want: result{code: 0, stdout: okStdout},
		},
		{
			name: "run logs the start, the guarantee and a summary",
			args: []string{"run", "testdata/ok.yaml"},
			want: result{code: 0, stdout: okStdout, stderr: startLine("eddy-state/ok") + okWarn + okAdmin + okSummary},
		},
		{
			name: "run with a flag that wins over the environment",
			args: []string{"run", "--log-level", "warn", "testdata/ok.yaml"},
			env:  map[string]string{"EDDY_LOG_LEVEL": "debug"},
			want: result{code: 0, stdout: okStdout, stderr: okWarn},
		},
		{
			name: "run with a global flag before the command",
			args: []string{"--log-level=warn", "run", "testdata/ok.yaml"},
			want: result{code: 0, stdout: okStdout, stderr: okWarn},
		},
		{
			name: "run with the state directory from the environment",
			args: []string{"run", "testdata/ok.yaml"},
			env:  map[string]string{"EDDY_STATE_DIR": "/var/lib/eddy"},
			want: result{code: 0, stdout: okStdout, stderr: startLine("/var/lib/eddy/ok") + okWarn + okAdmin + okSummary},
		},
		{
			name: "run with the state directory flag",
			args: []string{"run", "--state-dir", "/srv/state", "testdata/ok.yaml"},
			env:  map[string]string{"EDDY_STATE_DIR": "/var/lib/eddy"},
			want: result{code: 0, stdout: okStdout, stderr: startLine("/srv/state/ok") + okWarn + okAdmin + okSummary},
		},
		{
			name: "run logging json",
			args: []string{"run", "testdata/ok.yaml"},
			env:  map[string]string{"EDDY_LOG_FORMAT": "json", "EDDY_LOG_LEVEL": "WARN"},
			want: result{code: 0, stdout: okStdout, stderr: `{"level":"WARN","msg":"end-to-end guarantee is below exactly-once","pipeline":"ok","guarantee":"at-most-once","why":"sink \"print\" (stdout) is at-least-once; no checkpoint block: state and positions are not saved, so a crash loses in-flight results"}` + "\n"},
		},
		{
			name: "run an invalid file",
			args: []string{"run", "testdata/broken.yaml"},
			want: result{code: 2, stderr: brokenProblems},
		},
		{
			name: "run with a bad log level",
			args: []string{"run", "testdata/ok.yaml"},
			env:  map[string]string{"EDDY_LOG_LEVEL": "loud"},
			want: result{code: 2, stderr: "eddy: log level \"loud\": want debug, info, warn or error (--log-level or EDDY_LOG_LEVEL)\nRun 'eddy run --help' for usage.\n"},
		},
		{
			name: "run with a bad log format",
			args: []string{"run", "--log-format", "xml", "testdata/ok.yaml"},
			want: result{code: 2, stderr: "eddy: log format \"xml\": want text or json (--log-format or EDDY_LOG_FORMAT)\nRun 'eddy run --help' for usage.\n"},
		},
		{
			name: "run with an unknown flag",
			args: []string{"run", "--huge-pages", "on", "testdata/ok.yaml"},
			want: result{code: 2, stderr: "eddy: unknown flag: --huge-pages\nRun 'eddy run --help' for usage.\n"},
		},
		{
			name: "run a pipeline that fails",
			args: []string{"run", "testdata/fails.yaml"},
			env:  map[string]string{"EDDY_LOG_LEVEL": "error"},
			want: result{code: 1, stderr: `level=ERROR msg="pipeline failed" pipeline=fails status=failed duration=D records_read=0 records_written=0 err="task readings -> print[0/1]: open source \"readings\": file source \"readings\": no file matches testdata/no-such-dir/*.jsonl"` + "\n"},
		},
		{
			// on_error defaults to fail: a record that fails ends the run
			// with exit 1, and the summary counts it.
			name: "run a pipeline whose step fails a record",
			args: []string{"run", "--admin-addr", "off", "testdata/ratios.yaml"},
			env:  map[string]string{"EDDY_LOG_LEVEL": "warn"},
			want: result{code: 1, stderr: ratiosWarn("ratios") +
				`level=WARN msg="step summary" pipeline=ratios step=ratio kind=set errors=1 skipped=0 dead_lettered=0
level=ERROR msg="pipeline failed" pipeline=ratios status=failed duration=D records_read=4 records_written=0 record_errors=1 err="task numbers -> ratio -> print[0/1]: record failed in \"ratio\": set field \"r\": expression \"3 / n\": the result is +Inf, not a finite number (a division by zero?)"
`},
		},
		{
			name: "run a pipeline whose step skips a record",
			args: []string{"run", "--admin-addr", "off", "testdata/ratios_skip.yaml"},
			env:  map[string]string{"EDDY_LOG_LEVEL": "warn"},
			want: result{code: 0, stdout: `{"n":1,"r":3}` + "\n" + `{"n":2,"r":1.5}` + "\n" + `{"n":3,"r":1}` + "\n",
				stderr: ratiosWarn("ratios_skip") +
					`level=WARN msg="skipping a record that failed (on_error: skip); later ones are logged at debug level and counted in eddy_record_errors_total" pipeline=ratios_skip step=ratio subtask=0 id=ratio error="set field \"r\": expression \"3 / n\": the result is +Inf, not a finite number (a division by zero?)"
level=WARN msg="step summary" pipeline=ratios_skip step=ratio kind=set errors=1 skipped=1 dead_lettered=0
`},
		},
		{
			name: "unknown command",
			args: []string{"frobnicate"},
			want: result{code: 2, stderr: "eddy: unknown command \"frobnicate\" for \"eddy\"\nRun 'eddy --help' for usage.\n"},
		},
		{
			name: "unknown flag",
			args: []string{"validate", "--frob", "testdata/ok.yaml"},
			want: result{code: 2, stderr: "eddy: unknown flag: --frob\nRun 'eddy validate --help' for usage.\n"},
		},
		{
			name:           "completion",
			args:           []string{"completion", "bash"},
			want:           result{code: 0},
			stdoutContains: "# bash completion V2 for eddy",
		},
		{
			name: "completion of a flag value",
			args: []string{"__complete", "explain", "--format", ""},
			want: result{code: 0, stdout: "text\ndot\njson\n:4\n", stderr: "Completion ended with directive: ShellCompDirectiveNoFileComp\n"},
		},
		{
			name:           "help",
			args:           []string{},
			want:           result{code: 0},
			stdoutContains: "eddy validate pipeline.yaml",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := execute(t, tt.env, tt.args...)
			got.stderr = normaliseLog(got.stderr)
			if tt.stdoutContains != "" {
				require.Contains(t, got.stdout, tt.stdoutContains)
				got.stdout = ""
			}
			require.Equal(t, tt.want, got)
		})
	}
}

// An error a command returns without an exit code happened while it ran:
// exit 1, without the usage hint that only a mistake in the command line
// gets.
func TestRuntimeErrorWithoutUsage(t *testing.T) {
	root := &cobra.Command{Use: "eddy", SilenceErrors: true, SilenceUsage: true}
	root.AddCommand(&cobra.Command{Use: "fill", RunE: func(*cobra.Command, []string) error {
		return errors.New("write out.jsonl: no space left on device")
	}})
	asRuntimeFailure(root)
	var stderr bytes.Buffer
	root.SetArgs([]string{"fill"})
	root.SetErr(&stderr)
	require.Equal(t, exitFailure, ExecuteCommand(root))
	require.Equal(t, "eddy: write out.jsonl: no space left on device\n", stderr.String())
}
