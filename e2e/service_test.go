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
