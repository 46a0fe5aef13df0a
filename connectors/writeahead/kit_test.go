package writeahead_test

import (
	"context"

	"github.com/eddy-stream/eddy/connectors/writeahead"
	"github.com/eddy-stream/eddy/pipeline"
	"github.com/eddy-stream/eddy/pipeline/pipelinetest"
)

// The test kit: pipelinetest's source of numbered records and a
// two-phase-commit sink that only has to be recognised as one, registered
// into an isolated Env with the write-ahead wrapper.

func testEnv() *pipeline.Env {
	env := pipeline.NewEnv()
	env.RegisterWriteAhead(writeahead.Wrap)
	env.RegisterSource(pipeline.SourcePlugin{Type: "seq", New: func() pipeline.SourceConfig { return &pipelinetest.SeqSourceConfig{} }})
	env.RegisterSink(pipeline.SinkPlugin{Type: "txn", New: func() pipeline.SinkConfig { return &txnConfig{} }})
	return env
}

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
