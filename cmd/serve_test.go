package cmd

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestAdminTokenRequired: eddy run and eddy serve refuse an admin
// endpoint on every interface without EDDY_ADMIN_TOKEN (exit 2, before
// anything runs); with it, the run runs.
func TestAdminTokenRequired(t *testing.T) {
	env := map[string]string{"EDDY_STATE_DIR": t.TempDir()}
	r := execute(t, env, "run", "--admin-addr", "0.0.0.0:0", "testdata/ok.yaml")
	require.Equal(t, exitInvalid, r.code)
	require.Empty(t, r.stdout, "nothing ran")
	require.Contains(t, r.stderr, `eddy: --admin-addr: the admin endpoint would be reachable from other machines without a token: 0.0.0.0:0 listens on every interface; set EDDY_ADMIN_TOKEN to a secret`)

	r = execute(t, env, "serve", "--dir", t.TempDir(), "--admin-addr", "[::]:0")
	require.Equal(t, exitInvalid, r.code)
	require.Contains(t, r.stderr, "set EDDY_ADMIN_TOKEN to a secret")

	env["EDDY_ADMIN_TOKEN"] = "a-token"
	r = execute(t, env, "run", "--admin-addr", "0.0.0.0:0", "testdata/ok.yaml")
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Equal(t, okStdout, r.stdout)
	require.NotContains(t, r.stderr, "a-token", "the token is not logged")
}

// TestServeFlags: the invalid flags of eddy serve exit 2.
func TestServeFlags(t *testing.T) {
	file := filepath.Join("testdata", "ok.yaml")
	for _, tt := range []struct {
		args   []string
		stderr string
	}{
		{[]string{"serve"}, "eddy: eddy serve needs --dir, the folder of pipeline files\nRun 'eddy serve --help' for usage.\n"},
		{[]string{"serve", "--dir", filepath.Join(t.TempDir(), "nope")}, "eddy: --dir: stat "},
		{[]string{"serve", "--dir", file}, "eddy: --dir testdata/ok.yaml: not a directory\n"},
		{[]string{"serve", "--dir", t.TempDir(), "--data-dir", file}, "eddy: --data-dir testdata/ok.yaml: not a directory\n"},
		{[]string{"serve", "--dir", t.TempDir(), "--poll", "0s"}, "eddy: --poll 0s: want a positive duration\n"},
		{[]string{"serve", "--dir", t.TempDir(), "--ready-max-checkpoint-age", "-1s"}, "eddy: --ready-max-checkpoint-age -1s: want a positive duration, or 0 (off)\n"},
		{[]string{"serve", "x"}, "eddy: eddy serve takes no arguments (the folder is --dir), got 1 argument(s)\n"},
		{[]string{"run", "--ready-max-checkpoint-age", "-1s", file}, "want a positive duration, or 0 (off)"},
	} {
		r := execute(t, nil, tt.args...)
		require.Equal(t, exitInvalid, r.code, "%v: %s", tt.args, r.stderr)
		require.Contains(t, r.stderr, tt.stderr, "%v", tt.args)
	}
}
