package kafka

import (
	"cmp"
	"errors"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/IBM/sarama"
)

// The purge of consumed repartition records (docs/group.md, "Internal
// topics"), as Kafka Streams does it (repartition.purge.interval.ms): a
// repartition topic keeps its records forever (retention.ms=-1, so that no
// record is deleted by its event time before it is read), and once a
// transaction committed the offsets of the repartition partitions this
// process reads, the records before those offsets are read for good: the
// process deletes them (DeleteRecords), at most once per
// group.purge_interval. Only the partitions of the generation that is
// still current are purged, from the offsets it committed: a generation's
// end waits for a purge under way, and a purge that finds the generation
// ended sends nothing more. A purge that fails is counted and logged (once
// per kind of failure) and never fails the job; the next one tries again.

// purger purges the repartition partitions this process reads. Its
// methods are safe from any goroutine.
type purger struct {
	g        *groupRun
	interval time.Duration
	// topics are the repartition topics of the plan.
	topics map[string]bool

	mu sync.Mutex
	// gen is the generation whose committed offsets are purged; nil
	// between generations.
	gen *generation
	// committed is the last committed offset of each repartition
	// partition gen reads; purged the offset before which a purge of gen
	// deleted its records (or found none).
	committed, purged map[topicPartition]int64
	// last is when the last purge started (the process's, over the
	// generations); running is set while one is under way.
	last    time.Time
	running bool
	wg      sync.WaitGroup
	// admin sends the DeleteRecords requests over the process's client;
	// it is never closed, which would close the client.
	admin sarama.ClusterAdmin
	// logged is the kinds of failure logged already.
	logged map[string]bool
}

func newPurger(g *groupRun) *purger {
	p := &purger{g: g, interval: g.run.Plan.Group.PurgeInterval.D(), topics: map[string]bool{}, logged: map[string]bool{}}
	for _, x := range g.run.Plan.Exchanges {
		p.topics[x.Topic.Name] = true
	}
	return p
}

// begin starts purging for generation gen: nothing of it is committed yet.
func (p *purger) begin(gen *generation) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.gen = gen
	p.committed, p.purged = map[topicPartition]int64{}, map[topicPartition]int64{}
}

// end stops purging for gen and waits for a purge under way: once it
// returns, nothing deletes records of gen's partitions, which the next
// generation may give to another process.
func (p *purger) end(gen *generation) {
	p.mu.Lock()
	if p.gen == gen {
		p.gen = nil
	}
	p.mu.Unlock()
	p.wg.Wait()
}

// commit takes the offsets a transaction of gen committed (after
// CommitTxn returned) and starts a purge of the repartition partitions
// among them when the purge interval has passed since the last one and
// none is under way.
func (p *purger) commit(gen *generation, offsets map[topicPartition]int64) {
	now := time.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.gen != gen {
		return
	}
	for tp, next := range offsets {
		if p.topics[tp.topic] && next > p.committed[tp] {
			p.committed[tp] = next
		}
	}
	if p.running || (!p.last.IsZero() && now.Sub(p.last) < p.interval) {
		return
	}
	todo := map[topicPartition]int64{}
	for tp, next := range p.committed {
		if next > p.purged[tp] {
			todo[tp] = next
		}
	}
	if len(todo) == 0 {
		return
	}
	p.running, p.last = true, now
	p.wg.Add(1)
	go p.purge(gen, todo)
}

// purge deletes the records of each partition of todo before its
// committed offset: it asks the partitions' leaders for their log start
// offsets (what is before them is gone already, and the difference is the
// count of records deleted), then sends one DeleteRecords request per
// topic, as long as gen is the current generation.
func (p *purger) purge(gen *generation, todo map[topicPartition]int64) {
	defer p.wg.Done()
	done := map[topicPartition]int64{}
	defer func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		p.running = false
		if p.gen == gen {
			for tp, next := range done {
				p.purged[tp] = max(p.purged[tp], next)
			}
		}
	}()
	ended := gen.sess.Context().Done()
	current := func() bool {
		select {
		case <-ended:
			return false
		default:
			return true
		}
	}
	if !current() {
		return
	}
	cl := p.g.client
	if p.admin == nil { // only the one purge under way uses it
		admin, err := sarama.NewClusterAdminFromClient(cl)
		if err != nil {
			p.failed("connect to the cluster's controller", err)
			return
		}
		p.admin = admin
	}
	tps := slices.SortedFunc(maps.Keys(todo), func(a, b topicPartition) int {
		return cmp.Or(cmp.Compare(a.topic, b.topic), cmp.Compare(a.partition, b.partition))
	})
	starts, err := listOffsets(cl, sarama.ReadUncommitted, tps, func(topicPartition) offsetQuery { return sarama.OffsetOldest })
	if err != nil {
		p.failed("find the log start offsets", err)
		return
	}
	byTopic := map[string]map[int32]int64{}
	for _, tp := range tps {
		next := todo[tp]
		if next <= starts[tp] {
			done[tp] = next // nothing before it is left
			continue
		}
		if byTopic[tp.topic] == nil {
			byTopic[tp.topic] = map[int32]int64{}
		}
		byTopic[tp.topic][tp.partition] = next
	}
	for _, topic := range slices.Sorted(maps.Keys(byTopic)) {
		if !current() {
			return // the partitions may be another process's by now
		}
		offsets := byTopic[topic]
		if err := p.admin.DeleteRecords(topic, offsets); err != nil {
			// A partition whose leader moved answers NOT_LEADER: the next
			// purge asks the new one.
			_ = cl.RefreshMetadata(topic)
			p.failed("delete records", err)
			continue
		}
		var n int64
		for part, next := range offsets {
			tp := topicPartition{topic, part}
			n += next - starts[tp]
			done[tp] = next
		}
		p.g.run.Purged(n)
	}
}

// failed counts a failed request of a purge and logs it the first time
// its kind of failure (what was done, and the Kafka error code or the
// error's type) comes.
func (p *purger) failed(what string, err error) {
	p.g.run.PurgeFailed()
	kind := what + ": " + failureKind(err)
	p.mu.Lock()
	seen := p.logged[kind]
	p.logged[kind] = true
	p.mu.Unlock()
	if !seen {
		p.g.logger.Warn("purge of consumed repartition records failed; the next purge tries again (logged once per kind of failure, eddy_group_purge_errors_total counts each)",
			"op", what, "err", err.Error())
	}
}

// failureKind names the kind of err: the first Kafka error code in it, or
// the message of the innermost error it wraps (the first of several:
// "connection refused", not the address that refused).
func failureKind(err error) string {
	var kerr sarama.KError
	if errors.As(err, &kerr) {
		return kerr.Error()
	}
	for {
		switch u := err.(type) {
		case interface{ Unwrap() error }:
			if next := u.Unwrap(); next != nil {
				err = next
				continue
			}
		case interface{ Unwrap() []error }:
			if errs := u.Unwrap(); len(errs) > 0 && errs[0] != nil {
				err = errs[0]
				continue
			}
		}
		return err.Error()
	}
}
