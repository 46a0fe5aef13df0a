// Package conntest helps the connectors' tests: subtask contexts, draining a
// source, and loading a pipeline file against an isolated registry.
package conntest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/eddy-stream/eddy/pipeline"
)

// Info returns the SubtaskInfo of subtask k of p.
func Info(id string, k, p int) pipeline.SubtaskInfo {
	return pipeline.SubtaskInfo{
		ID: id, Subtask: k, Parallelism: p, MaxParallelism: 128, PipelineName: "test",
		Logger: slog.Default(), Metrics: pipeline.NewMetrics(),
	}
}

// OpenSource builds and opens the source of subtask k of p, restored from pos.
func OpenSource(t testing.TB, cfg pipeline.SourceConfig, k, p int, pos []byte) pipeline.Source {
	t.Helper()
	src, err := cfg.NewSource()
	require.NoError(t, err)
	require.NoError(t, src.Open(context.Background(), &pipeline.SourceContext{SubtaskInfo: Info("src", k, p), Restored: pos}))
	t.Cleanup(func() { _ = src.Close(context.Background()) })
	return src
}

// OpenSink builds and opens the sink of subtask k of p.
func OpenSink(t testing.TB, cfg pipeline.SinkConfig, k, p int) pipeline.Sink {
	t.Helper()
	sink, err := cfg.NewSink()
	require.NoError(t, err)
	require.NoError(t, sink.Open(context.Background(), &pipeline.SinkContext{SubtaskInfo: Info("out", k, p)}))
	return sink
}

// Records makes records of the given fields.
func Records(fields ...map[string]any) []pipeline.Record {
	out := make([]pipeline.Record, len(fields))
	for i, f := range fields {
		out[i] = pipeline.NewRecord(f)
	}
	return out
}

// Batch is what one Read returned.
type Batch struct {
	Records   []pipeline.Record
	Position  []byte
	Split     int
	SplitDone bool
	// Failed is the input that did not decode.
	Failed []pipeline.FailedRecord
	Err    error
}

// ReadOnce calls Read once with a fresh batch and a timeout.
func ReadOnce(t testing.TB, src pipeline.Source, timeout time.Duration) Batch {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var b pipeline.ReadBatch
	err := src.Read(ctx, &b)
	return Batch{Records: b.Records, Position: b.Position, Split: b.Split, SplitDone: b.SplitDone, Failed: b.Failed, Err: err}
}

// Drain reads until io.EOF (failing on any other error or after timeout)
// and returns every batch.
func Drain(t testing.TB, src pipeline.Source, timeout time.Duration) []Batch {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var out []Batch
	for {
		left := time.Until(deadline)
		require.Positive(t, left, "source did not end in %s", timeout)
		b := ReadOnce(t, src, left)
		if b.Err != nil && !errors.Is(b.Err, io.EOF) {
			require.NoError(t, b.Err)
		}
		if len(b.Records) > 0 || len(b.Failed) > 0 || b.Err == nil || b.SplitDone {
			out = append(out, b)
		}
		if errors.Is(b.Err, io.EOF) {
			return out
		}
	}
}

// Fields returns the fields of every record of the batches, in order.
func Fields(batches []Batch) []map[string]any {
	var out []map[string]any
	for _, b := range batches {
		for _, r := range b.Records {
			out = append(out, r.Fields)
		}
	}
	return out
}

// Failure is a failed record as text: its fields and its error's text.
type Failure struct {
	Fields map[string]any
	Err    string
}

// Failures returns the failed records of the batches, in order.
func Failures(batches []Batch) []Failure {
	var out []Failure
	for _, b := range batches {
		for _, f := range b.Failed {
			out = append(out, Failure{Fields: f.Fields, Err: f.Err.Error()})
		}
	}
	return out
}

// LastPosition returns the last non-nil position of the batches.
func LastPosition(batches []Batch) []byte {
	var pos []byte
	for _, b := range batches {
		if b.Position != nil {
			pos = b.Position
		}
	}
	return pos
}

// nopConfig is the config of the "nop" source and sink, which only exist
// so that a pipeline file with one component under test loads.
type nopConfig struct{}

func (nopConfig) Validate() error                 { return nil }
func (nopConfig) NewSink() (pipeline.Sink, error) { return nil, errors.New("nop sink cannot run") }
func (nopConfig) NewSource() (pipeline.Source, error) {
	return nil, errors.New("nop source cannot run")
}

// Env returns an isolated registry holding the named source and sink types
// of pipeline.Default plus a source and a sink of type "nop" without keys.
func Env(t testing.TB, sources, sinks []string) *pipeline.Env {
	t.Helper()
	env := pipeline.NewEnv()
	for _, typ := range sources {
		p, ok := pipeline.Default.Source(typ)
		require.True(t, ok, "source type %q is not registered", typ)
		env.RegisterSource(p)
	}
	for _, typ := range sinks {
		p, ok := pipeline.Default.Sink(typ)
		require.True(t, ok, "sink type %q is not registered", typ)
		env.RegisterSink(p)
	}
	env.RegisterSource(pipeline.SourcePlugin{Type: "nop", New: func() pipeline.SourceConfig { return &nopConfig{} }})
	env.RegisterSink(pipeline.SinkPlugin{Type: "nop", New: func() pipeline.SinkConfig { return &nopConfig{} }})
	return env
}

// LoadSource loads a pipeline whose only source is the YAML mapping body
// (indented keys of a `sources:` entry, without the dash) and returns its
// config, or the load error.
func LoadSource(t testing.TB, typ, body string) (pipeline.SourceConfig, error) {
	t.Helper()
	yaml := fmt.Sprintf("version: 1\nname: t\nsources:\n  - id: in\n    type: %s\n%s\nsinks:\n  - type: nop\n", typ, indent(body))
	spec, err := pipeline.Load(Env(t, []string{typ}, nil), "t.yaml", []byte(yaml))
	if err != nil {
		return nil, err
	}
	return spec.Sources[0].Config, nil
}

// LoadSink loads a pipeline whose only sink has the YAML mapping body.
func LoadSink(t testing.TB, typ, body string) (pipeline.SinkConfig, error) {
	t.Helper()
	yaml := fmt.Sprintf("version: 1\nname: t\nsources:\n  - type: nop\nsinks:\n  - id: out\n    type: %s\n%s\n", typ, indent(body))
	spec, err := pipeline.Load(Env(t, nil, []string{typ}), "t.yaml", []byte(yaml))
	if err != nil {
		return nil, err
	}
	return spec.Sinks[0].Config, nil
}

func indent(body string) string {
	var sb strings.Builder
	for _, line := range strings.Split(body, "\n") {
		if strings.TrimSpace(line) != "" {
			sb.WriteString("    " + line + "\n")
		}
	}
	return sb.String()
}
