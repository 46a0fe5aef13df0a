package cmd

import (
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
	"github.com/spf13/viper"
	"github.com/stretchr/testify/require"

	"github.com/eddy-stream/eddy/pipeline"
)

// unsetEnv unsets the variables for the test and restores them after it.
func unsetEnv(t *testing.T, names ...string) {
	t.Helper()
	for _, n := range names {
		t.Setenv(n, "")
		require.NoError(t, os.Unsetenv(n))
	}
}

// TestReadEnvFile: comments, blank lines, spaces and quotes; anything else
// is an error at FILE:LINE.
func TestReadEnvFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "eddy.env")
	require.NoError(t, os.WriteFile(path, []byte(`# a comment
; another

  EDDY_LOG_LEVEL = debug
EDDY_OUT="/var/lib/eddy out"
QUOTED='it''s'
EMPTY=
HALF="open
`), 0o644))
	vars, err := readEnvFile(path)
	require.NoError(t, err)
	require.Equal(t, map[string]string{"EDDY_LOG_LEVEL": "debug", "EDDY_OUT": "/var/lib/eddy out",
		"QUOTED": "it''s", "EMPTY": "", "HALF": `"open`}, vars)

	for _, bad := range []string{"export EDDY_LOG_LEVEL=debug", "no equals sign", "1X=2", "=value"} {
		require.NoError(t, os.WriteFile(path, []byte("A=1\n"+bad+"\n"), 0o644))
		_, err := readEnvFile(path)
		require.ErrorContains(t, err, path+":2: want KEY=value", bad)
	}
	_, err = readEnvFile(filepath.Join(t.TempDir(), "missing.env"))
	require.ErrorIs(t, err, os.ErrNotExist)
}

// TestEnvFileApply: the file sets what the environment does not have
// (an empty variable counts as unset) or has with the file's value; read
// again, it sets what changed and unsets what it no longer has, and never
// touches the others. A file named with a leading - may be missing.
func TestEnvFileApply(t *testing.T) {
	unsetEnv(t, "EDDY_T_A", "EDDY_T_B", "EDDY_T_C", "EDDY_T_D")
	t.Setenv("EDDY_T_OUTSIDE", "mine")
	t.Setenv("EDDY_T_EMPTY", "")
	t.Setenv("EDDY_T_SAME", "as in the file") // systemd read the file too
	path := filepath.Join(t.TempDir(), "eddy.env")
	write := func(text string) { require.NoError(t, os.WriteFile(path, []byte(text), 0o644)) }
	write("EDDY_T_A=1\nEDDY_T_B=2\nEDDY_T_OUTSIDE=file\nEDDY_T_EMPTY=filled\nEDDY_T_SAME=as in the file\n")
	v := viper.New()
	v.Set(keyEnvFile, path)
	f, err := loadEnvFile(v)
	require.NoError(t, err)
	require.Equal(t, "1", os.Getenv("EDDY_T_A"))
	require.Equal(t, "2", os.Getenv("EDDY_T_B"))
	require.Equal(t, "mine", os.Getenv("EDDY_T_OUTSIDE"), "the environment wins over the file")
	require.Equal(t, "filled", os.Getenv("EDDY_T_EMPTY"))

	write("EDDY_T_A=1\nEDDY_T_C=3\nEDDY_T_OUTSIDE=changed\nEDDY_T_EMPTY=filled\nEDDY_T_SAME=changed\n")
	changed, err := f.reread()
	require.NoError(t, err)
	require.Equal(t, []string{"EDDY_T_B", "EDDY_T_C", "EDDY_T_SAME"}, changed)
	require.Equal(t, "changed", os.Getenv("EDDY_T_SAME"), "the file's at start: it follows the file")
	_, set := os.LookupEnv("EDDY_T_B")
	require.False(t, set, "no longer in the file: unset")
	require.Equal(t, "3", os.Getenv("EDDY_T_C"))
	require.Equal(t, "mine", os.Getenv("EDDY_T_OUTSIDE"))

	write("EDDY_T_A=1\nbroken\n")
	_, err = f.reread()
	require.Error(t, err)
	require.Equal(t, "3", os.Getenv("EDDY_T_C"), "a file that does not parse changes nothing")

	missing := filepath.Join(t.TempDir(), "missing.env")
	v.Set(keyEnvFile, missing)
	_, err = loadEnvFile(v)
	require.Equal(t, exitInvalid, exitCode(err))

	v.Set(keyEnvFile, "-"+missing) // optional, as EnvironmentFile=-
	opt, err := loadEnvFile(v)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(missing, []byte("EDDY_T_D=4\n"), 0o644))
	changed, err = opt.reread()
	require.NoError(t, err)
	require.Equal(t, []string{"EDDY_T_D"}, changed)
	require.NoError(t, os.Remove(missing))
	changed, err = opt.reread()
	require.NoError(t, err)
	require.Equal(t, []string{"EDDY_T_D"}, changed, "gone again: unset")
	_, set = os.LookupEnv("EDDY_T_D")
	require.False(t, set)
}

// testGlobal returns the global options of a command line with args, its
// env file applied, the way the root command sets them up.
func testGlobal(t *testing.T, args ...string) *globalOptions {
	t.Helper()
	v := viper.New()
	v.SetEnvPrefix(envPrefix)
	v.SetEnvKeyReplacer(strings.NewReplacer("-", "_"))
	g := &globalOptions{v: v}
	fs := pflag.NewFlagSet("eddy", pflag.ContinueOnError)
	g.AddFlags(fs)
	addEnvFileFlag(v, fs)
	require.NoError(t, fs.Parse(args))
	var err error
	g.env, err = loadEnvFile(v)
	require.NoError(t, err)
	_, err = g.newLogger(os.Stderr)
	require.NoError(t, err)
	return g
}

// TestReloadLogLevel: a reload takes the log level from --log-level, then
// EDDY_LOG_LEVEL set outside the env file, then the env file's, then
// info; a bad level leaves it as it was.
func TestReloadLogLevel(t *testing.T) {
	path := filepath.Join(t.TempDir(), "eddy.env")
	write := func(text string) { require.NoError(t, os.WriteFile(path, []byte(text), 0o644)) }
	reload := func(g *globalOptions) slog.Level {
		t.Helper()
		_, err := g.reload()
		require.NoError(t, err)
		return g.level.Level()
	}

	t.Run("env file", func(t *testing.T) {
		unsetEnv(t, "EDDY_LOG_LEVEL")
		write("EDDY_LOG_LEVEL=debug\n")
		g := testGlobal(t, "--env-file", path)
		require.Equal(t, slog.LevelDebug, g.level.Level())
		write("EDDY_LOG_LEVEL=warn\n")
		require.Equal(t, slog.LevelWarn, reload(g))
		write("# no level\n")
		require.Equal(t, slog.LevelInfo, reload(g), "the default once the file no longer sets it")
		write("EDDY_LOG_LEVEL=loud\n")
		_, err := g.reload()
		require.ErrorContains(t, err, `log level "loud"`)
		require.Equal(t, slog.LevelInfo, g.level.Level(), "unchanged by a bad level")
	})
	t.Run("environment wins", func(t *testing.T) {
		t.Setenv("EDDY_LOG_LEVEL", "error")
		write("EDDY_LOG_LEVEL=debug\n")
		g := testGlobal(t, "--env-file", path)
		require.Equal(t, slog.LevelError, g.level.Level())
		write("EDDY_LOG_LEVEL=warn\n")
		require.Equal(t, slog.LevelError, reload(g))
	})
	t.Run("flag wins", func(t *testing.T) {
		unsetEnv(t, "EDDY_LOG_LEVEL")
		write("EDDY_LOG_LEVEL=debug\n")
		g := testGlobal(t, "--env-file", path, "--log-level", "warn")
		require.Equal(t, slog.LevelWarn, g.level.Level())
		write("EDDY_LOG_LEVEL=error\n")
		require.Equal(t, slog.LevelWarn, reload(g))
	})
	t.Run("no env file", func(t *testing.T) {
		unsetEnv(t, "EDDY_LOG_LEVEL")
		g := testGlobal(t, "--log-level", "debug")
		changed, err := g.reload()
		require.NoError(t, err)
		require.Empty(t, changed)
		require.Equal(t, slog.LevelDebug, g.level.Level())
	})
}

// TestWatchdogGate: pings while healthy, and for less than the interval
// after the run last was.
func TestWatchdogGate(t *testing.T) {
	t0 := time.Unix(1000, 0)
	g := watchdogGate{interval: 30 * time.Second, lastHealthy: t0}
	require.True(t, g.ping(t0.Add(15*time.Second), false), "not healthy yet, within the interval of the start")
	require.False(t, g.ping(t0.Add(30*time.Second), false), "not healthy for a whole interval")
	require.True(t, g.ping(t0.Add(45*time.Second), true))
	require.True(t, g.ping(t0.Add(60*time.Second), false), "restarting, 15s after it last was healthy")
	require.True(t, g.ping(t0.Add(74*time.Second), false))
	require.False(t, g.ping(t0.Add(75*time.Second), false), "restarting for 30s")
	require.True(t, g.ping(t0.Add(90*time.Second), true), "healthy again")
}

// TestStatusText: the STATUS= line of each state.
func TestStatusText(t *testing.T) {
	cp := pipeline.CheckpointStats{LatestCompleted: &pipeline.CheckpointRecord{ID: 42}}
	restored := pipeline.CheckpointStats{Restored: &pipeline.CheckpointRestore{ID: 7}}
	for _, tt := range []struct {
		state       pipeline.RunState
		opened, cps bool
		stats       pipeline.CheckpointStats
		want        string
	}{
		{state: pipeline.RunStarting, want: "starting: restoring state and opening sources"},
		{state: pipeline.RunRunning, opened: false, cps: true, want: "starting: restoring state and opening sources"},
		{state: pipeline.RunRunning, opened: true, want: "running"},
		{state: pipeline.RunRunning, opened: true, cps: true, want: "running, no checkpoint yet"},
		{state: pipeline.RunRunning, opened: true, cps: true, stats: restored, want: "running, restored checkpoint 7"},
		{state: pipeline.RunRunning, opened: true, cps: true, stats: cp, want: "running, checkpoint 42"},
		{state: pipeline.RunRestarting, opened: true, want: "restarting after a failure"},
		{state: pipeline.RunStopping, opened: true, want: "stopping"},
		{state: pipeline.RunFailed, want: "failed"},
	} {
		require.Equal(t, tt.want, statusText(tt.state, tt.opened, tt.cps, tt.stats), "%s opened=%v", tt.state, tt.opened)
	}
}
