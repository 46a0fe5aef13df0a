package pipeline_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"

	"github.com/eddy-stream/eddy/expr"
	"github.com/eddy-stream/eddy/pipeline"
	"github.com/eddy-stream/eddy/statestore"
)

// countStep emits {k, n, count}: the running count of its key, kept in
// keyed state so that it survives a restore.
type countConfig struct {
	Key expr.Expr `yaml:"count_by"`
}

func (c *countConfig) Validate() error                         { return nil }
func (c *countConfig) KeyExprs(int) []*expr.Expr               { return []*expr.Expr{&c.Key} }
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
