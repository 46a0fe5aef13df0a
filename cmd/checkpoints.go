package cmd

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/eddy-stream/eddy/pipeline"
	"github.com/eddy-stream/eddy/statestore"
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

// openCheckpoints opens the pipeline's checkpoint store and finds what the
// run restores from: a savepoint, the latest valid checkpoint (an unreadable
// one falls back to the previous, with a warning), or nothing.
func openCheckpoints(ctx context.Context, logger *slog.Logger, spec *pipeline.Spec, dir string, o restoreOptions, in io.Reader, out io.Writer) (
	store *statestore.CheckpointStore, restore *statestore.Checkpoint, next int64, err error,
) {
	// A store damaged beyond its checksums makes bbolt panic or fault:
	// that is a failure to report (exit 1), not a crash.
	err = guardStore(dir, func() error {
		var gerr error
		store, restore, next, gerr = findRestore(ctx, logger, spec, dir, o, in, out)
		return gerr
	})
	return store, restore, next, err
}

func findRestore(ctx context.Context, logger *slog.Logger, spec *pipeline.Spec, dir string, o restoreOptions, in io.Reader, out io.Writer) (
	store *statestore.CheckpointStore, restore *statestore.Checkpoint, next int64, err error,
) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, nil, 0, fmt.Errorf("create state dir: %w", err)
	}
	if o.fresh {
		if err := discardCheckpoints(dir, o.yes, in, out); err != nil {
			return nil, nil, 0, err
		}
	}
	store, err = statestore.OpenCheckpointStore(dir, statestore.CheckpointStoreOptions{Retain: spec.Checkpoint.Retain, Logger: logger})
	if err != nil {
		return nil, nil, 0, fmt.Errorf("open checkpoints in %s: %w", dir, err)
	}
	list, err := store.List()
	if err != nil {
		_ = store.Close(ctx)
		return nil, nil, 0, fmt.Errorf("list checkpoints in %s: %w", dir, err)
	}
	for _, c := range list {
		next = max(next, c.ID+1)
	}
	switch {
	case o.fromSavepoint != "":
		var spID int64
		restore, spID, next, err = importSavepoint(ctx, store, o.fromSavepoint, max(next, 1))
		if err != nil {
			_ = store.Close(ctx)
			return nil, nil, 0, err
		}
		logger.Info("restoring from savepoint", "path", o.fromSavepoint, "checkpoint", spID, "imported_as", restore.ID())
	default:
		restore, err = store.Latest(ctx)
		switch {
		case errors.Is(err, statestore.ErrNoCheckpoint):
			logger.Info("no checkpoint to restore: starting from the beginning", "state_dir", dir)
			return store, nil, max(next, 1), nil
		case err != nil:
			_ = store.Close(ctx)
			return nil, nil, 0, fmt.Errorf("restore from %s: %w (eddy never starts fresh on its own: fix or move the state dir, or run with --fresh)", dir, err)
		}
		deltas := 0
		for _, p := range restore.Parts() {
			if p.Base != 0 {
				deltas++
			}
		}
		logger.Info("restoring from checkpoint", "checkpoint", restore.ID(), "completed", restore.CompletedAt(), "delta_parts", deltas)
	}
	if h := restore.Meta().FileHash; h != "" && h != spec.Hash {
		logger.Warn("the pipeline file changed since the checkpoint was taken; state is matched by step id", "checkpoint", restore.ID())
	}
	return store, restore, next, nil
}

// importSavepoint copies the savepoint at path into the store as a
// completed checkpoint with an id after every other (next, or the
// savepoint's id + 1 if larger) and returns it, read back from the store,
// the savepoint's own id, and the id after the copy. The run restores from that copy: if it crashes
// before its first checkpoint, a plain restart restores the savepoint
// again, not an older checkpoint of the store.
func importSavepoint(ctx context.Context, store *statestore.CheckpointStore, path string, next int64) (restore *statestore.Checkpoint, spID, after int64, err error) {
	sp, err := statestore.OpenSavepoint(path)
	if err != nil {
		return nil, 0, 0, fmt.Errorf("open savepoint %s: %w", path, err)
	}
	defer func() { _ = sp.Close() }()
	id := max(next, sp.ID()+1)
	meta := sp.Meta()
	p, err := store.Begin(id, statestore.CheckpointMeta{Pipeline: meta.Pipeline, FileHash: meta.FileHash, Time: meta.Time, Committables: meta.Committables})
	if err != nil {
		return nil, 0, 0, fmt.Errorf("import savepoint %s as checkpoint %d: %w", path, id, err)
	}
	for _, part := range sp.Parts() {
		b, err := sp.Get(part.Name)
		if err == nil {
			err = p.Put(part.Name, b)
		}
		if err != nil {
			_ = p.Abort()
			return nil, 0, 0, fmt.Errorf("import savepoint %s: part %s: %w", path, part.Name, err)
		}
	}
	if err := p.Complete(ctx); err != nil {
		return nil, 0, 0, fmt.Errorf("import savepoint %s as checkpoint %d: %w", path, id, err)
	}
	restore, err = store.Latest(ctx)
	if err != nil {
		return nil, 0, 0, fmt.Errorf("read back savepoint %s imported as checkpoint %d: %w", path, id, err)
	}
	if restore.ID() != id {
		_ = restore.Close()
		return nil, 0, 0, fmt.Errorf("savepoint %s imported as checkpoint %d, but the newest valid checkpoint is %d", path, id, restore.ID())
	}
	return restore, sp.ID(), id + 1, nil
}

// warnAlreadyFinished says why a run that restored checkpoint id and
// ended by itself read nothing: the pipeline had finished before, its
// bounded sources resumed at the end of their input.
func warnAlreadyFinished(logger *slog.Logger, id int64) {
	logger.Warn("already finished: restored from the checkpoint, the sources resumed at the end of their input and read nothing; eddy run --fresh runs it again from the beginning",
		"checkpoint", id)
}

// discardCheckpoints removes the checkpoint store of dir, after the user
// confirmed (or --yes).
func discardCheckpoints(dir string, yes bool, in io.Reader, out io.Writer) error {
	path := filepath.Join(dir, statestore.CheckpointFileName)
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if !yes {
		fmt.Fprintf(out, "--fresh discards every checkpoint in %s. Continue? [y/N] ", dir)
		answer, _ := bufio.NewReader(in).ReadString('\n')
		if a := strings.ToLower(strings.TrimSpace(answer)); a != "y" && a != "yes" {
			return invalidInput("not confirmed: the checkpoints in %s are kept (add --yes to skip the question)", dir)
		}
	}
	for _, f := range []string{path, path + ".owner"} {
		if err := os.Remove(f); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("discard checkpoints: %w", err)
		}
	}
	return nil
}
