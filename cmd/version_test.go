package cmd

import (
	"runtime/debug"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestBuildVersion(t *testing.T) {
	const rev = "e88b723eeb97eb733f9ee4f2a673ebc283b20ff7"
	vcs := func(modified string) []debug.BuildSetting {
		return []debug.BuildSetting{{Key: "vcs", Value: "git"}, {Key: "vcs.revision", Value: rev},
			{Key: "vcs.time", Value: "2026-12-04T16:16:50Z"}, {Key: "vcs.modified", Value: modified}}
	}
	tests := []struct {
		name            string
		version, commit string // as -ldflags left them
		bi              *debug.BuildInfo
		wantV, wantC    string
	}{
		{name: "no build info", version: "dev", commit: "dev", wantV: "dev", wantC: "dev"},
		{name: "go test, -buildvcs=false", version: "dev", commit: "dev",
			bi: &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}, wantV: "dev", wantC: "dev"},
		{name: "a clone", version: "dev", commit: "dev",
			bi:    &debug.BuildInfo{Main: debug.Module{Version: "v0.0.0-20261204161650-e88b723eeb97"}, Settings: vcs("false")},
			wantV: "v0.0.0-20261204161650-e88b723eeb97", wantC: "e88b723eeb97"},
		{name: "a clone with changes", version: "dev", commit: "dev",
			bi:    &debug.BuildInfo{Main: debug.Module{Version: "v0.0.0-20261204161650-e88b723eeb97+dirty"}, Settings: vcs("true")},
			wantV: "v0.0.0-20261204161650-e88b723eeb97+dirty", wantC: "e88b723eeb97 (modified)"},
		{name: "go install @version", version: "dev", commit: "dev",
			bi: &debug.BuildInfo{Main: debug.Module{Version: "v0.2.0"}}, wantV: "v0.2.0", wantC: "dev"},
		{name: "-ldflags win", version: "v0.1.0", commit: "abc1234",
			bi:    &debug.BuildInfo{Main: debug.Module{Version: "v0.0.0-20261204161650-e88b723eeb97"}, Settings: vcs("true")},
			wantV: "v0.1.0", wantC: "abc1234"},
		{name: "-ldflags version only", version: "v0.1.0", commit: "dev",
			bi: &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: vcs("false")}, wantV: "v0.1.0", wantC: "e88b723eeb97"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v, c := buildVersion(tt.version, tt.commit, tt.bi)
			require.Equal(t, tt.wantV, v)
			require.Equal(t, tt.wantC, c)
		})
	}
}
