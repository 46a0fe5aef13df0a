// Package pipelinetest holds what the tests of the runtime and of its
// plugins share: an in-memory checkpoint store that outlives a job, a
// source of numbered records, and ways to run a job to its end. Production
// code never imports it.
package pipelinetest

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
	"github.com/eddy-stream/eddy/internal/testkit"
	"github.com/eddy-stream/eddy/pipeline"
)

// MemStore is an in-memory checkpoint store that survives a job: what a
// cancelled ("crashed") job completed stays for the next one to restore.
type MemStore struct {
	mu       sync.Mutex
	complete map[int64]map[string][]byte
	metas    map[int64]checkpoint.Meta
}

// NewMemStore returns an empty store.
func NewMemStore() *MemStore {
	return &MemStore{complete: map[int64]map[string][]byte{}, metas: map[int64]checkpoint.Meta{}}
}

// Begin starts checkpoint id; it completes when the Writer does.
func (s *MemStore) Begin(id int64, meta checkpoint.Meta) (checkpoint.Writer, error) {
	return &memPending{s: s, id: id, meta: meta, parts: map[string][]byte{}}, nil
}

// Latest returns the newest complete checkpoint, or nil.
func (s *MemStore) Latest() pipeline.RestoredCheckpoint {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.complete) == 0 {
		return nil
	}
	id := slices.Max(slices.Collect(maps.Keys(s.complete)))
	return memRestored{id: id, parts: s.complete[id]}
}

// Meta returns the metadata of checkpoint id, as Begin got it.
func (s *MemStore) Meta(id int64) checkpoint.Meta {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.metas[id]
}

// Completed reports whether checkpoint id completed.
func (s *MemStore) Completed(id int64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.complete[id]
	return ok
}

// Count returns how many checkpoints completed.
func (s *MemStore) Count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.complete)
}

type memPending struct {
	s     *MemStore
	id    int64
	meta  checkpoint.Meta
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
	p.s.metas[p.id] = p.meta
	return nil
}

func (p *memPending) Abort() error { return nil }

// Create takes whole parts only (checkpoint.ErrDeltaBase for a delta): an
// incremental backend's snapshots are then written in full.
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

func (r memRestored) ID() int64 { return r.id }
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

// SeqSourceConfig configures a source of numbered records (plugin type
// "seq" in the tests' Envs): each subtask emits records {n, k, src} with
// n = subtask, subtask+p, ... below count; its position is the next n.
type SeqSourceConfig struct {
	Count int    `yaml:"count"`
	Keys  int    `yaml:"keys"`
	Tag   string `yaml:"tag"`
	// Forever makes the source unbounded.
	Forever bool `yaml:"forever"`
	// Silent makes an unbounded source that never reads anything.
	Silent bool `yaml:"silent"`
	// Pace sleeps a millisecond per batch of 100 records.
	Pace bool `yaml:"pace"`
	// Hold makes a bounded source unbounded: after count records it reads
	// nothing more until it is stopped.
	Hold bool `yaml:"hold"`
}

func (c *SeqSourceConfig) Validate() error { return nil }
func (c *SeqSourceConfig) NewSource() (pipeline.Source, error) {
	return &seqSource{cfg: c}, nil
}

// seqSource is the source SeqSourceConfig makes.
type seqSource struct {
	cfg  *SeqSourceConfig
	next int
	step int
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
	if s.cfg.Silent {
		<-ctx.Done()
		return ctx.Err()
	}
	for range 100 {
		if !s.cfg.Forever && s.next >= s.cfg.Count {
			if !s.cfg.Hold {
				return io.EOF
			}
			if len(b.Records) > 0 {
				break // this batch ends here; the next Read holds
			}
			<-ctx.Done()
			return ctx.Err()
		}
		k := 0
		if s.cfg.Keys > 0 {
			k = s.next % s.cfg.Keys
		}
		b.Records = append(b.Records, pipeline.NewRecord(map[string]any{"n": s.next, "k": k, "src": s.cfg.Tag}))
		s.next += s.step
	}
	b.Position = binary.BigEndian.AppendUint64(nil, uint64(s.next))
	if s.cfg.Forever || s.cfg.Pace {
		time.Sleep(time.Millisecond) // pace the source
	}
	return nil
}

func (s *seqSource) Close(context.Context) error { return nil }

// WaitJob waits for job to end and returns Wait's error; the test fails,
// saying so, if the job hangs.
func WaitJob(t testing.TB, job *pipeline.Job) error {
	t.Helper()
	testkit.WaitFor(t, job.Done(), "the job to end")
	return job.Wait()
}

// RunJob starts plan with opts and waits for it to end: the job alone,
// without a Runner, for tests that bring their own checkpoint store or
// restore point.
func RunJob(ctx context.Context, plan *pipeline.Plan, opts pipeline.JobOptions) error {
	job, err := pipeline.Start(ctx, plan, opts)
	if err != nil {
		return err
	}
	return job.Wait()
}
