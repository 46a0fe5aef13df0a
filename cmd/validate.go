package cmd

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// validateOptions are the flags of `eddy validate` (none yet).
type validateOptions struct{}

// AddFlags adds nothing: validate has no flags of its own.
func (o *validateOptions) AddFlags(*pflag.FlagSet) {}

func newValidateCommand() *cobra.Command {
	o := &validateOptions{}
	c := &cobra.Command{
		Use:   "validate FILE...",
		Short: "Check pipeline files without running them",
		Long: `Validate loads each FILE as eddy run would, without running it: YAML
syntax, keys, types, ids and from: references, cycles, expressions and
every component's own checks, then the physical plan.

Each problem is written to stderr as FILE:LINE:COL: message. A valid file is
reported on stdout as "FILE: ok". Exit codes: 0 every file is valid, 2 at
least one is not.`,
		Args: func(c *cobra.Command, args []string) error {
			if len(args) == 0 {
				return usageError("%s takes one or more pipeline files", c.CommandPath())
			}
			return nil
		},
		ValidArgsFunction: func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
			return yamlExtensions, cobra.ShellCompDirectiveFilterFileExt
		},
		RunE: func(c *cobra.Command, args []string) error {
			return o.run(c, args)
		},
	}
	o.AddFlags(c.Flags())
	return c
}

func (o *validateOptions) run(c *cobra.Command, files []string) error {
	failed := false
	for _, file := range files {
		if _, err := loadPlan(c.ErrOrStderr(), file); err != nil {
			failed = true
			if !errors.Is(err, errReported) {
				fmt.Fprintf(c.ErrOrStderr(), "eddy: %v\n", err)
			}
			continue
		}
		fmt.Fprintf(c.OutOrStdout(), "%s: ok\n", file)
	}
	if failed {
		return reported(exitInvalid)
	}
	return nil
}
