package cmd

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/eddy-stream/eddy/pipeline"
)

// runStatus is the json output of `checkpoints status`: the admin
// endpoint's GET /checkpoints with the run's health.
type runStatus struct {
	Pipeline string `json:"pipeline"`
	Status   string `json:"status"`
	pipeline.CheckpointStats
}

func (o *checkpointsOptions) status(c *cobra.Command, file string) error {
	if o.format != "text" && o.format != "json" {
		return usageError("--format %q: want text or json", o.format)
	}
	plan, err := loadPlan(c.ErrOrStderr(), file)
	if err != nil {
		return err
	}
	spec := plan.Spec
	if spec.Checkpoint == nil {
		return invalidInput("%s: pipeline %q has no checkpoint block, so eddy run takes no checkpoints of it", file, spec.Name)
	}
	addr, addrPath, err := runningAdmin(spec.Name, o.stateDirFor(c, spec))
	if err != nil {
		return err
	}
	out := runStatus{Pipeline: spec.Name}
	var health struct {
		Status string `json:"status"`
	}
	for _, q := range []struct {
		path string
		v    any
	}{{"/healthz", &health}, {"/checkpoints", &out.CheckpointStats}} {
		if err := getJSON(c, addr+q.path, q.v); err != nil {
			return runtimeFailure(fmt.Errorf("checkpoints of pipeline %q: no answer from the eddy at %s (from %s; did it crash?): %w", spec.Name, addr, addrPath, err))
		}
	}
	out.Status = health.Status
	return writeList(c.OutOrStdout(), o.format, out, func(w io.Writer) error { return writeStatusText(w, out) })
}

// getJSON decodes the JSON answer of a GET of url into v; /healthz answers
// 503 with its JSON while the run starts or waits to restart.
func getJSON(c *cobra.Command, url string, v any) error {
	req, err := http.NewRequestWithContext(c.Context(), http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusServiceUnavailable {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		return fmt.Errorf("GET %s: %w", url, err)
	}
	return nil
}

func writeStatusText(w io.Writer, s runStatus) error {
	fmt.Fprintf(w, "pipeline %s: %s\n", s.Pipeline, s.Status)
	if r := s.Restored; r != nil {
		fmt.Fprintf(w, "started from checkpoint %d at %s\n", r.ID, r.At.UTC().Format(listTimeFormat))
	} else {
		fmt.Fprintln(w, "started without a checkpoint")
	}
	table := func(title string, rows []pipeline.CheckpointRecord) error {
		fmt.Fprintf(w, "\n%s:\n", title)
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tKIND\tSTATUS\tTRIGGERED\tDURATION\tACKNOWLEDGED\tSTATE\tERROR")
		for _, r := range rows {
			kind := r.Kind
			if r.Final {
				kind += " (final)"
			}
			state := ""
			if r.StateBytes > 0 {
				state = humanBytes(r.StateBytes)
			}
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%d/%d\t%s\t%s\n", r.ID, kind, r.Status, r.Triggered.UTC().Format(listTimeFormat),
				(time.Duration(r.DurationMS) * time.Millisecond).String(), r.Acknowledged, r.Tasks, state, r.Error)
		}
		return tw.Flush()
	}
	if len(s.InProgress) > 0 {
		if err := table("in progress", s.InProgress); err != nil {
			return err
		}
	}
	if len(s.History) == 0 {
		_, err := fmt.Fprintln(w, "\nno checkpoint has ended yet")
		return err
	}
	if err := table("recent, newest first", s.History); err != nil {
		return err
	}
	if f := s.LatestFailed; f != nil && f.ID < s.History[len(s.History)-1].ID {
		return table("latest failed", []pipeline.CheckpointRecord{*f})
	}
	return nil
}
