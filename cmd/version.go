package cmd

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// Version and Commit are set at build time:
//
//	go build -ldflags "-X github.com/eddy-stream/eddy/cmd.Version=v0.1.0 -X github.com/eddy-stream/eddy/cmd.Commit=$(git rev-parse --short HEAD)"
//
// Left at "dev", they are read from what the Go toolchain recorded in the
// binary (buildVersion).
var (
	Version = "dev"
	Commit  = "dev"
)

// unset is the value of Version and Commit that no -ldflags set.
const unset = "dev"

// versionOptions are the flags of `eddy version` (none yet).
type versionOptions struct{}

// AddFlags adds nothing: version has no flags of its own.
func (o *versionOptions) AddFlags(*pflag.FlagSet) {}

func newVersionCommand() *cobra.Command {
	o := &versionOptions{}
	c := &cobra.Command{
		Use:   "version",
		Short: "Print eddy's version, commit and Go version (also eddy --version)",
		Args:  exactArgs(0, "no arguments"),
		RunE: func(c *cobra.Command, _ []string) error {
			return o.run(c)
		},
	}
	o.AddFlags(c.Flags())
	return c
}

func (o *versionOptions) run(c *cobra.Command) error {
	if _, err := fmt.Fprint(c.OutOrStdout(), versionText()); err != nil {
		return runtimeFailure(err)
	}
	return nil
}

// versionText is the output of `eddy version` and `eddy --version`.
func versionText() string {
	bi, _ := debug.ReadBuildInfo()
	version, commit := buildVersion(Version, Commit, bi)
	return fmt.Sprintf("eddy %s\ncommit: %s\ngo: %s %s/%s\n", version, commit, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}

// buildVersion returns the version and commit to print: version and
// commit when -ldflags set them, else what bi records. `go install
// ...@v0.1.0` records the module's version; `go build` in a clone a
// pseudo-version (v0.0.0-<commit time>-<commit>, +dirty when the work tree
// has changes) and the revision, of which the commit is the first 12
// characters, with "(modified)" when the work tree had changes. Without
// any (go test, -buildvcs=false, a copy without .git) they stay "dev".
func buildVersion(version, commit string, bi *debug.BuildInfo) (string, string) {
	if bi == nil {
		return version, commit
	}
	if v := bi.Main.Version; version == unset && v != "" && v != "(devel)" {
		version = v
	}
	if commit != unset {
		return version, commit
	}
	var rev string
	modified := false
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			modified = s.Value == "true"
		}
	}
	if rev == "" {
		return version, commit
	}
	commit = rev[:min(len(rev), 12)]
	if modified {
		commit += " (modified)"
	}
	return version, commit
}
