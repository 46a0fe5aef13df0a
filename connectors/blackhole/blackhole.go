// Package blackhole provides the `blackhole` sink, which counts records and
// discards them: for benchmarks, and for tests that only need to know how
// many records arrived.
//
// It imports pipeline only.
package blackhole

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/eddy-stream/eddy/pipeline"
)

func init() {
	pipeline.Default.RegisterSink(pipeline.SinkPlugin{
		Type:    "blackhole",
		Summary: "counts records and discards them",
		New:     func() pipeline.SinkConfig { return &Config{} },
	})
}

// Config is the `blackhole` sink's configuration; it has no keys.
type Config struct{}

// Validate accepts everything.
func (c *Config) Validate() error { return nil }

// Guarantee is exactly-once: nothing is written anywhere, so nothing can be
// written twice.
func (c *Config) Guarantee() pipeline.Guarantee { return pipeline.ExactlyOnce }

// NewSink returns the sink of one subtask.
func (c *Config) NewSink() (pipeline.Sink, error) { return &Sink{}, nil }

// counters holds the running totals per sink id, over all subtasks and runs
// of this process.
var counters sync.Map // id -> *atomic.Int64

func counter(id string) *atomic.Int64 {
	c, _ := counters.LoadOrStore(id, new(atomic.Int64))
	return c.(*atomic.Int64)
}

// Count returns the number of records the blackhole sinks with this id
// received in this process, over all subtasks and runs since Reset.
func Count(id string) int64 { return counter(id).Load() }

// Reset sets every sink id's count to zero.
func Reset() { counters.Clear() }

// Sink is the blackhole of one subtask.
type Sink struct {
	n     atomic.Int64
	total *atomic.Int64
}

// Count returns the number of records this subtask received.
func (s *Sink) Count() int64 { return s.n.Load() }

// Open looks up the sink id's total.
func (s *Sink) Open(_ context.Context, sc *pipeline.SinkContext) error {
	s.total = counter(sc.ID)
	return nil
}

// Write counts the batch.
func (s *Sink) Write(_ context.Context, batch []pipeline.Record) error {
	s.n.Add(int64(len(batch)))
	if s.total != nil {
		s.total.Add(int64(len(batch)))
	}
	return nil
}

// Flush does nothing.
func (s *Sink) Flush(context.Context) error { return nil }

// Close does nothing.
func (s *Sink) Close(context.Context) error { return nil }
