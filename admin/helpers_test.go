package admin

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	// Every connector and step kind registers itself in pipeline.Default.
	_ "github.com/eddy-stream/eddy/connectors/all"
	_ "github.com/eddy-stream/eddy/operators"
	"github.com/eddy-stream/eddy/pipeline"
)

// fakeTarget is a Target in a state the test sets, whose savepoint calls
// answer what the test sets.
type fakeTarget struct {
	state atomic.Int64

	mu sync.Mutex
	// err fails every savepoint call; sp is the savepoint otherwise.
	err error
	sp  pipeline.Savepoint
	// dirs are the directories asked for; stops counts the stops.
	dirs  []string
	stops int
}

func newFakeTarget(s pipeline.RunState) *fakeTarget {
	t := &fakeTarget{}
	t.state.Store(int64(s))
	return t
}

func (t *fakeTarget) set(s pipeline.RunState) { t.state.Store(int64(s)) }

func (t *fakeTarget) State() pipeline.RunState { return pipeline.RunState(t.state.Load()) }

func (t *fakeTarget) TriggerSavepoint(_ context.Context, dir string) (pipeline.Savepoint, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.dirs = append(t.dirs, dir)
	if t.err != nil {
		return pipeline.Savepoint{}, t.err
	}
	return t.sp, nil
}

func (t *fakeTarget) StopWithSavepoint(_ context.Context, dir string) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.dirs = append(t.dirs, dir)
	if t.err != nil {
		return t.err
	}
	t.stops++
	return nil
}

func (t *fakeTarget) FinalSavepoint(context.Context) (pipeline.Savepoint, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	sp := t.sp
	sp.Final = true
	return sp, nil
}

// errUnexpected is a savepoint failure that is neither a stop nor a restart.
var errUnexpected = errors.New("disk full")

// fakeClock is a clock the test moves.
type fakeClock struct{ ns atomic.Int64 }

func newFakeClock(at time.Time) *fakeClock {
	c := &fakeClock{}
	c.ns.Store(at.UnixNano())
	return c
}

func (c *fakeClock) now() time.Time      { return time.Unix(0, c.ns.Load()) }
func (c *fakeClock) add(d time.Duration) { c.ns.Add(int64(d)) }
func (c *fakeClock) set(t time.Time)     { c.ns.Store(t.UnixNano()) }

// do sends a request with the headers hdr (key, value, key, value...) and
// returns the status code and body.
func do(t *testing.T, method, url string, body io.Reader, hdr ...string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, body)
	require.NoError(t, err)
	for i := 0; i+1 < len(hdr); i += 2 {
		if strings.EqualFold(hdr[i], "Host") {
			req.Host = hdr[i+1]
			continue
		}
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(b)
}

// quietLogger discards what it is given.
func quietLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }
