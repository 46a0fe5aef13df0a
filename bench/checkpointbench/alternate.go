package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime/pprof"
	"strings"
	"sync/atomic"
	"time"

	"github.com/eddy-stream/eddy/bench/internal/stats"
	"github.com/eddy-stream/eddy/internal/cputime"
	"github.com/eddy-stream/eddy/pipeline"
	"github.com/eddy-stream/eddy/statestore"
)

// -alternate: checkpoints switched on and off within one job.
//
// The rounds of the default mode compare runs of separate jobs, each with
// its own warm-up, tens of seconds apart; on the development VM a round's
// loss moves by ±10 points from one round to the next, more than the 5%
// target. Here one job runs for the whole measurement, with the
// checkpoint block of the mode, and its checkpoint store refuses to begin
// a checkpoint (a failed trigger, which costs the pipeline nothing) while
// checkpoints are off. Phases of -alternate each alternate: off, on, off,
// ..., on, off, with -runs phases on. Each on phase is measured from its
// first checkpoint's trigger, so that it holds as many checkpoints as a
// window of that length in a run with checkpoints throughout; each off
// phase from the moment the last checkpoint of the phase before completed.
// A phase on is compared with the mean of the phases off on either side
// of it: the same process, heap and state, a minute apart at most.

// gateStore is a checkpoint store that begins checkpoints only while open.
type gateStore struct {
	inner pipeline.CheckpointStore
	open  atomic.Bool
	// first is set by openGate and cleared by the first checkpoint begun
	// after it, which sends its time on began.
	first atomic.Bool
	began chan time.Time
}

// openGate lets checkpoints begin; the first one's time comes on began.
func (s *gateStore) openGate() {
	s.first.Store(true)
	s.open.Store(true)
}

var errGateClosed = errors.New("checkpoints are off in this phase")

func (s *gateStore) Begin(id int64, meta pipeline.CheckpointMeta) (pipeline.PendingCheckpoint, error) {
	if !s.open.Load() {
		return nil, errGateClosed
	}
	now := time.Now()
	p, err := s.inner.Begin(id, meta)
	if err == nil && s.first.CompareAndSwap(true, false) {
		s.began <- now // buffered: one send per openGate, each received
	}
	return p, err
}

// quietGate drops the coordinator's warnings about the checkpoints the
// closed gate refused.
type quietGate struct{ slog.Handler }

func (h quietGate) Handle(ctx context.Context, r slog.Record) error {
	refused := false
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "error" && strings.Contains(a.Value.String(), errGateClosed.Error()) {
			refused = true
			return false
		}
		return true
	})
	if refused {
		return nil
	}
	return h.Handler.Handle(ctx, r)
}

func (h quietGate) WithAttrs(as []slog.Attr) slog.Handler {
	return quietGate{h.Handler.WithAttrs(as)}
}

func (h quietGate) WithGroup(name string) slog.Handler {
	return quietGate{h.Handler.WithGroup(name)}
}

// phase is one measured phase of an alternating run.
type phase struct {
	on          bool
	rate        float64 // records/s
	cpuPerRec   float64 // µs
	checkpoints []ckpt  // triggered in the phase and completed
}

// alternate runs mode m (with checkpoints) as one job whose checkpoints
// are switched off and on, and prints its phases and their losses.
func (b *bench) alternate(m mode) (string, error) {
	dir, err := os.MkdirTemp(b.parent, fmt.Sprintf("%s-%s-alternate-", b.backend, m.name))
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(dir)
	plan, err := compile(spec(b.backend, b.keys, m.interval, m.low))
	if err != nil {
		return "", err
	}
	store, err := statestore.OpenCheckpointStore(dir, statestore.CheckpointStoreOptions{Retain: 2, Logger: b.logger})
	if err != nil {
		return "", err
	}
	defer func() { _ = store.Close(context.Background()) }()
	rec := newRecorder()
	gate := &gateStore{inner: recStore{inner: pipeline.BoltCheckpoints(store), rec: rec}, began: make(chan time.Time, 1)}
	mets := pipeline.NewMetrics()
	opts := pipeline.JobOptions{Logger: slog.New(quietGate{b.logger.Handler()}), Metrics: mets, StateDir: dir,
		Store: gate, OnAck: rec.onAck}
	in := windowIn(mets, *parallelism)
	job, err := pipeline.Start(context.Background(), plan, opts)
	if err != nil {
		return "", err
	}
	defer func() {
		job.Cancel()
		_ = job.Wait()
	}()
	ended := func() error { return fmt.Errorf("the job ended: %v", job.Wait()) }
	// wait polls cond every 10ms until it holds or the job ends.
	wait := func(cond func() bool) error {
		for !cond() {
			select {
			case <-job.Done():
				return ended()
			case <-time.After(10 * time.Millisecond):
			}
		}
		return nil
	}
	start := time.Now()
	if err := wait(func() bool { return in() >= float64(b.keys) }); err != nil {
		return "", err
	}
	fmt.Printf("%-6s %-7s alternating: warm-up %s\n", b.backend, m.name, time.Since(start).Round(100*time.Millisecond))

	// measure measures a phase of -alternate from t0 (a moment just
	// passed): records/s and CPU per record, and its checkpoints.
	measure := func(i int, on bool, t0 time.Time) (phase, error) {
		c0, use0 := in(), cputime.ProcessUsage()
		stop, err := phaseProfile(b.backend, m.name, i, on)
		if err != nil {
			return phase{}, err
		}
		select {
		case <-job.Done():
			stop()
			return phase{}, ended()
		case <-time.After(time.Until(t0.Add(*alternate))):
		}
		t1, c1, use := time.Now(), in(), cputime.ProcessUsage().Sub(use0)
		stop()
		p := phase{on: on, rate: (c1 - c0) / t1.Sub(t0).Seconds(), cpuPerRec: float64(use.CPU.Microseconds()) / (c1 - c0)}
		if on {
			p.checkpoints, _ = rec.within(t0, t1)
		}
		return p, nil
	}
	// An unmeasured phase on first: the heap grows as far as snapshots
	// make it grow before anything is measured.
	var phases []phase
	for i := -1; i <= 2**runs; i++ {
		on := i%2 != 0
		var t0 time.Time
		if on {
			gate.openGate()
			select {
			case t0 = <-gate.began:
			case <-job.Done():
				return "", ended()
			}
		} else {
			gate.open.Store(false)
			// The phase before's last checkpoint still encodes: off
			// starts once it completed (or failed).
			if err := wait(func() bool { return !rec.inFlight(time.Now()) }); err != nil {
				return "", err
			}
			t0 = time.Now()
		}
		p, err := measure(i, on, t0)
		gate.open.Store(false)
		if err != nil {
			return "", err
		}
		if i < 0 {
			continue
		}
		line := fmt.Sprintf("%-6s %-7s phase %2d %-3s: %9.0f records/s, %.2f µs CPU/record", b.backend, m.name, i+1, map[bool]string{true: "on", false: "off"}[on], p.rate, p.cpuPerRec)
		if on {
			line += fmt.Sprintf(", %d checkpoints", len(p.checkpoints))
		}
		fmt.Println(line)
		phases = append(phases, p)
	}
	return alternateSummary(b.backend, m, phases), nil
}

// phaseProfile starts a CPU profile of measured phase i (from 0; none for
// the unmeasured first phase, -1) with -cpuprofile, to
// PREFIX-<backend>-<mode>-<i+1>-<on|off>.pprof, and returns the function
// that stops it. The profiles of the phases on less those of the phases
// off are what checkpoints cost:
//
//	go tool pprof -proto P-*-off.pprof > off.pb.gz
//	go tool pprof -top -diff_base off.pb.gz P-*-on.pprof
func phaseProfile(backend, mode string, i int, on bool) (stop func(), err error) {
	if *cpuProfile == "" || i < 0 {
		return func() {}, nil
	}
	f, err := os.Create(fmt.Sprintf("%s-%s-%s-%d-%s.pprof", *cpuProfile, backend, mode, i+1, map[bool]string{true: "on", false: "off"}[on]))
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		_ = f.Close()
		return nil, err
	}
	return func() {
		pprof.StopCPUProfile()
		_ = f.Close()
	}, nil
}

// alternateSummary compares each phase on with the mean of the phases off
// on either side: the loss in throughput, and the extra CPU per checkpoint.
func alternateSummary(backend string, m mode, phases []phase) string {
	var ratios, perCkpt []float64
	var cs []ckpt
	for i := 1; i+1 < len(phases); i += 2 {
		before, on, after := phases[i-1], phases[i], phases[i+1]
		off := (before.rate + after.rate) / 2
		ratios = append(ratios, on.rate/off)
		if n := len(on.checkpoints); n > 0 {
			offCPU := (before.cpuPerRec + after.cpuPerRec) / 2
			perCkpt = append(perCkpt, (on.cpuPerRec-offCPU)*on.rate*alternate.Seconds()/1e6/float64(n))
		}
		cs = append(cs, on.checkpoints...)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "== %s backend, %s, alternating phases of %s: %d on, each against the mean of the phases off beside it\n", backend, m.name, *alternate, len(ratios))
	losses := make([]string, len(ratios))
	for i, r := range ratios {
		losses[i] = fmt.Sprintf("%.1f%%", 100*(1-r))
	}
	fmt.Fprintf(&b, "losses: %s\n", strings.Join(losses, ", "))
	if len(ratios) > 1 {
		mean, half := stats.MeanCI(ratios)
		fmt.Fprintf(&b, "loss: median %.1f%%, mean %.1f%% ± %.1f%% (95%% confidence)\n", 100*(1-stats.Median(ratios)), 100*(1-mean), 100*half)
	}
	if len(perCkpt) > 1 {
		mean, half := stats.MeanCI(perCkpt)
		fmt.Fprintf(&b, "extra CPU per checkpoint %.2f ± %.2f core-s\n", mean, half)
	}
	if len(cs) > 0 {
		b.WriteString(durations(m.name, cs))
	}
	return b.String()
}
