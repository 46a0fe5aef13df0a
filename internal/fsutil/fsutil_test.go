package fsutil_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/eddy-stream/eddy/internal/fsutil"
)

func TestSyncDir(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "f"), []byte("x"), 0o644))
	require.NoError(t, fsutil.SyncDir(dir))
	require.ErrorIs(t, fsutil.SyncDir(filepath.Join(dir, "missing")), os.ErrNotExist)
}
