package kafka

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/IBM/sarama"

	"github.com/eddy-stream/eddy/checkpoint"
	"github.com/eddy-stream/eddy/pipeline"
)

// The checkpoints of a generation's job are Kafka transactions (txnStore),
// and its keyed state lives in the changelog topics: each entry and timer
// of a stateful step's key group g is a record in partition g of its
// changelog (group_changelog.go). A checkpoint writes what changed since
// the last commit; a restore reads the assigned partitions of the
// changelogs to their end and keeps the last record of each key
// (changelogRestore).

// txnStore is the CheckpointStore of a generation: checkpoint N is the
// open transaction, which Complete commits with the offsets the sources'
// positions of N hold.
type txnStore struct{ gen *generation }

// Begin starts collecting checkpoint id; the transaction is open already
// (the records written since the last commit are in it).
func (s *txnStore) Begin(id int64, _ checkpoint.Meta) (checkpoint.Writer, error) {
	return &txnWriter{gen: s.gen, id: id, offsets: map[topicPartition]int64{}, meta: map[topicPartition]string{}}, nil
}

// txnWriter collects a checkpoint's parts: the sources' positions become
// the transaction's offsets, the keyed state becomes changelog records.
type txnWriter struct {
	gen *generation
	id  int64

	mu      sync.Mutex
	offsets map[topicPartition]int64
	// meta is the metadata of each partition's offset: the largest event
	// time a group source read from it, or an exchange reader's upstream
	// watermarks (decodeGroupPosition).
	meta map[topicPartition]string
	// changelogs are the parts' changelog writers: what they sent is
	// counted when the transaction commits.
	changelogs []*changelogWriter
}

// Put takes a source's position (src/<id>/<subtask>): the transaction
// commits its offsets, with each partition's largest event time (group
// sources) or upstream watermarks (exchange readers) in the metadata. The
// other small parts (watermarks, sink
// committables) need no storage in group mode: a source's watermark
// comes back from the event times of its partitions.
func (w *txnWriter) Put(part string, blob []byte) error {
	if !strings.HasPrefix(part, "src/") || len(blob) == 0 {
		return nil
	}
	entries, meta, err := decodeGroupPosition(blob)
	if err != nil {
		return fmt.Errorf("checkpoint %d: %s: %w", w.id, part, err)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for i, e := range entries {
		tp := topicPartition{e.Topic, e.Partition}
		w.offsets[tp] = e.Next
		if meta[i] != "" {
			w.meta[tp] = meta[i]
		}
	}
	return nil
}

// timeMetadataPrefix starts the metadata of a committed offset that
// carries the largest event time read from the partition before it: the
// process that reads the partition next starts its watermark there, so a
// partition with nothing more to read does not hold the watermark back.
const timeMetadataPrefix = "eddy-ts:"

// parseTimeMetadata returns the event time of a committed offset's
// metadata.
func parseTimeMetadata(m string) (int64, bool) {
	rest, ok := strings.CutPrefix(m, timeMetadataPrefix)
	if !ok {
		return 0, false
	}
	ts, err := strconv.ParseInt(rest, 10, 64)
	return ts, err == nil
}

// Create takes the keyed state of a step (op/<step>/<subtask>): what
// differs from what the step's changelog holds is written to it when the
// part is closed. A delta (base not 0) must be on a checkpoint that the
// generation committed: the changelog then holds the base's state with
// the changes committed since, which the delta holds too.
func (w *txnWriter) Create(part string, base int64) (checkpoint.PartWriter, error) {
	kind, rest, _ := strings.Cut(part, "/")
	step, _, _ := strings.Cut(rest, "/")
	if kind != "op" {
		return nil, fmt.Errorf("checkpoint %d: unexpected part %s", w.id, part)
	}
	if base < 0 || base > w.gen.held.lastCommitted() {
		return nil, checkpoint.ErrDeltaBase
	}
	t := w.gen.changelogOf(step)
	if t == nil {
		return nil, fmt.Errorf("checkpoint %d: step %q keeps state but has no changelog topic", w.id, step)
	}
	cw := &changelogWriter{gen: w.gen, topic: t, step: step, delta: base != 0}
	w.mu.Lock()
	w.changelogs = append(w.changelogs, cw)
	w.mu.Unlock()
	return cw, nil
}

// Complete commits the transaction with the checkpoint's offsets and the
// generation's group metadata, and begins the next one.
func (w *txnWriter) Complete(ctx context.Context) error {
	g := w.gen.g
	at := time.Now()
	if err := g.out.flush(ctx); err != nil {
		return fmt.Errorf("checkpoint %d: %w", w.id, err)
	}
	// Every record of the transaction is acknowledged: rec has the
	// changelog records' offsets.
	rec := w.gen.nextRecording()
	offsets := map[string][]*sarama.PartitionOffsetMetadata{}
	w.mu.Lock()
	for tp, next := range w.offsets {
		om := &sarama.PartitionOffsetMetadata{Partition: tp.partition, Offset: next}
		if m, ok := w.meta[tp]; ok {
			om.Metadata = &m
		}
		offsets[tp.topic] = append(offsets[tp.topic], om)
	}
	w.mu.Unlock()
	if len(offsets) > 0 {
		if err := g.producer.AddOffsetsToTxnWithGroupMetadata(offsets, w.gen.groupMetadata()); err != nil {
			return fmt.Errorf("checkpoint %d: add the offsets to the transaction: %w", w.id, err)
		}
	}
	if err := g.producer.CommitTxn(); err != nil {
		return fmt.Errorf("checkpoint %d: commit the transaction: %w", w.id, err)
	}
	// The offsets are committed: the records before them in the
	// repartition partitions are read for good.
	w.mu.Lock()
	g.purge.commit(w.gen, w.offsets)
	records, bytes := 0, 0
	for _, cw := range w.changelogs {
		records, bytes = records+cw.sent, bytes+cw.bytes
	}
	w.mu.Unlock()
	g.run.ChangelogWritten(records, bytes)
	// The changelog records are committed: the local copy takes them.
	w.gen.updateLocal(rec, at)
	w.gen.held.committed(w.id)
	if err := g.producer.BeginTxn(); err != nil {
		return fmt.Errorf("checkpoint %d: begin the next transaction: %w", w.id, err)
	}
	return nil
}

// Abort does nothing: a checkpoint that fails fails the job (no failure
// is tolerable in group mode), and the generation's end aborts the
// transaction.
func (w *txnWriter) Abort() error { return nil }

// changelogRestore is the keyed state of the generation's assigned
// partitions read from the changelogs, as a checkpoint of one subtask per
// step (op/<step>/0: the blobs of every key group). The restore at
// parallelism 1 takes them all.
type changelogRestore struct {
	parts map[string][]byte
	// read is the number of records read from the changelogs; local the
	// records taken from the local copies, of localParts partitions.
	read, local, localParts int
}

var _ pipeline.RestoredCheckpoint = (*changelogRestore)(nil)

// ID is 0: the state comes from no checkpoint of this store.
func (r *changelogRestore) ID() int64 { return 0 }

func (r *changelogRestore) Parts() []checkpoint.PartInfo {
	out := make([]checkpoint.PartInfo, 0, len(r.parts))
	for _, name := range slices.Sorted(mapKeys(r.parts)) {
		out = append(out, checkpoint.PartInfo{Name: name})
	}
	return out
}

func (r *changelogRestore) Get(part string) ([]byte, error) {
	b, ok := r.parts[part]
	if !ok {
		return nil, fmt.Errorf("no part %s", part)
	}
	return b, nil
}

func mapKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// readChangelogs restores the changelog partitions of the stages that run
// here, each up to its last stable offset once the transactions open on
// it ended (settledEnds): from the process's local copy of the partition
// and the records after the copy's offset where the copy can be used
// (localStarts), else from the partition's start. It keeps the last
// record of each key group's keys, and brings the local copy up to the
// offsets read to. The process's producer has fenced its previous
// incarnation already, so no transaction of its own holds the end back.
func (gen *generation) readChangelogs(ctx context.Context) (*changelogRestore, error) {
	g := gen.g
	r := &changelogRestore{parts: map[string][]byte{}}
	var tps []topicPartition
	stepOf := map[string]string{}
	for _, s := range g.run.Plan.Stages {
		for _, t := range s.Changelogs {
			stepOf[t.Name] = t.Step
			for _, p := range gen.Assigned(s) {
				tps = append(tps, topicPartition{t.Name, p})
			}
		}
	}
	g.run.RestoreStarted(len(tps))
	defer g.run.RestoreDone()
	if len(tps) == 0 {
		return r, nil
	}
	// The local copies will equal the partitions up to the ends as of now.
	began := time.Now()
	// Both reads, from a copy's offset or from the start, go to these ends.
	ends, err := gen.settledEnds(ctx, tps)
	if err != nil {
		return nil, fmt.Errorf("restore: the end of the changelogs: %w", err)
	}
	starts, err := listOffsets(g.client, sarama.ReadCommitted, tps, func(topicPartition) int64 { return sarama.OffsetOldest })
	if err != nil {
		return nil, fmt.Errorf("restore: the start of the changelogs: %w", err)
	}
	start := time.Now()
	copies := gen.localStarts(tps, starts, ends, began)
	local := 0
	for _, c := range copies {
		local += int(c.meta.count)
	}
	g.run.RestoreLocal(len(copies), local)
	// The partitions are read at once.
	type result struct {
		tp    topicPartition
		items map[string][]byte
		n     int
		err   error
	}
	results := make(chan result, len(tps))
	for _, tp := range tps {
		go func() {
			c, from := copies[tp], starts[tp]
			if c != nil {
				from = c.meta.next
			}
			var tail map[string][]byte
			var n int
			var err error
			if ends[tp] > from {
				tail, n, err = readPartitionTo(ctx, g.client, tp, from, ends[tp], g.run.RestoreRead)
			}
			if err != nil {
				results <- result{tp: tp, err: err}
				return
			}
			items := tail
			if c != nil {
				items = c.items
				for k, v := range tail {
					if v == nil {
						delete(items, k)
					} else {
						items[k] = v
					}
				}
			}
			gen.restoredLocal(tp, c == nil, tail, ends[tp], began)
			results <- result{tp, items, n, nil}
		}()
	}
	records := 0
	blobs := map[string]map[int][]byte{}
	var errs []error
	for range tps {
		res := <-results
		if res.err == nil {
			step := stepOf[res.tp.topic]
			var groups map[int][]byte
			if groups, res.err = restoreItems(res.items, gen.held.step(step)); res.err == nil {
				records += res.n
				if blobs[step] == nil {
					blobs[step] = map[int][]byte{}
				}
				maps.Copy(blobs[step], groups)
			}
		}
		if res.err != nil {
			errs = append(errs, fmt.Errorf("restore from changelog %s: %w", res.tp, res.err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	for step, groups := range blobs {
		var part []byte
		for _, group := range slices.Sorted(maps.Keys(groups)) {
			part = append(part, groups[group]...)
		}
		if len(part) > 0 {
			r.parts["op/"+step+"/0"] = part
		}
	}
	r.read, r.local, r.localParts = records, local, len(copies)
	if gen.copied != nil {
		gen.rec.Store(newLocalTxn()) // the commits keep the copies up to date
	}
	g.logger.Info("restored keyed state from the changelogs", "partitions", len(tps), "records", records,
		"local_partitions", len(copies), "local_records", local, "duration", time.Since(start).Round(time.Millisecond))
	return r, nil
}

// settleSlack is how much longer than the group's transaction timeout a
// restore waits for the transactions open on its changelog partitions: a
// broker aborts a timed-out transaction at its next check
// (transaction.abort.timed.out.transaction.cleanup.interval.ms, 10s by
// default) and then writes the markers.
const settleSlack = time.Minute

// settledEnds returns the offsets the restore reads the changelog
// partitions to: their last stable offsets once every transaction that
// had written to them when the restore began has ended. A transaction
// that committed may not have its markers written yet (the broker writes
// them after the commit returns), and its records, below the last stable
// offset until then, would be missed: the state of the last commit lost.
// So while a partition's last stable offset is below the high-water mark
// it had at the start, the restore waits (and says so in its status); a
// transaction of a process that died ends at the group's transaction
// timeout, when the broker aborts it.
func (gen *generation) settledEnds(ctx context.Context, tps []topicPartition) (map[topicPartition]int64, error) {
	g := gen.g
	newest := func(topicPartition) int64 { return sarama.OffsetNewest }
	hwms, err := listOffsets(g.client, sarama.ReadUncommitted, tps, newest)
	if err != nil {
		return nil, err
	}
	limit := g.run.Plan.Group.TransactionTimeout.D() + settleSlack
	start := time.Now()
	wait := 10 * time.Millisecond
	for said := false; ; {
		ends, err := listOffsets(g.client, sarama.ReadCommitted, tps, newest)
		if err != nil {
			return nil, err
		}
		var open []topicPartition
		for _, tp := range tps {
			if ends[tp] < hwms[tp] {
				open = append(open, tp)
			}
		}
		g.run.RestoreWaiting(len(open))
		if len(open) == 0 {
			return ends, nil
		}
		if time.Since(start) > limit {
			return nil, fmt.Errorf("%d partitions (%s first) still have a transaction open after %s, longer than the group's transaction_timeout",
				len(open), open[0], limit.Round(time.Second))
		}
		if !said {
			said = true
			g.logger.Info("restore waits for the transactions open on changelog partitions to end",
				"partitions", len(open), "first", open[0].String())
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(wait):
		}
		wait = min(2*wait, time.Second)
	}
}

// restoreFetchBytes is what a restore's fetch asks for at first, per
// partition; a record batch larger than that doubles it.
const restoreFetchBytes = 4 << 20

// readPartitionTo reads changelog partition tp from offset start until
// offset end (its last stable offset) and returns the last value of each
// key (nil: a tombstone) and the number of records read. It sends raw
// fetch requests at read_committed and filters their record batches as a
// consumer does (eachVisible), so it knows it reached end even when the
// last offsets are markers, which no consumer hands out.
func readPartitionTo(ctx context.Context, cl sarama.Client, tp topicPartition, start, end int64, read func(int)) (map[string][]byte, int, error) {
	last := map[string][]byte{}
	n := 0
	defer func() { read(n % 1024) }()
	size := int32(restoreFetchBytes)
	for next := start; next < end; {
		if err := ctx.Err(); err != nil {
			return nil, 0, err
		}
		blk, err := fetchFrom(cl, sarama.ReadCommitted, tp, next, size, 100)
		if err != nil {
			return nil, 0, err
		}
		from := next
		var bad error
		var partial bool
		next, partial = eachVisible(blk, sarama.ReadCommitted, next, end, func(off int64, key, value []byte) bool {
			if _, _, _, err := parseChangelogKey(key); err != nil {
				bad = fmt.Errorf("offset %d: %w", off, err)
				return false
			}
			last[string(key)] = value
			if n++; n%1024 == 0 {
				read(1024)
			}
			return true
		})
		if bad != nil {
			return nil, 0, bad
		}
		if next == from && (partial || blk.Partial) {
			if size >= 1<<30 {
				return nil, 0, fmt.Errorf("fetch at %d: a record batch larger than %d bytes", next, size)
			}
			size *= 2
		}
	}
	return last, n, nil
}
