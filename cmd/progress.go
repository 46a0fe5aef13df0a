package cmd

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/term"

	"github.com/eddy-stream/eddy/pipeline"
)

// The progress line of `eddy run`: for a bounded pipeline run on a
// terminal, one line on stderr, drawn again in place twice a second, says
// how many records the sources read, how fast, how much of the input that
// is and when the input will end:
//
//	1,234,567 records read  45,321/s  42.3%  ETA 1m05s
//
// Log lines go above it (the line is cleared, the log written, the line
// drawn again), and it is cleared when the run ends. There is none when
// stderr is not a terminal, with --quiet or with --log-format json.

const (
	// progressInterval is how often the line is drawn.
	progressInterval = 500 * time.Millisecond
	// rateWindow is how far back the rate looks.
	rateWindow = 5 * time.Second
	// eraseLine returns to the start of the line and erases it.
	eraseLine = "\r\x1b[K"
)

// progressWanted tells whether a run draws the progress line: a bounded
// pipeline, stderr a terminal, text logs, not --quiet.
func progressWanted(bounded, terminal, quiet bool, logFormat string) bool {
	return bounded && terminal && !quiet && strings.EqualFold(strings.TrimSpace(logFormat), "text")
}

// terminalFd returns the file descriptor of w when w is a terminal.
func terminalFd(w io.Writer) (int, bool) {
	f, ok := w.(interface{ Fd() uintptr })
	if !ok {
		return 0, false
	}
	fd := int(f.Fd())
	return fd, term.IsTerminal(fd)
}

// bounded tells whether every source of spec ends.
func bounded(spec *pipeline.Spec) bool {
	for _, s := range spec.Sources {
		if b, ok := s.Config.(pipeline.Bounded); !ok || !b.Bounded() {
			return false
		}
	}
	return true
}

// progressLine is stderr with the progress line at its bottom: a log
// written through it goes above the line.
type progressLine struct {
	mu    sync.Mutex
	w     io.Writer
	shown string // the line on screen; "" when none
}

// Write writes p (whole log lines) above the progress line.
func (l *progressLine) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.shown == "" {
		return l.w.Write(p)
	}
	if _, err := io.WriteString(l.w, eraseLine); err != nil {
		return 0, err
	}
	n, err := l.w.Write(p)
	if err == nil {
		_, err = io.WriteString(l.w, l.shown+"\x1b[K")
	}
	return n, err
}

// set draws line in place of the one shown.
func (l *progressLine) set(line string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.shown = line
	_, _ = io.WriteString(l.w, "\r"+line+"\x1b[K")
}

// clear erases the line shown.
func (l *progressLine) clear() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.shown != "" {
		_, _ = io.WriteString(l.w, eraseLine)
		l.shown = ""
	}
}

// progressOutput returns where the run's log goes: stderr itself, or,
// when a progress line may be drawn on it (a terminal, text logs, not
// --quiet), stderr under a progressLine.
func (o *runOptions) progressOutput(stderr io.Writer) io.Writer {
	if _, terminal := terminalFd(stderr); !progressWanted(true, terminal, o.quiet, o.global.v.GetString(keyLogFormat)) {
		return stderr
	}
	return &progressLine{w: stderr}
}

// startProgress draws the progress line of r's run on out, if out is a
// progressLine and the pipeline bounded, until the function it returns
// is called; that clears the line.
func startProgress(out io.Writer, r *pipeline.Runner, m *pipeline.Metrics) (stop func()) {
	l, ok := out.(*progressLine)
	if !ok || !bounded(r.Plan().Spec) {
		return func() {}
	}
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		var meter progressMeter
		tick := time.NewTicker(progressInterval)
		defer tick.Stop()
		for {
			select {
			case now := <-tick.C:
				f, known := inputFraction(r.Progress())
				line := meter.line(progressSample{at: now, records: recordsRead(r.Plan(), m), fraction: f, known: known})
				l.set(fit(line, terminalWidth(l.w)))
			case <-quit:
				return
			}
		}
	}()
	return func() {
		close(quit)
		<-done
		l.clear()
	}
}

// recordsRead sums the records the sources of plan read.
func recordsRead(plan *pipeline.Plan, m *pipeline.Metrics) int64 {
	var sum float64
	for _, n := range plan.Nodes {
		if n.Kind != pipeline.SourceNode {
			continue
		}
		for sub := range n.Parallelism {
			sum += pipeline.CounterValue(m.RecordsOut(pipeline.SubtaskInfo{ID: n.ID, Subtask: sub, Parallelism: n.Parallelism}))
		}
	}
	return int64(sum)
}

// inputFraction is how much of the input the sources read: the least of
// each source's part (the run ends when its last source does); not known
// when a source does not say.
func inputFraction(sources []pipeline.SourceProgress) (float64, bool) {
	f, known := 1.0, len(sources) > 0
	for _, s := range sources {
		if s.Total <= 0 {
			return 0, false
		}
		f = min(f, float64(s.Done)/float64(s.Total))
	}
	return f, known
}

// terminalWidth returns the width of the terminal w is, 80 when it cannot
// tell.
func terminalWidth(w io.Writer) int {
	if fd, ok := terminalFd(w); ok {
		if width, _, err := term.GetSize(fd); err == nil && width > 0 {
			return width
		}
	}
	return 80
}

// fit cuts line to less than width columns, so that it does not wrap.
func fit(line string, width int) string {
	if r := []rune(line); len(r) >= width {
		return string(r[:max(width-1, 0)])
	}
	return line
}

// progressSample is what the progress line shows at one moment.
type progressSample struct {
	at      time.Time
	records int64
	// fraction of the input read, when known.
	fraction float64
	known    bool
}

// progressMeter turns samples into progress lines: the rate over the last
// rateWindow, and the ETA from how fast the fraction grew since it was
// first known.
type progressMeter struct {
	recent []progressSample // within rateWindow of the last, oldest first
	first  progressSample   // the first with a known fraction
}

// line records s and returns its progress line.
func (m *progressMeter) line(s progressSample) string {
	if s.known && !m.first.known {
		m.first = s
	}
	m.recent = append(m.recent, s)
	for len(m.recent) > 1 && s.at.Sub(m.recent[0].at) > rateWindow {
		m.recent = m.recent[1:]
	}
	parts := []string{thousands(s.records) + " records read"}
	if old := m.recent[0]; s.at.After(old.at) {
		rate := float64(s.records-old.records) / s.at.Sub(old.at).Seconds()
		parts = append(parts, thousands(int64(rate+0.5))+"/s")
	}
	if s.known {
		parts = append(parts, strconv.FormatFloat(100*s.fraction, 'f', 1, 64)+"%")
		if eta, ok := m.eta(s); ok {
			parts = append(parts, "ETA "+formatETA(eta))
		}
	}
	return strings.Join(parts, "  ")
}

// eta returns the time left at s, once the fraction grew for a second.
func (m *progressMeter) eta(s progressSample) (time.Duration, bool) {
	elapsed, grown := s.at.Sub(m.first.at), s.fraction-m.first.fraction
	if elapsed < time.Second || grown <= 0 || s.fraction >= 1 {
		return 0, false
	}
	return time.Duration(float64(elapsed) * (1 - s.fraction) / grown), true
}

// formatETA writes d in whole seconds: 45s, 4m05s, 1h02m.
func formatETA(d time.Duration) string {
	sec := int64((d + time.Second/2) / time.Second)
	switch {
	case sec < 60:
		return fmt.Sprintf("%ds", sec)
	case sec < 3600:
		return fmt.Sprintf("%dm%02ds", sec/60, sec%60)
	}
	return fmt.Sprintf("%dh%02dm", sec/3600, sec%3600/60)
}

// thousands writes n (not negative) with commas between groups of three
// digits.
func thousands(n int64) string {
	s := strconv.FormatInt(n, 10)
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}
