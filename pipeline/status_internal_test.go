package pipeline

import (
	"fmt"
	"testing"
	"time"
)

// BenchmarkTaskStatsWait measures what the time accounting adds to a task
// per batch it waits for: leaving busy for idle and back, each with a
// clock reading.
func BenchmarkTaskStatsWait(b *testing.B) {
	ts := &taskStats{}
	ts.enter(phaseBusy, time.Now())
	for b.Loop() {
		ts.enter(phaseIdle, time.Now())
		ts.enter(phaseBusy, time.Now())
	}
}

// BenchmarkSinkSamplerOffer measures what the sample of a sink adds per
// batch of 1024 records (the default batch size).
func BenchmarkSinkSamplerOffer(b *testing.B) {
	batch := make([]Record, 1024)
	for i := range batch {
		batch[i] = NewRecord(map[string]any{"n": i})
	}
	s := &sinkSampler{}
	for b.Loop() {
		s.offer(batch)
	}
}

// TestTaskStatsRead: the time of the current phase counts as it goes, and
// the totals never decrease while phases change.
func TestTaskStatsRead(t *testing.T) {
	ts := &taskStats{}
	t0 := time.Unix(1000, 0)
	spent, phase := ts.read(t0)
	if phase != phaseEnded || spent != [phaseCount]time.Duration{} {
		t.Fatalf("before the task started: %v %v", spent, phase)
	}
	ts.enter(phaseBusy, t0)
	ts.enter(phaseIdle, t0.Add(1*time.Second))
	ts.enter(phaseBackpressured, t0.Add(3*time.Second))
	spent, phase = ts.read(t0.Add(6 * time.Second))
	want := [phaseCount]time.Duration{phaseBusy: time.Second, phaseIdle: 2 * time.Second, phaseBackpressured: 3 * time.Second}
	if phase != phaseBackpressured || spent != want {
		t.Fatalf("got %v in %v, want %v in backpressured", spent, phase, want)
	}
	ts.enter(phaseEnded, t0.Add(7*time.Second))
	spent, _ = ts.read(t0.Add(100 * time.Second))
	want[phaseBackpressured] = 4 * time.Second
	if spent != want {
		t.Fatalf("after the task ended: got %v, want %v (no time counts while it does not run)", spent, want)
	}
}

// TestSinkSamplerKeepsTheLastRecords: whatever the batch sizes, the
// published sample is the last sinkSampleSize records offered, oldest
// first; publish waits for its period unless forced.
func TestSinkSamplerKeepsTheLastRecords(t *testing.T) {
	s := &sinkSampler{}
	next := 0
	offer := func(n int) {
		batch := make([]Record, n)
		for i := range batch {
			batch[i] = NewRecord(map[string]any{"n": next})
			next++
		}
		s.offer(batch)
	}
	published := func() string {
		out := ""
		for _, r := range s.published() {
			out += string(r.fields)
		}
		return out
	}
	want := func(from, to int) string {
		out := ""
		for i := from; i < to; i++ {
			out += fmt.Sprintf(`{"n":%d}`, i)
		}
		return out
	}
	t0 := time.Unix(1000, 0)
	offer(7)
	s.publish(t0, false)
	if got := published(); got != want(0, 7) {
		t.Fatalf("got %s, want %s", got, want(0, 7))
	}
	offer(3)
	offer(30)
	s.publish(t0.Add(sinkSamplePeriod/2), false)
	if got := published(); got != want(0, 7) {
		t.Fatalf("published before its period: %s", got)
	}
	offer(15)
	offer(1)
	s.publish(t0.Add(sinkSamplePeriod/2), true)
	if got := published(); got != want(36, 56) {
		t.Fatalf("got %s, want %s", got, want(36, 56))
	}
	if s.waiting() {
		t.Fatal("nothing waits once published")
	}
	offer(2)
	s.publish(t0.Add(2*sinkSamplePeriod), false)
	if got := published(); got != want(38, 58) {
		t.Fatalf("got %s, want %s", got, want(38, 58))
	}
}
