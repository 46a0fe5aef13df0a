package cmd

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestMemoryLimit(t *testing.T) {
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
			got, ok := memoryLimit(c.container, c.okC, c.machine, c.okM)
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

func TestLazyReleaseEnv(t *testing.T) {
	cases := []struct {
		name    string
		env     []string
		want    []string
		changed bool
	}{
		{"no GODEBUG", []string{"A=1"}, []string{"A=1", "GODEBUG=madvdontneed=0"}, true},
		{"empty GODEBUG", []string{"GODEBUG=", "A=1"}, []string{"GODEBUG=madvdontneed=0", "A=1"}, true},
		{"other settings kept", []string{"GODEBUG=gctrace=1"}, []string{"GODEBUG=gctrace=1,madvdontneed=0"}, true},
		{"the user's choice wins", []string{"GODEBUG=madvdontneed=1"}, []string{"GODEBUG=madvdontneed=1"}, false},
		{"set among others", []string{"GODEBUG=gctrace=1,madvdontneed=0"}, []string{"GODEBUG=gctrace=1,madvdontneed=0"}, false},
		{"a longer name is another setting", []string{"GODEBUG=xmadvdontneed=1"}, []string{"GODEBUG=xmadvdontneed=1,madvdontneed=0"}, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			in := append([]string(nil), c.env...)
			got, changed := lazyReleaseEnv(in)
			require.Equal(t, c.changed, changed)
			require.Equal(t, c.want, got)
			require.Equal(t, c.env, in, "the environment passed in is not modified")
		})
	}
}

func TestGodebugSetting(t *testing.T) {
	v, ok := godebugSetting("madvdontneed=1,gctrace=1,madvdontneed=0", "madvdontneed")
	require.True(t, ok)
	require.Equal(t, "0", v, "the last one wins, as in the runtime")
	_, ok = godebugSetting("gctrace=1,madvdontneed", "madvdontneed")
	require.False(t, ok, "a name without a value sets nothing")
}
