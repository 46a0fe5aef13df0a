package cmd

import (
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/eddy-stream/eddy/admin"
)

// newServeService starts eddy serve's service (sd_notify, see service)
// on the pipelines of m, which a scan looks at every poll. Call it before
// Manager.Run, then readyWhen with Manager.WaitStarted.
func newServeService(logger *slog.Logger, g *globalOptions, m *admin.Manager, poll time.Duration) *service {
	s := startService(logger, g, &folderWatch{m: m, poll: poll})
	s.follow()
	return s
}

// folderWatch is eddy serve's folder as its service reports it:
//   - READY=1 once every pipeline of the folder started (restored and
//     running, or failed: one failing pipeline does not hold it back);
//   - STATUS= the pipelines by state, naming those that failed: "3
//     pipelines: 2 running, 1 failed (orders)";
//   - healthy while serve follows its folder: a scan of the folder ended
//     within two polls, or serve stops. A failing pipeline leaves it
//     healthy: a watchdog restart would stop the others;
//   - a reload looks at the folder at once.
type folderWatch struct {
	m    *admin.Manager
	poll time.Duration
}

func (f *folderWatch) statusText() string { return serveStatusText(f.m.Summary()) }

func (f *folderWatch) readyText() string { return f.statusText() }

func (f *folderWatch) healthy() bool {
	s := f.m.Summary()
	return s.Closing || scanFresh(s.LastScan, time.Now(), f.poll)
}

// scanFresh tells whether a scan that ended at last is recent at now:
// within two polls. Before the first scan (zero) it is not.
func scanFresh(last, now time.Time, poll time.Duration) bool {
	return !last.IsZero() && now.Sub(last) <= 2*poll
}

func (f *folderWatch) stopping() bool { return f.m.Summary().Closing }

// endText: stopped once Run stopped every pipeline; aborted when serve
// ended before (its admin endpoint could not listen).
func (f *folderWatch) endText() string {
	if f.m.Summary().Closing {
		return "stopped"
	}
	return "aborted"
}

// reload scans the folder at once, once Run scanned it first (before,
// a scan would start pipelines that nothing stops).
func (f *folderWatch) reload() {
	if f.m.Summary().Scanned {
		f.m.Scan()
	}
}

// serveStateOrder is the order of the states in serve's STATUS= line;
// others follow, sorted.
var serveStateOrder = []string{"running", "starting", "restoring", "pending", "restarting", "stopping",
	"finished", "stopped", "cancelled", "failed", "aborted", "invalid"}

// serveFailedStates are the states whose pipelines the STATUS= line names.
var serveFailedStates = []string{"restarting", "failed", "aborted", "invalid"}

// maxNamed is how many pipelines of one state the STATUS= line names.
const maxNamed = 3

// serveStatusText is eddy serve's STATUS= line for s: its pipelines
// counted by state, naming those that failed.
func serveStatusText(s admin.Summary) string {
	if !s.Scanned {
		return "starting: reading the pipelines folder"
	}
	prefix := ""
	if s.Closing {
		prefix = "stopping: "
	}
	if len(s.States) == 0 {
		return prefix + "no pipeline files in the folder"
	}
	byState := map[string][]string{}
	for name, state := range s.States {
		byState[state] = append(byState[state], name)
	}
	order := slices.Clone(serveStateOrder)
	var others []string
	for state := range byState {
		if !slices.Contains(order, state) {
			others = append(others, state)
		}
	}
	slices.Sort(others)
	var parts []string
	for _, state := range append(order, others...) {
		names := byState[state]
		if len(names) == 0 {
			continue
		}
		part := fmt.Sprintf("%d %s", len(names), state)
		if slices.Contains(serveFailedStates, state) {
			slices.Sort(names)
			shown := names[:min(len(names), maxNamed)]
			list := strings.Join(shown, ", ")
			if more := len(names) - len(shown); more > 0 {
				list += fmt.Sprintf(" and %d more", more)
			}
			part += " (" + list + ")"
		}
		parts = append(parts, part)
	}
	noun := "pipelines"
	if len(s.States) == 1 {
		noun = "pipeline"
	}
	return fmt.Sprintf("%s%d %s: %s", prefix, len(s.States), noun, strings.Join(parts, ", "))
}
