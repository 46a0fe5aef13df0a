package cmd

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"
)

// Exit codes of the eddy binary.
const (
	exitOK      = 0
	exitFailure = 1 // the pipeline failed at run time
	exitInvalid = 2 // invalid input: a pipeline file, a flag, an argument
)

// errReported marks an error whose details the command already wrote to
// stderr (problems of a pipeline file, a failure in the run's log): Execute
// only turns it into an exit code.
var errReported = errors.New("already reported")

// exitError carries the exit code of a failed command.
type exitError struct {
	code int
	err  error
	// usage marks a mistake in the command line (a flag, an argument):
	// Execute points at the command's --help after the message.
	usage bool
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// invalidInput returns an error that exits 2 after printing err: input
// that cannot be used (a pipeline file, a state dir, a savepoint).
func invalidInput(format string, args ...any) error {
	return &exitError{code: exitInvalid, err: fmt.Errorf(format, args...)}
}

// usageError returns an error that exits 2 after printing err and where
// the command's help is: a flag or argument the command cannot take.
func usageError(format string, args ...any) error {
	return &exitError{code: exitInvalid, err: fmt.Errorf(format, args...), usage: true}
}

// runtimeFailure returns an error that exits 1 after printing err.
func runtimeFailure(err error) error {
	return &exitError{code: exitFailure, err: err}
}

// reported returns an error that exits with code and prints nothing more.
func reported(code int) error {
	return &exitError{code: code, err: errReported}
}

// isUsageError tells whether err is a mistake in the command line: a
// usageError, or an error of cobra's own (an unknown command or flag); a
// command's other errors are *exitError (asRuntimeFailure).
func isUsageError(err error) bool {
	var ee *exitError
	if errors.As(err, &ee) {
		return ee.usage
	}
	return true
}

// asRuntimeFailure makes every error that the RunE of c or of its
// subcommands returns without an exit code a runtime failure (exit 1):
// invalid input is marked where it is found, so that an error not marked
// is one that happened while the command ran.
func asRuntimeFailure(c *cobra.Command) {
	if run := c.RunE; run != nil {
		c.RunE = func(c *cobra.Command, args []string) error {
			err := run(c, args)
			var ee *exitError
			if err != nil && !errors.As(err, &ee) {
				return runtimeFailure(err)
			}
			return err
		}
	}
	for _, sub := range c.Commands() {
		asRuntimeFailure(sub)
	}
}

// exitCode maps the error of a command to the process's exit code. Errors
// that are not an *exitError come from cobra itself (an unknown command or
// flag, a wrong number of arguments): invalid input.
func exitCode(err error) int {
	if err == nil {
		return exitOK
	}
	var ee *exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	return exitInvalid
}
