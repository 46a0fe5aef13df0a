package kafka

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/IBM/sarama"

	"github.com/eddy-stream/eddy/pipeline"
)

// The runtime of group mode on Kafka (docs/group.md, "How it runs"): the
// process joins the group's consumer group with the stage range strategy
// (group_assign.go), so partition p of every input topic of a stage goes
// to the same member and a stage's inputs are co-partitioned; each
// generation runs one job (pipeline.GroupRun.StartGeneration) over the
// partitions assigned to it. One transactional producer per process
// carries every checkpoint of the job as one transaction: the output of
// the sinks, the exchanges' records and watermark markers, the changelog
// records of the keyed state and the consumed offsets, committed with the
// generation's metadata (KIP-447), so that a member of an older
// generation is fenced. A rebalance ends the generation: its job is
// cancelled and the open transaction aborted, and the members go on from
// the last commit.

var _ pipeline.GroupRunner = (*GroupClientConfig)(nil)

// RunGroup implements pipeline.GroupRunner: it creates or checks the
// internal topics, joins the group and runs a job per generation until ctx
// ends (the process leaves the group) or a job fails. Before each join it
// resolves the sources' topics (their topic patterns against the
// cluster's topics) and subscribes to them and to the repartition topics;
// while a generation runs, a watcher ends it when they change, and the
// process joins again with the new subscription.
func (c *GroupClientConfig) RunGroup(ctx context.Context, run *pipeline.GroupRun) error {
	gp := run.Plan
	admin, err := c.NewGroupAdmin()
	if err != nil {
		return err
	}
	created, err := pipeline.EnsureGroupTopics(admin, gp)
	_ = admin.Close()
	if err != nil {
		return err
	}
	if len(created) > 0 {
		run.Logger.Info("created the internal topics", "topics", created)
	}
	g := &groupRun{cfg: c, run: run, logger: run.Logger, interval: watchInterval(gp)}
	g.purge = newPurger(g)
	g.local = openLocalState(run.StateDir, run.Logger)
	if err := g.connect(); err != nil {
		g.close()
		return err
	}
	defer g.close()
	// A generation whose job failed ends; the process joins again after
	// the restart strategy's delay (restart: none, the default, ends the
	// run with the failure).
	policy := pipeline.NewRestartPolicy(gp.Plan.Spec.Restart)
	var joining joinRetry
	for ctx.Err() == nil {
		topics, err := g.subscribe(ctx)
		if err != nil || topics == nil {
			return err // nil: ctx ended while no topic matched
		}
		genCtx, endGeneration := context.WithCancel(ctx)
		w := g.watch(genCtx, endGeneration)
		err = g.group.Consume(genCtx, topics, g)
		endGeneration()
		changed := w.wait()
		if failed := g.failed; failed != nil {
			g.failed = nil
			if g.topicsGone() {
				// The job failed as a topic it read was deleted (its
				// offsets cannot be committed): the topics changed, the
				// generation did not fail.
				run.Logger.Warn("group generation failed after a topic it read was deleted: joining again without it", "err", failed.Error())
				continue
			}
			delay, why := policy.Next(time.Now())
			if why != nil {
				return failed
			}
			run.Restarting(failed)
			run.Logger.Warn("group generation failed: joining again", "err", failed.Error(), "delay", delay)
			select {
			case <-time.After(delay):
			case <-ctx.Done():
			}
			continue
		}
		switch {
		case err == nil || ctx.Err() != nil || changed:
			joining = joinRetry{}
			continue
		case errors.Is(err, sarama.ErrUnknownTopicOrPartition) && gp.HasPatterns():
			// A topic matched was deleted before the join was through.
			run.Logger.Warn("a topic of the subscription is gone: resolving the topic patterns again", "err", err.Error())
			continue
		}
		delay, ok := joining.next(err, gp.Group.TransactionTimeout.D()+settleSlack)
		if !ok {
			return fmt.Errorf("consumer group %s: %w", gp.Group.ID, err)
		}
		run.Logger.Warn("joining the group failed: trying again", "err", err.Error(), "delay", delay)
		select {
		case <-time.After(delay):
		case <-ctx.Done():
		}
	}
	return nil
}

// joinRetry paces the attempts to join the group again after a join
// failed for a reason that passes. The usual one: a transaction that
// committed offsets of the assigned partitions has not ended (a process
// died in the middle of its commit), and the offsets stay unstable
// (KIP-447) until the brokers abort it at the transaction timeout; the
// client's few retries of the offset fetch give up long before.
type joinRetry struct {
	since time.Time     // the first failure of this run of failures
	delay time.Duration // the last wait
}

// next returns how long to wait before joining again after err, or false
// when err does not pass or the failures have lasted longer than limit.
func (j *joinRetry) next(err error, limit time.Duration) (time.Duration, bool) {
	if !transientJoinError(err) {
		return 0, false
	}
	if j.since.IsZero() {
		j.since = time.Now()
	}
	if time.Since(j.since) > limit {
		return 0, false
	}
	j.delay = min(max(2*j.delay, 100*time.Millisecond), 2*time.Second)
	return j.delay, true
}

// transientJoinError tells whether a failure of Consume (joining the
// group and fetching the assigned partitions' offsets) can pass: the
// offsets are unstable or still loading, the coordinator moved or is not
// ready, a leader moved, the connection broke. Anything else
// (authorization, configuration) fails the run at once.
func transientJoinError(err error) bool {
	var kerr sarama.KError
	if errors.As(err, &kerr) {
		switch kerr {
		case sarama.ErrUnstableOffsetCommit, sarama.ErrOffsetsLoadInProgress, sarama.ErrNotCoordinatorForConsumer,
			sarama.ErrConsumerCoordinatorNotAvailable, sarama.ErrRebalanceInProgress, sarama.ErrNotLeaderForPartition,
			sarama.ErrLeaderNotAvailable, sarama.ErrRequestTimedOut, sarama.ErrNetworkException,
			sarama.ErrNotEnoughReplicas, sarama.ErrNotEnoughReplicasAfterAppend:
			return true
		}
		return false
	}
	var nerr net.Error
	return errors.Is(err, sarama.ErrOutOfBrokers) || errors.Is(err, sarama.ErrNotConnected) ||
		errors.Is(err, io.EOF) || errors.As(err, &nerr)
}

// groupRun is one process's membership of the group: its client, consumer
// group and transactional producer, and the generation that runs.
type groupRun struct {
	cfg    *GroupClientConfig
	run    *pipeline.GroupRun
	logger *slog.Logger

	client   sarama.Client // metadata, offsets, the changelogs' reads
	group    sarama.ConsumerGroup
	producer sarama.AsyncProducer
	out      *output
	// topics is what the sources read in the generation that is joined or
	// runs, resolved before the join; tasks is the number of tasks of
	// each stage then (the largest partition count of its input topics):
	// the upstream tasks an exchange reader waits for.
	topics *pipeline.GroupTopics
	tasks  map[*pipeline.GroupStage]int
	// interval is how often a running generation checks whether the
	// sources' topics changed; 0: never (no topic pattern, or discovery
	// is off).
	interval time.Duration

	gen *generation
	// purge deletes the repartition records the generations committed.
	purge *purger
	// local is the process's local copy of its changelog partitions; nil
	// without a state directory.
	local *localState
	// failed is the error of a job that failed: the run ends with it.
	failed error
}

// connect opens the client, the transactional producer (which fences
// this process's previous incarnation) and the consumer group.
func (g *groupRun) connect() error {
	gp := g.run.Plan
	base, err := g.cfg.saramaConfig()
	if err != nil {
		return err
	}
	base.Metadata.AllowAutoTopicCreation = false
	base.Consumer.IsolationLevel = sarama.ReadCommitted
	base.Consumer.MaxWaitTime = 100 * time.Millisecond
	if g.client, err = g.cfg.newClient(base); err != nil {
		return err
	}
	if err := g.startProducer(); err != nil {
		return err
	}

	cc, err := g.cfg.saramaConfig()
	if err != nil {
		return err
	}
	cc.Metadata.AllowAutoTopicCreation = false
	cc.Consumer.Return.Errors = true
	cc.Consumer.IsolationLevel = sarama.ReadCommitted
	cc.Consumer.Offsets.AutoCommit.Enable = false
	cc.Consumer.Offsets.Initial = sarama.OffsetOldest
	cc.Consumer.Group.Rebalance.GroupStrategies = []sarama.BalanceStrategy{&stageRange{plan: gp}, sarama.NewBalanceStrategyRange()}
	cc.Consumer.MaxWaitTime = 100 * time.Millisecond
	if g.group, err = sarama.NewConsumerGroup(g.cfg.Brokers, gp.Group.ID, cc); err != nil {
		return fmt.Errorf("join consumer group %s: %w", gp.Group.ID, err)
	}
	go func() {
		for err := range g.group.Errors() {
			g.logger.Warn("consumer group", "err", err.Error())
		}
	}()
	return nil
}

// startProducer starts the process's transactional producer; its
// InitProducerId fences the previous incarnation of this process's
// transactional id and aborts what it left open.
func (g *groupRun) startProducer() error {
	gp := g.run.Plan
	pc, err := g.cfg.saramaConfig()
	if err != nil {
		return err
	}
	pc.Metadata.AllowAutoTopicCreation = false
	pc.Producer.Return.Errors = true
	pc.Producer.Return.Successes = true
	pc.Producer.Partitioner = sarama.NewManualPartitioner
	pc.Producer.RequiredAcks = sarama.WaitForAll
	pc.Producer.Idempotent = true
	pc.Producer.Flush.Frequency = 5 * time.Millisecond
	pc.Producer.Flush.Bytes = 1 << 20
	pc.Net.MaxOpenRequests = 1
	pc.Producer.Transaction.ID = gp.Group.ID + "-" + g.run.ProcessID
	// The brokers abort a transaction open longer than this: a commit
	// that slow fails the generation, and a process that dies holds the
	// read_committed readers of what it wrote until then (or until it is
	// started again with the same state directory, which fences it).
	pc.Producer.Transaction.Timeout = gp.Group.TransactionTimeout.D()
	pc.Producer.Transaction.Retry.Max = 250
	pc.Producer.Transaction.Retry.Backoff = 20 * time.Millisecond
	if g.producer, err = sarama.NewAsyncProducer(g.cfg.Brokers, pc); err != nil {
		return fmt.Errorf("start the group's transactional producer: %w", err)
	}
	g.out = newOutput(g.producer)
	return nil
}

// endTransaction aborts the generation's open transaction, also one a
// failed commit left in error or half ended (a commit whose offsets the
// broker refused stays committing); a producer in a fatal error (fenced),
// or that cannot abort, is replaced.
func (g *groupRun) endTransaction() error {
	st := g.producer.TxnStatus()
	if st&sarama.ProducerTxnFlagFatalError == 0 {
		if st&sarama.ProducerTxnFlagReady != 0 {
			return nil // no transaction is open
		}
		err := g.producer.AbortTxn()
		if err == nil {
			return nil
		}
		g.logger.Warn("abort the generation's open transaction: starting a new producer", "err", err.Error())
	}
	_ = g.out.close()
	return g.startProducer()
}

// close leaves the group and closes the producer and the client.
func (g *groupRun) close() {
	if g.group != nil {
		if err := g.group.Close(); err != nil {
			g.logger.Warn("leave the group", "err", err.Error())
		}
	}
	if g.out != nil {
		_ = g.out.close()
	}
	if g.client != nil {
		_ = g.client.Close()
	}
	g.local.close()
}

// Setup starts a generation: it reads the state of the assigned
// partitions from the changelogs, begins the generation's first
// transaction and starts its job.
func (g *groupRun) Setup(sess sarama.ConsumerGroupSession) error {
	gen := newGeneration(g, sess)
	g.gen = gen
	g.purge.begin(gen)
	g.logger.Info("group generation", "generation", sess.GenerationID(), "member", sess.MemberID(), "assigned", gen.describe())
	g.run.Generation(pipeline.GroupGenerationInfo{Member: sess.MemberID(), Generation: sess.GenerationID(), Assigned: gen.assigned})
	restore, err := gen.readChangelogs(sess.Context())
	if err != nil {
		if sess.Context().Err() != nil {
			return nil // a rebalance ended the generation meanwhile: no job
		}
		return g.fail(err)
	}
	gen.restore = restore
	g.out.resetFailure()
	if err := g.producer.BeginTxn(); err != nil {
		return g.fail(fmt.Errorf("begin transaction: %w", err))
	}
	job, err := g.run.StartGeneration(context.Background(), gen)
	if err != nil {
		return g.fail(err)
	}
	gen.job = job
	if job != nil {
		go func() {
			gen.jobErr = job.Wait()
			close(gen.jobDone)
		}()
	}
	return nil
}

// fail records err as the run's failure and returns it.
func (g *groupRun) fail(err error) error {
	if g.failed == nil {
		g.failed = err
	}
	return err
}

// ConsumeClaim hands the claim to the generation's source or exchange
// reader and waits for the generation to end.
func (g *groupRun) ConsumeClaim(sess sarama.ConsumerGroupSession, claim sarama.ConsumerGroupClaim) error {
	gen := g.gen
	gen.addClaim(claim)
	select {
	case <-sess.Context().Done():
	case <-gen.jobDone:
	}
	return nil
}

// Cleanup ends the generation: its job is cancelled and its open
// transaction aborted; a job that failed on its own ends the run.
func (g *groupRun) Cleanup(sarama.ConsumerGroupSession) error {
	gen := g.gen
	if gen == nil {
		return nil
	}
	if gen.job != nil {
		select {
		case <-gen.jobDone:
			// A job that could not open because the generation ended
			// meanwhile (a rebalance) did not fail.
			if gen.jobErr != nil && !errors.Is(gen.jobErr, errGenerationEnded) {
				g.fail(gen.jobErr)
			}
		default:
			gen.job.Cancel()
			<-gen.jobDone
		}
		g.run.EndGeneration(gen.job, gen.jobErr)
	}
	g.purge.end(gen)
	if err := g.endTransaction(); err != nil {
		return g.fail(fmt.Errorf("end the generation's open transaction: %w", err))
	}
	return nil
}

// errGenerationEnded is the error of a source that waited for its claims
// while the generation ended.
var errGenerationEnded = errors.New("the group's generation ended")

// generation is one generation of the group in this process: its
// assignment and claims, its job and the job's transactions.
type generation struct {
	g    *groupRun
	sess sarama.ConsumerGroupSession
	// topics is what the sources read in the generation.
	topics *pipeline.GroupTopics
	// assigned is the session's claims: the partitions of each topic.
	assigned map[string][]int32

	mu     sync.Mutex
	claims map[topicPartition]sarama.ConsumerGroupClaim
	// ready is closed once every assigned partition's claim arrived.
	ready chan struct{}

	restore *changelogRestore
	// held is what the changelogs hold of the assigned key groups
	// (restored or written), and the last committed checkpoint.
	held changelogHeld
	// copied is when each changelog partition's local copy was last known
	// to equal the partition (group_localstate.go): the partitions whose
	// copy the commits keep up to date. nil without a local copy.
	copied   map[topicPartition]time.Time
	copiedMu sync.Mutex // the restore's goroutines
	// topicIDs are the changelog topics' ids, which the copies record.
	topicIDs map[string]sarama.Uuid
	// rec records the changelog records of the open transaction for the
	// local copy; nil without one.
	rec atomic.Pointer[localTxn]

	job     *pipeline.Job
	jobDone chan struct{}
	jobErr  error
}

var _ pipeline.GroupGeneration = (*generation)(nil)

func newGeneration(g *groupRun, sess sarama.ConsumerGroupSession) *generation {
	gen := &generation{g: g, sess: sess, topics: g.topics, assigned: sess.Claims(), claims: map[topicPartition]sarama.ConsumerGroupClaim{},
		ready: make(chan struct{}), jobDone: make(chan struct{})}
	for _, ps := range gen.assigned {
		slices.Sort(ps)
	}
	if gen.want() == 0 {
		close(gen.ready)
	}
	return gen
}

// want is the number of assigned partitions.
func (gen *generation) want() int {
	n := 0
	for _, ps := range gen.assigned {
		n += len(ps)
	}
	return n
}

// describe is the assignment for the log: topic -> partitions.
func (gen *generation) describe() map[string][]int32 { return gen.assigned }

// addClaim registers a claim; the last one makes the generation ready.
func (gen *generation) addClaim(c sarama.ConsumerGroupClaim) {
	gen.mu.Lock()
	defer gen.mu.Unlock()
	gen.claims[topicPartition{c.Topic(), c.Partition()}] = c
	if len(gen.claims) == gen.want() {
		close(gen.ready)
	}
}

// awaitClaims waits until every claim arrived and returns those of the
// partitions of topics, in topic then partition order.
func (gen *generation) awaitClaims(ctx context.Context, topics []string) ([]sarama.ConsumerGroupClaim, error) {
	select {
	case <-gen.ready:
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-gen.sess.Context().Done():
		return nil, errGenerationEnded
	}
	gen.mu.Lock()
	defer gen.mu.Unlock()
	var out []sarama.ConsumerGroupClaim
	for _, t := range topics {
		for _, p := range gen.assigned[t] {
			out = append(out, gen.claims[topicPartition{t, p}])
		}
	}
	return out, nil
}

// Assigned implements pipeline.GroupGeneration: the assigned partitions
// of the stage's input topics.
func (gen *generation) Assigned(s *pipeline.GroupStage) []int32 {
	var out []int32
	for _, t := range s.Topics(gen.topics) {
		for _, p := range gen.assigned[t] {
			if !slices.Contains(out, p) {
				out = append(out, p)
			}
		}
	}
	slices.Sort(out)
	return out
}

// Source implements pipeline.GroupGeneration: the kafka source src reads
// its assigned partitions from the generation's claims.
func (gen *generation) Source(src pipeline.GroupSourceInput) (pipeline.SourceConfig, error) {
	cfg, ok := src.Node.Source.Config.(*SourceConfig)
	if !ok {
		return nil, fmt.Errorf("source %q: a %s source cannot run in group mode", src.Node.ID, src.Node.Type)
	}
	c := &groupSourceConfig{SourceConfig: *cfg, gen: gen, topics: gen.topics.Of[src.Node.ID], eventTime: src.Node.Source.EventTime}
	c.StopAt = "" // a group run reads until it is stopped
	return c, nil
}

// Sink implements pipeline.GroupGeneration: a kafka sink writes through
// the process's producer, in its transactions.
func (gen *generation) Sink(s *pipeline.SinkSpec) (pipeline.SinkConfig, error) {
	cfg, ok := s.Config.(*SinkConfig)
	if !ok {
		return nil, fmt.Errorf("sink %q: a %s sink cannot run in group mode yet: only kafka sinks write in the group's transactions", s.ID, s.Type)
	}
	return &groupSinkConfig{SinkConfig: cfg, gen: gen}, nil
}

// ExchangeWriter implements pipeline.GroupGeneration.
func (gen *generation) ExchangeWriter(x *pipeline.GroupExchange) (pipeline.SinkConfig, error) {
	return &exchangeWriterConfig{gen: gen, x: x, tasks: gen.Assigned(x.From), maxPar: gen.g.run.Plan.MaxParallelism,
		partitions: gen.g.run.Plan.Partitions}, nil
}

// ExchangeReader implements pipeline.GroupGeneration.
func (gen *generation) ExchangeReader(x *pipeline.GroupExchange) (pipeline.SourceConfig, error) {
	return &exchangeReaderConfig{gen: gen, x: x, upstream: gen.g.tasks[x.From]}, nil
}

// Store implements pipeline.GroupGeneration: each checkpoint is a
// transaction.
func (gen *generation) Store() pipeline.CheckpointStore { return &txnStore{gen: gen} }

// Restore implements pipeline.GroupGeneration.
func (gen *generation) Restore() pipeline.RestoredCheckpoint {
	if gen.restore == nil || len(gen.restore.parts) == 0 {
		return nil
	}
	return gen.restore
}

// groupMetadata is the generation's consumer group metadata, which the
// transactions' offsets carry (KIP-447).
func (gen *generation) groupMetadata() *sarama.ConsumerGroupMetadata {
	return &sarama.ConsumerGroupMetadata{GroupID: gen.g.run.Plan.Group.ID, GenerationID: gen.sess.GenerationID(),
		MemberID: gen.sess.MemberID()}
}

// changelogOf returns the changelog topic of stateful step id.
func (gen *generation) changelogOf(step string) *pipeline.InternalTopic {
	for _, t := range gen.g.run.Plan.Topics {
		if t.Kind == pipeline.ChangelogTopic && t.Step == step {
			return t
		}
	}
	return nil
}

// resetFailure forgets the failure of a record of an aborted
// transaction: a new generation starts clean.
func (o *output) resetFailure() {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.err = nil
}
