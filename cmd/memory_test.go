package cmd

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/eddy-stream/eddy/pipeline"
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

func TestHugePagesReservation(t *testing.T) {
	for _, c := range []struct {
		setting   string
		heapState bool
		want      int64
	}{
		{"auto", true, ReserveToLimit},
		{"auto", false, 0},
		{"", true, 0},
		{"on", false, ReserveToLimit},
		{"off", true, 0},
		{"8GiB", false, 8 << 30},
		{" 512MiB ", true, 512 << 20},
	} {
		got, err := hugePagesReservation(c.setting, c.heapState)
		require.NoError(t, err)
		require.Equal(t, c.want, got, "setting %q, heap state %v", c.setting, c.heapState)
	}
	for _, bad := range []string{"yes", "0", "-1GiB", "8 parsecs"} {
		_, err := hugePagesReservation(bad, true)
		require.ErrorContains(t, err, "want auto, on, off or a size such as 8GiB", bad)
	}
}

func TestHeapKeyedState(t *testing.T) {
	plan := func(src string) *pipeline.Plan {
		spec, err := pipeline.Load(pipeline.Default, "p.yaml", []byte(src))
		require.NoError(t, err)
		p, err := pipeline.Compile(spec)
		require.NoError(t, err)
		return p
	}
	const keyed = `version: 1
name: p
sources:
  - id: in
    type: generator
    count: 1
    fields: {k: "1"}
steps:
  - id: per_k
    key_by: k
    window: {type: tumbling, size: 1m}
    aggregate: {n: count()}
sinks:
  - id: out
    type: blackhole
    from: per_k
`
	require.True(t, heapKeyedState(plan(keyed)))
	require.False(t, heapKeyedState(plan(keyed+"state:\n  backend: bbolt\n")))
	require.False(t, heapKeyedState(plan(strings.Replace(keyed, "key_by: k\n    window: {type: tumbling, size: 1m}\n    aggregate: {n: count()}", "filter: k == \"1\"", 1))))
}
