package cmd

import (
	"errors"
	"fmt"
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
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// invalidInput returns an error that exits 2 after printing err.
func invalidInput(format string, args ...any) error {
	return &exitError{code: exitInvalid, err: fmt.Errorf(format, args...)}
}

// runtimeFailure returns an error that exits 1 after printing err.
func runtimeFailure(err error) error {
	return &exitError{code: exitFailure, err: err}
}

// reported returns an error that exits with code and prints nothing more.
func reported(code int) error {
	return &exitError{code: code, err: errReported}
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
