package kafka

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/IBM/sarama"
	"github.com/cespare/xxhash/v2"
	bolt "go.etcd.io/bbolt"

	"github.com/eddy-stream/eddy/statestore"
)

// The local copy of the changelogs (docs/group.md, "State"), as Kafka
// Streams keeps its local stores with a checkpoint of changelog offsets: the
// process keeps in its state directory, per changelog partition it
// restored or wrote, what the partition's records say (changelog key ->
// value, the last record of each key, no tombstones) and the offset up to
// which that equals the partition. A restore then starts from the copy and
// reads the changelog only from that offset on (group_state.go); a copy
// that cannot be trusted is dropped and the partition read from its start.
//
// The copy is written at two moments, each one bbolt transaction: after a
// restore (the partitions now equal the changelog up to the end the restore
// read to), and after each Kafka transaction that committed (CommitTxn
// returned), with the changelog records that transaction wrote and the
// offsets the producer acknowledged them at. A process that dies between
// the commit and the copy's update leaves the copy behind, which the next
// restore's tail read covers; nothing the brokers did not commit is ever
// in it.
//
// Within a generation this process is the only writer of its changelog
// partitions, so after the restore each commit's records follow the copy's
// offset with nothing in between but markers and aborted records; an
// update that fails stops the updates of the generation, since a later one
// would skip what the failed one held.

// localStateFile is the bbolt file of the local copy in the state
// directory.
const localStateFile = "group-changelogs.db"

// defaultDeleteRetention is Kafka's default delete.retention.ms: how long a
// compacted topic keeps a tombstone at least.
const defaultDeleteRetention = 24 * time.Hour

// localRefresh is how old the time of an untouched partition's copy may
// get before a commit writes it again (see copyMeta.updated).
const localRefresh = time.Minute

// Keys of the bbolt file: a bucket per changelog topic, in it a bucket per
// partition (its number in decimal) holding metaKey and the itemsBucket.
var (
	metaKey     = []byte("meta")
	itemsBucket = []byte("items")
)

// copyMeta is what the copy of a partition says about itself.
type copyMeta struct {
	// next is the offset up to which the copy equals the partition: the
	// offset after the last record it reflects.
	next int64
	// updated is when the copy was last known to equal the partition up to
	// next (unix ms): at its last update, or at a commit of a generation
	// that owns the partition (nobody else writes it meanwhile). A
	// tombstone written after that lives delete.retention.ms at least, so
	// a copy younger than that misses none in the tail.
	updated int64
	// topic is the changelog topic's id (zero where the broker has none): a
	// recreated topic has another.
	topic sarama.Uuid
	// sum and count are the xor of itemSum over the items and their count:
	// a copy whose items do not add up is corrupt.
	sum, count uint64
}

const copyMetaVersion = 1

func (m copyMeta) encode() []byte {
	b := []byte{copyMetaVersion}
	b = binary.BigEndian.AppendUint64(b, uint64(m.next))
	b = binary.BigEndian.AppendUint64(b, uint64(m.updated))
	b = append(b, m.topic[:]...)
	b = binary.BigEndian.AppendUint64(b, m.sum)
	return binary.BigEndian.AppendUint64(b, m.count)
}

var (
	// errCorruptCopy is a partition's copy whose meta or items do not add
	// up; errCorruptFile a file bbolt cannot read (it panicked), whose
	// every copy is suspect.
	errCorruptCopy = errors.New("corrupt local copy")
	errCorruptFile = fmt.Errorf("%w: the file is damaged", errCorruptCopy)
)

func decodeCopyMeta(b []byte) (copyMeta, error) {
	if len(b) != 1+8+8+16+8+8 || b[0] != copyMetaVersion {
		return copyMeta{}, fmt.Errorf("%w: a meta of %d bytes", errCorruptCopy, len(b))
	}
	var m copyMeta
	m.next = int64(binary.BigEndian.Uint64(b[1:]))
	m.updated = int64(binary.BigEndian.Uint64(b[9:]))
	copy(m.topic[:], b[17:33])
	m.sum = binary.BigEndian.Uint64(b[33:])
	m.count = binary.BigEndian.Uint64(b[41:])
	return m, nil
}

// itemSum is an item's part of a copy's sum: a hash of its key and value.
func itemSum(key, value []byte) uint64 {
	var d xxhash.Digest
	d.Reset()
	var n [binary.MaxVarintLen64]byte
	_, _ = d.Write(n[:binary.PutUvarint(n[:], uint64(len(key)))])
	_, _ = d.Write(key)
	_, _ = d.Write(value)
	return d.Sum64()
}

// localState is the process's local copy of the changelog partitions.
// Its methods are safe from any goroutine (bbolt's transactions).
type localState struct {
	path   string
	logger *slog.Logger
	mu     sync.Mutex // guards db against reset
	db     *bolt.DB
}

// openLocalState opens the local copy in dir. A file that is not a bbolt
// file (or a corrupt one) is replaced by an empty one; a file that cannot
// be opened at all (another process holds it) leaves the process without
// a copy: it restores from the changelogs alone.
func openLocalState(dir string, logger *slog.Logger) *localState {
	if dir == "" {
		return nil
	}
	ls := &localState{path: filepath.Join(dir, localStateFile), logger: logger}
	db, err := ls.open()
	if err != nil && !errors.Is(err, bolt.ErrTimeout) {
		logger.Warn("the local copy of the changelogs is corrupt: starting a new one, the restores read the changelogs from their start",
			"file", ls.path, "err", err.Error())
		if rerr := os.Remove(ls.path); rerr == nil {
			db, err = ls.open()
		}
	}
	if err != nil {
		logger.Warn("cannot open the local copy of the changelogs: the restores read the changelogs from their start", "file", ls.path, "err", err.Error())
		return nil
	}
	ls.db = db
	return ls
}

// open opens the bbolt file, turning a panic of bbolt on a corrupt file
// into an error.
func (ls *localState) open() (db *bolt.DB, err error) {
	defer recoverCorrupt(&err)
	return statestore.OpenMapped(ls.path, &bolt.Options{Timeout: time.Second})
}

// recoverCorrupt turns a panic (bbolt's on a corrupt page, or a fault
// reading the mapped file) into errCorruptFile in *err.
func recoverCorrupt(err *error) {
	if r := recover(); r != nil {
		*err = fmt.Errorf("%w: %v", errCorruptFile, r)
	}
}

// close closes the file.
func (ls *localState) close() {
	if ls == nil {
		return
	}
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if ls.db != nil {
		_ = ls.db.Close()
		ls.db = nil
	}
}

// reset replaces a file found corrupt by an empty one.
func (ls *localState) reset(why error) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	ls.logger.Warn("the local copy of the changelogs is corrupt: starting a new one", "file", ls.path, "err", why.Error())
	if ls.db != nil {
		_ = ls.db.Close()
		ls.db = nil
	}
	if err := os.Remove(ls.path); err != nil && !errors.Is(err, os.ErrNotExist) {
		ls.logger.Warn("remove the local copy of the changelogs", "file", ls.path, "err", err.Error())
		return
	}
	db, err := ls.open()
	if err != nil {
		ls.logger.Warn("cannot open the local copy of the changelogs", "file", ls.path, "err", err.Error())
		return
	}
	ls.db = db
}

// isOpen tells whether the file is open (a reset may have failed).
func (ls *localState) isOpen() bool {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	return ls.db != nil
}

// view runs fn in a read transaction; a panic of bbolt (a corrupt page)
// is errCorruptCopy.
func (ls *localState) view(fn func(*bolt.Tx) error) (err error) {
	ls.mu.Lock()
	db := ls.db
	ls.mu.Unlock()
	if db == nil {
		return errors.New("the local copy is not open")
	}
	old := debug.SetPanicOnFault(true)
	defer debug.SetPanicOnFault(old)
	defer recoverCorrupt(&err)
	return db.View(fn)
}

// update runs fn in a write transaction, as view does.
func (ls *localState) update(fn func(*bolt.Tx) error) (err error) {
	ls.mu.Lock()
	db := ls.db
	ls.mu.Unlock()
	if db == nil {
		return errors.New("the local copy is not open")
	}
	old := debug.SetPanicOnFault(true)
	defer debug.SetPanicOnFault(old)
	defer recoverCorrupt(&err)
	return db.Update(fn)
}

// partitionBucket returns the bucket of tp's copy, or nil.
func partitionBucket(tx *bolt.Tx, tp topicPartition) *bolt.Bucket {
	t := tx.Bucket([]byte(tp.topic))
	if t == nil {
		return nil
	}
	return t.Bucket([]byte(strconv.Itoa(int(tp.partition))))
}

// localCopy is the copy of a partition as a restore loaded it.
type localCopy struct {
	meta  copyMeta
	items map[string][]byte
}

// load returns tp's copy: nil without one, errCorruptCopy for a copy whose
// meta or items do not add up.
func (ls *localState) load(tp topicPartition) (*localCopy, error) {
	var c *localCopy
	err := ls.view(func(tx *bolt.Tx) error {
		pb := partitionBucket(tx, tp)
		if pb == nil {
			return nil
		}
		meta, err := decodeCopyMeta(pb.Get(metaKey))
		if err != nil {
			return err
		}
		items := pb.Bucket(itemsBucket)
		if items == nil {
			return fmt.Errorf("%w: no items", errCorruptCopy)
		}
		c = &localCopy{meta: meta, items: make(map[string][]byte, meta.count)}
		var sum, count uint64
		err = items.ForEach(func(k, v []byte) error {
			if v == nil {
				return fmt.Errorf("%w: a bucket among the items", errCorruptCopy)
			}
			sum ^= itemSum(k, v)
			count++
			c.items[string(k)] = append([]byte(nil), v...)
			return nil
		})
		if err != nil {
			return err
		}
		if sum != meta.sum || count != meta.count {
			return fmt.Errorf("%w: its %d items do not add up to its sum (%d items)", errCorruptCopy, count, meta.count)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return c, nil
}

// copyUpdate is what one bbolt transaction writes of a partition's copy:
// its items' changes (nil: delete), or with full all its items, and the
// new meta (sum and count are computed).
type copyUpdate struct {
	tp      topicPartition
	full    bool
	changes map[string][]byte
	next    int64
	updated time.Time
	topic   sarama.Uuid
	// touch only refreshes updated (no change, same offset).
	touch bool
}

// write applies the updates in one transaction. A partition whose items
// bbolt cannot hold (a key longer than its limit) loses its copy and is
// returned in dropped; any other failure leaves every copy as it was.
func (ls *localState) write(updates []copyUpdate) (dropped []topicPartition, err error) {
	err = ls.update(func(tx *bolt.Tx) error {
		dropped = dropped[:0]
		for _, u := range updates {
			ok, err := writeCopy(tx, u)
			if err != nil {
				return fmt.Errorf("local copy of %s: %w", u.tp, err)
			}
			if !ok {
				dropped = append(dropped, u.tp)
			}
		}
		return nil
	})
	return dropped, err
}

// writeCopy applies u in tx; false: the copy could not hold the items and
// is deleted.
func writeCopy(tx *bolt.Tx, u copyUpdate) (bool, error) {
	tb, err := tx.CreateBucketIfNotExists([]byte(u.tp.topic))
	if err != nil {
		return false, err
	}
	name := []byte(strconv.Itoa(int(u.tp.partition)))
	if u.full {
		if err := tb.DeleteBucket(name); err != nil && !errors.Is(err, bolt.ErrBucketNotFound) {
			return false, err
		}
	}
	pb, err := tb.CreateBucketIfNotExists(name)
	if err != nil {
		return false, err
	}
	var meta copyMeta
	if !u.full {
		if meta, err = decodeCopyMeta(pb.Get(metaKey)); err != nil {
			return false, err
		}
	}
	items, err := pb.CreateBucketIfNotExists(itemsBucket)
	if err != nil {
		return false, err
	}
	// In key order: bbolt appends to its pages instead of inserting into
	// them.
	for _, k := range slices.Sorted(maps.Keys(u.changes)) {
		v := u.changes[k]
		if len(k) > bolt.MaxKeySize {
			return false, tb.DeleteBucket(name)
		}
		if old := items.Get([]byte(k)); old != nil {
			meta.sum ^= itemSum([]byte(k), old)
			meta.count--
		}
		if v == nil {
			if err := items.Delete([]byte(k)); err != nil {
				return false, err
			}
			continue
		}
		if err := items.Put([]byte(k), v); err != nil {
			return false, err
		}
		meta.sum ^= itemSum([]byte(k), v)
		meta.count++
	}
	if !u.touch {
		meta.next, meta.topic = u.next, u.topic
	}
	meta.updated = u.updated.UnixMilli()
	return true, pb.Put(metaKey, meta.encode())
}

// drop deletes the copies of the partitions.
func (ls *localState) drop(tps []topicPartition) error {
	return ls.update(func(tx *bolt.Tx) error {
		for _, tp := range tps {
			if t := tx.Bucket([]byte(tp.topic)); t != nil {
				if err := t.DeleteBucket([]byte(strconv.Itoa(int(tp.partition)))); err != nil && !errors.Is(err, bolt.ErrBucketNotFound) {
					return err
				}
			}
		}
		return nil
	})
}

// copyUnusable says why a partition's copy cannot be the start of its
// restore, "" when it can: the partition holds [start, end), the topic has
// id topic now and keeps tombstones retention (0: unknown).
func copyUnusable(m copyMeta, start, end int64, topic sarama.Uuid, retention time.Duration, now time.Time) string {
	switch {
	case m.next > end:
		return "its offset is past the end of the partition (the topic was deleted or reset)"
	case m.next < start:
		return "its offset is below the partition's log start"
	case m.topic != (sarama.Uuid{}) && topic != (sarama.Uuid{}) && m.topic != topic:
		return "the topic was recreated since"
	case retention <= 0:
		return "the topic's delete.retention.ms is not known"
	case now.Sub(time.UnixMilli(m.updated)) >= retention:
		return "it is older than the topic's delete.retention.ms (compaction may have removed tombstones it needs)"
	}
	return ""
}

// changelogTopicInfo returns the ids of topics (zero where the broker has
// none: versions before 2.8) and their delete.retention.ms, asking any
// broker (Metadata, DescribeConfigs).
func changelogTopicInfo(cl sarama.Client, topics []string) (map[string]sarama.Uuid, map[string]time.Duration, error) {
	b := cl.LeastLoadedBroker()
	if b == nil {
		return nil, nil, errors.New("no broker to ask")
	}
	version := cl.Config().Version
	md, err := b.GetMetadata(sarama.NewMetadataRequest(version, topics))
	if err != nil {
		return nil, nil, fmt.Errorf("metadata of the changelogs: %w", err)
	}
	ids := map[string]sarama.Uuid{}
	for _, t := range md.Topics {
		if !errors.Is(t.Err, sarama.ErrNoError) {
			return nil, nil, fmt.Errorf("metadata of %s: %w", t.Name, t.Err)
		}
		ids[t.Name] = t.Uuid
	}
	req := &sarama.DescribeConfigsRequest{}
	switch {
	case version.IsAtLeast(sarama.V2_0_0_0):
		req.Version = 2
	case version.IsAtLeast(sarama.V1_1_0_0):
		req.Version = 1
	}
	for _, t := range topics {
		req.Resources = append(req.Resources, &sarama.ConfigResource{Type: sarama.TopicResource, Name: t, ConfigNames: []string{"delete.retention.ms"}})
	}
	resp, err := b.DescribeConfigs(req)
	if err != nil {
		return nil, nil, fmt.Errorf("configs of the changelogs: %w", err)
	}
	retention := map[string]time.Duration{}
	for _, r := range resp.Resources {
		if r.ErrorCode != 0 {
			return nil, nil, fmt.Errorf("configs of %s: %w: %s", r.Name, sarama.KError(r.ErrorCode), r.ErrorMsg)
		}
		for _, c := range r.Configs {
			if c.Name != "delete.retention.ms" {
				continue
			}
			ms, err := strconv.ParseInt(c.Value, 10, 64)
			if err != nil {
				return nil, nil, fmt.Errorf("delete.retention.ms of %s: %q", r.Name, c.Value)
			}
			retention[r.Name] = time.Duration(ms) * time.Millisecond
		}
	}
	return ids, retention, nil
}

// localTxn records the changelog records of one Kafka transaction as the
// producer acknowledges them (output's successes call acked): each
// partition's last value of each key and the offset after its last
// record. Safe from any goroutine.
type localTxn struct {
	mu    sync.Mutex
	parts map[topicPartition]*localTxnPart
}

// localTxnPart is what a transaction wrote to one changelog partition.
type localTxnPart struct {
	next  int64
	items map[string]localTxnItem
}

// localTxnItem is the last record of a key (value nil: a tombstone).
type localTxnItem struct {
	offset int64
	value  []byte
}

func newLocalTxn() *localTxn { return &localTxn{parts: map[topicPartition]*localTxnPart{}} }

// acked records m, acknowledged at m.Offset.
func (t *localTxn) acked(m *sarama.ProducerMessage) {
	key, _ := m.Key.(sarama.ByteEncoder)
	var value []byte
	if v, ok := m.Value.(sarama.ByteEncoder); ok {
		value = v
	}
	tp := topicPartition{m.Topic, m.Partition}
	t.mu.Lock()
	defer t.mu.Unlock()
	p := t.parts[tp]
	if p == nil {
		p = &localTxnPart{items: map[string]localTxnItem{}}
		t.parts[tp] = p
	}
	p.next = max(p.next, m.Offset+1)
	if it, ok := p.items[string(key)]; !ok || it.offset < m.Offset {
		p.items[string(key)] = localTxnItem{offset: m.Offset, value: value}
	}
}

// ackRecorder is the Metadata of a produced message that wants to know the
// offset it was written at (output calls acked on success).
type ackRecorder interface {
	acked(*sarama.ProducerMessage)
}

// localStarts returns the copies a restore of tps starts from: those of
// partitions whose copy can be used (copyUnusable), loaded. It logs, per
// reason, the partitions read from their start instead. It also makes the
// generation ready to keep the copies up to date (restoredLocal,
// updateLocal).
func (gen *generation) localStarts(tps []topicPartition, starts, ends map[topicPartition]int64, now time.Time) map[topicPartition]*localCopy {
	ls := gen.g.local
	copies := map[topicPartition]*localCopy{}
	if ls == nil || !ls.isOpen() {
		return copies
	}
	gen.copied = map[topicPartition]time.Time{}
	ids, retention, infoErr := changelogTopicInfo(gen.g.client, topicsOf(tps))
	gen.topicIDs = ids
	// why lists the partitions read from their start by reason; the
	// corrupt ones are logged as warnings.
	why := map[string][]topicPartition{}
	corrupt := map[string]bool{}
	var dropped []topicPartition
loads:
	for _, tp := range tps {
		c, err := ls.load(tp)
		var reason string
		switch {
		case errors.Is(err, errCorruptFile):
			// Every copy of the file is suspect: a new file, and every
			// partition is read from its start.
			ls.reset(err)
			clear(copies)
			clear(why)
			reason = "the local copy's file is damaged: " + err.Error()
			why[reason], corrupt[reason] = tps, true
			dropped = nil
			break loads
		case err != nil:
			reason = "the local copy is corrupt: " + err.Error()
			corrupt[reason] = true
			dropped = append(dropped, tp)
		case c == nil:
			reason = "no local copy"
		case infoErr != nil:
			reason = "the changelog topic's id and delete.retention.ms are unknown: " + infoErr.Error()
		default:
			reason = copyUnusable(c.meta, starts[tp], ends[tp], ids[tp.topic], retention[tp.topic], now)
		}
		if reason != "" {
			why[reason] = append(why[reason], tp)
			continue
		}
		copies[tp] = c
	}
	if !ls.isOpen() {
		gen.copied = nil // a damaged file that could not be replaced
	}
	if len(dropped) > 0 {
		if err := ls.drop(dropped); err != nil {
			gen.g.logger.Warn("drop the corrupt local copies", "err", err.Error())
		}
	}
	for _, reason := range slices.Sorted(maps.Keys(why)) {
		level := slog.LevelInfo
		if corrupt[reason] {
			level = slog.LevelWarn
		}
		gen.g.logger.Log(context.Background(), level, "restoring changelog partitions from their start: their local copy cannot be used",
			"reason", reason, "partitions", fmt.Sprint(why[reason]))
	}
	return copies
}

// restoredLocal brings tp's copy up to end once a restore read the
// partition to there: with full, the copy becomes items (the records read
// from the partition's start); else the copy's items change by the tail's
// records (nil: a tombstone). A partition whose copy is in step is kept up
// to date by the generation's commits. Safe from the restore's goroutines.
func (gen *generation) restoredLocal(tp topicPartition, full bool, items map[string][]byte, end int64, now time.Time) {
	ls := gen.g.local
	if ls == nil || gen.copied == nil {
		return
	}
	var dropped []topicPartition
	var err error
	if full || len(items) > 0 {
		dropped, err = ls.write([]copyUpdate{{tp: tp, full: full, changes: items, next: end, updated: now, topic: gen.topicIDs[tp.topic]}})
	}
	if err != nil {
		gen.g.logger.Warn("update the local copy of a changelog partition after its restore", "partition", tp.String(), "err", err.Error())
		return
	}
	gen.copiedMu.Lock()
	defer gen.copiedMu.Unlock()
	if len(dropped) == 0 {
		gen.copied[tp] = now
	}
}

// recording returns the recorder of the open transaction's changelog
// records, nil when the generation keeps no local copy.
func (gen *generation) recording() *localTxn { return gen.rec.Load() }

// nextRecording returns the recorder of the transaction being committed
// (every record of it acknowledged) and gives the next transaction its own.
func (gen *generation) nextRecording() *localTxn {
	if gen.rec.Load() == nil {
		return nil
	}
	return gen.rec.Swap(newLocalTxn())
}

// updateLocal updates the local copies with what the committed transaction
// of rec wrote, in one bbolt transaction: for each partition in step, its
// items and the offset after the transaction's last record. The copies of
// the generation's other partitions get their time refreshed once it is
// localRefresh old (the generation is their only writer: they still equal
// their partitions). A failure stops the updates of the generation: the
// copies stay behind, which the next restore's tail read covers.
func (gen *generation) updateLocal(rec *localTxn, at time.Time) {
	ls := gen.g.local
	if ls == nil || rec == nil || len(gen.copied) == 0 {
		return
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	var updates []copyUpdate
	for tp, p := range rec.parts {
		if _, ok := gen.copied[tp]; !ok {
			continue
		}
		changes := make(map[string][]byte, len(p.items))
		for k, it := range p.items {
			changes[k] = it.value
		}
		updates = append(updates, copyUpdate{tp: tp, changes: changes, next: p.next, updated: at, topic: gen.topicIDs[tp.topic]})
	}
	for tp, t := range gen.copied {
		if rec.parts[tp] == nil && at.Sub(t) >= localRefresh {
			updates = append(updates, copyUpdate{tp: tp, touch: true, updated: at})
		}
	}
	if len(updates) == 0 {
		return
	}
	dropped, err := ls.write(updates)
	if err != nil {
		gen.g.logger.Warn("update the local copy of the changelogs after a commit: it stays behind until the next restore", "err", err.Error())
		gen.copied = nil
		return
	}
	for _, u := range updates {
		gen.copied[u.tp] = at
	}
	for _, tp := range dropped {
		delete(gen.copied, tp)
	}
}
