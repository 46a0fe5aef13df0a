package memlimit

import (
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"runtime/debug"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestLimit(t *testing.T) {
	const gib = int64(1) << 30
	cases := []struct {
		name               string
		container, machine int64
		okC, okM           bool
		want               int64
		ok                 bool
	}{
		{"container below the machine", 4 * gib, 64 * gib, true, true, 4 * gib / 10 * 9, true},
		{"container above the machine", 64 * gib, 8 * gib, true, true, 6 * gib, true},
		{"machine only", 0, 24 * gib, false, true, 18 * gib, true},
		{"container only", 2 * gib, 0, true, false, 2 * gib / 10 * 9, true},
		{"neither", 0, 0, false, false, 0, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, ok := limit(c.container, c.okC, c.machine, c.okM)
			require.Equal(t, c.ok, ok)
			require.Equal(t, c.want, got)
		})
	}
}

func TestReadMemoryFiles(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte(body), 0o644))
		return p
	}
	n, ok := readMemTotal(write("meminfo", "MemFree:  100 kB\nMemTotal:       24567 kB\nSwapTotal: 0 kB\n"))
	require.True(t, ok)
	require.Equal(t, int64(24567)<<10, n)
	_, ok = readMemTotal(write("meminfo-bad", "MemTotal: lots\n"))
	require.False(t, ok)
	_, ok = readMemTotal(filepath.Join(dir, "missing"))
	require.False(t, ok)

	n, ok = readCgroupLimit(write("memory.max", "1073741824\n"))
	require.True(t, ok)
	require.Equal(t, int64(1)<<30, n)
	_, ok = readCgroupLimit(write("memory.max-none", "max\n"))
	require.False(t, ok)
}

// TestApply checks that Apply sets the GC percent and the soft memory
// limit, and leaves each alone where GOGC or GOMEMLIMIT is set.
func TestApply(t *testing.T) {
	logger := slog.New(slog.DiscardHandler)
	t.Cleanup(func() {
		debug.SetGCPercent(100)
		debug.SetMemoryLimit(math.MaxInt64)
	})
	want, known := Default()
	for _, c := range []struct {
		name             string
		gogc, gomemlimit bool
	}{
		{"neither set", false, false},
		{"GOGC set", true, false},
		{"GOMEMLIMIT set", false, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.gogc {
				t.Setenv("GOGC", "100")
			} else {
				unsetenv(t, "GOGC")
			}
			if c.gomemlimit {
				t.Setenv("GOMEMLIMIT", "off")
			} else {
				unsetenv(t, "GOMEMLIMIT")
			}
			debug.SetGCPercent(100)
			debug.SetMemoryLimit(math.MaxInt64)
			Apply(logger, 250)
			gc := debug.SetGCPercent(100)
			limit := debug.SetMemoryLimit(-1)
			if c.gogc {
				require.Equal(t, 100, gc)
			} else {
				require.Equal(t, 250, gc)
			}
			if c.gomemlimit || !known {
				require.Equal(t, int64(math.MaxInt64), limit)
			} else {
				require.Equal(t, want, limit)
			}
		})
	}
}

// unsetenv removes key from the environment for the rest of the test.
func unsetenv(t *testing.T, key string) {
	t.Setenv(key, "") // restores the old value at the end
	require.NoError(t, os.Unsetenv(key))
}
