package cmd

import (
	"io"
	"log/slog"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"github.com/spf13/viper"
)

// Settings of every command, read through viper (flag, then EDDY_*, then default).
const (
	keyLogLevel  = "log-level"
	keyLogFormat = "log-format"
)

// globalOptions are the root command's persistent flags.
type globalOptions struct {
	v *viper.Viper
	// env is the --env-file applied, nil without one.
	env *envFile
	// level is the level of the logger newLogger returned; SIGHUP sets it
	// again (reloadLogLevel).
	level slog.LevelVar
}

// AddFlags adds --log-level and --log-format and binds them to viper.
func (o *globalOptions) AddFlags(fs *pflag.FlagSet) {
	fs.String(keyLogLevel, "info", "log level: debug, info, warn or error (env "+envName(keyLogLevel)+")")
	fs.String(keyLogFormat, "text", "log format on stderr: text or json (env "+envName(keyLogFormat)+")")
	bindFlag(o.v, fs, keyLogLevel)
	bindFlag(o.v, fs, keyLogFormat)
}

// addCompletions completes the values of the flags AddFlags added.
func (o *globalOptions) addCompletions(c *cobra.Command) {
	_ = c.RegisterFlagCompletionFunc(keyLogLevel, cobra.FixedCompletions([]string{"debug", "info", "warn", "error"}, cobra.ShellCompDirectiveNoFileComp))
	_ = c.RegisterFlagCompletionFunc(keyLogFormat, cobra.FixedCompletions([]string{"text", "json"}, cobra.ShellCompDirectiveNoFileComp))
}

// logLevels are the accepted --log-level values.
var logLevels = map[string]slog.Level{
	"debug": slog.LevelDebug,
	"info":  slog.LevelInfo,
	"warn":  slog.LevelWarn,
	"error": slog.LevelError,
}

// logLevel returns the --log-level setting. A bad level is invalid input.
func (o *globalOptions) logLevel() (slog.Level, error) {
	levelName := strings.ToLower(strings.TrimSpace(o.v.GetString(keyLogLevel)))
	level, ok := logLevels[levelName]
	if !ok {
		return 0, usageError("log level %q: want debug, info, warn or error (--%s or %s)",
			o.v.GetString(keyLogLevel), keyLogLevel, envName(keyLogLevel))
	}
	return level, nil
}

// newLogger returns the logger of a run, writing to w (stderr), at the
// level o.level holds. A bad level or format is invalid input.
func (o *globalOptions) newLogger(w io.Writer) (*slog.Logger, error) {
	level, err := o.logLevel()
	if err != nil {
		return nil, err
	}
	o.level.Set(level)
	opts := &slog.HandlerOptions{Level: &o.level}
	switch format := strings.ToLower(strings.TrimSpace(o.v.GetString(keyLogFormat))); format {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, usageError("log format %q: want text or json (--%s or %s)",
		o.v.GetString(keyLogFormat), keyLogFormat, envName(keyLogFormat))
}
