package kafka

import (
	"bytes"
	"crypto/rand"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
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

// logBuffer keeps what a process of a test logs.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func (l *logBuffer) logger() *slog.Logger { return slog.New(slog.NewTextHandler(l, nil)) }

// restart starts process pid again with its state directory dir, as after
// a SIGKILL: the old one's producer is left as it is (the new one fences
// it), its local copy's file is let go.
func (h *changelogHarness) restart(pid, dir string, logs *logBuffer) {
	h.g.local.close()
	h.g = h.process(pid, dir, logs.logger())
}

// abort writes b's checkpoint id into gen's transaction, full, and ends
// the generation before it commits: its transaction is aborted.
func (h *changelogHarness) abort(gen *generation, b statestore.IncrementalBackend, id int64) {
	t := h.t
	snap, err := b.SnapshotCheckpoint(id)
	require.NoError(t, err)
	snap.(statestore.DeltaSnapshot).Full()
	w, err := gen.Store().Begin(id, checkpoint.Meta{})
	require.NoError(t, err)
	pw, err := w.Create(harnessPart, 0)
	require.NoError(t, err)
	_, err = snap.WriteAndRelease(pw)
	require.NoError(t, err)
	require.NoError(t, pw.Close())
	require.NoError(t, h.g.out.flush(t.Context()))
	require.NoError(t, h.g.endTransaction(), "the generation ends: its transaction is aborted")
}

func userKey(i int) string { return "user-" + strconv.Itoa(i) }

// TestGroupLocalStateRestart: a process started again with its state
// directory restores from its local copy and reads only the changelog
// records after the copy's offsets: none when the copy took the last
// commit (an aborted transaction is not in it), and the records of a
// commit whose local update did not happen (the process died between the
// commit and the update) when it did not. The state is the one committed.
func TestGroupLocalStateRestart(t *testing.T) {
	h := newChangelogHarness(t, 8)
	dir, logs := t.TempDir(), &logBuffer{}
	h.g = h.process("p1", dir, logs.logger())
	gen, b, r := h.restoreCounted("memory")
	require.Zero(t, r.localParts)
	require.Contains(t, logs.String(), "reason=\"no local copy\"")
	s := registerHarness(t, b)
	const n = 2000
	for i := range n {
		s.count.Put(userKey(i), "", int64(i))
		s.tm.RegisterEventTimer(userKey(i), "", 60_000)
	}
	_, records := h.commit(gen, b, 1)
	require.Equal(t, 2*n, records)
	for i := range 10 {
		s.count.Put(userKey(i), "", -1)
	}
	s.count.Clear(userKey(10), "")
	_, records = h.commit(gen, b, 2)
	require.Equal(t, 11, records)
	want := fullSnapshot(t, b)
	for i := range 100 {
		s.count.Put("aborted-"+strconv.Itoa(i), "", 1)
	}
	h.abort(gen, b, 3)

	h.restart("p1", dir, logs)
	gen2, b2, r2 := h.restoreCounted("memory")
	s2 := registerHarness(t, b2)
	require.Equal(t, want, fullSnapshot(t, b2), "the committed state")
	require.Equal(t, 8, r2.localParts, "every partition starts from the copy")
	require.Equal(t, 2*n-1, r2.local, "the copy holds every entry and timer")
	require.Zero(t, r2.read, "the copy is at the end of every partition")
	_, records = h.commit(gen2, b2, 1)
	require.Zero(t, records, "the changelog holds the restored state already")

	// The next commit's local update fails (the process dies between the
	// commit and the update): the copy stays behind by that commit.
	for i := range 5 {
		s2.count.Put(userKey(i), "", 7)
	}
	h.g.local.close()
	_, records = h.commit(gen2, b2, 2)
	require.Equal(t, 5, records)
	require.Contains(t, logs.String(), "update the local copy of the changelogs after a commit")
	want = fullSnapshot(t, b2)

	h.restart("p1", dir, logs)
	gen3, b3, r3 := h.restoreCounted("memory")
	registerHarness(t, b3)
	require.Equal(t, want, fullSnapshot(t, b3))
	require.Equal(t, 8, r3.localParts)
	require.Equal(t, 5, r3.read, "only the commit the copy missed is read")
	_, records = h.commit(gen3, b3, 1)
	require.Zero(t, records)

	// The restore brought the copy up to the end: the next restart reads
	// nothing again.
	h.restart("p1", dir, logs)
	_, b4, r4 := h.restoreCounted("memory")
	registerHarness(t, b4)
	require.Equal(t, want, fullSnapshot(t, b4))
	require.Zero(t, r4.read)
	require.Equal(t, 2*n-1, r4.local)
}

// TestGroupLocalStateBehind: another process wrote the partitions while
// this one did not own them: its copy is behind, the restore reads the
// other's records after it and has the other's state.
func TestGroupLocalStateBehind(t *testing.T) {
	h := newChangelogHarness(t, 4)
	logs := &logBuffer{}
	a := h.process("a", t.TempDir(), logs.logger())
	h.g = a
	genA, bA := h.restore("memory")
	sA := registerHarness(t, bA)
	for i := range 500 {
		sA.count.Put(userKey(i), "", int64(i))
	}
	h.commit(genA, bA, 1)

	// The partitions go to process b, which has no copy of its own.
	h.g = h.process("b", t.TempDir(), logs.logger())
	genB, bB, rB := h.restoreCounted("memory")
	require.Zero(t, rB.localParts)
	require.Equal(t, 500, rB.read)
	sB := registerHarness(t, bB)
	for i := range 20 {
		sB.count.Put(userKey(i), "", -1)
	}
	for i := 20; i < 25; i++ {
		sB.count.Clear(userKey(i), "")
	}
	sB.tm.RegisterEventTimer(userKey(0), "", 5000)
	_, written := h.commit(genB, bB, 1)
	require.Equal(t, 26, written)
	want := fullSnapshot(t, bB)

	// They come back to a.
	h.g = a
	_, bA2, rA2 := h.restoreCounted("memory")
	registerHarness(t, bA2)
	require.Equal(t, want, fullSnapshot(t, bA2), "b's state")
	require.Equal(t, 4, rA2.localParts)
	require.Equal(t, 500, rA2.local)
	require.Equal(t, written, rA2.read, "only b's records are read")
}

// recreateTopics deletes the group's internal topics and creates them
// again, empty (eddy group reset, then a run).
func (h *changelogHarness) recreateTopics() {
	admin := groupAdminOf(h.t, h.gp)
	_, err := pipeline.ResetGroup(admin, h.gp)
	require.NoError(h.t, err)
	_, err = pipeline.EnsureGroupTopics(admin, h.gp)
	require.NoError(h.t, err)
	h.total = 0
}

// TestGroupLocalStateTopicRecreated: a copy of a changelog that was
// deleted and created again is not used: its offset is past the new
// partition's end, or (the new topic got more records since) the topic's
// id is another. The restore reads the new topic from its start.
func TestGroupLocalStateTopicRecreated(t *testing.T) {
	h := newChangelogHarness(t, 2)
	dir, logs := t.TempDir(), &logBuffer{}
	h.g = h.process("a", dir, logs.logger())
	gen, b := h.restore("memory")
	s := registerHarness(t, b)
	for i := range 50 {
		s.count.Put(userKey(i), "", int64(i))
	}
	h.commit(gen, b, 1)

	h.recreateTopics()
	h.restart("a", dir, logs)
	gen, b, r := h.restoreCounted("memory")
	require.Contains(t, logs.String(), "its offset is past the end of the partition")
	require.Zero(t, r.localParts)
	require.Zero(t, r.read)
	s = registerHarness(t, b)
	_, ok := s.count.Get(userKey(0), "")
	require.False(t, ok, "the state went with the topic")
	s.count.Put("a", "", 1)
	h.commit(gen, b, 1)

	h.recreateTopics()
	a := h.g
	h.g = h.process("b", t.TempDir(), logs.logger())
	genB, bB := h.restore("memory")
	sB := registerHarness(t, bB)
	for i := range 200 {
		sB.count.Put(userKey(i), "", -int64(i))
	}
	h.commit(genB, bB, 1)
	want := fullSnapshot(t, bB)

	h.g = a
	h.restart("a", dir, logs)
	_, bA, rA := h.restoreCounted("memory")
	registerHarness(t, bA)
	require.Equal(t, want, fullSnapshot(t, bA))
	require.Contains(t, logs.String(), "the topic was recreated since")
	require.Zero(t, rA.localParts)
	require.Equal(t, 200, rA.read)
}

// TestGroupLocalStateCorrupt: a copy whose bytes changed (a flipped byte
// in an item) is not used, with a warning, and its partition is read from
// the start while the others start from their copies; a file that is not
// a bbolt file is replaced, with a warning, and every partition is read
// from the start. The state is the one committed either way.
func TestGroupLocalStateCorrupt(t *testing.T) {
	h := newChangelogHarness(t, 4)
	dir, logs := t.TempDir(), &logBuffer{}
	h.g = h.process("a", dir, logs.logger())
	gen, b := h.restore("memory")
	s := registerHarness(t, b)
	for i := range 100 {
		s.count.Put(userKey(i), "", int64(i))
	}
	marker := "MARKER-" + strings.Repeat("m", 64)
	s.big.Put("k", "", marker)
	h.commit(gen, b, 1)
	want := fullSnapshot(t, b)
	markerPart := pipeline.KeyGroupPartition(pipeline.KeyGroup("k", h.maxPar), h.maxPar, h.maxPar)

	h.g.local.close()
	path := filepath.Join(dir, localStateFile)
	file, err := os.ReadFile(path)
	require.NoError(t, err)
	flipped := 0
	for i := bytes.Index(file, []byte(marker)); i >= 0; {
		file[i+len(marker)/2] ^= 0xff
		flipped++
		next := bytes.Index(file[i+1:], []byte(marker))
		if next < 0 {
			break
		}
		i += 1 + next
	}
	require.Positive(t, flipped, "the item is in the file")
	require.NoError(t, os.WriteFile(path, file, 0o600))

	h.restart("a", dir, logs)
	_, b2, r2 := h.restoreCounted("memory")
	registerHarness(t, b2)
	require.Equal(t, want, fullSnapshot(t, b2))
	require.Regexp(t, `level=WARN msg="restoring changelog partitions from their start: their local copy cannot be used" reason="the local copy is corrupt: [^"]*" partitions=.*\[`+strconv.Itoa(markerPart)+`\]`, logs.String())
	require.Equal(t, 3, r2.localParts, "the other partitions start from their copies")
	require.Positive(t, r2.read)

	h.g.local.close()
	garbage := make([]byte, 64<<10)
	_, _ = rand.Read(garbage)
	require.NoError(t, os.WriteFile(path, garbage, 0o600))
	h.restart("a", dir, logs)
	require.Contains(t, logs.String(), "level=WARN msg=\"the local copy of the changelogs is corrupt: starting a new one, the restores read the changelogs from their start\"")
	_, b3, r3 := h.restoreCounted("memory")
	registerHarness(t, b3)
	require.Equal(t, want, fullSnapshot(t, b3))
	require.Zero(t, r3.localParts)
	require.Equal(t, 101, r3.read)

	// The new file took the restore: the next one starts from it.
	h.restart("a", dir, logs)
	_, _, r4 := h.restoreCounted("memory")
	require.Equal(t, 4, r4.localParts)
	require.Zero(t, r4.read)
}

// TestGroupLocalStateRefresh: a commit that wrote nothing to a partition
// refreshes the time of its copy once the copy is localRefresh old (the
// generation owns the partition: it still equals it), and leaves a younger
// copy as it is; the offset and the items stay.
func TestGroupLocalStateRefresh(t *testing.T) {
	h := newChangelogHarness(t, 2)
	h.g = h.process("a", t.TempDir(), slog.New(slog.DiscardHandler))
	gen, b := h.restore("memory")
	s := registerHarness(t, b)
	for i := range 20 {
		s.count.Put(userKey(i), "", int64(i))
	}
	h.commit(gen, b, 1)
	tps := make([]topicPartition, 0, len(gen.copied))
	for tp := range gen.copied {
		tps = append(tps, tp)
	}
	require.Len(t, tps, 2)
	before := map[topicPartition]copyMeta{}
	for _, tp := range tps {
		c, err := h.g.local.load(tp)
		require.NoError(t, err)
		before[tp] = c.meta
	}

	now := time.Now().Add(time.Hour)
	gen.copied[tps[0]] = now.Add(-localRefresh)
	gen.copied[tps[1]] = now.Add(-localRefresh + time.Second)
	gen.updateLocal(newLocalTxn(), now)
	for i, tp := range tps {
		c, err := h.g.local.load(tp)
		require.NoError(t, err)
		want := before[tp]
		if i == 0 {
			want.updated = now.UnixMilli()
		}
		require.Equal(t, want, c.meta, "partition %s", tp)
	}
}

// TestCopyUnusable: a copy is used when its offset is within the
// partition, its topic is the one the broker has, and it is younger than
// the topic's delete.retention.ms.
func TestCopyUnusable(t *testing.T) {
	now := time.UnixMilli(1_700_000_000_000)
	id := sarama.Uuid{1}
	m := copyMeta{next: 10, updated: now.Add(-time.Hour).UnixMilli(), topic: id}
	day := 24 * time.Hour
	require.Empty(t, copyUnusable(m, 0, 10, id, day, now))
	require.Empty(t, copyUnusable(m, 10, 20, id, day, now), "the partition's start at the copy's offset")
	require.Empty(t, copyUnusable(m, 0, 20, sarama.Uuid{}, day, now), "a broker without topic ids")
	require.Contains(t, copyUnusable(m, 0, 9, id, day, now), "past the end")
	require.Contains(t, copyUnusable(m, 11, 20, id, day, now), "below the partition's log start")
	require.Contains(t, copyUnusable(m, 0, 20, sarama.Uuid{2}, day, now), "recreated")
	require.Contains(t, copyUnusable(m, 0, 20, id, time.Hour, now), "older than the topic's delete.retention.ms")
	require.Contains(t, copyUnusable(m, 0, 20, id, 0, now), "delete.retention.ms is not known")
}

// BenchmarkGroupRestore measures the restore of a state of 100,000 keys
// (8 changelog partitions) by a process started again, whose keys were
// written once or five times (the changelog holds each write until
// compaction): "changelog" without a local copy (every record read from
// the changelog), "changelog+copy" the same with the copy written after
// the read (the first restore of a process, or one whose copy cannot be
// used), "copy" from the local copy with nothing after it in the
// changelog. It reports the records read from the changelog and taken
// from the copy per restore.
func BenchmarkGroupRestore(b *testing.B) {
	const keys = 100_000
	for _, writes := range []int{1, 5} {
		for _, mode := range []string{"changelog", "changelog+copy", "copy"} {
			b.Run(fmt.Sprintf("writes=%d/%s", writes, mode), func(b *testing.B) {
				h := newChangelogHarness(b, 8)
				dir := ""
				if mode != "changelog" {
					dir = b.TempDir()
				}
				logger := slog.New(slog.DiscardHandler)
				h.g = h.process("p1", dir, logger)
				gen, be := h.restore("memory")
				s := registerHarness(b, be)
				for w := range writes {
					for i := range keys {
						s.count.Put(userKey(i), "", int64(w*keys+i))
					}
					h.commit(gen, be, int64(w+1))
				}
				var r *changelogRestore
				b.ResetTimer()
				for range b.N {
					b.StopTimer()
					h.g.local.close()
					if mode == "changelog+copy" {
						require.NoError(b, os.Remove(filepath.Join(dir, localStateFile)))
					}
					h.g = h.process("p1", dir, logger)
					b.StartTimer()
					_, _, r = h.restoreCounted("memory")
				}
				b.ReportMetric(float64(r.read), "changelog-records/op")
				b.ReportMetric(float64(r.local), "copy-records/op")
			})
		}
	}
}
