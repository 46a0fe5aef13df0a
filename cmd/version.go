package cmd

import (
	"fmt"
	"runtime"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// Version and Commit are set at build time:
//
//	go build -ldflags "-X github.com/eddy-stream/eddy/cmd.Version=v0.1.0 -X github.com/eddy-stream/eddy/cmd.Commit=$(git rev-parse --short HEAD)"
var (
	Version = "dev"
	Commit  = "dev"
)

// versionOptions are the flags of `eddy version` (none yet).
type versionOptions struct{}

// AddFlags adds nothing: version has no flags of its own.
func (o *versionOptions) AddFlags(*pflag.FlagSet) {}

func newVersionCommand() *cobra.Command {
	o := &versionOptions{}
	c := &cobra.Command{
		Use:   "version",
		Short: "Print eddy's version, commit and Go version",
		Args:  exactArgs(0, "no arguments"),
		RunE: func(c *cobra.Command, _ []string) error {
			return o.run(c)
		},
	}
	o.AddFlags(c.Flags())
	return c
}

func (o *versionOptions) run(c *cobra.Command) error {
	if _, err := fmt.Fprintf(c.OutOrStdout(), "eddy %s\ncommit: %s\ngo: %s %s/%s\n",
		Version, Commit, runtime.Version(), runtime.GOOS, runtime.GOARCH); err != nil {
		return runtimeFailure(err)
	}
	return nil
}
