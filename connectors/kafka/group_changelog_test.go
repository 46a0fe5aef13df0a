package kafka

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"maps"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/stretchr/testify/require"

	"github.com/eddy-stream/eddy/checkpoint"
	"github.com/eddy-stream/eddy/pipeline"
	"github.com/eddy-stream/eddy/statestore"
)

// changelogHarness runs generations of groupPipeline's group on the test
// broker without a consumer group: each owns every partition, its
// txnStore takes a backend's checkpoints as the job's coordinator hands
// them over, and readChangelogs restores them.
type changelogHarness struct {
	t      testing.TB
	gp     *pipeline.GroupPlan
	g      *groupRun
	maxPar int
	clock  int64
	total  int // the changelog's committed records
}

const harnessPart = "op/per_user/0"

func newChangelogHarness(t testing.TB, maxPar int) *changelogHarness {
	brokers := testBrokers(t)
	src := testTopic(t, brokers, 1)
	gp := groupPipeline(t, brokers, src+"-g", src, maxPar)
	_, err := pipeline.EnsureGroupTopics(groupAdminOf(t, gp), gp)
	require.NoError(t, err)
	h := &changelogHarness{t: t, gp: gp, maxPar: maxPar, clock: 1_000_000}
	h.g = h.process("p1", "", slog.New(slog.NewTextHandler(io.Discard, nil)))
	return h
}

// process connects a process of the harness's group: its client and
// transactional producer (process id pid), and with a state directory its
// local copy of the changelogs. The test's end closes it.
func (h *changelogHarness) process(pid, stateDir string, logger *slog.Logger) *groupRun {
	t := h.t
	cfg := h.gp.Group.Client.(*GroupClientConfig)
	run := &pipeline.GroupRun{Plan: h.gp, Logger: logger, ProcessID: pid, StateDir: stateDir}
	g := &groupRun{cfg: cfg, run: run, logger: run.Logger}
	g.purge = newPurger(g)
	g.local = openLocalState(stateDir, logger)
	sc, err := cfg.saramaConfig()
	require.NoError(t, err)
	sc.Consumer.IsolationLevel = sarama.ReadCommitted
	sc.Consumer.MaxWaitTime = 50 * time.Millisecond
	g.client, err = cfg.newClient(sc)
	require.NoError(t, err)
	require.NoError(t, g.startProducer())
	t.Cleanup(g.close)
	return g
}

// generation starts a generation that owns every partition, and begins
// its first transaction.
func (h *changelogHarness) generation() *generation {
	gen := h.generationOf(h.g)
	require.NoError(h.t, h.g.endTransaction())
	require.NoError(h.t, h.g.producer.BeginTxn())
	return gen
}

// generationOf returns a generation of process g that owns every
// partition.
func (h *changelogHarness) generationOf(g *groupRun) *generation {
	all := make([]int32, h.maxPar)
	for i := range all {
		all[i] = int32(i)
	}
	topics, err := h.gp.ResolveTopics(nil)
	require.NoError(h.t, err)
	assigned := map[string][]int32{}
	for _, s := range h.gp.Stages {
		for _, topic := range s.Topics(topics) {
			assigned[topic] = all
		}
	}
	gen := &generation{g: g, topics: topics, assigned: assigned}
	g.gen = gen
	return gen
}

// backend opens an incremental backend as a group generation's job does.
func (h *changelogHarness) backend(kind string) statestore.IncrementalBackend {
	opts := statestore.Options{
		KeyGroup:  func(k string) int { return pipeline.KeyGroup(k, h.maxPar) },
		KeyGroups: [2]int{0, h.maxPar}, Clock: func() int64 { return h.clock },
		Incremental: true, Changelog: true,
	}
	var b statestore.IncrementalBackend
	var err error
	if kind == "bbolt" {
		b, err = statestore.NewBolt(statestore.BoltOptions{Options: opts, Dir: h.t.TempDir()})
	} else {
		b, err = statestore.NewMemory(opts)
	}
	require.NoError(h.t, err)
	h.t.Cleanup(func() { _ = b.Close() })
	return b
}

// commit takes checkpoint id of b, writes it into gen's transaction as the
// coordinator does (a delta, or full where the store refuses its base),
// commits it and tells b. It returns the snapshot's base and the records
// the checkpoint wrote to the changelog, as the broker has them.
func (h *changelogHarness) commit(gen *generation, b statestore.IncrementalBackend, id int64) (base int64, records int) {
	t := h.t
	t.Helper()
	s, err := b.SnapshotCheckpoint(id)
	require.NoError(t, err)
	ds := s.(statestore.DeltaSnapshot)
	w, err := gen.Store().Begin(id, checkpoint.Meta{})
	require.NoError(t, err)
	pw, err := w.Create(harnessPart, ds.Base())
	if errors.Is(err, checkpoint.ErrDeltaBase) {
		ds.Full()
		pw, err = w.Create(harnessPart, 0)
	}
	require.NoError(t, err)
	base = ds.Base()
	_, err = s.WriteAndRelease(pw)
	require.NoError(t, err)
	require.NoError(t, pw.Close())
	require.NoError(t, w.Complete(t.Context()))
	b.CheckpointCompleted(id)
	sent := pw.(*changelogWriter).sent
	before := h.total
	h.total = h.records()
	records = h.total - before
	require.Equal(t, sent, records, "the records sent are the ones committed")
	return base, records
}

// records counts the committed records of the changelog.
func (h *changelogHarness) records() int {
	t := h.t
	topic := h.gp.Stages[1].Changelogs[0].Name
	var tps []topicPartition
	for p := range h.maxPar {
		tps = append(tps, topicPartition{topic, int32(p)})
	}
	// A real broker writes a committed transaction's markers after the
	// commit returns: the records are all readable once the last stable
	// offsets reach the high-water marks (no transaction is open).
	var ends map[topicPartition]int64
	require.Eventually(t, func() bool {
		var err error
		ends, err = listOffsets(h.g.client, sarama.ReadCommitted, tps, func(topicPartition) int64 { return sarama.OffsetNewest })
		require.NoError(t, err)
		hwms, err := listOffsets(h.g.client, sarama.ReadUncommitted, tps, func(topicPartition) int64 { return sarama.OffsetNewest })
		require.NoError(t, err)
		return maps.Equal(ends, hwms)
	}, time.Minute, 10*time.Millisecond, "the changelog's transactions end")
	counts := make(chan int, len(tps))
	for _, tp := range tps {
		go func() {
			_, n, err := readPartitionTo(context.Background(), h.g.client, tp, 0, ends[tp], func(int) {})
			if err != nil {
				n = -1 << 30
			}
			counts <- n
		}()
	}
	total := 0
	for range tps {
		total += <-counts
	}
	require.GreaterOrEqual(t, total, 0, "reading the changelog failed")
	return total
}

// restore reads the changelog into a new generation and a new backend.
func (h *changelogHarness) restore(kind string) (*generation, statestore.IncrementalBackend) {
	h.t.Helper()
	gen, b, _ := h.restoreCounted(kind)
	return gen, b
}

// restoreCounted is restore, which also returns the restore's counts.
func (h *changelogHarness) restoreCounted(kind string) (*generation, statestore.IncrementalBackend, *changelogRestore) {
	t := h.t
	t.Helper()
	gen := h.generation()
	r, err := gen.readChangelogs(t.Context())
	require.NoError(t, err)
	return gen, h.restoreInto(r, kind), r
}

// restoreInto restores what a restore read into a new backend.
func (h *changelogHarness) restoreInto(r *changelogRestore, kind string) statestore.IncrementalBackend {
	t := h.t
	t.Helper()
	b := h.backend(kind)
	if part, ok := r.parts[harnessPart]; ok {
		var blobs [][]byte
		require.NoError(t, statestore.SplitBlobs(part, func(_ int, blob []byte) error { blobs = append(blobs, blob); return nil }))
		require.NoError(t, b.Restore(blobs...))
	}
	return b
}

// harnessStates are the states of the tests' backends.
type harnessStates struct {
	count statestore.ValueState[int64]
	seen  statestore.ValueState[string] // TTL 1 minute
	big   statestore.ValueState[string]
	tm    *statestore.TimerService
}

func registerHarness(t testing.TB, b statestore.Backend) *harnessStates {
	var s harnessStates
	var err error
	s.count, err = statestore.RegisterValue(b, statestore.ValueDescriptor[int64]{Name: "count"})
	require.NoError(t, err)
	s.seen, err = statestore.RegisterValue(b, statestore.ValueDescriptor[string]{Name: "seen", TTL: time.Minute})
	require.NoError(t, err)
	s.big, err = statestore.RegisterValue(b, statestore.ValueDescriptor[string]{Name: "big"})
	require.NoError(t, err)
	s.tm = b.TimerService("window")
	return &s
}

func fullSnapshot(t testing.TB, b statestore.Backend) []byte {
	s, err := b.Snapshot()
	require.NoError(t, err)
	var buf bytes.Buffer
	_, err = s.WriteAndRelease(&buf)
	require.NoError(t, err)
	return buf.Bytes()
}

// TestGroupChangelogWritesChanges: a state of many keys of which few
// change between commits: the first commit writes every entry and timer,
// the next ones only the entries that changed (and a tombstone for each
// deleted one, and each timer gone), nothing when nothing changed. A
// restore after deletes and TTL expiry gives exactly the state; its first
// commit (full: no base yet) writes nothing, as the changelog holds it
// already, and the next ones are deltas again.
func TestGroupChangelogWritesChanges(t *testing.T) {
	for _, kind := range []string{"memory", "bbolt"} {
		t.Run(kind, func(t *testing.T) {
			h := newChangelogHarness(t, 8)
			gen := h.generation()
			b := h.backend(kind)
			s := registerHarness(t, b)
			const n = 2000
			key := func(i int) string { return "user-" + strconv.Itoa(i) }
			for i := range n {
				s.count.Put(key(i), "", int64(i))
				s.seen.Put(key(i), "", "x")
				s.tm.RegisterEventTimer(key(i), "", 60_000)
			}
			base, records := h.commit(gen, b, 1)
			require.Zero(t, base)
			require.Equal(t, 3*n, records, "every entry and timer")

			for i := range 10 {
				s.count.Put(key(i), "", -1)
			}
			for i := 10; i < 13; i++ {
				s.count.Clear(key(i), "")
			}
			for i := 20; i < 22; i++ {
				s.tm.DeleteEventTimer(key(i), "", 60_000)
				s.tm.RegisterEventTimer(key(i), "", 120_000)
			}
			s.count.Put("new", "", 1)
			s.count.Clear("new", "") // written and deleted between two commits
			base, records = h.commit(gen, b, 2)
			require.Equal(t, int64(1), base)
			require.Equal(t, 10+3+2*2, records, "10 updates, 3 deletions, 2 timers moved")

			base, records = h.commit(gen, b, 3)
			require.Equal(t, int64(2), base)
			require.Zero(t, records, "nothing changed")

			// TTL: five entries are written again, the others expire and a
			// cleanup deletes them.
			h.clock += 50_000
			for i := range 5 {
				s.seen.Put(key(i), "", "y")
			}
			h.clock += 20_000
			deleted, err := b.Cleanup()
			require.NoError(t, err)
			require.Equal(t, n-5, deleted)
			base, records = h.commit(gen, b, 4)
			require.Equal(t, int64(3), base)
			require.Equal(t, n, records, "5 updates and the tombstones of the expired entries")
			// The chain is never cut: more than 16 deltas.
			for id := int64(5); id < 20; id++ {
				s.count.Put(key(int(id)), "", -id)
				base, records = h.commit(gen, b, id)
				require.Equal(t, id-1, base)
				require.Equal(t, 1, records)
			}
			want := fullSnapshot(t, b)

			gen2, b2 := h.restore(kind)
			s2 := registerHarness(t, b2)
			require.Equal(t, want, fullSnapshot(t, b2), "the restored state")
			base, records = h.commit(gen2, b2, 1)
			require.Zero(t, base)
			require.Zero(t, records, "the changelog holds the state already")
			s2.count.Clear(key(0), "")
			s2.tm.DeleteEventTimer(key(1), "", 60_000)
			base, records = h.commit(gen2, b2, 2)
			require.Equal(t, int64(1), base)
			require.Equal(t, 2, records)

			// A restore that finds state the backend no longer has (a full
			// snapshot of other state): the changelog deletes it.
			gen3 := h.generation()
			_, err = gen3.readChangelogs(t.Context())
			require.NoError(t, err)
			b3 := h.backend(kind)
			s3 := registerHarness(t, b3)
			s3.count.Put(key(7), "", -7) // as the changelog holds it
			s3.count.Put("other", "", 5)
			base, records = h.commit(gen3, b3, 1)
			require.Zero(t, base)
			// The changelog holds n-1 counts (key 0's deleted; 10 to 12
			// written again by the deltas), 5 seen, n-1 timers (key 1's
			// deleted).
			held := (n - 1) + 5 + (n - 1)
			require.Equal(t, 1+held-1, records, "one new entry, a tombstone for every other item but key 7's count")
			_, b4 := h.restore(kind)
			registerHarness(t, b4)
			require.Equal(t, fullSnapshot(t, b3), fullSnapshot(t, b4))
		})
	}
}

// TestGroupChangelogLargeEntry: an entry larger than a record's piece is
// written in pieces, which a restore joins; when it shrinks, the pieces
// it no longer has get tombstones; a piece missing from the changelog is
// an error that says so.
func TestGroupChangelogLargeEntry(t *testing.T) {
	h := newChangelogHarness(t, 2)
	gen := h.generation()
	b := h.backend("memory")
	s := registerHarness(t, b)
	s.big.Put("k", "", strings.Repeat("x", 2*changelogChunk+10))
	_, records := h.commit(gen, b, 1)
	require.Equal(t, 3, records, "three pieces")
	want := fullSnapshot(t, b)
	_, b2 := h.restore("memory")
	registerHarness(t, b2)
	require.Equal(t, want, fullSnapshot(t, b2))

	s.big.Put("k", "", "small")
	_, records = h.commit(gen, b, 2)
	require.Equal(t, 3, records, "one piece and two tombstones")
	want = fullSnapshot(t, b)
	_, b3 := h.restore("memory")
	registerHarness(t, b3)
	require.Equal(t, want, fullSnapshot(t, b3))

	held := &heldStep{groups: map[int]*heldGroup{}}
	key := changelogKey(1, 0, "item")
	_, err := restoreItems(map[string][]byte{string(key): {3, 'a'}, string(changelogKey(1, 1, "item")): {3, 'b'}}, held)
	require.ErrorContains(t, err, "key group 1: piece 2 of 3 of an item is missing from the changelog")
	_, err = restoreItems(map[string][]byte{"\x00\x00\x00\x01": {1}}, held)
	require.ErrorIs(t, err, errChangelogRecord)
}

// TestGroupChangelogRestoreAfterAbort: a generation that ends with a large
// transaction aborted (a rebalance in the middle of a commit) leaves the
// changelog with records nobody may read; the next restore reads past
// them and gets the state of the last commit.
func TestGroupChangelogRestoreAfterAbort(t *testing.T) {
	h := newChangelogHarness(t, 16)
	gen := h.generation()
	b := h.backend("memory")
	s := registerHarness(t, b)
	s.count.Put("a", "", 1)
	h.commit(gen, b, 1)
	want := fullSnapshot(t, b)
	for i := range 120_000 {
		k := "k" + strconv.Itoa(i)
		s.count.Put(k, "", int64(i))
		s.tm.RegisterEventTimer(k, "", 1000)
	}
	snap, err := b.SnapshotCheckpoint(2)
	require.NoError(t, err)
	snap.(statestore.DeltaSnapshot).Full()
	w, err := gen.Store().Begin(2, checkpoint.Meta{})
	require.NoError(t, err)
	pw, err := w.Create(harnessPart, 0)
	require.NoError(t, err)
	_, err = snap.WriteAndRelease(pw)
	require.NoError(t, err)
	require.NoError(t, pw.Close())
	require.NoError(t, h.g.out.flush(t.Context()))
	require.NoError(t, h.g.endTransaction(), "the generation ends: its transaction is aborted")

	_, b2 := h.restore("memory")
	registerHarness(t, b2)
	require.Equal(t, want, fullSnapshot(t, b2))
}

// TestGroupChangelogRestoreWaits: a restore that starts while a
// transaction that wrote changelog records is open waits until it ends
// (a transaction that committed but whose markers the broker has not
// written yet looks the same to it), then gets the state that transaction
// committed, or the state before it when it was aborted.
func TestGroupChangelogRestoreWaits(t *testing.T) {
	for _, commit := range []bool{true, false} {
		t.Run(map[bool]string{true: "committed", false: "aborted"}[commit], func(t *testing.T) {
			h := newChangelogHarness(t, 4)
			gen := h.generation()
			b := h.backend("memory")
			s := registerHarness(t, b)
			s.count.Put("a", "", 1)
			h.commit(gen, b, 1)
			before := fullSnapshot(t, b)

			// Checkpoint 2's changelog records go into the open transaction.
			s.count.Put("a", "", 2)
			s.count.Put("b", "", 5)
			snap, err := b.SnapshotCheckpoint(2)
			require.NoError(t, err)
			w, err := gen.Store().Begin(2, checkpoint.Meta{})
			require.NoError(t, err)
			pw, err := w.Create(harnessPart, snap.(statestore.DeltaSnapshot).Base())
			require.NoError(t, err)
			_, err = snap.WriteAndRelease(pw)
			require.NoError(t, err)
			require.NoError(t, pw.Close())
			require.NoError(t, h.g.out.flush(t.Context()))
			after := fullSnapshot(t, b)
			require.NotEqual(t, before, after)

			// Another process restores the key groups meanwhile.
			waiting := make(chan struct{})
			logger := slog.New(&messageSignal{msg: "restore waits for the transactions open on changelog partitions to end", ch: waiting})
			other := h.process("p2", "", logger)
			type result struct {
				r   *changelogRestore
				err error
			}
			done := make(chan result, 1)
			go func() {
				r, err := h.generationOf(other).readChangelogs(t.Context())
				done <- result{r, err}
			}()
			select {
			case <-waiting:
			case res := <-done:
				require.FailNow(t, "the restore did not wait for the open transaction", "err %v", res.err)
			}
			want := before
			if commit {
				require.NoError(t, w.Complete(t.Context()))
				want = after
			} else {
				require.NoError(t, h.g.endTransaction())
			}
			res := <-done
			require.NoError(t, res.err)
			b2 := h.restoreInto(res.r, "memory")
			registerHarness(t, b2)
			require.Equal(t, want, fullSnapshot(t, b2))
		})
	}
}

// messageSignal is a slog handler that closes ch at the first record
// whose message is msg.
type messageSignal struct {
	msg  string
	ch   chan struct{}
	once sync.Once
}

func (m *messageSignal) Enabled(context.Context, slog.Level) bool { return true }
func (m *messageSignal) Handle(_ context.Context, r slog.Record) error {
	if r.Message == m.msg {
		m.once.Do(func() { close(m.ch) })
	}
	return nil
}
func (m *messageSignal) WithAttrs([]slog.Attr) slog.Handler { return m }
func (m *messageSignal) WithGroup(string) slog.Handler      { return m }
