package cmd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/eddy-stream/eddy/checkpoint"
	"github.com/eddy-stream/eddy/pipeline"
)

// defaultStateDir is the runner's state directory when neither --state-dir
// nor EDDY_STATE_DIR says otherwise; `eddy run` has the same default.
const defaultStateDir = "./eddy-state"

// checkpointsOptions are the flags of `eddy checkpoints list|export`.
type checkpointsOptions struct {
	global   *globalOptions
	stateDir string
	format   string
}

// AddFlags adds --state-dir to the checkpoints command and its
// subcommands. It is not bound to viper: viper binds a setting to one
// flag, and that is run's --state-dir; stateDirFor reads
// EDDY_STATE_DIR through it.
func (o *checkpointsOptions) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.stateDir, keyStateDir, "", "directory for checkpoints and state, as for eddy run (default: "+envName(keyStateDir)+", else "+defaultStateDir+")")
}

// addListFlags adds --format to `checkpoints list`.
func (o *checkpointsOptions) addListFlags(fs *pflag.FlagSet) {
	fs.StringVarP(&o.format, "format", "f", "text", "output format: text or json")
}

func newCheckpointsCommand(g *globalOptions) *cobra.Command {
	o := &checkpointsOptions{global: g}
	c := &cobra.Command{
		Use:   "checkpoints",
		Short: "List a pipeline's checkpoints and export one as a savepoint",
		Long: `Checkpoints shows and exports the checkpoints that eddy run takes of a
pipeline with a checkpoint block. They live in the checkpoint store
<state dir>/<pipeline name>/checkpoints.db; the state dir is the pipeline
file's state.dir, else --state-dir, else EDDY_STATE_DIR, else ./eddy-state,
as for eddy run.

  eddy checkpoints list pipeline.yaml                 newest first, each verified
  eddy checkpoints export pipeline.yaml 42 sp.db      checkpoint 42 as a savepoint
  eddy checkpoints export pipeline.yaml latest sp.db  the checkpoint run would restore
  eddy run --from-savepoint sp.db pipeline.yaml       restore it
  eddy checkpoints status pipeline.yaml               the running eddy's recent ones

The store is locked while eddy run holds it: list and export need the
pipeline stopped; status asks the running process instead.`,
		Args: exactArgs(0, "a subcommand: list, export or status"),
		RunE: func(c *cobra.Command, _ []string) error { return c.Help() },
	}
	o.AddFlags(c.PersistentFlags())

	list := &cobra.Command{
		Use:   "list FILE",
		Short: "List the checkpoints of the pipeline in FILE, newest first",
		Long: `List prints the checkpoints in the store of the pipeline in FILE, newest
first: the id, when it completed, the size of its parts, the number of
parts, and its status. Every checkpoint is verified as eddy run would
before restoring it (every byte of every part is read and checked):

  ok          complete and valid
  corrupt     complete, but it does not verify (the error says why); eddy run
              skips it and falls back to the previous one, with a warning
  incomplete  being written, or left by a crash (eddy run deletes it)

The last line says which checkpoint eddy run restores. --format json prints

  {"pipeline": "name", "store": "path", "restore": 42 or null,
   "checkpoints": [{"id": 42, "triggered": "RFC 3339", "completed": "RFC 3339",
                    "size": bytes, "parts": n, "status": "ok", "error": "..."}]}

with "completed" and "error" omitted when they do not apply. Exit codes:
0 ok (also when checkpoints are corrupt), 1 the store cannot be read
(locked by a running pipeline, damaged), 2 invalid file or flags.`,
		Args:              exactArgs(1, "one pipeline file"),
		ValidArgsFunction: pipelineFiles,
		RunE: func(c *cobra.Command, args []string) error {
			return o.list(c, args[0])
		},
	}
	o.addListFlags(list.Flags())
	_ = list.RegisterFlagCompletionFunc("format", cobra.FixedCompletions([]string{"text", "json"}, cobra.ShellCompDirectiveNoFileComp))

	export := &cobra.Command{
		Use:   "export FILE ID PATH",
		Short: "Write checkpoint ID of the pipeline in FILE as a savepoint file PATH",
		Long: `Export writes completed checkpoint ID (a number, or "latest": the newest
that verifies, the one eddy run would restore) of the pipeline in FILE as a
savepoint: one self-contained file at PATH that
eddy run --from-savepoint PATH FILE restores, also on another machine or
with another state dir. The checkpoint is verified as it is copied, so a
corrupt checkpoint is not exported. PATH is written to PATH.tmp, fsynced
and renamed, so it is either complete or absent; an existing PATH is not
overwritten.

A savepoint holds the sources' positions, the steps' state and the file
sinks' pre-committed part files, which name files in the sinks' output
directories: restore it where those directories are.

Exit codes: 0 ok, 1 the export failed (a corrupt checkpoint, a store
locked by a running pipeline, a write error), 2 invalid file or arguments
(no such checkpoint, PATH exists).`,
		Args:              exactArgs(3, "a pipeline file, a checkpoint id and a savepoint path"),
		ValidArgsFunction: pipelineFiles,
		RunE: func(c *cobra.Command, args []string) error {
			return o.export(c, args[0], args[1], args[2])
		},
	}
	status := &cobra.Command{
		Use:   "status FILE",
		Short: "Show the recent checkpoints of the running pipeline in FILE",
		Long: `Status asks the eddy run process of the pipeline in FILE for its recent
checkpoints and savepoints, through its admin endpoint (found as eddy
savepoint trigger finds it): whether it runs, the checkpoint its job
started from, the checkpoints in progress (with the tasks that have
acknowledged them: one that does not is where a checkpoint is stuck), the
last ten that ended, newest first, and the newest that failed, with its
error. --format json prints the endpoint's GET /checkpoints answer
(docs/checkpoints.md, "Checkpoint metrics") with "status" added.

Exit codes: 0 ok, 1 no running pipeline was found or it did not answer,
2 invalid file or flags.`,
		Args:              exactArgs(1, "one pipeline file"),
		ValidArgsFunction: pipelineFiles,
		RunE: func(c *cobra.Command, args []string) error {
			return o.status(c, args[0])
		},
	}
	o.addListFlags(status.Flags())
	_ = status.RegisterFlagCompletionFunc("format", cobra.FixedCompletions([]string{"text", "json"}, cobra.ShellCompDirectiveNoFileComp))
	c.AddCommand(list, export, status)
	return c
}

// stateDirFor returns the pipeline's state directory: the file's
// state.dir, else --state-dir, else EDDY_STATE_DIR, else the default.
func (o *checkpointsOptions) stateDirFor(c *cobra.Command, spec *pipeline.Spec) string {
	runnerDir := o.stateDir
	if f := c.Flags().Lookup(keyStateDir); f == nil || !f.Changed {
		// run's flag is never set here: viper gives EDDY_STATE_DIR, else
		// run's default.
		runnerDir = o.global.v.GetString(keyStateDir)
	}
	if runnerDir == "" {
		runnerDir = defaultStateDir
	}
	return stateDir(spec, runnerDir)
}

// openStore loads the pipeline file and opens its checkpoint store, or
// returns a nil store when there is none (nothing is created).
func (o *checkpointsOptions) openStore(c *cobra.Command, file string) (spec *pipeline.Spec, dir string, store *checkpoint.Store, err error) {
	logger, err := o.global.newLogger(c.ErrOrStderr())
	if err != nil {
		return nil, "", nil, err
	}
	plan, err := loadPlan(c.ErrOrStderr(), file)
	if err != nil {
		return nil, "", nil, err
	}
	spec = plan.Spec
	if spec.Checkpoint == nil {
		return nil, "", nil, invalidInput("%s: pipeline %q has no checkpoint block, so eddy run takes no checkpoints of it", file, spec.Name)
	}
	dir = o.stateDirFor(c, spec)
	if _, err := os.Stat(filepath.Join(dir, checkpoint.FileName)); errors.Is(err, fs.ErrNotExist) {
		return spec, dir, nil, nil
	}
	logger = logger.With("pipeline", spec.Name)
	err = checkpoint.Guard(dir, func() error {
		var err error
		store, err = checkpoint.Open(dir, checkpoint.Options{Retain: spec.Checkpoint.Retain, Logger: logger})
		return err
	})
	if errors.Is(err, checkpoint.ErrStateDirLocked) {
		return nil, "", nil, runtimeFailure(fmt.Errorf("open the checkpoints of %q: %w (while it runs, eddy checkpoints status %s shows its recent checkpoints)", spec.Name, err, file))
	}
	if err != nil {
		return nil, "", nil, runtimeFailure(fmt.Errorf("open the checkpoints of %q: %w", spec.Name, err))
	}
	return spec, dir, store, nil
}

// checkpointRow is one checkpoint of `checkpoints list`; the json format
// is a list of them.
type checkpointRow struct {
	ID        int64      `json:"id"`
	Triggered time.Time  `json:"triggered"`
	Completed *time.Time `json:"completed,omitempty"`
	Size      int64      `json:"size"`
	Parts     int        `json:"parts"`
	// Bases are the checkpoints whose parts its delta parts build on
	// (checkpoint.incremental).
	Bases  []int64 `json:"bases,omitempty"`
	Status string  `json:"status"`
	Error  string  `json:"error,omitempty"`
}

// checkpointList is the json output of `checkpoints list`.
type checkpointList struct {
	Pipeline    string          `json:"pipeline"`
	Store       string          `json:"store"`
	Restore     *int64          `json:"restore"`
	Checkpoints []checkpointRow `json:"checkpoints"`
}

// Statuses of a listed checkpoint.
const (
	statusOK         = "ok"
	statusCorrupt    = "corrupt"
	statusIncomplete = "incomplete"
)

func (o *checkpointsOptions) list(c *cobra.Command, file string) error {
	if o.format != "text" && o.format != "json" {
		return usageError("--format %q: want text or json", o.format)
	}
	spec, dir, store, err := o.openStore(c, file)
	if err != nil {
		return err
	}
	out := checkpointList{Pipeline: spec.Name, Store: filepath.Join(dir, checkpoint.FileName), Checkpoints: []checkpointRow{}}
	if store != nil {
		defer func() { _ = store.Close(context.WithoutCancel(c.Context())) }()
		err = checkpoint.Guard(dir, func() error {
			out.Checkpoints, err = listCheckpoints(c.Context(), store)
			return err
		})
		if err != nil {
			return runtimeFailure(fmt.Errorf("list the checkpoints of %q: %w", spec.Name, err))
		}
	}
	for _, r := range out.Checkpoints {
		if r.Status == statusOK {
			id := r.ID
			out.Restore = &id
			break
		}
	}
	return writeList(c.OutOrStdout(), o.format, out, func(w io.Writer) error { return writeCheckpointsText(w, out) })
}

// writeList writes a list command's result v: indented JSON with format
// json, else as text writes it.
func writeList(w io.Writer, format string, v any, text func(io.Writer) error) error {
	var err error
	if format == "json" {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		err = enc.Encode(v)
	} else {
		err = text(w)
	}
	if err != nil {
		return runtimeFailure(fmt.Errorf("write the list: %w", err))
	}
	return nil
}

// listCheckpoints returns the store's checkpoints, newest first, each
// verified.
func listCheckpoints(ctx context.Context, store *checkpoint.Store) ([]checkpointRow, error) {
	infos, err := store.List()
	if err != nil {
		return nil, err
	}
	rows := make([]checkpointRow, 0, len(infos))
	for _, info := range infos {
		r := checkpointRow{ID: info.ID, Triggered: info.Time.UTC(), Size: info.Size, Parts: info.Parts, Status: statusIncomplete}
		if info.Complete {
			cp, err := store.Checkpoint(ctx, info.ID)
			switch {
			case err == nil:
				completed := cp.CompletedAt().UTC()
				r.Completed, r.Size, r.Parts, r.Status = &completed, cp.Size(), len(cp.Parts()), statusOK
				for _, p := range cp.Parts() {
					if p.Base != 0 && !slices.Contains(r.Bases, p.Base) {
						r.Bases = append(r.Bases, p.Base)
					}
				}
				slices.Sort(r.Bases)
				_ = cp.Close()
			case ctx.Err() != nil:
				return nil, ctx.Err()
			default:
				r.Status, r.Error = statusCorrupt, err.Error()
			}
		}
		rows = append(rows, r)
	}
	return rows, nil
}

func writeCheckpointsText(w io.Writer, l checkpointList) error {
	if len(l.Checkpoints) == 0 {
		_, err := fmt.Fprintf(w, "no checkpoints of pipeline %s in %s: eddy run starts from the beginning\n", l.Pipeline, l.Store)
		return err
	}
	fmt.Fprintf(w, "checkpoints of pipeline %s in %s, newest first:\n\n", l.Pipeline, l.Store)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tCOMPLETED\tSIZE\tPARTS\tDELTA ON\tSTATUS")
	for _, r := range l.Checkpoints {
		completed := "-"
		if r.Completed != nil {
			completed = r.Completed.Format(listTimeFormat)
		}
		status := r.Status
		if r.Error != "" {
			status += ": " + r.Error
		}
		bases := "-"
		if len(r.Bases) > 0 {
			ids := make([]string, len(r.Bases))
			for i, b := range r.Bases {
				ids[i] = strconv.FormatInt(b, 10)
			}
			bases = strings.Join(ids, ",")
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t%s\t%s\n", r.ID, completed, humanBytes(r.Size), r.Parts, bases, status)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	var err error
	if l.Restore != nil {
		_, err = fmt.Fprintf(w, "\neddy run restores checkpoint %d.\n", *l.Restore)
	} else {
		_, err = fmt.Fprintf(w, "\nno checkpoint verifies: eddy run fails rather than start from the beginning (restore from a savepoint, or eddy run --fresh).\n")
	}
	return err
}

// listTimeFormat is RFC 3339 in UTC with milliseconds.
const listTimeFormat = "2006-01-02T15:04:05.000Z07:00"

// humanBytes formats a size with a binary unit: 512 B, 1.5 KiB, 3.0 MiB.
func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return strconv.FormatInt(n, 10) + " B"
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

func (o *checkpointsOptions) export(c *cobra.Command, file, idArg, path string) error {
	id, latest := int64(0), strings.EqualFold(idArg, "latest")
	if !latest {
		var err error
		if id, err = strconv.ParseInt(idArg, 10, 64); err != nil || id <= 0 {
			return usageError("checkpoint id %q: want a positive number (eddy checkpoints list %s shows them) or latest", idArg, file)
		}
	}
	spec, dir, store, err := o.openStore(c, file)
	if err != nil {
		return err
	}
	if store == nil {
		return invalidInput("pipeline %q has no checkpoints in %s", spec.Name, dir)
	}
	defer func() { _ = store.Close(context.WithoutCancel(c.Context())) }()
	var size int64
	err = checkpoint.Guard(dir, func() error {
		if latest {
			cp, err := store.Latest(c.Context())
			if err != nil {
				return err
			}
			id = cp.ID()
			_ = cp.Close()
		}
		if err := store.ExportSavepoint(id, path); err != nil {
			return err
		}
		if st, err := os.Stat(path); err == nil {
			size = st.Size()
		}
		return nil
	})
	switch {
	case errors.Is(err, checkpoint.ErrNoCheckpoint) && !latest:
		return invalidInput("pipeline %q has no completed checkpoint %d in %s (eddy checkpoints list %s shows them)", spec.Name, id, dir, file)
	case errors.Is(err, checkpoint.ErrNoCheckpoint):
		return invalidInput("pipeline %q has no completed checkpoint in %s", spec.Name, dir)
	case errors.Is(err, fs.ErrExist):
		return invalidInput("%s exists: not overwriting it (choose another path, or remove it)", path)
	case err != nil:
		return runtimeFailure(err)
	}
	_, err = fmt.Fprintf(c.OutOrStdout(), "exported checkpoint %d of pipeline %s to %s (%s)\nrestore it with: eddy run --from-savepoint %s %s\n",
		id, spec.Name, path, humanBytes(size), path, file)
	if err != nil {
		return runtimeFailure(err)
	}
	return nil
}
