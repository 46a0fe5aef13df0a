package kafka

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/IBM/sarama"
	"github.com/fxamacker/cbor/v2"

	"github.com/eddy-stream/eddy/pipeline"
)

// Exactly-once (Flink's KafkaSink): one Kafka transaction per
// checkpoint and sink subtask. The first record after a barrier begins a
// transaction on a free transactional id of the subtask's pool; once its
// first record is acknowledged, the transaction is Ongoing at its
// coordinator and a goroutine learns its producer id, epoch and start time
// from DescribeTransactions, off the task goroutine. PreCommit at the next
// barrier waits for every record's acknowledgement and for that answer:
// that is the committable the checkpoint stores.
// When the checkpoint completes, Commit hands the transaction to a
// goroutine that commits it with the producer that holds it, which then
// stays the id's for its next transaction; the task goes on at once. Until that
// commit is confirmed, every committable the sink returns carries the
// transaction too, so a checkpoint taken meanwhile still commits it after
// a crash; a failed commit fails the sink at its next transaction, barrier
// or Close. After a crash, the restore commits the restored committables
// with EndTxn from the committable alone, before any producer of the new
// run touches those ids.
//
// The pool: the transactional ids of subtask k are
// <prefix>-<sink id>-<k>-<slot>, slot 0..K-1 with K = checkpoint
// max_concurrent + tolerable_failures + 2. A transaction waits from its
// barrier until its commit is confirmed: at most
// max_concurrent checkpoints are in flight, each with a pre-committed
// transaction; up to tolerable_failures failed ones leave theirs to the next
// completed checkpoint; the notification of a completed checkpoint may
// reach the subtask after the next barrier (one more); and one transaction
// is open for the records after the last barrier. An id is never reused
// while it holds a pre-committed transaction: beginning a transaction on it
// would mix records of two checkpoints, and re-initialising it would abort
// the pending one. When no id is free the sink fails with ErrNoFreeTransactionalID.
//
// A committable must name one transaction only. sarama keeps a producer's
// epoch across its transactions (Kafka's transaction protocol v1, which is
// what sarama speaks, also with transaction.version=2 brokers), and an
// EndTxn with a (producer id, epoch) commits whatever transaction is open
// with them: a restore that re-commits a transaction committed before the
// crash would commit the next one on that id, records a restore replays
// (verified against Kafka 4.x). The committable therefore holds the
// transaction's start time too, which the coordinator fixes when the
// transaction begins and reports with its state, and a restore commits
// only when the id's transaction has that start time. That is what lets a
// slot keep its producer from one transaction to the next: an id is reused
// only after Kafka confirmed the commit of its previous transaction, so a
// later transaction on the same producer id and epoch, whatever its state,
// means that the committable's was committed. A failed commit closes the
// producer and fails the sink; the restart starts new producers (and
// epochs) for every id.

// Errors of the kafka sink, to test with errors.Is.
var (
	// ErrNoFreeTransactionalID is returned when every transactional id of
	// the subtask's pool holds a pre-committed transaction that waits for
	// its checkpoint.
	ErrNoFreeTransactionalID = errors.New("no free transactional id")
	// ErrTransactionLost is returned when Kafka aborted a pre-committed
	// transaction (it was open longer than transaction_timeout): the
	// records of its checkpoint are not in the topic.
	ErrTransactionLost = errors.New("pre-committed kafka transaction was aborted")
)

// errTransactionalIDNotFound is TRANSACTIONAL_ID_NOT_FOUND (Kafka 3.0+),
// which sarama has no name for.
const errTransactionalIDNotFound sarama.KError = 105

// committableVersion is the version of the committable encoding.
const committableVersion = 1

// committable is one pre-committed transaction: a CBOR array
// [version, transactional id, producer id, producer epoch, checkpoint id,
// transaction start time (epoch ms, the coordinator's clock)]. PreCommit
// returns one committable, or, when transactions whose commit is not yet
// confirmed ride along, a CBOR array of committables (decodeCommittables
// reads both).
type committable struct {
	_          struct{} `cbor:",toarray"`
	V          int
	TxnID      string
	ProducerID int64
	Epoch      int16
	Checkpoint int64
	Start      int64
}

func (c committable) encode() ([]byte, error) {
	b, err := cbor.Marshal(c)
	if err != nil {
		return nil, fmt.Errorf("encode committable: %w", err)
	}
	return b, nil
}

func decodeCommittable(b []byte) (committable, error) {
	var c committable
	if err := cbor.Unmarshal(b, &c); err != nil {
		return c, fmt.Errorf("decode committable: %w (was the checkpoint written by another sink type?)", err)
	}
	if c.V != committableVersion {
		return c, fmt.Errorf("committable has version %d, this eddy reads version %d", c.V, committableVersion)
	}
	if c.TxnID == "" {
		return c, errors.New("committable has no transactional id")
	}
	return c, nil
}

// encodeCommittables encodes the committables PreCommit returns: one as a
// single committable, several as an array of them, none as no bytes.
func encodeCommittables(cs []committable) ([]byte, error) {
	switch len(cs) {
	case 0:
		return []byte{}, nil
	case 1:
		return cs[0].encode()
	}
	b, err := cbor.Marshal(cs)
	if err != nil {
		return nil, fmt.Errorf("encode committables: %w", err)
	}
	return b, nil
}

// decodeCommittables reads what encodeCommittables wrote.
func decodeCommittables(b []byte) ([]committable, error) {
	var items []cbor.RawMessage
	if err := cbor.Unmarshal(b, &items); err != nil {
		return nil, fmt.Errorf("decode committable: %w (was the checkpoint written by another sink type?)", err)
	}
	if len(items) == 0 || items[0][0]>>5 != 4 { // not an array of arrays: one committable
		c, err := decodeCommittable(b)
		if err != nil {
			return nil, err
		}
		return []committable{c}, nil
	}
	cs := make([]committable, 0, len(items))
	for _, it := range items {
		c, err := decodeCommittable(it)
		if err != nil {
			return nil, err
		}
		cs = append(cs, c)
	}
	return cs, nil
}

// poolSize returns K, the number of transactional ids of a subtask.
func poolSize(cp *pipeline.CheckpointSpec) int {
	if cp == nil {
		return 2
	}
	return max(cp.MaxConcurrent, 1) + max(cp.TolerableFailures, 0) + 2
}

// txnPrefix returns "<prefix>-<sink id>-": what every transactional id of
// the sink starts with.
func (s *sink) txnPrefix(pipelineName string) string {
	p := s.cfg.TransactionalIDPrefix
	if p == "" {
		p = pipelineName
	}
	return p + "-" + s.id + "-"
}

type slotState int

const (
	slotIdle       slotState = iota // no transaction
	slotOpen                        // records since the last barrier
	slotPending                     // pre-committed, waiting for its checkpoint
	slotCommitting                  // being committed on a goroutine
)

// txnSlot is one transactional id of the pool with its own client and
// producer.
type txnSlot struct {
	index  int
	id     string
	client sarama.Client
	out    *output
	state  slotState
	// pending is the transaction of a slot in slotPending or
	// slotCommitting; committed the last one this run committed on it.
	pending   committable
	committed committable
	// described delivers the state of the open transaction, learnt once
	// its first record was acknowledged; stopDescribe ends the goroutine
	// that waits for that, which closes describeDone when it returns.
	described    chan described
	stopDescribe context.CancelFunc
	describeDone chan struct{}
	// outcome delivers the result of a slot in slotCommitting: nil once
	// committed, or why the commit failed (the commit goroutine then
	// closed out). The task does not touch out meanwhile.
	outcome chan error
}

// described is the outcome of the background DescribeTransactions of an
// open transaction.
type described struct {
	st  sarama.TransactionState
	err error
}

// txnPool is the exactly_once writer of one subtask.
type txnPool struct {
	s     *sink
	slots []*txnSlot
	cur   *output  // the producer of the open transaction; nil when none is open
	open  *txnSlot // the slot of cur
	next  int      // where the search for a free slot starts
}

// openPool starts the producers of the subtask's transactional ids (each
// InitProducerId fences the crashed run's producer and aborts what it left
// open on the id), then aborts open transactions of ids of this sink that
// no subtask of this run owns.
func (s *sink) openPool(ctx context.Context, sc *pipeline.SinkContext) (*txnPool, error) {
	pool := &txnPool{s: s}
	k := poolSize(sc.Checkpoint)
	prefix := s.txnPrefix(sc.PipelineName)
	for i := range k {
		slot := &txnSlot{index: i, id: prefix + strconv.Itoa(sc.Subtask) + "-" + strconv.Itoa(i)}
		pool.slots = append(pool.slots, slot)
		if err := ctx.Err(); err != nil {
			_ = pool.close(ctx)
			return nil, err
		}
		if err := s.startSlot(slot); err != nil {
			_ = pool.close(ctx)
			return nil, err
		}
	}
	s.abortLingering(prefix, sc.Subtask, sc.Parallelism, k)
	return pool, nil
}

// startSlot connects the slot's client and starts its producer.
func (s *sink) startSlot(slot *txnSlot) error {
	pc, err := s.cfg.producerConfig(DeliveryExactlyOnce, slot.id)
	if err != nil {
		return s.errorf("%w", err)
	}
	if slot.client, err = s.cfg.newClient(pc); err != nil {
		return s.errorf("%w", err)
	}
	slot.out, err = s.newProducer(slot)
	return err
}

// newProducer starts a producer for the slot's transactional id; its
// InitProducerId fences earlier producers of the id and aborts what they
// left open.
func (s *sink) newProducer(slot *txnSlot) (*output, error) {
	p, err := sarama.NewAsyncProducerFromClient(slot.client)
	if err != nil {
		return nil, s.errorf("start the transactional producer %q: %w%s", slot.id, err, txnHint(err))
	}
	return newOutput(p), nil
}

// commitAsync commits the slot's pending transaction on a goroutine of its
// own: EndTxn takes a round trip to the coordinator, which the task does
// not wait for. settle takes the outcome. After a successful commit the
// producer stays the slot's for the id's next transaction (see the top of
// this file); a failed commit closes it, and the sink fails.
func (s *sink) commitAsync(slot *txnSlot) {
	out, c := slot.out, slot.pending
	slot.state = slotCommitting
	done := make(chan error, 1)
	slot.outcome = done
	go func() {
		var err error
		if h := s.hooks.commitGoroutine; h != nil {
			err = h(c)
		}
		if err == nil {
			if err = out.p.CommitTxn(); err != nil {
				err = s.commitFailed(context.Background(), c, err)
			}
		}
		if err != nil {
			_ = out.close()
		}
		done <- err
	}()
}

// settle takes the outcome of a committing slot when it is ready, or waits
// for it when wait is set; it reports a failed commit.
func (s *sink) settle(ctx context.Context, slot *txnSlot, wait bool) error {
	if slot.state != slotCommitting {
		return nil
	}
	var err error
	if wait {
		select {
		case err = <-slot.outcome:
		case <-ctx.Done():
			return ctx.Err()
		}
	} else {
		select {
		case err = <-slot.outcome:
		default:
			return nil
		}
	}
	slot.outcome, slot.state = nil, slotIdle
	if err != nil {
		slot.out = nil // closed by the commit goroutine: the sink fails
		return err
	}
	slot.committed, slot.pending = slot.pending, committable{}
	return nil
}

// settleAll takes the outcomes of finished commits, waiting for those in
// progress when wait is set.
func (p *txnPool) settleAll(ctx context.Context, wait bool) error {
	for _, slot := range p.slots {
		if err := p.s.settle(ctx, slot, wait); err != nil {
			return err
		}
	}
	return nil
}

func txnHint(err error) string {
	switch {
	case isKafkaErr(err, sarama.ErrInvalidTransactionTimeout):
		return " (transaction_timeout is longer than the brokers' transaction.max.timeout.ms: lower it or raise that setting)"
	case isKafkaErr(err, sarama.ErrTransactionalIDAuthorizationFailed):
		return " (the user needs WRITE and DESCRIBE on the transactional ids starting with transactional_id_prefix)"
	}
	return ""
}

// current returns the producer of the open transaction, beginning one on
// the next free transactional id when none is open; when the only free ids
// are still being committed, it waits for the first of them.
func (p *txnPool) current(ctx context.Context) (*output, error) {
	if p.cur != nil {
		return p.cur, nil
	}
	n := len(p.slots)
	slot, err := p.free(ctx)
	if err != nil {
		return nil, err
	}
	if slot != nil {
		slot.out.nextTxn()
		if err := slot.out.p.BeginTxn(); err != nil {
			return nil, p.s.errorf("begin a transaction on %q: %w", slot.id, err)
		}
		slot.state = slotOpen
		p.open, p.cur = slot, slot.out
		p.s.describeWhenOngoing(slot)
		p.next = (slot.index + 1) % n
		return p.cur, nil
	}
	ids := make([]string, 0, n)
	for _, slot := range p.slots {
		ids = append(ids, fmt.Sprintf("%s (checkpoint %d)", slot.id, slot.pending.Checkpoint))
	}
	return nil, p.s.errorf("%w: all %d transactional ids hold pre-committed transactions waiting for their checkpoints to complete: %s; "+
		"the pool has checkpoint.max_concurrent + checkpoint.tolerable_failures + 2 ids, so checkpoints complete less often than that allows: check why they fail or are slow",
		ErrNoFreeTransactionalID, n, strings.Join(ids, ", "))
}

// free returns the next idle slot, in pool order from p.next, taking the
// outcomes of finished commits; when none is idle it waits for a commit in
// progress. Nil when every slot holds a pre-committed transaction.
func (p *txnPool) free(ctx context.Context) (*txnSlot, error) {
	n := len(p.slots)
	var committing *txnSlot
	for i := range n {
		slot := p.slots[(p.next+i)%n]
		if err := p.s.settle(ctx, slot, false); err != nil {
			return nil, err
		}
		switch slot.state {
		case slotIdle:
			return slot, nil
		case slotCommitting:
			if committing == nil {
				committing = slot
			}
		}
	}
	if committing == nil {
		return nil, nil
	}
	if err := p.s.settle(ctx, committing, true); err != nil {
		return nil, err
	}
	return committing, nil
}

// describeWhenOngoing starts the goroutine that learns the state of the
// slot's new transaction: a transaction is Ongoing at its coordinator, with
// its start time fixed, from the AddPartitionsToTxn that comes before its
// first record, so the first acknowledgement is the moment to ask.
func (s *sink) describeWhenOngoing(slot *txnSlot) {
	ctx, cancel := context.WithCancel(context.Background())
	slot.described, slot.stopDescribe, slot.describeDone = make(chan described, 1), cancel, make(chan struct{})
	first, ch, done := slot.out.firstAck, slot.described, slot.describeDone
	go func() {
		defer close(done)
		select {
		case <-first:
		case <-ctx.Done():
			return
		}
		st, err := s.describeTxn(ctx, slot.id)
		ch <- described{st: st, err: err}
	}()
}

// endDescribe stops the slot's describe goroutine and waits until it
// returned (it uses the sink's client, which Close closes).
func (slot *txnSlot) endDescribe() {
	if slot.stopDescribe != nil {
		slot.stopDescribe()
		<-slot.describeDone
	}
	slot.described, slot.stopDescribe, slot.describeDone = nil, nil, nil
}

// preCommit ends the open transaction's part of checkpoint id (its records
// are acknowledged: sink.PreCommit flushed) and returns its committable.
// The transaction's state normally was learnt in the background; only a
// transaction whose records all failed to be acknowledged is described
// here.
func (p *txnPool) preCommit(ctx context.Context, id int64) ([]byte, error) {
	if err := p.settleAll(ctx, false); err != nil {
		return nil, err
	}
	var cs []committable
	for _, slot := range p.slots {
		if slot.state == slotCommitting {
			cs = append(cs, slot.pending)
		}
	}
	slot := p.open
	if slot == nil {
		return encodeCommittables(cs)
	}
	var d described
	select {
	case <-slot.out.firstAck:
		select {
		case d = <-slot.described:
		case <-ctx.Done():
			return nil, p.s.errorf("pre-commit at checkpoint %d: %w", id, ctx.Err())
		}
	default:
		d.st, d.err = p.s.describeTxn(ctx, slot.id)
	}
	slot.endDescribe()
	st, err := d.st, d.err
	if err != nil {
		return nil, p.s.errorf("pre-commit at checkpoint %d: %w", id, err)
	}
	// A transaction Kafka aborts after this answer (transaction_timeout)
	// fails its commit: commitFailed and recover tell ErrTransactionLost.
	if st.TransactionState != "Ongoing" {
		return nil, p.s.errorf("pre-commit at checkpoint %d: transaction of %q is %s, not Ongoing: Kafka ended it (did it run longer than transaction_timeout?)",
			id, slot.id, st.TransactionState)
	}
	c := committable{V: committableVersion, TxnID: slot.id, ProducerID: st.ProducerID, Epoch: st.ProducerEpoch, Checkpoint: id, Start: st.TransactionStartTime}
	b, err := encodeCommittables(append(cs, c))
	if err != nil {
		return nil, p.s.errorf("%w", err)
	}
	slot.state, slot.pending = slotPending, c
	p.open, p.cur = nil, nil
	return b, nil
}

// commitLive starts the commit of c when a producer of this run holds
// it, and tells whether c is this run's: pending (its commit starts now),
// being committed, or committed. A committable that is not this run's was
// restored: the caller recovers it.
func (p *txnPool) commitLive(c committable) (mine bool) {
	for _, slot := range p.slots {
		switch {
		case slot.state == slotPending && slot.pending == c:
			p.s.commitAsync(slot)
			return true
		case slot.state == slotCommitting && slot.pending == c, slot.committed == c:
			return true
		}
	}
	return false
}

// commitFailed explains a failed commit of c with its live producer. The
// sink's own ids see no other producer, so when the coordinator says that
// the id's epoch moved on (Kafka aborted the transaction after
// transaction_timeout and bumped it, or another pipeline uses the same
// transactional ids) the transaction is lost: ErrTransactionLost.
func (s *sink) commitFailed(ctx context.Context, c committable, err error) error {
	st, derr := s.describeTxn(ctx, c.TxnID)
	if derr == nil && (abortedByKafka(st, c) || st.ProducerID != c.ProducerID || st.ProducerEpoch != c.Epoch) {
		return fmt.Errorf("%w (the commit failed: %v; if Kafka did not abort it, another producer uses the same transactional ids: give each pipeline and sink its own transactional_id_prefix)", s.lost(c, st), err)
	}
	return s.errorf("commit the transaction of checkpoint %d on %q: %w", c.Checkpoint, c.TxnID, err)
}

// close aborts the open transaction, waits for the commits in progress and
// stops every producer; pending transactions stay for the restore. It
// returns the first failed commit.
func (p *txnPool) close(ctx context.Context) error {
	if slot := p.open; slot != nil && slot.out != nil {
		if err := slot.out.flush(ctx); err == nil {
			if err := slot.out.p.AbortTxn(); err != nil {
				p.s.logger.Warn("kafka sink could not abort its open transaction; the next start aborts it, or Kafka after transaction_timeout",
					"transactional_id", slot.id, "err", err)
			}
		}
	}
	p.open, p.cur = nil, nil
	var first error
	for _, slot := range p.slots {
		slot.endDescribe()
		if slot.state == slotCommitting {
			// The commit goroutine always delivers.
			if err := <-slot.outcome; err != nil {
				slot.out = nil // closed by the commit goroutine
				if first == nil {
					first = err
				}
			}
			slot.outcome = nil
		}
		if slot.out != nil {
			_ = slot.out.close()
			slot.out = nil
		}
		if slot.client != nil {
			_ = slot.client.Close()
			slot.client = nil
		}
	}
	return first
}

// commitEach commits the transactions of the committables, oldest first:
// those a producer of this run holds on a goroutine (commitLive), the
// others (restored ones) with EndTxn. Open calls it before the pool exists,
// so everything is recovered then.
func (s *sink) commitEach(ctx context.Context, committables [][]byte) error {
	for _, b := range committables {
		if len(b) == 0 {
			continue
		}
		cs, err := decodeCommittables(b)
		if err != nil {
			return s.errorf("%w", err)
		}
		for _, c := range cs {
			if s.hooks.beforeCommit != nil {
				if err := s.hooks.beforeCommit(c); err != nil {
					return err
				}
			}
			if s.txn != nil && s.txn.commitLive(c) {
				continue
			}
			if err := s.recover(ctx, c); err != nil {
				return err
			}
		}
	}
	return nil
}

// recover commits the transaction of c without its producer: after a
// crash, or when no producer of this run holds it. It asks the
// coordinator for the id's state first, and sends EndTxn(commit) only when
// the id's open transaction is c's (same producer id, epoch and start
// time); any other state means c's transaction ended before: committed, by
// the run that pre-committed it or by an earlier restore (this is what
// makes a repeated restore harmless), or aborted by Kafka after
// transaction_timeout, which is ErrTransactionLost where the coordinator
// still says so. A later transaction with c's producer id and epoch (the
// slot kept its producer) began only after c's commit was confirmed, so
// it tells that c was committed, whether it is open, committed or
// aborted.
func (s *sink) recover(ctx context.Context, c committable) error {
	log := s.logger.With("transactional_id", c.TxnID, "checkpoint", c.Checkpoint, "producer_id", c.ProducerID, "epoch", c.Epoch)
	for attempt := 0; ; attempt++ {
		st, err := s.describeTxn(ctx, c.TxnID)
		if isKafkaErr(err, errTransactionalIDNotFound) {
			log.Warn("kafka sink: the transactional id of a restored transaction expired (transactional.id.expiration.ms): its transaction ended long ago")
			return nil
		}
		if err != nil {
			return s.errorf("restore the transaction of checkpoint %d: %w", c.Checkpoint, err)
		}
		same := st.ProducerID == c.ProducerID && st.ProducerEpoch == c.Epoch
		switch {
		case abortedByKafka(st, c):
			return s.lost(c, st)
		case same && st.TransactionStartTime > 0 && st.TransactionStartTime != c.Start:
			log.Info("kafka sink: a restored transaction was committed before; a later one on its id followed (an open one is aborted when the producers start)",
				"later_state", st.TransactionState)
			return nil
		case same && (st.TransactionState == "Ongoing" || st.TransactionState == "Empty"):
			// Empty with the same epoch: a broker that keeps no completed
			// state (the in-process one); EndTxn tells.
		case same && (st.TransactionState == "PrepareCommit" || st.TransactionState == "CompleteCommit"):
			log.Info("kafka sink: a restored transaction was committed before the restore")
			return nil
		case same:
			return s.lost(c, st)
		default:
			log.Info("kafka sink: a restored transaction was committed before the restore (its id was re-initialised since)",
				"state", st.TransactionState, "now_producer_id", st.ProducerID, "now_epoch", st.ProducerEpoch)
			return nil
		}
		kerr, err := s.endTxn(c)
		switch {
		case err != nil:
			return s.errorf("restore the transaction of checkpoint %d: EndTxn to %q's coordinator: %w", c.Checkpoint, c.TxnID, err)
		case kerr == sarama.ErrNoError:
			log.Info("kafka sink committed a restored transaction")
			return nil
		case kerr == sarama.ErrInvalidTxnState && st.TransactionState == "Empty":
			// A broker that keeps no completed state and whose last
			// transaction with c's producer id and epoch was aborted: by
			// the producer, so a later transaction than c's, which began
			// only after c's commit was confirmed (Kafka's own aborts
			// after transaction_timeout bump the epoch).
			log.Info("kafka sink: a restored transaction was committed before; a later one on its id was aborted")
			return nil
		case attempt >= 20:
			return s.errorf("restore the transaction of checkpoint %d on %q: EndTxn keeps failing: %w", c.Checkpoint, c.TxnID, kerr)
		}
		// CONCURRENT_TRANSACTIONS, a moved coordinator, or a state that
		// changed since the describe: look again.
		if err := sleepCtx(ctx, backoff(attempt)); err != nil {
			return s.errorf("restore the transaction of checkpoint %d: %w", c.Checkpoint, err)
		}
	}
}

// abortedByKafka tells whether the coordinator's state st says that c's
// own transaction was aborted: Kafka bumps the epoch when it aborts a
// transaction that ran past its timeout, and keeps its start time.
func abortedByKafka(st sarama.TransactionState, c committable) bool {
	return st.ProducerID == c.ProducerID && st.TransactionStartTime == c.Start && c.Start > 0 &&
		(st.TransactionState == "PrepareAbort" || st.TransactionState == "CompleteAbort")
}

func (s *sink) lost(c committable, st sarama.TransactionState) error {
	return s.errorf("%w: transaction of checkpoint %d on %q (producer id %d, epoch %d) is %s (now epoch %d): its records are not in Kafka. "+
		"Kafka aborts a transaction open longer than transaction_timeout (%s): raise it above checkpoint.interval + checkpoint.timeout + the restart delay, and restart sooner after failures. "+
		"To go on without those records, start the pipeline without restoring this checkpoint",
		ErrTransactionLost, c.Checkpoint, c.TxnID, c.ProducerID, c.Epoch, st.TransactionState, st.ProducerEpoch, s.cfg.TransactionTimeout.D())
}

// describeTxn asks the coordinator of a transactional id for its state.
func (s *sink) describeTxn(ctx context.Context, id string) (sarama.TransactionState, error) {
	for attempt := 0; ; attempt++ {
		coord, err := s.client.TransactionCoordinator(id)
		if err == nil {
			var resp *sarama.DescribeTransactionsResponse
			resp, err = coord.DescribeTransactions(&sarama.DescribeTransactionsRequest{TransactionalIDs: []string{id}})
			if err == nil {
				if len(resp.TransactionStates) != 1 {
					return sarama.TransactionState{}, fmt.Errorf("describe transaction %q: %d answers", id, len(resp.TransactionStates))
				}
				st := resp.TransactionStates[0]
				if st.ErrorCode == sarama.ErrNoError {
					return st, nil
				}
				err = st.ErrorCode
				if !coordinatorMoved(st.ErrorCode) {
					return st, fmt.Errorf("describe transaction %q: %w", id, err)
				}
			} else {
				_ = coord.Close()
			}
		}
		if attempt >= 10 {
			return sarama.TransactionState{}, fmt.Errorf("describe transaction %q: %w", id, err)
		}
		_ = s.client.RefreshTransactionCoordinator(id)
		if err := sleepCtx(ctx, backoff(attempt)); err != nil {
			return sarama.TransactionState{}, err
		}
	}
}

// endTxn sends EndTxn(commit) for c to its coordinator and returns the
// Kafka error code; err is a failure to get an answer.
func (s *sink) endTxn(c committable) (sarama.KError, error) {
	req := &sarama.EndTxnRequest{TransactionalID: c.TxnID, ProducerID: c.ProducerID, ProducerEpoch: c.Epoch, TransactionResult: true}
	// The versions sarama's own producer uses; v5 (transactions v2) has a
	// response sarama cannot decode.
	switch v := s.client.Config().Version; {
	case v.IsAtLeast(sarama.V2_8_0_0):
		req.Version = 3
	case v.IsAtLeast(sarama.V2_7_0_0):
		req.Version = 2
	case v.IsAtLeast(sarama.V2_0_0_0):
		req.Version = 1
	}
	var err error
	for attempt := range 5 {
		var coord *sarama.Broker
		if coord, err = s.client.TransactionCoordinator(c.TxnID); err == nil {
			var resp *sarama.EndTxnResponse
			if resp, err = coord.EndTxn(req); err == nil {
				if coordinatorMoved(resp.Err) {
					_ = s.client.RefreshTransactionCoordinator(c.TxnID)
				}
				return resp.Err, nil
			}
			_ = coord.Close()
		}
		_ = s.client.RefreshTransactionCoordinator(c.TxnID)
		time.Sleep(backoff(attempt))
	}
	return 0, err
}

func coordinatorMoved(k sarama.KError) bool {
	return k == sarama.ErrNotCoordinatorForConsumer || k == sarama.ErrConsumerCoordinatorNotAvailable || k == sarama.ErrOffsetsLoadInProgress
}

func backoff(attempt int) time.Duration {
	return min(50*time.Millisecond<<min(attempt, 5), time.Second)
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// abortLingering aborts the open transactions on ids of this sink that no
// subtask of this run owns: those of subtasks n >= parallelism with
// n mod parallelism == this subtask (the parallelism went down), and of
// this subtask's slots >= k (the pool got smaller). An open transaction
// holds back every read_committed consumer of its partitions until Kafka
// aborts it after transaction_timeout. It runs after the restored
// committables were committed, so only transactions no checkpoint needs
// are left open. Failures are logged: they delay consumers, they lose
// nothing.
func (s *sink) abortLingering(prefix string, subtask, parallelism, k int) {
	ta, ok := s.admin.(sarama.TransactionClusterAdmin)
	if !ok {
		return
	}
	txns, err := ta.ListTransactions([]string{"Ongoing"}, nil, -1)
	if err != nil {
		s.logger.Warn("kafka sink could not list open transactions to abort those of subtasks that no longer exist", "err", err)
		return
	}
	for _, t := range txns {
		n, slot, ok := parseTxnID(t.TransactionalID, prefix)
		if !ok || !(n >= parallelism && n%parallelism == subtask || n == subtask && slot >= k) {
			continue
		}
		if err := s.fence(t.TransactionalID); err != nil {
			s.logger.Warn("kafka sink could not abort a lingering transaction; Kafka aborts it after transaction_timeout",
				"transactional_id", t.TransactionalID, "err", err)
			continue
		}
		s.logger.Info("kafka sink aborted a lingering transaction of a subtask that no longer exists", "transactional_id", t.TransactionalID)
	}
}

// parseTxnID splits "<prefix><subtask>-<slot>".
func parseTxnID(id, prefix string) (subtask, slot int, ok bool) {
	rest, ok := strings.CutPrefix(id, prefix)
	if !ok {
		return 0, 0, false
	}
	a, b, ok := strings.Cut(rest, "-")
	if !ok {
		return 0, 0, false
	}
	n, err1 := strconv.Atoi(a)
	m, err2 := strconv.Atoi(b)
	if err1 != nil || err2 != nil || n < 0 || m < 0 {
		return 0, 0, false
	}
	return n, m, true
}

// fence aborts what is open on a transactional id by starting a producer
// for it (InitProducerId) and closing it.
func (s *sink) fence(id string) error {
	pc, err := s.cfg.producerConfig(DeliveryExactlyOnce, id)
	if err != nil {
		return err
	}
	cl, err := s.cfg.newClient(pc)
	if err != nil {
		return err
	}
	defer cl.Close()
	p, err := sarama.NewAsyncProducerFromClient(cl)
	if err != nil {
		return err
	}
	p.AsyncClose()
	for range p.Errors() {
	}
	return nil
}

// output is one sarama AsyncProducer whose acknowledgements are counted by
// two goroutines of its own, so that the task goroutine only hands records
// over and Flush waits for the count to reach zero. A message whose
// Metadata is an ackRecorder is told its offset when acknowledged.
type output struct {
	p sarama.AsyncProducer
	// inflight counts records handed over and not yet acknowledged.
	inflight atomic.Int64
	mu       sync.Mutex
	err      error         // the first failed record
	wake     chan struct{} // signalled when inflight reaches 0 or a record fails
	free     chan *sarama.ProducerMessage
	done     sync.WaitGroup
	// firstAck is closed at the first acknowledged record since the
	// output started or nextTxn replaced it; unacked holds it until the
	// successes goroutine closed it.
	firstAck chan struct{}
	unacked  atomic.Pointer[chan struct{}]
}

// newOutput returns the output of p, whose configuration returns both
// successes and errors.
func newOutput(p sarama.AsyncProducer) *output {
	o := &output{p: p, wake: make(chan struct{}, 1), free: make(chan *sarama.ProducerMessage, 1024)}
	o.nextTxn()
	o.done.Go(func() {
		for m := range p.Successes() {
			if r, ok := m.Metadata.(ackRecorder); ok {
				r.acked(m)
			}
			o.recycle(m)
			if ch := o.unacked.Load(); ch != nil && o.unacked.CompareAndSwap(ch, nil) {
				close(*ch)
			}
			o.acked()
		}
	})
	o.done.Go(func() {
		for e := range p.Errors() {
			o.mu.Lock()
			if o.err == nil {
				o.err = fmt.Errorf("produce to %s[%d]: %w", e.Msg.Topic, e.Msg.Partition, e.Err)
			}
			o.mu.Unlock()
			o.acked()
			o.signal() // wake a flush waiting for other records
		}
	})
	return o
}

// nextTxn gives the output a new firstAck, for the transaction that
// begins; the previous transaction's records are all acknowledged (it was
// pre-committed) or failed (the sink fails).
func (o *output) nextTxn() {
	ch := make(chan struct{})
	o.firstAck = ch
	o.unacked.Store(&ch)
}

func (o *output) signal() {
	select {
	case o.wake <- struct{}{}:
	default:
	}
}

func (o *output) acked() {
	if o.inflight.Add(-1) == 0 {
		o.signal()
	}
}

// newMessage returns a message to fill: a recycled one when there is one.
func (o *output) newMessage() *sarama.ProducerMessage {
	select {
	case m := <-o.free:
		return m
	default:
		return &sarama.ProducerMessage{}
	}
}

func (o *output) recycle(m *sarama.ProducerMessage) {
	*m = sarama.ProducerMessage{Headers: m.Headers[:0]}
	select {
	case o.free <- m:
	default:
	}
}

// failure returns the first failed record's error, if any.
func (o *output) failure() error {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.err
}

// send hands msg to the producer.
func (o *output) send(ctx context.Context, msg *sarama.ProducerMessage) error {
	o.inflight.Add(1)
	select {
	case o.p.Input() <- msg:
		return nil
	case <-ctx.Done():
		o.acked()
		return ctx.Err()
	}
}

// flush waits until every record handed over is acknowledged, or one
// failed.
func (o *output) flush(ctx context.Context) error {
	for {
		if err := o.failure(); err != nil {
			return err
		}
		if o.inflight.Load() == 0 {
			return nil
		}
		select {
		case <-o.wake:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// close stops the producer after it sent what it holds (it does not end a
// transaction) and returns the first failed record's error.
func (o *output) close() error {
	o.p.AsyncClose()
	o.done.Wait()
	return o.failure()
}
