//go:build !windows

package e2e_test

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/eddy-stream/eddy/admin/ui/uitest"
)

// dashboardPipeline runs until stopped: a generator with a rate, a step
// that sends one record in 50 to its dead letters (the modulo by zero),
// a keyed aggregate on two subtasks, a sink for each; checkpoints every
// 500ms. Each record carries markup, which the page must show as text.
const dashboardPipeline = `version: 1
name: dash
checkpoint:
  interval: 500ms
sources:
  - id: events
    type: generator
    count: 0
    rate: 200
    fields:
      i: i
      key: '"k" + string(i % 5)'
      v: i % 100
      note: '"<img src=x onerror=alert(1)>"'
steps:
  - id: scaled
    set:
      ratio: 100 % (i % 50)
    on_error: dead_letter
  - id: totals
    key_by: key
    parallelism: 2
    aggregate:
      n: count()
      total: sum(v)
sinks:
  - id: out
    from: totals
    type: file
    path: ${DASH_OUT}/
    changelog: upsert
  - id: bad
    from: scaled.errors
    type: file
    path: ${DASH_OUT}/bad/
`

// waitForAddrFile waits until the run wrote its admin endpoint's address
// to path and returns the endpoint's URL.
func waitForAddrFile(t *testing.T, p *proc, path string) string {
	t.Helper()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		if b, err := os.ReadFile(path); err == nil && strings.HasSuffix(string(b), "\n") {
			addr := strings.TrimSpace(string(b))
			if !strings.Contains(addr, "://") {
				addr = "http://" + addr
			}
			return addr
		}
		select {
		case <-tick.C:
		case <-p.done:
			t.Fatalf("eddy run ended before it wrote %s; stderr:\n%s", path, p.log.text())
		}
	}
}

// planNodeIDs returns the ids of the nodes in the run's plan, from its
// status.
func planNodeIDs(t *testing.T, url string) []string {
	t.Helper()
	resp, err := http.Get(url + "/api/status")
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var st struct {
		Nodes []struct {
			ID string `json:"id"`
		} `json:"nodes"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&st))
	ids := make([]string, 0, len(st.Nodes))
	for _, n := range st.Nodes {
		ids = append(ids, n.ID)
	}
	return ids
}

// writtenPath returns the path of the savepoint that the page's result of
// a savepoint button ("PREFIX ID written: PATH") names.
func writtenPath(t *testing.T, result, prefix string) string {
	t.Helper()
	rest, ok := strings.CutPrefix(result, prefix)
	require.True(t, ok, result)
	id, path, ok := strings.Cut(rest, " written: ")
	require.True(t, ok, result)
	_, err := strconv.ParseInt(id, 10, 64)
	require.NoError(t, err, result)
	return path
}

// completedCheckpointJS is the newest completed checkpoint the page's
// list shows, or 0.
const completedCheckpointJS = `Math.max(0, ...Array.from(document.querySelectorAll('#checkpoints tbody tr'))
  .filter((r) => r.cells[1].textContent === 'checkpoint' && r.cells[2].textContent === 'completed')
  .map((r) => Number(r.cells[0].textContent)))`

// TestDashboard runs `eddy run` on an unbounded pipeline with checkpoints
// and loads the dashboard from its admin endpoint in headless chromium:
// the graph shows every node of the plan, the source's rate becomes
// positive, the checkpoint list shows a completed checkpoint and then a
// newer one, the samples show the output and the dead letters (their
// markup as text), "Trigger savepoint" writes a savepoint that the page
// lists, and "Stop with savepoint" ends the run with exit 0 and a final
// savepoint. A screenshot is kept (EDDY_TEST_ARTIFACTS).
func TestDashboard(t *testing.T) {
	work := t.TempDir()
	state := filepath.Join(work, "state")
	file := filepath.Join(work, "dash.yaml")
	require.NoError(t, os.WriteFile(file, []byte(dashboardPipeline), 0o644))
	env := map[string]string{"EDDY_LOG_FORMAT": "json", "EDDY_STATE_DIR": state, "DASH_OUT": filepath.Join(work, "out")}

	b := uitest.New(t) // before the run: fails at once without chromium
	p := startEddy(t, work, env, "run", file)
	url := waitForAddrFile(t, p, filepath.Join(state, "dash", "admin.addr"))
	ids := planNodeIDs(t, url)
	require.ElementsMatch(t, []string{"events", "scaled", "totals", "out", "bad"}, ids)

	b.Do("load the dashboard", chromedp.Navigate(url+"/"))
	idsJSON, err := json.Marshal(ids)
	require.NoError(t, err)
	uitest.WaitFor[bool](b, "every node of the plan in the graph", `(() => {
  const shown = Array.from(document.querySelectorAll('#graph g.node .node-id'), (e) => e.textContent);
  return JSON.stringify(shown) === `+strconv.Quote(string(idsJSON))+`;
})()`)
	require.Equal(t, "dash", uitest.Eval[string](b, `document.querySelector('#name').textContent`))
	uitest.WaitFor[bool](b, "the state running", `document.querySelector('#state').textContent === 'running'`)

	rate := uitest.WaitFor[float64](b, "records out per second of the source above 0", `(() => {
  const v = parseFloat(document.querySelector('#graph g.node[data-node="events"] .rate-out').textContent);
  const row = parseFloat(document.querySelector('#subtasks tr[data-node="events"] .rate-out').textContent);
  return v > 0 && row > 0 && v;
})()`)
	t.Logf("the source's rate on the page: %g records/s", rate)

	first := uitest.WaitFor[int64](b, "a completed checkpoint", completedCheckpointJS)
	newer := uitest.WaitFor[int64](b, "a newer completed checkpoint", `(() => { const id = `+completedCheckpointJS+`; return id > `+strconv.FormatInt(first, 10)+` && id; })()`)
	require.Greater(t, newer, first)
	uitest.WaitFor[bool](b, "the chart", `document.querySelectorAll('#checkpoint-chart rect.bar').length > 1`)

	dead := uitest.WaitFor[string](b, "a dead letter", `(() => {
  const c = document.querySelector('#dead-letters .sample[data-sink="bad"] code');
  return c && c.textContent;
})()`)
	require.Contains(t, dead, `<img src=x onerror=alert(1)>`, "the record's markup is shown as text")
	require.Contains(t, dead, `"step":"scaled"`)
	uitest.WaitFor[bool](b, "an output record", `document.querySelectorAll('#output-samples .sample[data-sink="out"] li').length > 0`)
	require.Zero(t, uitest.Eval[int](b, `document.querySelectorAll('main img, main script').length`), "markup in records became elements")

	b.Do("trigger a savepoint", chromedp.Click(chromedp.CSS("#trigger-savepoint")))
	result := uitest.WaitFor[string](b, "the savepoint's result", `(() => { const s = document.querySelector('#action-result').textContent; return !s.endsWith('…') && s; })()`)
	path := writtenPath(t, result, "savepoint ")
	require.Equal(t, filepath.Join(state, "dash", "savepoints"), filepath.Dir(path))
	require.FileExists(t, path)
	listed := uitest.WaitFor[[]string](b, "the savepoint in the list", `(() => {
  const row = Array.from(document.querySelectorAll('#savepoints tbody tr'), (r) => Array.from(r.cells, (c) => c.textContent))
    .find((r) => r[5] === `+strconv.Quote(path)+`);
  return row;
})()`)
	require.Equal(t, "ok", listed[4])
	require.Empty(t, listed[2], "not final")

	b.NoProblems()
	b.Screenshot("dashboard")

	b.Answer(func(ev page.EventJavascriptDialogOpening) (bool, string) {
		return ev.Type == page.DialogTypeConfirm, ""
	})
	b.Do("stop with a savepoint", chromedp.Click(chromedp.CSS("#stop-savepoint")))
	result = uitest.WaitFor[string](b, "the stop's result", `(() => { const s = document.querySelector('#action-result').textContent; return !s.endsWith('…') && s; })()`)
	require.FileExists(t, writtenPath(t, result, "final savepoint "))
	res := p.wait(t)
	require.Equal(t, 0, res.code, "stderr:\n%s", p.log.text())
}
