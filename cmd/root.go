package cmd

import (
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"github.com/spf13/viper"

	// Every connector and step kind registers itself in pipeline.Default.
	_ "github.com/eddy-stream/eddy/connectors/all"
	_ "github.com/eddy-stream/eddy/operators"
)

// envPrefix prefixes the environment variable of every setting:
// --log-level is EDDY_LOG_LEVEL.
const envPrefix = "EDDY"

// Execute runs the eddy command line with os.Args and returns the exit code.
func Execute() int {
	return ExecuteCommand(NewRootCommand())
}

// ExecuteCommand runs root (with the arguments, input and outputs set on
// it) and returns the exit code: 0 ok, 1 runtime failure, 2 invalid input.
// Errors not yet reported are written to root's stderr.
func ExecuteCommand(root *cobra.Command) int {
	c, err := root.ExecuteC()
	if err == nil {
		return exitOK
	}
	if !errors.Is(err, errReported) {
		fmt.Fprintf(root.ErrOrStderr(), "eddy: %v\n", err)
		if isUsageError(err) && c != nil {
			fmt.Fprintf(root.ErrOrStderr(), "Run '%s --help' for usage.\n", c.CommandPath())
		}
	}
	return exitCode(err)
}

// NewRootCommand returns the eddy command with its subcommands. Each call
// has its own viper instance, so commands built in tests do not share
// settings.
func NewRootCommand() *cobra.Command {
	g := &globalOptions{v: newViper()}

	root := &cobra.Command{
		Use:   "eddy",
		Short: "Run stream-processing pipelines described in YAML files",
		Long: `eddy runs stream-processing pipelines described in YAML files, with
Flink's semantics (event time, watermarks, windows, keyed state) in one
process.

  eddy validate pipeline.yaml     check a pipeline file
  eddy explain pipeline.yaml      show its physical plan
  eddy run pipeline.yaml          run it (SIGINT/SIGTERM stop it gracefully)
  eddy serve --dir pipelines/     run every pipeline file of a folder

The settings --log-level, --log-format, --state-dir and --admin-addr can
also be set with EDDY_LOG_LEVEL, EDDY_LOG_FORMAT, EDDY_STATE_DIR and
EDDY_ADMIN_ADDR; a flag wins over the environment. --env-file FILE
(EDDY_ENV_FILE) sets the KEY=value lines of FILE in the environment,
except variables set already to another value; eddy run reads it again
on SIGHUP.

Exit codes: 0 ok, 1 the pipeline (or the command) failed while it ran,
2 invalid input (pipeline file, state, flags or arguments). Only a mistake
in the flags or arguments is followed by "Run '... --help' for usage."`,
		SilenceErrors: true,
		SilenceUsage:  true,
		// --version prints what `eddy version` does.
		Version: versionText(),
	}
	root.SetVersionTemplate("{{.Version}}")
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error {
		return usageError("%w", err)
	})
	g.AddFlags(root.PersistentFlags())
	g.addCompletions(root)
	addEnvFileFlag(g.v, root.PersistentFlags())
	root.PersistentPreRunE = func(*cobra.Command, []string) (err error) {
		g.env, err = loadEnvFile(g.v)
		return err
	}

	root.AddCommand(
		newRunCommand(g),
		newDevCommand(),
		newValidateCommand(),
		newExplainCommand(),
		newSchemaCommand(),
		newVersionCommand(),
		newHealthCommand(g),
		newServeCommand(g),
	)
	root.AddCommand(newCheckpointsCommand(g))
	root.AddCommand(newSavepointCommand(g))
	root.AddCommand(newStateCommand(g))
	root.AddCommand(newGroupCommand())
	root.AddCommand(newBenchCommand(g))
	asRuntimeFailure(root)
	return root
}

// newViper returns a viper instance that reads EDDY_<KEY> for the
// settings bound to it.
func newViper() *viper.Viper {
	v := viper.New()
	v.SetEnvPrefix(envPrefix)
	v.SetEnvKeyReplacer(strings.NewReplacer("-", "_"))
	return v
}

// bindFlag makes viper read key from the flag of the same name, then from
// EDDY_<KEY>, then from the flag's default.
func bindFlag(v *viper.Viper, fs *pflag.FlagSet, key string) {
	if err := v.BindPFlag(key, fs.Lookup(key)); err != nil {
		panic(fmt.Sprintf("bind flag --%s: %v", key, err)) // a programming error
	}
	if err := v.BindEnv(key); err != nil {
		panic(fmt.Sprintf("bind env of --%s: %v", key, err))
	}
}

// envName returns the environment variable of a setting.
func envName(key string) string {
	return envPrefix + "_" + strings.ToUpper(strings.ReplaceAll(key, "-", "_"))
}

// yamlExtensions are the extensions shells complete pipeline files with.
var yamlExtensions = []string{"yaml", "yml"}

// pipelineFiles completes the one pipeline file of run and explain.
func pipelineFiles(_ *cobra.Command, args []string, _ string) ([]string, cobra.ShellCompDirective) {
	if len(args) > 0 {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	return yamlExtensions, cobra.ShellCompDirectiveFilterFileExt
}

// exactArgs is cobra.ExactArgs with the command's usage in the message.
func exactArgs(n int, what string) cobra.PositionalArgs {
	return func(c *cobra.Command, args []string) error {
		if len(args) != n {
			return usageError("%s takes %s, got %d argument(s)", c.CommandPath(), what, len(args))
		}
		return nil
	}
}
