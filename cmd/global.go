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

// newLogger returns the logger of a run, writing to w (stderr). A bad level
// or format is invalid input.
func (o *globalOptions) newLogger(w io.Writer) (*slog.Logger, error) {
	levelName := strings.ToLower(strings.TrimSpace(o.v.GetString(keyLogLevel)))
	level, ok := logLevels[levelName]
	if !ok {
		return nil, usageError("log level %q: want debug, info, warn or error (--%s or %s)",
			o.v.GetString(keyLogLevel), keyLogLevel, envName(keyLogLevel))
	}
	opts := &slog.HandlerOptions{Level: level}
	switch format := strings.ToLower(strings.TrimSpace(o.v.GetString(keyLogFormat))); format {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, usageError("log format %q: want text or json (--%s or %s)",
		o.v.GetString(keyLogFormat), keyLogFormat, envName(keyLogFormat))
}
