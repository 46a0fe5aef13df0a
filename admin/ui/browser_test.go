package ui_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/eddy-stream/eddy/admin"
	"github.com/eddy-stream/eddy/admin/ui/uitest"
)

// shownJS collects what the page shows, as text, once it rendered a
// status.
const shownJS = `(() => {
  const t = (s) => { const e = document.querySelector(s); return e ? e.textContent : null; };
  const all = (s, f) => Array.from(document.querySelectorAll(s), f);
  const rows = (s) => all(s + ' tbody tr', (r) => Array.from(r.cells, (c) => c.textContent));
  const samples = (s) => all(s + ' .sample', (e) => [e.querySelector('h3').textContent, ...all2(e, 'code')]);
  const all2 = (e, s) => Array.from(e.querySelectorAll(s), (c) => c.textContent);
  const slow = document.querySelector('#graph g.node[data-node="slow"]');
  return {
    name: t('#name'), state: t('#state'), uptime: t('#uptime'), restarts: t('#restarts'),
    guarantee: t('#guarantee'), transactions: t('#transactions'), lastError: t('#last-error'),
    nodeIds: all('#graph g.node .node-id', (e) => e.textContent),
    edgeLabels: all('#graph g.edge text', (e) => e.textContent),
    chains: all('#graph g.chain', (e) => e.dataset.task),
    sourceOut: t('#graph g.node[data-node="orders"] .rate-out'),
    slowLevel: slow.querySelector('.level').textContent,
    slowClass: slow.getAttribute('class'),
    slowMore: slow.querySelector('.node-more').textContent,
    subtasks: rows('#subtasks'),
    kafkaShown: !document.querySelector('#kafka').hidden,
    kafka: rows('#kafka'),
    checkpoints: rows('#checkpoints'),
    bars: document.querySelectorAll('#checkpoint-chart rect.bar').length,
    restored: t('#restored'),
    output: samples('#output-samples'),
    dead: samples('#dead-letters'),
    markup: document.querySelectorAll('main img, main script, main b, main i, main u, header script, header b').length,
  };
})()`

// shown is what shownJS collects.
type shown struct {
	Name         string     `json:"name"`
	State        string     `json:"state"`
	Uptime       string     `json:"uptime"`
	Restarts     string     `json:"restarts"`
	Guarantee    string     `json:"guarantee"`
	Transactions string     `json:"transactions"`
	LastError    string     `json:"lastError"`
	NodeIDs      []string   `json:"nodeIds"`
	EdgeLabels   []string   `json:"edgeLabels"`
	Chains       []string   `json:"chains"`
	SourceOut    string     `json:"sourceOut"`
	SlowLevel    string     `json:"slowLevel"`
	SlowClass    string     `json:"slowClass"`
	SlowMore     string     `json:"slowMore"`
	Subtasks     [][]string `json:"subtasks"`
	KafkaShown   bool       `json:"kafkaShown"`
	Kafka        [][]string `json:"kafka"`
	Checkpoints  [][]string `json:"checkpoints"`
	Bars         int        `json:"bars"`
	Restored     string     `json:"restored"`
	Output       [][]string `json:"output"`
	Dead         [][]string `json:"dead"`
	Markup       int        `json:"markup"`
}

// TestDashboardRendersStatus loads the dashboard from a pipeline's admin
// endpoint in headless chromium, and checks what it shows of a status with
// every part: the header, the plan's nodes, edges and chains with their
// numbers and backpressure, every subtask, the Kafka partitions, the
// checkpoints and their chart, the savepoint files and the samples, with
// the markup in the user's data shown as text, never parsed.
func TestDashboardRendersStatus(t *testing.T) {
	spDir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(spDir, "broken.db"), []byte("not a savepoint"), 0o644))
	srv, err := admin.Listen(quietLogger(), "127.0.0.1:0", newFakePipeline(newFakeTarget(), spDir).Handler(), "")
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, srv.Close(context.Background())) })

	b := uitest.New(t)
	b.Do("load the dashboard", chromedp.Navigate("http://"+srv.Addr()+"/"))
	uitest.WaitFor[bool](b, "the status and the savepoint list", `document.querySelectorAll('#graph g.node').length > 0 && document.querySelectorAll('#savepoints tbody tr').length > 0`)
	got := uitest.Eval[shown](b, shownJS)

	require.Equal(t, fakeName, got.Name)
	require.Equal(t, "running", got.State)
	require.Equal(t, "1h 2m 3s", got.Uptime)
	require.Equal(t, "2", got.Restarts)
	require.Equal(t, "exactly-once", got.Guarantee)
	require.Equal(t, "8 committed, 1 aborted", got.Transactions)
	require.Equal(t, `last error: sink "out": <script>alert(1)</script> refused`, got.LastError)

	require.Equal(t, []string{"orders", enrich, "slow", "out", "bad"}, got.NodeIDs)
	require.Equal(t, []string{"chained", "hash (user)", "forward", "forward [errors]"}, got.EdgeLabels)
	require.Equal(t, []string{"0"}, got.Chains, "the one chain of two nodes is grouped")
	require.Equal(t, "2.0k", got.SourceOut, "records out per second of both source subtasks")
	require.Equal(t, "HIGH", got.SlowLevel)
	require.Contains(t, strings.Fields(got.SlowClass), "level-high")
	require.Equal(t, "wm lag 2.5 s · late 3 · state 2.0 KiB", got.SlowMore)

	require.Len(t, got.Subtasks, 7, "a row per subtask")
	slow := got.Subtasks[4]
	slow[10] = "" // the watermark, in the browser's time zone
	require.Equal(t, []string{"slow", "0", "2.0k", "2.00", "120,000", "100", "20%", "75%", "5%", "HIGH", "", "2.5 s", "3", "0", "2.0 KiB"}, slow)
	require.Equal(t, enrich, got.Subtasks[2][0])
	require.Equal(t, "4", got.Subtasks[2][13], "record errors")
	require.Equal(t, "100", got.Subtasks[5][5], "a sink's records out are those it wrote")

	require.True(t, got.KafkaShown)
	require.Equal(t, [][]string{
		{"orders", "0", "orders/0", "4,711", "12", ""},
		{"orders", "0", "orders/2", "–", "–", ""},
		{"orders", "1", "orders/1", "99", "0", "idle"},
	}, got.Kafka)

	require.Len(t, got.Checkpoints, 4, "in progress, then the history")
	for i, want := range [][]string{
		{"9", "checkpoint", "in_progress", "40 ms", "1/4", "0 B", "0 ms"},
		{"8", "checkpoint", "completed", "120 ms", "4/4", "4.0 KiB", "15 ms"},
		{"7", "checkpoint", "failed", "3.0 s", "2/4", "0 B", "0 ms"},
		{"6", "savepoint", "completed", "80 ms", "4/4", "2.0 KiB", "0 ms"},
	} {
		row := got.Checkpoints[i]
		require.Equal(t, want, []string{row[0], row[1], row[2], row[4], row[5], row[6], row[7]}, "checkpoint row %d (id, kind, status, duration, acks, size, alignment)", i)
	}
	require.Equal(t, "<u>timeout</u>", got.Checkpoints[2][8])
	require.Equal(t, 3, got.Bars, "a bar per ended checkpoint")
	require.True(t, strings.HasPrefix(got.Restored, "restored from 5 at "), got.Restored)

	require.Equal(t, [][]string{{"out", `{"n":1,"user":"<img src=x onerror=alert(1)>"}`}}, got.Output)
	require.Equal(t, [][]string{{"bad", `{"error":"</code><script>alert(2)</script>","step":"<i>enrich</i>"}`}}, got.Dead)
	require.Zero(t, got.Markup, "markup in the data became elements")

	savepoints := uitest.Eval[[][]string](b, `Array.from(document.querySelectorAll('#savepoints tbody tr'), (r) => Array.from(r.cells, (c) => c.textContent))`)
	require.Len(t, savepoints, 1)
	require.Equal(t, "corrupt", savepoints[0][4])
	require.Equal(t, filepath.Join(spDir, "broken.db"), savepoints[0][5])

	b.NoProblems()
	b.Screenshot("dashboard-fake-status")
}

// TestDashboardActionsAskForTheToken: on an endpoint with a token, the
// savepoint buttons ask for it on the first 401 and send it as a bearer
// token from then on; a wrong one is refused and asked for again. Stop
// with a savepoint asks for a confirmation and does nothing without it.
func TestDashboardActionsAskForTheToken(t *testing.T) {
	const token = "s3cret"
	target := newFakeTarget()
	spDir := t.TempDir()
	srv, err := admin.Listen(quietLogger(), "127.0.0.1:0", newFakePipeline(target, spDir).Handler(), token)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, srv.Close(context.Background())) })

	b := uitest.New(t)
	answer := func(prompt string, confirm bool) {
		b.Answer(func(ev page.EventJavascriptDialogOpening) (bool, string) {
			if ev.Type == page.DialogTypePrompt {
				return prompt != "", prompt
			}
			return confirm, ""
		})
	}
	// click clears the action's result, clicks button, waits for the
	// action's result (while it runs, the text ends with an ellipsis) and
	// requires that it starts with want.
	click := func(button, want string) string {
		t.Helper()
		uitest.Eval[chromedp.Void](b, `document.querySelector('#action-result').textContent = ''`)
		b.Do("click "+button, chromedp.Click(chromedp.CSS(button)))
		got := uitest.WaitFor[string](b, "the result of "+button, `(() => { const s = document.querySelector('#action-result').textContent; return !s.endsWith('…') && s; })()`)
		require.True(t, strings.HasPrefix(got, want), "%s: %s", button, got)
		return got
	}
	b.Do("load the dashboard", chromedp.Navigate("http://"+srv.Addr()+"/"))
	uitest.WaitFor[bool](b, "the buttons", `!document.querySelector('#actions').hidden`)

	answer("wrong", false)
	got := click("#trigger-savepoint", "savepoint failed (401)")
	require.Contains(t, got, "Authorization: Bearer")
	triggers, _ := target.calls()
	require.Empty(t, triggers)

	answer(token, false)
	require.Equal(t, "savepoint 7 written: /sp/sp-7.db", click("#trigger-savepoint", "savepoint 7"))
	answer("", false) // the token is kept: no prompt is answered from here on
	require.Equal(t, "savepoint 7 written: /sp/sp-7.db", click("#trigger-savepoint", "savepoint 7"))
	triggers, _ = target.calls()
	require.Equal(t, []string{spDir, spDir}, triggers)

	b.Do("click stop, and cancel", chromedp.Click(chromedp.CSS("#stop-savepoint")))
	answer("", true)
	require.Equal(t, "final savepoint 8 written: /sp/sp-8.db", click("#stop-savepoint", "final savepoint"))
	_, stops := target.calls()
	require.Equal(t, 1, stops, "the cancelled stop sent nothing")

	var prompts, confirms int
	for _, d := range b.Dialogs() {
		switch {
		case strings.HasPrefix(d, "prompt: "):
			prompts++
		case strings.HasPrefix(d, "confirm: Stop "+fakeName+" with a savepoint?"):
			confirms++
		default:
			t.Errorf("unexpected dialog %q", d)
		}
	}
	require.Equal(t, 2, prompts, "the token is asked for on the first 401 and after a refused one only")
	require.Equal(t, 2, confirms)
	b.NoProblems("401 (Unauthorized)")
}

// servePipeline is a checkpointed unbounded pipeline for eddy serve.
const servePipeline = `version: 1
name: steady
checkpoint:
  interval: 200ms
sources:
  - id: numbers
    type: generator
    rate: 100
    fields:
      i: i
sinks:
  - id: out
    type: blackhole
`

// TestDashboardUnderServe: at / of eddy serve the dashboard lists the
// pipelines with their state and, for an invalid file, its problems at
// FILE:LINE:COL; each links to its own page under /pipelines/NAME/, which
// shows that pipeline and links back.
func TestDashboardUnderServe(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "steady.yaml"), []byte(servePipeline), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "broken.yaml"), []byte("version: 1\nname: broken\nsources: [{id: s, type: nope}]\n"), 0o644))
	m, err := admin.NewManager(admin.ServeOptions{Dir: dir, StateDir: t.TempDir(), Logger: quietLogger()})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan struct{})
	go func() {
		defer close(ran)
		m.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-ran
	})
	srv, err := admin.Listen(quietLogger(), "127.0.0.1:0", m.Handler(), "")
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, srv.Close(context.Background())) })
	root := "http://" + srv.Addr()

	b := uitest.New(t)
	b.Do("load the dashboard", chromedp.Navigate(root+"/"))
	rows := uitest.WaitFor[[][]string](b, "both pipelines, steady running", `(() => {
  const rows = Array.from(document.querySelectorAll('#pipelines tbody tr'), (r) => Array.from(r.cells, (c) => c.textContent));
  return rows.length === 2 && rows.some((r) => r[0] === 'steady' && r[1] === 'running') && rows;
})()`)
	require.Equal(t, "eddy serve", uitest.Eval[string](b, `document.querySelector('#name').textContent`))
	require.Equal(t, []string{"broken", "invalid"}, rows[0][:2])
	require.Regexp(t, `broken\.yaml:3:\d+: .*nope`, rows[0][2])
	href := uitest.Eval[string](b, `Array.from(document.querySelectorAll('#pipelines a')).find((a) => a.textContent === 'steady').getAttribute('href')`)
	require.Equal(t, "/pipelines/steady/", href)
	// The page tells eddy serve's endpoint by its 404 to GET /api/status.
	b.NoProblems(root + "/api/status:1: error: Failed to load resource: the server responded with a status of 404")

	b.Do("open steady", chromedp.Navigate(root+href))
	uitest.WaitFor[bool](b, "steady's page", `document.querySelector('#name').textContent === 'steady' &&
  Array.from(document.querySelectorAll('#graph .node-id'), (e) => e.textContent).join() === 'numbers,out'`)
	back := uitest.Eval[string](b, `(() => { const a = document.querySelector('#all-pipelines'); return a.hidden ? '' : a.getAttribute('href'); })()`)
	require.Equal(t, "/", back)
	b.NoProblems(root + "/api/status:1: error: Failed to load resource: the server responded with a status of 404")
}
