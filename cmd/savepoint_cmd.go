package cmd

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/eddy-stream/eddy/admin"
)

// savepointOptions are the flags of `eddy savepoint trigger|list`.
type savepointOptions struct {
	global   *globalOptions
	stateDir string
	pipeline string
	dir      string
	stop     bool
	format   string
}

// AddFlags adds --state-dir and --pipeline to the savepoint command and
// its subcommands. --state-dir is not bound to viper (run's flag is):
// EDDY_STATE_DIR is read through run's binding, as by `eddy checkpoints`.
func (o *savepointOptions) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.stateDir, keyStateDir, "", "directory for checkpoints and state, as for eddy run (default: "+envName(keyStateDir)+", else "+defaultStateDir+")")
	fs.StringVarP(&o.pipeline, "pipeline", "p", "", "the pipeline's name, instead of its file (its state dir is then --state-dir/NAME)")
}

// addTriggerFlags adds --dir and --stop to `savepoint trigger`.
func (o *savepointOptions) addTriggerFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.dir, "dir", "", "write the savepoint into this directory (default: <state dir>/<pipeline>/savepoints)")
	fs.BoolVar(&o.stop, "stop", false, "stop the pipeline with the savepoint (its final checkpoint)")
}

// addListFlags adds --format to `savepoint list`.
func (o *savepointOptions) addListFlags(fs *pflag.FlagSet) {
	fs.StringVarP(&o.format, "format", "f", "text", "output format: text or json")
}

func newSavepointCommand(g *globalOptions) *cobra.Command {
	o := &savepointOptions{global: g}
	c := &cobra.Command{
		Use:   "savepoint",
		Short: "Take a savepoint of a running pipeline, or list its savepoints",
		Long: `Savepoint takes savepoints of a pipeline that eddy run is running, through
the run's admin endpoint, and lists the savepoint files of a pipeline.

  eddy savepoint trigger pipeline.yaml          a savepoint; prints its path
  eddy savepoint trigger --stop pipeline.yaml   stop the pipeline with a savepoint
  eddy savepoint list pipeline.yaml             the savepoint files, newest first
  eddy run --from-savepoint PATH pipeline.yaml  restore one

The pipeline is named by its file or by --pipeline NAME; its state dir is
the file's state.dir, else --state-dir, else EDDY_STATE_DIR, else
./eddy-state, as for eddy run. Savepoints are written to
<state dir>/<pipeline>/savepoints unless --dir says otherwise.`,
		Args: exactArgs(0, "a subcommand: trigger or list"),
		RunE: func(c *cobra.Command, _ []string) error { return c.Help() },
	}
	o.AddFlags(c.PersistentFlags())

	trigger := &cobra.Command{
		Use:   "trigger [FILE]",
		Short: "Take a savepoint of the running pipeline in FILE (or --pipeline NAME)",
		Long: `Trigger asks the eddy run process of the pipeline for a savepoint and
prints the path of the savepoint file once it is written. The process is
found through <state dir>/<pipeline>/admin.addr, which eddy run writes while
its admin endpoint (--admin-addr) is on.

A savepoint is an aligned checkpoint (also with mode: at_least_once), taken
like the periodic ones (it waits for checkpoint.max_concurrent and
min_pause), then written as one self-contained file:
<dir>/savepoint-<id>-<time>.db. Checkpoint retention never removes it.
With --stop the pipeline stops gracefully and its final checkpoint is the
savepoint (stop-with-savepoint); the command returns once the run ended.

Exit codes: 0 ok, 1 no running pipeline was found or the savepoint failed,
2 invalid file or flags.`,
		Args:              cobra.MaximumNArgs(1),
		ValidArgsFunction: pipelineFiles,
		RunE: func(c *cobra.Command, args []string) error {
			return o.trigger(c, args)
		},
	}
	o.addTriggerFlags(trigger.Flags())

	list := &cobra.Command{
		Use:   "list [FILE]",
		Short: "List the savepoint files of the pipeline in FILE (or --pipeline NAME)",
		Long: `List prints the savepoint files in <state dir>/<pipeline>/savepoints, newest
first: the checkpoint id, when it was triggered, the pipeline's name and
file hash (which file the savepoint was taken with), whether it verifies,
and the path. Every file is verified as eddy run --from-savepoint would
(every byte of every part is read and checked). --format json prints

  {"pipeline": "name", "dir": "path",
   "savepoints": [{"id": 42, "time": "RFC 3339", "pipeline": "name",
                   "file_hash": "...", "final": false, "size": bytes,
                   "path": "...", "status": "ok", "error": "..."}]}

Savepoints written elsewhere (trigger --dir, checkpoints export) are not
listed. Exit codes: 0 ok (also when a file is corrupt), 1 the directory
cannot be read, 2 invalid file or flags.`,
		Args:              cobra.MaximumNArgs(1),
		ValidArgsFunction: pipelineFiles,
		RunE: func(c *cobra.Command, args []string) error {
			return o.list(c, args)
		},
	}
	o.addListFlags(list.Flags())
	_ = list.RegisterFlagCompletionFunc("format", cobra.FixedCompletions([]string{"text", "json"}, cobra.ShellCompDirectiveNoFileComp))
	c.AddCommand(trigger, list)
	return c
}

// target returns the pipeline's name and state dir, from FILE or
// --pipeline.
func (o *savepointOptions) target(c *cobra.Command, args []string) (name, dir string, err error) {
	switch {
	case len(args) == 1 && o.pipeline != "":
		return "", "", usageError("%s takes a pipeline file or --pipeline NAME, not both", c.CommandPath())
	case len(args) == 0 && o.pipeline == "":
		return "", "", usageError("%s takes a pipeline file or --pipeline NAME", c.CommandPath())
	case o.pipeline != "":
		if strings.ContainsAny(o.pipeline, `/\`) || o.pipeline == "." || o.pipeline == ".." {
			return "", "", usageError("--pipeline %q: want the pipeline's name (its file's name: key), not a path", o.pipeline)
		}
		return o.pipeline, filepath.Join(o.runnerStateDir(c), o.pipeline), nil
	}
	plan, err := loadPlan(c.ErrOrStderr(), args[0])
	if err != nil {
		return "", "", err
	}
	spec := plan.Spec
	if spec.Checkpoint == nil {
		return "", "", invalidInput("%s: pipeline %q has no checkpoint block, so it takes no savepoints", args[0], spec.Name)
	}
	runner := spec.State.Dir
	if runner == "" {
		runner = o.runnerStateDir(c)
	}
	return spec.Name, filepath.Join(runner, spec.Name), nil
}

// runnerStateDir is --state-dir, else EDDY_STATE_DIR, else the default.
func (o *savepointOptions) runnerStateDir(c *cobra.Command) string {
	if f := c.Flags().Lookup(keyStateDir); f != nil && f.Changed {
		return o.stateDir
	}
	return cmp.Or(o.global.v.GetString(keyStateDir), defaultStateDir)
}

func (o *savepointOptions) trigger(c *cobra.Command, args []string) error {
	name, dir, err := o.target(c, args)
	if err != nil {
		return err
	}
	addr, addrPath, err := runningAdmin(name, dir)
	if err != nil {
		return err
	}
	q := url.Values{}
	if o.dir != "" {
		abs, err := filepath.Abs(o.dir)
		if err != nil {
			return usageError("--dir %q: %v", o.dir, err)
		}
		q.Set("dir", abs)
	}
	if o.stop {
		q.Set("stop", "true")
	}
	req, err := http.NewRequestWithContext(c.Context(), http.MethodPost, addr+"/savepoints?"+q.Encode(), nil)
	if err != nil {
		return runtimeFailure(fmt.Errorf("savepoint of pipeline %q: %w", name, err))
	}
	if token := strings.TrimSpace(os.Getenv(admin.TokenEnv)); token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return runtimeFailure(fmt.Errorf("savepoint of pipeline %q: no eddy answers at %s (from %s; did it crash?): %w", name, addr, addrPath, err))
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return runtimeFailure(fmt.Errorf("savepoint of pipeline %q: read the answer: %w", name, err))
	}
	if resp.StatusCode != http.StatusOK {
		var e admin.ErrorReply
		if json.Unmarshal(body, &e) != nil || e.Error == "" {
			e.Error = fmt.Sprintf("%s: %s", resp.Status, strings.TrimSpace(string(body)))
		}
		return runtimeFailure(fmt.Errorf("savepoint of pipeline %q failed: %s", name, e.Error))
	}
	var sp admin.SavepointReply
	if err := json.Unmarshal(body, &sp); err != nil || sp.Path == "" {
		return runtimeFailure(fmt.Errorf("savepoint of pipeline %q: unexpected answer %q", name, body))
	}
	if _, err := fmt.Fprintln(c.OutOrStdout(), sp.Path); err != nil {
		return runtimeFailure(err)
	}
	return nil
}

// runningAdmin returns the base URL of the admin endpoint of the running
// pipeline name with state dir dir (http://HOST:PORT for eddy run,
// http://HOST:PORT/pipelines/NAME under eddy serve), and the file it read
// it from.
func runningAdmin(name, dir string) (base, addrPath string, err error) {
	addrPath = filepath.Join(dir, adminAddrFile)
	b, err := os.ReadFile(addrPath)
	if errors.Is(err, fs.ErrNotExist) {
		return "", "", runtimeFailure(fmt.Errorf("no running eddy of pipeline %q: %s does not exist (eddy run writes it while it runs with its admin endpoint on; check the state dir)", name, addrPath))
	}
	if err != nil {
		return "", "", runtimeFailure(fmt.Errorf("find the running eddy of pipeline %q: %w", name, err))
	}
	base = strings.TrimSpace(string(b))
	if !strings.HasPrefix(base, "http://") {
		base = "http://" + base
	}
	return base, addrPath, nil
}

func (o *savepointOptions) list(c *cobra.Command, args []string) error {
	if o.format != "text" && o.format != "json" {
		return usageError("--format %q: want text or json", o.format)
	}
	name, dir, err := o.target(c, args)
	if err != nil {
		return err
	}
	out := admin.SavepointList{Pipeline: name, Dir: filepath.Join(dir, savepointsDir)}
	if out.Savepoints, err = admin.ListSavepoints(out.Dir); err != nil {
		return runtimeFailure(err)
	}
	return writeList(c.OutOrStdout(), o.format, out, func(w io.Writer) error { return writeSavepointsText(w, out) })
}

func writeSavepointsText(w io.Writer, l admin.SavepointList) error {
	if len(l.Savepoints) == 0 {
		_, err := fmt.Fprintf(w, "no savepoints of pipeline %s in %s\n", l.Pipeline, l.Dir)
		return err
	}
	fmt.Fprintf(w, "savepoints of pipeline %s in %s, newest first:\n\n", l.Pipeline, l.Dir)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tTIME\tPIPELINE\tFILE HASH\tPATH\tSTATUS")
	for _, r := range l.Savepoints {
		id, at, name, hash, status := "-", "-", "-", "-", r.Status
		if r.Status == statusOK {
			id, at, name = fmt.Sprint(r.ID), r.Time.Format(listTimeFormat), r.Pipeline
			if r.FileHash != "" {
				hash = r.FileHash[:min(len(r.FileHash), 12)]
			}
			if r.Final {
				status += " (final)"
			}
		} else {
			status += ": " + r.Error
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", id, at, name, hash, r.Path, status)
	}
	return tw.Flush()
}
