package pipeline_test

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"sync"

	"github.com/eddy-stream/eddy/checkpoint"
	"github.com/eddy-stream/eddy/expr"
	"github.com/eddy-stream/eddy/pipeline"
	"github.com/eddy-stream/eddy/statestore"
)

// memStore is an in-memory checkpoint store that survives a job: what a
// cancelled ("crashed") job completed stays for the next one to restore.
type memStore struct {
	mu       sync.Mutex
	complete map[int64]map[string][]byte
	metas    map[int64]checkpoint.Meta
}

func newMemStore() *memStore {
	return &memStore{complete: map[int64]map[string][]byte{}, metas: map[int64]checkpoint.Meta{}}
}

func (s *memStore) Begin(id int64, meta checkpoint.Meta) (checkpoint.Writer, error) {
	return &memPending{s: s, id: id, meta: meta, parts: map[string][]byte{}}, nil
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

func (s *memStore) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.complete)
}

type memPending struct {
	s     *memStore
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

// countStep emits {k, n, count}: the running count of its key, kept in
// keyed state so that it survives a restore.
type countConfig struct {
	Key expr.Expr `yaml:"count_by"`
}

func (c *countConfig) Validate() error                         { return nil }
func (c *countConfig) KeyExprs() []*expr.Expr                  { return []*expr.Expr{&c.Key} }
func (c *countConfig) NewOperator() (pipeline.Operator, error) { return &countOp{}, nil }

type countOp struct {
	counts statestore.ValueState[int64]
}

func (o *countOp) Open(_ context.Context, oc *pipeline.OperatorContext) error {
	b, err := oc.KeyedState()
	if err != nil {
		return err
	}
	o.counts, err = statestore.RegisterValue(b, statestore.ValueDescriptor[int64]{Name: "count"})
	return err
}

func (o *countOp) Process(in []pipeline.Record, out pipeline.Emitter) error {
	for _, r := range in {
		c, _ := o.counts.Get(r.Key, "")
		c++
		o.counts.Put(r.Key, "", c)
		r.Fields["count"] = c
	}
	return out.Emit(in)
}
func (o *countOp) Close() error { return nil }

// txnSink is a two-phase-commit sink over a txnLog that outlives the job,
// as files on disk outlive a process: pending transactions survive a crash
// and are committed on restore; in-progress ones are lost.
type txnLog struct {
	mu        sync.Mutex
	pending   map[string][]map[string]any
	committed []map[string]any
	done      map[string]bool
}

func newTxnLog() *txnLog {
	return &txnLog{pending: map[string][]map[string]any{}, done: map[string]bool{}}
}

func (l *txnLog) output() []map[string]any {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.committed)
}

type txnConfig struct {
	log *txnLog
}

func (c *txnConfig) Validate() error                 { return nil }
func (c *txnConfig) NewSink() (pipeline.Sink, error) { return &txnSink{log: c.log}, nil }
func (c *txnConfig) Guarantee() pipeline.Guarantee   { return pipeline.ExactlyOnce }

type txnSink struct {
	log     *txnLog
	sub     int
	current []map[string]any
}

func (s *txnSink) Open(ctx context.Context, sc *pipeline.SinkContext) error {
	s.sub = sc.Subtask
	return s.Commit(ctx, sc.Committables)
}
func (s *txnSink) Write(_ context.Context, b []pipeline.Record) error {
	for _, r := range b {
		s.current = append(s.current, r.Fields)
	}
	return nil
}
func (s *txnSink) Flush(context.Context) error { return nil }
func (s *txnSink) Close(context.Context) error { return nil }
func (s *txnSink) PreCommit(_ context.Context, id int64) ([]byte, error) {
	name := strconv.Itoa(s.sub) + "/" + strconv.FormatInt(id, 10)
	s.log.mu.Lock()
	s.log.pending[name] = s.current
	s.log.mu.Unlock()
	s.current = nil
	return []byte(name), nil
}
func (s *txnSink) Commit(_ context.Context, cs [][]byte) error {
	s.log.mu.Lock()
	defer s.log.mu.Unlock()
	for _, c := range cs {
		name := string(c)
		if s.log.done[name] {
			continue
		}
		recs, ok := s.log.pending[name]
		if !ok {
			return fmt.Errorf("transaction %s is neither pending nor committed", name)
		}
		s.log.committed = append(s.log.committed, recs...)
		s.log.done[name] = true
		delete(s.log.pending, name)
	}
	return nil
}
