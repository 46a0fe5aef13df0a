package cmd

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/eddy-stream/eddy/checkpoint"
	"github.com/eddy-stream/eddy/pipeline"
)

// stateDir returns the state directory of a pipeline: the file's state.dir,
// else the runner's --state-dir, with a sub-directory per pipeline name.
func stateDir(spec *pipeline.Spec, runnerDir string) string {
	dir := spec.State.Dir
	if dir == "" {
		dir = runnerDir
	}
	return filepath.Join(dir, spec.Name)
}

// restoreOptions are the restore flags of `eddy run`.
type restoreOptions struct {
	fresh         bool
	yes           bool
	fromSavepoint string
	allowDropped  bool
}

// warnAlreadyFinished says why a run that restored checkpoint id and
// ended by itself read nothing: the pipeline had finished before, its
// bounded sources resumed at the end of their input.
func warnAlreadyFinished(logger *slog.Logger, id int64) {
	logger.Warn("already finished: restored from the checkpoint, the sources resumed at the end of their input and read nothing; eddy run --fresh runs it again from the beginning",
		"checkpoint", id)
}

// confirmFresh asks the user whether --fresh may discard the checkpoint
// store of dir, unless there is none or --yes was given; the runner
// discards it.
func confirmFresh(dir string, yes bool, in io.Reader, out io.Writer) error {
	path := filepath.Join(dir, checkpoint.FileName)
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) || yes {
		return nil
	}
	fmt.Fprintf(out, "--fresh discards every checkpoint in %s. Continue? [y/N] ", dir)
	answer, _ := bufio.NewReader(in).ReadString('\n')
	if a := strings.ToLower(strings.TrimSpace(answer)); a != "y" && a != "yes" {
		return invalidInput("not confirmed: the checkpoints in %s are kept (add --yes to skip the question)", dir)
	}
	return nil
}
