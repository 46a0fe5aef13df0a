// Package cmd is eddy's command line: the cobra commands (run, serve,
// validate, explain, schema, checkpoints, savepoint, state, group, bench,
// health, version, dev; cobra's completion), their flags, the EDDY_* environment variables read
// through viper (and the --env-file that sets them), what `eddy run` and
// `eddy serve` tell systemd, and what `eddy run` draws on a terminal.
//
// cmd is the only package that uses viper and the only one that knows about
// exit codes: 0 ok, 1 runtime failure, 2 invalid input (an invalid pipeline
// file, a bad flag or argument). It imports pipeline, operators and
// connectors/all (for their registrations), and no connector package: what
// it needs of a connector (decoding a source's position, the job's
// standard streams) goes through pipeline's registry and interfaces.
// Nothing imports cmd except main.
package cmd
