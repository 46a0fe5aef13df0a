package e2e_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// installedBin is where the units of configs/ expect the binary.
const installedBin = "/usr/local/bin/eddy"

// units are the systemd units of configs/.
var units = []string{"eddy.service", "eddy-serve.service"}

// TestSystemdUnitVerifies: systemd-analyze verify accepts each unit of
// configs/ without a warning about it (a key in the wrong section is only
// a warning, and systemd ignores that key). systemd-analyze checks that
// the commands exist, so a copy of the unit runs the binary TestMain
// built instead of the installed one.
func TestSystemdUnitVerifies(t *testing.T) {
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze is not installed (apt-get install systemd): the units of configs/ are not verified")
	}
	for _, name := range units {
		t.Run(name, func(t *testing.T) {
			unit, err := os.ReadFile(filepath.Join(repoRoot, "configs", name))
			require.NoError(t, err)
			require.Contains(t, string(unit), "ExecStart="+installedBin+" ", "the unit no longer runs %s: update this test", installedBin)
			path := filepath.Join(t.TempDir(), name)
			require.NoError(t, os.WriteFile(path, []byte(strings.ReplaceAll(string(unit), installedBin, eddyBin)), 0o644))

			out, err := exec.Command(analyze, "verify", path).CombinedOutput()
			var about []string
			for line := range strings.Lines(string(out)) {
				if strings.Contains(line, name) {
					about = append(about, strings.TrimSpace(line))
				}
			}
			require.Empty(t, about, "systemd-analyze verify warns about configs/%s", name)
			require.NoError(t, err, "systemd-analyze verify failed:\n%s", out)
		})
	}
}

// TestSystemdUnitsNotify: both units are Type=notify with a watchdog,
// reload with SIGHUP, and read /etc/eddy/eddy.env (EnvironmentFile=, and
// EDDY_ENV_FILE, which SIGHUP reads again); eddy-serve.service runs eddy
// serve on a folder the service may write (for uploads and deletes).
func TestSystemdUnitsNotify(t *testing.T) {
	for _, name := range units {
		unit, err := os.ReadFile(filepath.Join(repoRoot, "configs", name))
		require.NoError(t, err)
		for _, line := range []string{"Type=notify", "NotifyAccess=main", "WatchdogSec=30s",
			"ExecReload=/bin/kill -HUP $MAINPID", "EnvironmentFile=-/etc/eddy/eddy.env",
			"Environment=EDDY_ENV_FILE=-/etc/eddy/eddy.env"} {
			require.Contains(t, string(unit), "\n"+line+"\n", name)
		}
	}
	unit, err := os.ReadFile(filepath.Join(repoRoot, "configs", "eddy-serve.service"))
	require.NoError(t, err)
	require.Contains(t, string(unit), "\nExecStart="+installedBin+" serve --dir /var/lib/eddy/pipelines\n")
	require.Contains(t, string(unit), "\nStateDirectory=eddy eddy/pipelines eddy/state eddy/data\n")
}

// TestSystemdUnitEnvFile: configs/eddy.env, which the units read from
// /etc/eddy/eddy.env (TestSystemdUnitsNotify), is a file eddy reads: its
// variables reach a pipeline's ${VAR}.
func TestSystemdUnitEnvFile(t *testing.T) {
	envFile := filepath.Join(t.TempDir(), "eddy.env")
	example, err := os.ReadFile(filepath.Join(repoRoot, "configs", "eddy.env"))
	require.NoError(t, err)
	out := t.TempDir()
	writeFile(t, envFile, string(example)+"EDDY_OUT="+out+"\n")
	pipelineFile := filepath.Join(t.TempDir(), "p.yaml")
	writeFile(t, pipelineFile, `version: 1
name: env_file
sources:
  - { id: g, type: generator, count: 1, fields: { i: i } }
sinks:
  - { id: out, type: file, path: "${EDDY_OUT}/x.jsonl" }
`)
	res := eddy(t, ".", map[string]string{"EDDY_ENV_FILE": "-" + envFile, "EDDY_STATE_DIR": t.TempDir()}, "run", pipelineFile)
	require.Equal(t, 0, res.code, res.stderr)
	written, err := os.ReadFile(filepath.Join(out, "x.jsonl"))
	require.NoError(t, err, "the sink wrote under the env file's EDDY_OUT")
	require.Equal(t, "{\"i\":0}\n", string(written))
}
