package writeahead_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/eddy-stream/eddy/checkpoint"
	"github.com/eddy-stream/eddy/connectors/writeahead"
	"github.com/eddy-stream/eddy/internal/testkit"
	"github.com/eddy-stream/eddy/pipeline"
)

// The test kit: a source of numbered records, a two-phase-commit sink
// that only has to be recognised as one, and an in-memory checkpoint
// store that outlives a job. They register into an isolated Env with the
// write-ahead wrapper.

func testEnv() *pipeline.Env {
	env := pipeline.NewEnv()
	env.RegisterWriteAhead(writeahead.Wrap)
	env.RegisterSource(pipeline.SourcePlugin{Type: "seq", New: func() pipeline.SourceConfig { return &seqConfig{} }})
	env.RegisterSink(pipeline.SinkPlugin{Type: "txn", New: func() pipeline.SinkConfig { return &txnConfig{} }})
	return env
}

// seqSource emits records {n} with n = subtask, subtask+p, ... below
// count; its position is the next n.
type seqConfig struct {
	Count int `yaml:"count"`
	// Pace sleeps a millisecond per batch of 100 records.
	Pace bool `yaml:"pace"`
}

func (c *seqConfig) Validate() error                     { return nil }
func (c *seqConfig) NewSource() (pipeline.Source, error) { return &seqSource{cfg: c}, nil }

type seqSource struct {
	cfg        *seqConfig
	next, step int
}

func (s *seqSource) Open(_ context.Context, sc *pipeline.SourceContext) error {
	s.next, s.step = sc.Subtask, sc.Parallelism
	if sc.Restored != nil {
		s.next = int(binary.BigEndian.Uint64(sc.Restored))
	}
	return nil
}

func (s *seqSource) Read(ctx context.Context, b *pipeline.ReadBatch) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	for range 100 {
		if s.next >= s.cfg.Count {
			return io.EOF
		}
		b.Records = append(b.Records, pipeline.NewRecord(map[string]any{"n": s.next}))
		s.next += s.step
	}
	b.Position = binary.BigEndian.AppendUint64(nil, uint64(s.next))
	if s.cfg.Pace {
		time.Sleep(time.Millisecond) // pace the source
	}
	return nil
}

func (s *seqSource) Close(context.Context) error { return nil }

// txnSink is a two-phase-commit sink that writes nothing.
type txnConfig struct{}

func (c *txnConfig) Validate() error                 { return nil }
func (c *txnConfig) NewSink() (pipeline.Sink, error) { return txnSink{}, nil }

type txnSink struct{}

func (txnSink) Open(context.Context, *pipeline.SinkContext) error { return nil }
func (txnSink) Write(context.Context, []pipeline.Record) error    { return nil }
func (txnSink) Flush(context.Context) error                       { return nil }
func (txnSink) Close(context.Context) error                       { return nil }
func (txnSink) PreCommit(context.Context, int64) ([]byte, error)  { return nil, nil }
func (txnSink) Commit(context.Context, [][]byte) error            { return nil }

var _ pipeline.TwoPhaseCommitSink = txnSink{}

// memStore is an in-memory checkpoint store that survives a job: what a
// cancelled ("crashed") job completed stays for the next one to restore.
type memStore struct {
	mu       sync.Mutex
	complete map[int64]map[string][]byte
}

func newMemStore() *memStore {
	return &memStore{complete: map[int64]map[string][]byte{}}
}

func (s *memStore) Begin(id int64, _ checkpoint.Meta) (checkpoint.Writer, error) {
	return &memPending{s: s, id: id, parts: map[string][]byte{}}, nil
}

// latest returns the newest complete checkpoint, or nil.
func (s *memStore) latest() pipeline.RestoredCheckpoint {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.complete) == 0 {
		return nil
	}
	id := slices.Max(slices.Collect(maps.Keys(s.complete)))
	return memRestored{id: id, parts: s.complete[id]}
}

type memPending struct {
	s     *memStore
	id    int64
	mu    sync.Mutex
	parts map[string][]byte
}

func (p *memPending) Put(part string, blob []byte) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.parts[part] = slices.Clone(blob)
	return nil
}

func (p *memPending) Complete(context.Context) error {
	p.s.mu.Lock()
	defer p.s.mu.Unlock()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.s.complete[p.id] = maps.Clone(p.parts)
	return nil
}

func (p *memPending) Abort() error { return nil }

// Create takes whole parts only (checkpoint.ErrDeltaBase for a delta).
func (p *memPending) Create(part string, base int64) (checkpoint.PartWriter, error) {
	if base != 0 {
		return nil, fmt.Errorf("create part %q: %w", part, checkpoint.ErrDeltaBase)
	}
	return &memPart{p: p, name: part}, nil
}

// memPart is memPending's PartWriter: Close Puts what was written.
type memPart struct {
	bytes.Buffer
	p    *memPending
	name string
}

func (w *memPart) Close() error { return w.p.Put(w.name, w.Bytes()) }
func (w *memPart) Abort()       {}

type memRestored struct {
	id    int64
	parts map[string][]byte
}

func (r memRestored) ID() int64       { return r.id }
func (r memRestored) Parts() []checkpoint.PartInfo {
	var out []checkpoint.PartInfo
	for _, name := range slices.Sorted(maps.Keys(r.parts)) {
		out = append(out, checkpoint.PartInfo{Name: name, Size: int64(len(r.parts[name]))})
	}
	return out
}
func (r memRestored) Get(part string) ([]byte, error) {
	b, ok := r.parts[part]
	if !ok {
		return nil, fmt.Errorf("no part %q", part)
	}
	return b, nil
}

// waitJob waits for job to end and returns Wait's error; the test fails,
// saying so, if the job hangs.
func waitJob(t testing.TB, job *pipeline.Job) error {
	t.Helper()
	testkit.WaitFor(t, job.Done(), "the job to end")
	return job.Wait()
}

// runJob starts plan with opts and waits for it to end.
func runJob(ctx context.Context, plan *pipeline.Plan, opts pipeline.JobOptions) error {
	job, err := pipeline.Start(ctx, plan, opts)
	if err != nil {
		return err
	}
	return job.Wait()
}
