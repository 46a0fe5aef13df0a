// Package uitest drives the dashboard in a real headless browser for tests
// (admin/ui's and e2e's): Debian's chromium package, started through
// chromedp. A test that needs it fails when chromium is not installed:
// .ci/run installs it.
package uitest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
)

// hangTimeout bounds a test's browser session so that a page that never
// gets where a test waits for fails the test instead of hanging it; no
// assertion depends on how long anything takes.
const hangTimeout = 3 * time.Minute

// ArtifactsEnv names the directory where tests keep their screenshots
// (CI keeps it); without it they go to the test's temporary directory.
const ArtifactsEnv = "EDDY_TEST_ARTIFACTS"

// Browser is a headless chromium tab of one test.
type Browser struct {
	t   testing.TB
	ctx context.Context

	mu       sync.Mutex
	problems []string
	dialogs  []string
	// answer answers the page's dialogs (confirm, prompt).
	answer func(page.EventJavascriptDialogOpening) (accept bool, text string)
}

// New starts chromium headless, 1400 pixels wide, with a blank tab that
// the test's cleanup closes. It records the page's uncaught exceptions and
// error messages (NoProblems) and dismisses its dialogs until Answer says
// otherwise.
func New(t testing.TB) *Browser {
	t.Helper()
	path, err := exec.LookPath("chromium")
	if err != nil {
		t.Fatalf("the dashboard tests load the page in Debian's chromium, which is not installed: apt-get install chromium (.ci/run installs it): %v", err)
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(path), chromedp.WindowSize(1400, 1000))
	if os.Geteuid() == 0 {
		opts = append(opts, chromedp.NoSandbox) // chromium refuses to run as root with its sandbox
	}
	hang, cancelHang := context.WithTimeout(context.Background(), hangTimeout)
	alloc, cancelAlloc := chromedp.NewExecAllocator(hang, opts...)
	ctx, cancel := chromedp.NewContext(alloc)
	t.Cleanup(func() {
		cancel()
		cancelAlloc()
		cancelHang()
	})
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("start %s: %v", path, err)
	}
	b := &Browser{t: t, ctx: ctx, answer: func(page.EventJavascriptDialogOpening) (bool, string) { return false, "" }}
	b.watch()
	return b
}

// Context is the tab's chromedp context.
func (b *Browser) Context() context.Context { return b.ctx }

// watch records the page's problems and answers its dialogs, until the
// tab ends.
func (b *Browser) watch() {
	console := chromedp.Console(b.ctx)
	dialogs := chromedp.Events(b.ctx, page.JavascriptDialogOpening)
	go func() {
		for m, err := range console {
			if err != nil {
				return
			}
			if m.Type == chromedp.ConsoleException || m.Type == chromedp.ConsoleError {
				b.mu.Lock()
				b.problems = append(b.problems, fmt.Sprintf("%s:%d: %s: %s", m.URL, m.Line+1, m.Type, m.Text))
				b.mu.Unlock()
			}
		}
	}()
	go func() {
		for ev, err := range dialogs {
			if err != nil {
				return
			}
			b.mu.Lock()
			b.dialogs = append(b.dialogs, string(ev.Type)+": "+ev.Message)
			answer := b.answer
			b.mu.Unlock()
			accept, text := answer(ev)
			_, _ = chromedp.Call(b.ctx, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: accept, PromptText: text})
		}
	}()
}

// Answer makes the tab answer the page's dialogs with answer from now on.
func (b *Browser) Answer(answer func(page.EventJavascriptDialogOpening) (accept bool, text string)) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.answer = answer
}

// Dialogs returns the dialogs the page opened so far ("TYPE: MESSAGE").
func (b *Browser) Dialogs() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.dialogs...)
}

// NoProblems fails the test if the page threw an uncaught exception or
// logged an error (a failed request, a refused script or style), other
// than those that contain one of expected.
func (b *Browser) NoProblems(expected ...string) {
	b.t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	var problems []string
	for _, p := range b.problems {
		if !slices.ContainsFunc(expected, func(e string) bool { return strings.Contains(p, e) }) {
			problems = append(problems, p)
		}
	}
	if len(problems) > 0 {
		b.t.Fatalf("the page reported problems:\n%s", strings.Join(problems, "\n"))
	}
}

// Do runs actions in the tab, failing the test on an error.
func (b *Browser) Do(what string, actions ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	if err := chromedp.Do(b.ctx, actions...); err != nil {
		b.t.Fatalf("%s: %v", what, err)
	}
}

// WaitFor waits until the JavaScript expression expr is truthy in the
// page, evaluating it at once and after every change of the DOM, and
// returns its value. what says what the test waits for.
//
// Should the page never get there, the wait ends a little before the
// session's hang timeout, so that the failure can show the page's text.
func WaitFor[T any](b *Browser, what, expr string) T {
	b.t.Helper()
	ctx := b.ctx
	if deadline, ok := ctx.Deadline(); ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, deadline.Add(-hangTimeout/10))
		defer cancel()
	}
	v, err := chromedp.Run(ctx, chromedp.Poll[T](expr, chromedp.WithPollingMutation(), chromedp.WithPollingTimeout(0)))
	if err != nil {
		text, _ := chromedp.Run(b.ctx, chromedp.Evaluate[string](`document.body.innerText`))
		b.t.Fatalf("waiting for %s (%s): %v\nthe page shows:\n%s", what, expr, err, text)
	}
	return v
}

// Eval returns the value of the JavaScript expression expr in the page.
func Eval[T any](b *Browser, expr string) T {
	b.t.Helper()
	v, err := chromedp.Run(b.ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		b.t.Fatalf("evaluate %s: %v", expr, err)
	}
	return v
}

// Screenshot saves a PNG of the whole page as name.png in the directory
// that EDDY_TEST_ARTIFACTS names, else in the test's temporary directory,
// logs its path and returns it.
func (b *Browser) Screenshot(name string) string {
	b.t.Helper()
	png, err := chromedp.Run(b.ctx, chromedp.FullScreenshot(100))
	if err != nil {
		b.t.Fatalf("screenshot: %v", err)
	}
	dir := os.Getenv(ArtifactsEnv)
	if dir == "" {
		dir = b.t.TempDir()
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		b.t.Fatalf("screenshot: %v", err)
	}
	path, err := filepath.Abs(filepath.Join(dir, name+".png"))
	if err != nil {
		b.t.Fatalf("screenshot: %v", err)
	}
	if err := os.WriteFile(path, png, 0o644); err != nil {
		b.t.Fatalf("screenshot: %v", err)
	}
	b.t.Logf("screenshot of the dashboard: %s", path)
	return path
}
