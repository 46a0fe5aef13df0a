package writeahead_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/eddy-stream/eddy/checkpoint"
	"github.com/eddy-stream/eddy/connectors/writeahead"
	"github.com/eddy-stream/eddy/expr"
	"github.com/eddy-stream/eddy/pipeline"
	"github.com/eddy-stream/eddy/pipeline/pipelinetest"
)

// waLog is the output of waSink: what its Flush made durable. It outlives
// a job, as a file outlives a process.
type waLog struct {
	mu      sync.Mutex
	records []pipeline.Record
	// failWrite fails the next Write of the sink subtasks it holds, before
	// it buffers anything (a process that dies as the commit starts);
	// failFlush fails the next Flush after it made the buffer durable (one
	// that dies right after the flush). Each is cleared when it fires.
	failWrite map[int]bool
	failFlush bool
}

func (l *waLog) all() []pipeline.Record {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.records)
}

// ns returns the field n of every record written, in write order.
func (l *waLog) ns() []int {
	var out []int
	for _, r := range l.all() {
		out = append(out, r.Fields["n"].(int))
	}
	return out
}

func (l *waLog) failWriteOf(sub int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.failWrite == nil {
		l.failWrite = map[int]bool{}
	}
	l.failWrite[sub] = true
}

func (l *waLog) failNextFlush() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.failFlush = true
}

var errDied = errors.New("the process died")

// waConfig is a sink without transactions: Write buffers, Flush appends
// the buffer to the log.
type waConfig struct {
	log *waLog
}

func (c *waConfig) Validate() error                 { return nil }
func (c *waConfig) NewSink() (pipeline.Sink, error) { return &waSink{log: c.log}, nil }
func (c *waConfig) Guarantee() pipeline.Guarantee   { return pipeline.AtLeastOnce }

type waSink struct {
	log *waLog
	sub int
	buf []pipeline.Record
}

func (s *waSink) Open(_ context.Context, sc *pipeline.SinkContext) error {
	if sc.Committables != nil {
		return errors.New("the wrapped sink got committables")
	}
	s.sub = sc.Subtask
	return nil
}

func (s *waSink) Write(_ context.Context, b []pipeline.Record) error {
	s.log.mu.Lock()
	fail := s.log.failWrite[s.sub]
	delete(s.log.failWrite, s.sub)
	s.log.mu.Unlock()
	if fail {
		return errDied
	}
	s.buf = append(s.buf, b...)
	return nil
}

func (s *waSink) Flush(context.Context) error {
	s.log.mu.Lock()
	defer s.log.mu.Unlock()
	s.log.records = append(s.log.records, s.buf...)
	s.buf = nil
	if s.log.failFlush {
		s.log.failFlush = false
		return errDied
	}
	return nil
}

func (s *waSink) Close(context.Context) error { return nil }

// fixedSource emits the records it is given, then ends; it cannot replay.
type fixedConfig struct {
	Fixed   bool `yaml:"fixed"`
	records []pipeline.Record
}

func (c *fixedConfig) Validate() error                     { return nil }
func (c *fixedConfig) NewSource() (pipeline.Source, error) { return &fixedSource{recs: c.records}, nil }

type fixedSource struct{ recs []pipeline.Record }

func (s *fixedSource) Open(context.Context, *pipeline.SourceContext) error { return nil }
func (s *fixedSource) Read(_ context.Context, b *pipeline.ReadBatch) error {
	b.Records = append(b.Records, s.recs...)
	s.recs = nil
	return io.EOF
}
func (s *fixedSource) Close(context.Context) error { return nil }

func waEnv() *pipeline.Env {
	env := testEnv()
	env.RegisterSink(pipeline.SinkPlugin{Type: "plain", New: func() pipeline.SinkConfig { return &waConfig{} }})
	env.RegisterSource(pipeline.SourcePlugin{Type: "fixed", New: func() pipeline.SourceConfig { return &fixedConfig{} }})
	return env
}

// loadWA loads a pipeline whose plain sinks write to log.
func loadWA(t *testing.T, text string, log *waLog) *pipeline.Plan {
	t.Helper()
	spec, err := pipeline.Load(waEnv(), "test.yaml", []byte(text))
	require.NoError(t, err)
	for _, s := range spec.Sinks {
		if c, ok := s.Config.(*waConfig); ok {
			c.log = log
		}
	}
	plan, err := pipeline.Compile(spec)
	require.NoError(t, err)
	return plan
}

// waText is a seq source into a plain sink with write_ahead; the %s are
// the checkpoint interval, the source's and the sink's parallelism.
const waText = `
version: 1
name: wa
checkpoint:
  interval: %s
sources:
  - id: nums
    type: seq
    count: %d
    pace: true
    parallelism: %d
sinks:
  - id: out
    type: plain
    write_ahead: true
    parallelism: %d
`

// requireEach asserts that the log holds every n in [0, count) exactly
// times times.
func requireEach(t *testing.T, log *waLog, count, times int) {
	t.Helper()
	ns := log.ns()
	slices.Sort(ns)
	require.Len(t, ns, count*times, "records written")
	for i, n := range ns {
		require.Equal(t, i/times, n, "record %d written other than %d times", i/times, times)
	}
}

// gateStore holds every checkpoint's completion until the test releases it.
type gateStore struct {
	*pipelinetest.MemStore
	completing chan int64
	release    chan struct{}
}

type gatePending struct {
	checkpoint.Writer
	g  *gateStore
	id int64
}

func (g *gateStore) Begin(id int64, meta checkpoint.Meta) (checkpoint.Writer, error) {
	p, err := g.MemStore.Begin(id, meta)
	return gatePending{Writer: p, g: g, id: id}, err
}

func (p gatePending) Complete(ctx context.Context) error {
	p.g.completing <- p.id
	<-p.g.release
	return p.Writer.Complete(ctx)
}

// TestWriteAheadHoldsRecordsUntilComplete holds each checkpoint's
// completion: by then the sink subtask acked the barrier, so it received
// every record before it, yet none of the records after the previous
// completed checkpoint's barrier may have reached the wrapped sink.
func TestWriteAheadHoldsRecordsUntilComplete(t *testing.T) {
	const count = 2000
	log := &waLog{}
	plan := loadWA(t, fmt.Sprintf(waText, "5ms", count, 1, 1), log)
	store := &gateStore{MemStore: pipelinetest.NewMemStore(), completing: make(chan int64), release: make(chan struct{})}
	var mu sync.Mutex
	positions := map[int64]int{} // the source's next n at each barrier
	onAck := func(a pipeline.Ack) {
		p, ok := a.Positions["nums"]
		if !ok {
			return
		}
		next := 0 // a barrier before the first read: no position yet
		if len(p) > 0 {
			next = int(binary.BigEndian.Uint64(p))
		}
		mu.Lock()
		positions[a.Checkpoint] = next
		mu.Unlock()
	}
	job, err := pipeline.Start(context.Background(), plan, pipeline.JobOptions{Store: store, StateDir: t.TempDir(), OnAck: onAck})
	require.NoError(t, err)
	prev, held, checkpoints := 0, 0, 0
loop:
	for {
		select {
		case id := <-store.completing:
			mu.Lock()
			pos := positions[id]
			mu.Unlock()
			for _, n := range log.ns() {
				require.Less(t, n, prev, "record %d reached the sink before checkpoint %d, which holds it, completed", n, id)
			}
			held += pos - prev
			prev = pos
			checkpoints++
			store.release <- struct{}{}
		case <-job.Done():
			break loop
		}
	}
	require.NoError(t, pipelinetest.WaitJob(t, job))
	require.Equal(t, count, held, "every record was held by some checkpoint")
	t.Logf("%d checkpoints", checkpoints)
	requireEach(t, log, count, 1)
}

// TestWriteAheadCrashBeforeCommit: a run dies as sink subtask 1 starts to
// commit a completed checkpoint; the next run, restored from it (also at
// another sink parallelism, where another subtask commits what subtask 1
// left, by subtask 1's marker), writes every record exactly once. With
// interval 1h the final checkpoint is the only one.
func TestWriteAheadCrashBeforeCommit(t *testing.T) {
	for _, tc := range []struct {
		interval string
		par      int
	}{{"5ms", 2}, {"5ms", 1}, {"5ms", 3}, {"1h", 2}, {"1h", 1}, {"1h", 3}} {
		t.Run(fmt.Sprintf("interval %s, restored at sink parallelism %d", tc.interval, tc.par), func(t *testing.T) {
			const count = 3000
			store, log, dir := pipelinetest.NewMemStore(), &waLog{}, t.TempDir()
			log.failWriteOf(1)
			plan := loadWA(t, fmt.Sprintf(waText, tc.interval, count, 2, 2), log)
			err := pipelinetest.RunJob(context.Background(), plan, pipeline.JobOptions{Store: store, StateDir: dir})
			require.ErrorIs(t, err, errDied)
			restored := store.Latest()
			require.NotNil(t, restored, "the checkpoint whose commit failed completed")

			plan = loadWA(t, fmt.Sprintf(waText, tc.interval, count, 2, tc.par), log)
			require.NoError(t, pipelinetest.RunJob(context.Background(), plan, pipeline.JobOptions{Store: store, StateDir: dir, Restore: restored}))
			requireEach(t, log, count, 1)
		})
	}
}

// TestWriteAheadRepeatedCommitIsNoop restores a finished run's final
// checkpoint, whose committable was committed already: the commit marker
// makes the restore's commit a no-op. Without the marker the same restore
// writes the records again, which shows the marker is what prevents it.
func TestWriteAheadRepeatedCommitIsNoop(t *testing.T) {
	const count = 1000
	store, log, dir := pipelinetest.NewMemStore(), &waLog{}, t.TempDir()
	// No periodic checkpoint: the final one holds every record.
	text := fmt.Sprintf(waText, "1h", count, 1, 1)
	require.NoError(t, pipelinetest.RunJob(context.Background(), loadWA(t, text, log), pipeline.JobOptions{Store: store, StateDir: dir}))
	requireEach(t, log, count, 1)
	final := store.Latest()
	require.NotNil(t, final)
	markers, err := filepath.Glob(filepath.Join(dir, writeahead.Dir, "out", "*"))
	require.NoError(t, err)
	require.Len(t, markers, 1, "one marker per sink subtask")
	b, err := os.ReadFile(markers[0])
	require.NoError(t, err)
	require.Equal(t, fmt.Sprintf("%d\n", final.ID()), string(b))

	require.NoError(t, pipelinetest.RunJob(context.Background(), loadWA(t, text, log), pipeline.JobOptions{Store: store, StateDir: dir, Restore: final}))
	requireEach(t, log, count, 1)

	require.NoError(t, os.RemoveAll(filepath.Join(dir, writeahead.Dir)))
	require.NoError(t, pipelinetest.RunJob(context.Background(), loadWA(t, text, log), pipeline.JobOptions{Store: store, StateDir: dir, Restore: final}))
	requireEach(t, log, count, 2)
}

// TestWriteAheadMarkersFollowTheRestore: the markers belong to the
// lineage of checkpoints they were written in. A fresh start in the same
// state dir (checkpoint ids begin again at 1) resets them, and a restore
// from a checkpoint older than a marker brings the marker down to it;
// otherwise the new checkpoints' records would be taken as committed.
func TestWriteAheadMarkersFollowTheRestore(t *testing.T) {
	dir, log := t.TempDir(), &waLog{}
	text := func(count int) string { return fmt.Sprintf(waText, "1h", count, 1, 1) }
	first := pipelinetest.NewMemStore()
	require.NoError(t, pipelinetest.RunJob(context.Background(), loadWA(t, text(1000), log), pipeline.JobOptions{Store: first, StateDir: dir}))
	requireEach(t, log, 1000, 1)

	// A fresh start with a new store: its checkpoint 1 is not the one the
	// marker says was committed.
	require.NoError(t, pipelinetest.RunJob(context.Background(), loadWA(t, text(1000), log), pipeline.JobOptions{Store: pipelinetest.NewMemStore(), StateDir: dir}))
	requireEach(t, log, 1000, 2)

	// A marker from a later lineage than the checkpoint restored: the
	// restored records are taken as written, the new ones are written.
	marker := filepath.Join(dir, writeahead.Dir, "out", "0.committed")
	require.NoError(t, os.WriteFile(marker, []byte("100\n"), 0o644))
	log = &waLog{}
	require.NoError(t, pipelinetest.RunJob(context.Background(), loadWA(t, text(1500), log),
		pipeline.JobOptions{Store: pipelinetest.NewMemStore(), StateDir: dir, Restore: first.Latest()}))
	ns := log.ns()
	slices.Sort(ns)
	require.Len(t, ns, 500)
	for i, n := range ns {
		require.Equal(t, 1000+i, n, "the records after the restored checkpoint, once each")
	}
	b, err := os.ReadFile(marker)
	require.NoError(t, err)
	require.Equal(t, fmt.Sprintf("%d\n", first.Latest().ID()+1), string(b))
}

// TestWriteAheadCrashAfterFlush is the known window of at-least-once: the
// run dies after the wrapped sink flushed a checkpoint's records and
// before the commit marker was written, so the restored run writes those
// records again (as Flink's GenericWriteAheadSink does).
func TestWriteAheadCrashAfterFlush(t *testing.T) {
	const count = 1000
	store, log, dir := pipelinetest.NewMemStore(), &waLog{}, t.TempDir()
	log.failNextFlush()
	text := fmt.Sprintf(waText, "1h", count, 1, 1)
	err := pipelinetest.RunJob(context.Background(), loadWA(t, text, log), pipeline.JobOptions{Store: store, StateDir: dir})
	require.ErrorIs(t, err, errDied)
	requireEach(t, log, count, 1)

	require.NoError(t, pipelinetest.RunJob(context.Background(), loadWA(t, text, log), pipeline.JobOptions{Store: store, StateDir: dir, Restore: store.Latest()}))
	requireEach(t, log, count, 2)
}

// TestWriteAheadKeepsRecords: what the wrapped sink gets is the record the
// wrapper got: fields of every kind, event time, key and source metadata.
func TestWriteAheadKeepsRecords(t *testing.T) {
	at := time.Date(2024, 5, 6, 7, 8, 9, 123456789, time.UTC)
	want := []pipeline.Record{{
		Fields: map[string]any{
			"i": 42, "neg": -7, "f": 2.0, "s": "héllo", "b": true, "null": nil,
			"bytes": []byte{0, 0xff}, "t": at,
			"list": []any{1, "x", 1.5}, "map": map[string]any{"a": 1, "b": []any{false}},
		},
		Time: 1_700_000_000_123,
		Key:  "\x00\xffbinary",
		Meta: &expr.Meta{Key: []byte("k"), Headers: map[string]string{"h": "v"}, Partition: 3, Offset: 99, Timestamp: 5},
	}, {Fields: map[string]any{"n": 1}, Time: pipeline.NoTime}}
	log := &waLog{}
	plan := loadWA(t, `
version: 1
name: wa
checkpoint: { interval: 1h }
sources: [{ id: in, type: fixed, fixed: true }]
sinks: [{ id: out, type: plain, write_ahead: true }]
`, log)
	plan.Spec.Sources[0].Config.(*fixedConfig).records = []pipeline.Record{want[0].Clone(), want[1].Clone()}
	require.NoError(t, pipelinetest.RunJob(context.Background(), plan, pipeline.JobOptions{Store: pipelinetest.NewMemStore(), StateDir: t.TempDir()}))
	require.Equal(t, want, log.all())
}

// TestWriteAheadNeedsStateDir: without a state dir for its markers the
// sink does not open.
func TestWriteAheadNeedsStateDir(t *testing.T) {
	plan := loadWA(t, fmt.Sprintf(waText, "1h", 10, 1, 1), &waLog{})
	err := pipelinetest.RunJob(context.Background(), plan, pipeline.JobOptions{Store: pipelinetest.NewMemStore()})
	require.ErrorContains(t, err, `open sink "out": write_ahead needs a state directory`)
}

func TestLoadWriteAhead(t *testing.T) {
	log := &waLog{}
	plan := loadWA(t, fmt.Sprintf(waText, "1s", 10, 1, 1), log)
	require.True(t, plan.Spec.Sinks[0].WriteAhead)
	// The seq source is at-most-once (it declares nothing): the sink's
	// reason is the one to check.
	sinkWhy := func(p *pipeline.Plan) string {
		for _, r := range p.GuaranteeWhy {
			if strings.HasPrefix(r, `sink "out"`) {
				return r
			}
		}
		return ""
	}
	why := sinkWhy(plan)
	require.True(t, strings.HasPrefix(why, `sink "out" (plain) is at-least-once with write_ahead: `), "write_ahead keeps the sink's class, with a note: %s", why)
	require.Contains(t, why, "again only if eddy dies between the sink's flush and its commit marker")

	plan = loadWA(t, strings.Replace(fmt.Sprintf(waText, "1s", 10, 1, 1), "write_ahead: true", "write_ahead: false", 1), log)
	require.False(t, plan.Spec.Sinks[0].WriteAhead)
	require.Equal(t, `sink "out" (plain) is at-least-once`, sinkWhy(plan))

	const head = "version: 1\nname: bad\n"
	tests := []struct {
		name, text, want string
	}{{
		name: "a two-phase-commit sink",
		text: head + "checkpoint: {interval: 1s}\nsources: [{type: seq}]\nsinks:\n  - id: out\n    type: txn\n    write_ahead: true\n",
		want: `bad.yaml:8:18: sink "out": write_ahead is for sinks without transactions; a txn sink already commits its output with each checkpoint (remove write_ahead)`,
	}, {
		name: "no checkpoint block",
		text: head + "sources: [{type: seq}]\nsinks:\n  - id: out\n    type: plain\n    write_ahead: true\n",
		want: `bad.yaml:7:18: sink "out": write_ahead needs a checkpoint block: its records are written when a checkpoint completes (add checkpoint: {interval: 1s}, or remove write_ahead)`,
	}, {
		name: "not a bool",
		text: head + "checkpoint: {interval: 1s}\nsources: [{type: seq}]\nsinks:\n  - id: out\n    type: plain\n    write_ahead: yes please\n",
		want: `bad.yaml:8:18: write_ahead: cannot use "yes please" as true or false`,
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := pipeline.Load(waEnv(), "bad.yaml", []byte(tc.text))
			require.ErrorIs(t, err, pipeline.ErrInvalid)
			require.Equal(t, tc.want, err.Error())
		})
	}
}
