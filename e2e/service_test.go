package e2e_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// installedBin is where configs/eddy.service expects the binary.
const installedBin = "/usr/local/bin/eddy"

// TestSystemdUnitVerifies: systemd-analyze verify accepts configs/eddy.service
// without a warning about it (a key in the wrong section is only a warning,
// and systemd ignores that key). systemd-analyze checks that the commands
// exist, so a copy of the unit runs the binary TestMain built instead of
// the installed one.
func TestSystemdUnitVerifies(t *testing.T) {
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze is not installed (apt-get install systemd): configs/eddy.service is not verified")
	}
	unit, err := os.ReadFile(filepath.Join(repoRoot, "configs", "eddy.service"))
	require.NoError(t, err)
	require.Contains(t, string(unit), "ExecStart="+installedBin+" ", "the unit no longer runs %s: update this test", installedBin)
	path := filepath.Join(t.TempDir(), "eddy.service")
	require.NoError(t, os.WriteFile(path, []byte(strings.ReplaceAll(string(unit), installedBin, eddyBin)), 0o644))

	out, err := exec.Command(analyze, "verify", path).CombinedOutput()
	var about []string
	for line := range strings.Lines(string(out)) {
		if strings.Contains(line, "eddy.service") {
			about = append(about, strings.TrimSpace(line))
		}
	}
	require.Empty(t, about, "systemd-analyze verify warns about configs/eddy.service")
	require.NoError(t, err, "systemd-analyze verify failed:\n%s", out)
}

// TestSystemdUnitEnvFile: the unit points eddy at /etc/eddy/eddy.env
// (EDDY_ENV_FILE, which SIGHUP reads again) and configs/eddy.env, which is
// installed there, is a file eddy reads: its variables reach a pipeline's
// ${VAR}.
func TestSystemdUnitEnvFile(t *testing.T) {
	unit, err := os.ReadFile(filepath.Join(repoRoot, "configs", "eddy.service"))
	require.NoError(t, err)
	require.Contains(t, string(unit), "\nEnvironmentFile=-/etc/eddy/eddy.env\n")
	require.Contains(t, string(unit), "\nEnvironment=EDDY_ENV_FILE=-/etc/eddy/eddy.env\n")
	require.Contains(t, string(unit), "\nType=notify\n")
	require.Contains(t, string(unit), "\nExecReload=/bin/kill -HUP $MAINPID\n")

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
