package kafka

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strconv"
	"time"

	"github.com/IBM/sarama"

	"github.com/eddy-stream/eddy/connectors/codec"
	"github.com/eddy-stream/eddy/expr"
	"github.com/eddy-stream/eddy/pipeline"
)

func init() {
	pipeline.Default.RegisterSink(pipeline.SinkPlugin{
		Type:    "kafka",
		Summary: "writes JSON or CSV values to Kafka topics; with checkpoints, exactly-once through one Kafka transaction per checkpoint",
		New:     func() pipeline.SinkConfig { c := defaultSinkConfig(); return &c },
	})
}

// The values of delivery.
const (
	DeliveryExactlyOnce = "exactly_once"
	DeliveryAtLeastOnce = "at_least_once"
	DeliveryNone        = "none"
)

// The values of partitioner.
const (
	PartitionerMurmur2    = "murmur2"
	PartitionerHash       = "hash"
	PartitionerRoundRobin = "round_robin"
	PartitionerRandom     = "random"
	PartitionerManual     = "manual"
)

// DefaultTransactionTimeout is the default transaction_timeout: the default
// transaction.max.timeout.ms of Kafka brokers.
const DefaultTransactionTimeout = 15 * time.Minute

// SinkConfig is the `kafka` sink's configuration.
type SinkConfig struct {
	// brokers, client_id, kafka_version, tls, sasl, dial_timeout.
	ClientConfig `yaml:",inline"`
	// Topic is the topic every record goes to; exactly one of Topic and
	// TopicExpr.
	Topic string `yaml:"topic"`
	// TopicExpr is an expression giving each record's topic (a string).
	TopicExpr expr.Expr `yaml:"topic_expr"`
	// Key is an expression giving the record key; unset: no key. Strings
	// are written as they are, numbers and booleans as text, other values
	// as JSON.
	Key expr.Expr `yaml:"key"`
	// Headers are record headers, name: expression (values as for Key; a
	// nil result leaves the header out).
	Headers expr.Map `yaml:"headers"`
	// Partitioner picks a keyed record's partition: murmur2 (what the Java
	// client does), hash (sarama's FNV-1a), round_robin, random, or manual
	// (the partition expression).
	Partitioner string `yaml:"partitioner" enum:"murmur2,hash,round_robin,random,manual"`
	// Partition is the partition expression of partitioner: manual.
	Partition expr.Expr `yaml:"partition"`
	// Compression is none, gzip, snappy, lz4 or zstd.
	Compression string `yaml:"compression" enum:"none,gzip,snappy,lz4,zstd"`
	// format, columns and csv_delimiter of the value.
	codec.EncodeOptions `yaml:",inline"`
	// Delivery is exactly_once (transactions; at_least_once when the
	// pipeline does not checkpoint), at_least_once or none.
	Delivery string `yaml:"delivery" enum:"exactly_once,at_least_once,none"`
	// TransactionalIDPrefix starts every transactional id of the sink;
	// default: the pipeline's name.
	TransactionalIDPrefix string `yaml:"transactional_id_prefix"`
	// TransactionTimeout is how long Kafka keeps a transaction open before
	// it aborts it.
	TransactionTimeout pipeline.Duration `yaml:"transaction_timeout"`
	// CreateTopic creates a missing topic; nil: the topic must exist.
	CreateTopic *CreateTopicConfig `yaml:"create_topic"`
	// MaxMessageBytes is the largest record (and batch) the producer sends.
	MaxMessageBytes int `yaml:"max_message_bytes"`
	// Linger is how long the producer waits to fill a batch (0: send at
	// once).
	Linger pipeline.Duration `yaml:"linger"`
	// BatchBytes sends a batch once it holds this many bytes (0: sarama's
	// default).
	BatchBytes int `yaml:"batch_bytes"`
}

// CreateTopicConfig is the `create_topic` block of the kafka sink: the
// settings of a topic the sink creates at Open (or at the first record of
// a topic_expr topic) when it does not exist.
type CreateTopicConfig struct {
	// Partitions of the new topic; 0 means 1.
	Partitions int32 `yaml:"partitions"`
	// ReplicationFactor of the new topic; 0 or -1 takes the broker's
	// default.
	ReplicationFactor int16 `yaml:"replication_factor"`
	// Configs are topic settings, e.g. cleanup.policy: compact.
	Configs map[string]string `yaml:"configs"`
}

func defaultSinkConfig() SinkConfig {
	return SinkConfig{
		ClientConfig:       defaultClientConfig(),
		Partitioner:        PartitionerMurmur2,
		Compression:        "none",
		EncodeOptions:      codec.DefaultEncodeOptions(),
		Delivery:           DeliveryExactlyOnce,
		TransactionTimeout: pipeline.Duration(DefaultTransactionTimeout),
		MaxMessageBytes:    1000000,
	}
}

var compressions = map[string]sarama.CompressionCodec{
	"none": sarama.CompressionNone, "gzip": sarama.CompressionGZIP, "snappy": sarama.CompressionSnappy,
	"lz4": sarama.CompressionLZ4, "zstd": sarama.CompressionZSTD,
}

// Validate checks the keys. The loader calls it once, after decoding the
// pipeline file and compiling its expressions; what needs the cluster
// (topics, transaction.max.timeout.ms) is checked by the sink's Open.
func (c *SinkConfig) Validate() error {
	var errs []error
	if err := c.ClientConfig.Validate(); err != nil {
		errs = append(errs, err)
	}
	switch {
	case c.Topic == "" && !c.TopicExpr.IsSet():
		errs = append(errs, pipeline.FieldErr("topic", "name the topic to write (topic: orders) or give topic_expr"))
	case c.Topic != "" && c.TopicExpr.IsSet():
		errs = append(errs, pipeline.FieldErr("topic_expr", "give either topic or topic_expr, not both"))
	}
	switch c.Partitioner {
	case PartitionerMurmur2, PartitionerHash, PartitionerRoundRobin, PartitionerRandom:
		if c.Partition.IsSet() {
			errs = append(errs, pipeline.FieldErr("partition", "only applies to partitioner: manual"))
		}
	case PartitionerManual:
		if !c.Partition.IsSet() {
			errs = append(errs, pipeline.FieldErr("partition", "partitioner manual needs the partition expression, e.g. partition: id %% 4"))
		}
	default:
		errs = append(errs, pipeline.FieldErr("partitioner", "must be murmur2, hash, round_robin, random or manual, not %q", c.Partitioner))
	}
	if _, ok := compressions[c.Compression]; !ok {
		errs = append(errs, pipeline.FieldErr("compression", "must be none, gzip, snappy, lz4 or zstd, not %q", c.Compression))
	}
	if err := c.EncodeOptions.Validate(); err != nil {
		errs = append(errs, err)
	}
	switch c.Delivery {
	case DeliveryExactlyOnce, DeliveryAtLeastOnce, DeliveryNone:
	default:
		errs = append(errs, pipeline.FieldErr("delivery", "must be exactly_once, at_least_once or none, not %q", c.Delivery))
	}
	if c.TransactionTimeout.D() < time.Second {
		errs = append(errs, pipeline.FieldErr("transaction_timeout", "must be at least 1s"))
	}
	if ct := c.CreateTopic; ct != nil {
		if ct.Partitions < 0 {
			errs = append(errs, pipeline.FieldErr("create_topic", "partitions must be at least 1"))
		}
		if ct.ReplicationFactor < -1 {
			errs = append(errs, pipeline.FieldErr("create_topic", "replication_factor must be at least 1, or -1 for the broker's default"))
		}
	}
	if c.MaxMessageBytes < 1 {
		errs = append(errs, pipeline.FieldErr("max_message_bytes", "must be positive"))
	}
	if c.BatchBytes < 0 {
		errs = append(errs, pipeline.FieldErr("batch_bytes", "must not be negative"))
	}
	return errors.Join(errs...)
}

// Guarantee is what delivery promises, for the plan's end-to-end guarantee
// (computed when the pipeline is compiled, shown by explain and logged at
// startup): exactly-once with transactions (assuming checkpoints; the plan
// weighs the checkpoint block), at-least-once and at-most-once for the
// others. A source that cannot replay lowers the pipeline's guarantee
// whatever the sink does, and the startup warning names it.
func (c *SinkConfig) Guarantee() pipeline.Guarantee {
	switch c.Delivery {
	case DeliveryAtLeastOnce:
		return pipeline.AtLeastOnce
	case DeliveryNone:
		return pipeline.AtMostOnce
	}
	return pipeline.ExactlyOnce
}

// NewSink returns the sink of one subtask. The runtime calls it once per
// subtask before the run starts; the sink connects at Open.
func (c *SinkConfig) NewSink() (pipeline.Sink, error) {
	return &sink{cfg: c}, nil
}

// producerConfig returns the sarama configuration of the sink's producers
// for a delivery mode; txnID is the transactional id (exactly_once only).
func (c *SinkConfig) producerConfig(delivery, txnID string) (*sarama.Config, error) {
	sc, err := c.saramaConfig()
	if err != nil {
		return nil, err
	}
	// A topic must exist or be created by create_topic: never by a
	// metadata request for a misspelt name.
	sc.Metadata.AllowAutoTopicCreation = false
	sc.Producer.Compression = compressions[c.Compression]
	sc.Producer.MaxMessageBytes = c.MaxMessageBytes
	sc.Producer.Flush.Frequency = c.Linger.D()
	sc.Producer.Flush.Bytes = c.BatchBytes
	sc.Producer.Return.Errors = true
	// Successes are counted in every mode: barriers wait for them except
	// with delivery none, Close always (see output).
	sc.Producer.Return.Successes = true
	sc.Producer.Partitioner = c.partitioner()
	switch delivery {
	case DeliveryNone:
		sc.Producer.RequiredAcks = sarama.WaitForLocal
	default:
		sc.Producer.RequiredAcks = sarama.WaitForAll
		sc.Producer.Idempotent = true
		sc.Net.MaxOpenRequests = 1
	}
	if delivery == DeliveryExactlyOnce {
		sc.Producer.Transaction.ID = txnID
		sc.Producer.Transaction.Timeout = c.TransactionTimeout.D()
		// InitProducerId answers CONCURRENT_TRANSACTIONS while the
		// coordinator aborts what a crashed run left open: give it time.
		// CONCURRENT_TRANSACTIONS (markers of the id's previous
		// transaction still being written) passes in milliseconds: retry
		// often, for up to about 5s.
		sc.Producer.Transaction.Retry.Max = 250
		sc.Producer.Transaction.Retry.Backoff = 20 * time.Millisecond
	}
	return sc, nil
}

func (c *SinkConfig) partitioner() sarama.PartitionerConstructor {
	switch c.Partitioner {
	case PartitionerHash:
		return sarama.NewHashPartitioner
	case PartitionerRoundRobin:
		return sarama.NewRoundRobinPartitioner
	case PartitionerRandom:
		return sarama.NewRandomPartitioner
	case PartitionerManual:
		return sarama.NewManualPartitioner
	}
	return sarama.NewMurmur2Partitioner
}

// sink is the kafka sink of one subtask. All its methods run on the task
// goroutine; the producers' acknowledgements are counted by goroutines of
// their own (see output).
type sink struct {
	cfg      *SinkConfig
	id       string
	logger   *slog.Logger
	delivery string // the mode in effect (exactly_once falls back without checkpoints)
	upsert   bool

	client sarama.Client       // metadata, admin requests, EndTxn on recovery
	admin  sarama.ClusterAdmin // on client
	out    *output             // at_least_once and none
	txn    *txnPool            // exactly_once

	vm     expr.VM
	enc    codec.Encoder
	scr    []byte // scratch: one encoded value
	arena  arena
	jsonv  codec.JSONEncoder // keys and headers that are not strings
	topics map[string]bool   // topics known to exist
	hnames [][]byte          // the header names
	last   string            // the topic of the previous record

	hooks sinkHooks
	// err is sticky: a failed produce or commit leaves the sink failed
	// until the runtime restarts it from the last checkpoint.
	err error
}

// sinkHooks are the sink's fault-injection points for tests; all nil in
// production.
type sinkHooks struct {
	// beforeCommit runs before each pre-committed transaction is committed
	// (live or on recovery); an error stops Commit there, as a crash
	// between the checkpoint's completion and the commit would.
	beforeCommit func(c committable) error
	// commitGoroutine runs on the goroutine of a live commit, before
	// CommitTxn; an error ends that commit there, as a crash would.
	commitGoroutine func(c committable) error
}

var _ pipeline.TwoPhaseCommitSink = (*sink)(nil)

func (s *sink) errorf(format string, args ...any) error {
	return fmt.Errorf("kafka sink %q: "+format, append([]any{s.id}, args...)...)
}

// Open checks the setup and starts the producers. In order: the settings
// that need no broker (key with changelog: upsert, transaction_timeout
// against the checkpoint settings), the connection, transaction_timeout
// against the broker's transaction.max.timeout.ms, the topic (created with
// create_topic), then, with transactions, the commit of the restored
// committables, the producers of the subtask's transactional ids (which
// aborts what a crashed run left open on them) and the abort of open
// transactions of subtasks that no longer exist.
func (s *sink) Open(ctx context.Context, sc *pipeline.SinkContext) error {
	if err := s.open(ctx, sc); err != nil {
		_ = s.Close(ctx)
		return err
	}
	return nil
}

func (s *sink) open(ctx context.Context, sc *pipeline.SinkContext) error {
	s.id = sc.ID
	s.logger = sc.Logger
	if s.logger == nil {
		s.logger = slog.New(slog.DiscardHandler)
	}
	s.enc = s.cfg.NewEncoder()
	s.topics = map[string]bool{}
	for _, h := range s.cfg.Headers {
		s.hnames = append(s.hnames, []byte(h.Name))
	}
	s.delivery = s.cfg.Delivery
	if s.delivery == DeliveryExactlyOnce && !sc.Checkpointing {
		s.delivery = DeliveryAtLeastOnce
		s.logger.Info("kafka sink writes at-least-once: delivery exactly_once needs the pipeline's checkpoint block (one transaction per checkpoint)")
	}
	s.upsert = sc.Changelog == pipeline.ChangelogUpsert
	if s.upsert && !s.cfg.Key.IsSet() {
		return s.errorf("changelog: upsert needs `key`, the expression of the row's key (the group key of the aggregate, e.g. key: sensor): a delete is a tombstone for that key")
	}
	if s.delivery == DeliveryExactlyOnce {
		if err := checkTxnTimeout(s.cfg.TransactionTimeout.D(), sc.Checkpoint, sc.RestartDelay); err != nil {
			return s.errorf("%w", err)
		}
	}
	base, err := s.cfg.producerConfig(DeliveryNone, "")
	if err != nil {
		return s.errorf("%w", err)
	}
	if s.client, err = s.cfg.newClient(base); err != nil {
		return s.errorf("%w", err)
	}
	if s.admin, err = sarama.NewClusterAdminFromClient(s.client); err != nil {
		return s.errorf("connect to the cluster's controller: %w", err)
	}
	if s.delivery == DeliveryExactlyOnce {
		if err := s.checkBrokerTxnTimeout(); err != nil {
			return err
		}
	}
	if s.cfg.Topic != "" {
		if err := s.ensureTopic(s.cfg.Topic); err != nil {
			return err
		}
		s.last = s.cfg.Topic
	}
	if len(sc.Committables) > 0 {
		if err := s.commitEach(ctx, sc.Committables); err != nil {
			return err
		}
	}
	if s.delivery == DeliveryExactlyOnce {
		s.txn, err = s.openPool(ctx, sc)
		return err
	}
	pc, err := s.cfg.producerConfig(s.delivery, "")
	if err != nil {
		return s.errorf("%w", err)
	}
	p, err := sarama.NewAsyncProducer(s.cfg.Brokers, pc)
	if err != nil {
		return s.errorf("start the producer: %w", err)
	}
	s.out = newOutput(p)
	return nil
}

// Write turns the records into Kafka records and hands them to the
// producer; with transactions it begins one on the first record after a
// barrier.
func (s *sink) Write(ctx context.Context, batch []pipeline.Record) error {
	if s.err != nil {
		return s.failed()
	}
	out := s.out
	if s.txn != nil {
		var err error
		if out, err = s.txn.current(ctx); err != nil {
			return s.fail(err)
		}
	}
	if err := out.failure(); err != nil {
		return s.fail(s.errorf("%w", err))
	}
	for i := range batch {
		msg, err := s.message(out, &batch[i])
		var fault *sinkFault
		switch {
		case errors.As(err, &fault):
			return s.fail(fault.err)
		case err != nil:
			// The record's own fault: the ones before it are sent, and the
			// runtime flushes them before it fails the task.
			return &pipeline.SinkRecordError{Index: i, Err: err}
		}
		if err := out.send(ctx, msg); err != nil {
			return s.fail(s.errorf("%w", err))
		}
	}
	return nil
}

// Flush waits until the broker acknowledged every record written so far
// (at_least_once, exactly_once: in the open transaction, still invisible
// to read_committed consumers); with delivery none it only reports
// errors.
func (s *sink) Flush(ctx context.Context) error {
	if s.err != nil {
		return s.failed()
	}
	out := s.out
	if s.txn != nil {
		out = s.txn.cur
	}
	if out == nil {
		return nil
	}
	if s.delivery == DeliveryNone {
		if err := out.failure(); err != nil {
			return s.fail(s.errorf("%w", err))
		}
		return nil
	}
	if err := out.flush(ctx); err != nil {
		if ctx.Err() != nil {
			return s.errorf("flush: %w", err)
		}
		return s.fail(s.errorf("%w", err))
	}
	return nil
}

// PreCommit, at the barrier of checkpoint id, flushes and, with
// transactions, learns the producer id and epoch of the open transaction
// and returns them as the committable; the next record begins a new
// transaction on the next free transactional id. Without a transaction
// (nothing written since the last barrier, or no transactions) the
// committable is empty.
func (s *sink) PreCommit(ctx context.Context, id int64) ([]byte, error) {
	if err := s.Flush(ctx); err != nil {
		return nil, err
	}
	if s.txn == nil {
		return []byte{}, nil
	}
	b, err := s.txn.preCommit(ctx, id)
	if err != nil {
		return nil, s.fail(err)
	}
	return b, nil
}

// Commit commits the pre-committed transactions of the committables,
// oldest first: those a producer of this run holds on a goroutine (the
// task goes on; a failure fails the sink at its next transaction, barrier
// or Close), restored ones with EndTxn. Committing one again is harmless;
// empty committables are skipped.
func (s *sink) Commit(ctx context.Context, committables [][]byte) error {
	if s.err != nil {
		return s.failed()
	}
	if err := s.commitEach(ctx, committables); err != nil {
		return s.fail(err)
	}
	return nil
}

// Close stops the producers after the broker acknowledged every record
// written (with delivery none too: a batch the producer retried while it
// stopped would be failed as "shutting down"). With transactions it
// aborts the open transaction (records after the last barrier, which a
// restore replays) and leaves the pre-committed ones to the restore, which
// commits those of the restored checkpoint and aborts the others. A
// graceful end has committed everything before: the runtime pre-commits
// and commits a final checkpoint.
func (s *sink) Close(ctx context.Context) error {
	var errs []error
	if s.out != nil {
		if s.err == nil {
			if err := s.out.flush(ctx); err != nil {
				errs = append(errs, s.errorf("flush at close: %w", err))
			}
		}
		if err := s.out.close(); err != nil && s.err == nil {
			errs = append(errs, s.errorf("close the producer: %w", err))
		}
		s.out = nil
	}
	if s.txn != nil {
		if err := s.txn.close(ctx); err != nil && s.err == nil {
			errs = append(errs, s.fail(err))
		}
		s.txn = nil
	}
	if s.admin != nil {
		_ = s.admin.Close() // closes s.client
		s.admin, s.client = nil, nil
	} else if s.client != nil {
		_ = s.client.Close()
		s.client = nil
	}
	return errors.Join(errs...)
}

func (s *sink) fail(err error) error {
	if s.err == nil {
		s.err = err
	}
	return err
}

func (s *sink) failed() error {
	return s.errorf("failed earlier, waiting for a restart: %w", s.err)
}

// message builds the Kafka record of r. The key, value and header bytes
// live in the sink's arena; the message struct is recycled from out. An
// error is the record's (an expression that fails, a value its format
// cannot encode), except a *sinkFault.
func (s *sink) message(out *output, r *pipeline.Record) (*sarama.ProducerMessage, error) {
	msg := out.newMessage()
	topic := s.cfg.Topic
	if s.cfg.TopicExpr.IsSet() {
		v, err := s.vm.EvalRecord(&s.cfg.TopicExpr, r.Fields, r.Meta)
		if err != nil {
			return nil, s.errorf("topic_expr %q: %w", s.cfg.TopicExpr.Source, err)
		}
		t, ok := v.(string)
		if !ok || t == "" {
			return nil, s.errorf("topic_expr %q returned %s, not a topic name", s.cfg.TopicExpr.Source, describeValue(v))
		}
		if t != s.last {
			if !s.topics[t] {
				if err := s.ensureTopic(t); err != nil {
					return nil, &sinkFault{err}
				}
			}
			s.last = t
		}
		topic = s.last
	}
	msg.Topic = topic
	if s.cfg.Key.IsSet() {
		v, err := s.vm.EvalRecord(&s.cfg.Key, r.Fields, r.Meta)
		if err != nil {
			return nil, s.errorf("key %q: %w", s.cfg.Key.Source, err)
		}
		b, err := s.bytesOf(v)
		if err != nil {
			return nil, s.errorf("key %q: %w", s.cfg.Key.Source, err)
		}
		if b != nil {
			msg.Key = sarama.ByteEncoder(b)
		}
	}
	if s.cfg.Partition.IsSet() {
		v, err := s.vm.EvalRecord(&s.cfg.Partition, r.Fields, r.Meta)
		if err != nil {
			return nil, s.errorf("partition %q: %w", s.cfg.Partition.Source, err)
		}
		p, ok := partitionOf(v)
		if !ok {
			return nil, s.errorf("partition %q returned %s, not a partition number", s.cfg.Partition.Source, describeValue(v))
		}
		msg.Partition = p
	}
	for i := range s.cfg.Headers {
		h := &s.cfg.Headers[i]
		v, err := s.vm.EvalRecord(&h.Expr, r.Fields, r.Meta)
		if err != nil {
			return nil, s.errorf("header %s %q: %w", h.Name, h.Expr.Source, err)
		}
		b, err := s.bytesOf(v)
		if err != nil {
			return nil, s.errorf("header %s %q: %w", h.Name, h.Expr.Source, err)
		}
		if b != nil {
			msg.Headers = append(msg.Headers, sarama.RecordHeader{Key: s.hnames[i], Value: b})
		}
	}
	if r.Time != pipeline.NoTime {
		msg.Timestamp = time.UnixMilli(r.Time)
	}
	if s.upsert {
		// -U rows never get here (the runtime drops them in upsert mode).
		op, _ := r.Fields[pipeline.OpField].(string)
		if op == pipeline.OpDelete {
			if msg.Key == nil {
				return nil, s.errorf("a delete (-D) row has a nil key %q: a tombstone needs the key of the row it deletes", s.cfg.Key.Source)
			}
			return msg, nil // nil value: a tombstone
		}
		delete(r.Fields, pipeline.OpField)
	}
	line, err := s.enc.Append(s.scr[:0], r.Fields)
	if err != nil {
		return nil, s.errorf("encode the value for topic %s: %w", topic, err)
	}
	s.scr = line
	line = line[:len(line)-1] // the encoders end a line with '\n'
	msg.Value = sarama.ByteEncoder(s.arena.copy(line))
	return msg, nil
}

// sinkFault marks an error of message that is the sink's, not the record's.
type sinkFault struct{ err error }

func (f *sinkFault) Error() string { return f.err.Error() }

// bytesOf renders a key or header value: strings and byte slices as they
// are, numbers and booleans as text, other values as JSON; nil is nil.
func (s *sink) bytesOf(v any) ([]byte, error) {
	var b []byte
	switch x := v.(type) {
	case nil:
		return nil, nil
	case string:
		return s.arena.copyString(x), nil
	case []byte:
		return s.arena.copy(x), nil
	case int:
		b = strconv.AppendInt(s.scr[:0], int64(x), 10)
	case int64:
		b = strconv.AppendInt(s.scr[:0], x, 10)
	case float64:
		if x == math.Trunc(x) && math.Abs(x) < 1<<53 {
			b = strconv.AppendInt(s.scr[:0], int64(x), 10)
		} else {
			b = strconv.AppendFloat(s.scr[:0], x, 'g', -1, 64)
		}
	case bool:
		b = strconv.AppendBool(s.scr[:0], x)
	default:
		var err error
		if b, err = s.jsonv.AppendValue(s.scr[:0], v); err != nil {
			return nil, err
		}
	}
	s.scr = b
	return s.arena.copy(b), nil
}

func partitionOf(v any) (int32, bool) {
	var n int64
	switch x := v.(type) {
	case int:
		n = int64(x)
	case int64:
		n = x
	case int32:
		n = int64(x)
	case float64:
		if x != math.Trunc(x) {
			return 0, false
		}
		n = int64(x)
	default:
		return 0, false
	}
	if n < 0 || n > math.MaxInt32 {
		return 0, false
	}
	return int32(n), true
}

func describeValue(v any) string {
	if v == nil {
		return "nil"
	}
	return fmt.Sprintf("%T %v", v, v)
}

// ensureTopic checks that topic exists, creating it with create_topic
// when it does not. It runs at Open for `topic` and at the first record
// of each topic of topic_expr.
func (s *sink) ensureTopic(topic string) error {
	parts, err := s.client.Partitions(topic)
	if err == nil && len(parts) > 0 {
		s.topics[topic] = true
		return nil
	}
	if err != nil && !errors.Is(err, sarama.ErrUnknownTopicOrPartition) {
		return s.errorf("look up topic %q: %w", topic, err)
	}
	ct := s.cfg.CreateTopic
	if ct == nil {
		return s.errorf("topic %q does not exist: create it, or add a create_topic block to the sink (create_topic: {partitions: 3, replication_factor: 3})", topic)
	}
	detail := &sarama.TopicDetail{NumPartitions: max(ct.Partitions, 1), ReplicationFactor: ct.ReplicationFactor}
	if detail.ReplicationFactor == 0 {
		detail.ReplicationFactor = -1
	}
	if len(ct.Configs) > 0 {
		detail.ConfigEntries = make(map[string]*string, len(ct.Configs))
		for k, v := range ct.Configs {
			detail.ConfigEntries[k] = &v
		}
	}
	err = s.admin.CreateTopic(topic, detail, false)
	if err != nil && !errors.Is(err, sarama.ErrTopicAlreadyExists) {
		var te *sarama.TopicError
		if !errors.As(err, &te) || te.Err != sarama.ErrTopicAlreadyExists {
			return s.errorf("create topic %q (create_topic): %w", topic, err)
		}
	}
	if err == nil {
		s.logger.Info("kafka sink created the topic", "topic", topic, "partitions", detail.NumPartitions, "replication_factor", detail.ReplicationFactor)
	}
	// The metadata of a new topic reaches the brokers shortly after.
	for attempt := 0; ; attempt++ {
		if err := s.client.RefreshMetadata(topic); err == nil {
			if parts, err := s.client.Partitions(topic); err == nil && len(parts) > 0 {
				s.topics[topic] = true
				return nil
			}
		}
		if attempt == 50 {
			return s.errorf("topic %q was created but its metadata did not show up: check the brokers' logs", topic)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// checkTxnTimeout checks that a pre-committed transaction outlives a
// checkpoint plus a restart: it is opened after one barrier, pre-committed
// at the next (up to checkpoint.interval later), committed when that
// checkpoint completes (up to checkpoint.timeout later), or after a crash
// when the restart (its delay) restores it. Kafka aborts it once it is
// older than transaction_timeout, and its records would be lost.
func checkTxnTimeout(timeout time.Duration, cp *pipeline.CheckpointSpec, restartDelay time.Duration) error {
	if cp == nil {
		return nil
	}
	need := cp.Interval.D() + cp.Timeout.D() + restartDelay
	if timeout > need {
		return nil
	}
	return fmt.Errorf("transaction_timeout %s must be longer than checkpoint.interval (%s) + checkpoint.timeout (%s) + the restart delay (%s) = %s: "+
		"Kafka aborts a transaction older than that, and a pre-committed transaction waits for its checkpoint to complete or for a restart to commit it; "+
		"raise transaction_timeout (at most the brokers' transaction.max.timeout.ms) or lower checkpoint.interval, checkpoint.timeout or restart.delay",
		timeout, cp.Interval.D(), cp.Timeout.D(), restartDelay, need)
}

// checkBrokerTxnTimeout checks transaction_timeout against the broker's
// transaction.max.timeout.ms; when that cannot be read it logs and goes on
// (the producers' InitProducerId would then fail with
// INVALID_TRANSACTION_TIMEOUT).
func (s *sink) checkBrokerTxnTimeout() error {
	brokers := s.client.Brokers()
	if len(brokers) == 0 {
		return nil
	}
	id := strconv.Itoa(int(brokers[0].ID()))
	entries, err := s.admin.DescribeConfig(sarama.ConfigResource{Type: sarama.BrokerResource, Name: id, ConfigNames: []string{"transaction.max.timeout.ms"}})
	var maxMs int64 = -1
	for _, e := range entries {
		if e.Name == "transaction.max.timeout.ms" {
			maxMs, _ = strconv.ParseInt(e.Value, 10, 64)
		}
	}
	if err != nil || maxMs <= 0 {
		s.logger.Warn("kafka sink could not read the brokers' transaction.max.timeout.ms; transaction_timeout is checked when the producers start", "broker", id, "err", err)
		return nil
	}
	if limit := time.Duration(maxMs) * time.Millisecond; s.cfg.TransactionTimeout.D() > limit {
		return s.errorf("transaction_timeout %s is longer than the brokers' transaction.max.timeout.ms (%s): lower transaction_timeout, or raise transaction.max.timeout.ms on the brokers",
			s.cfg.TransactionTimeout.D(), limit)
	}
	return nil
}

// arena hands out byte slices for message keys, values and headers from
// large blocks, so that a record costs no allocation of its own for them.
// A block is never written again once handed out: the producer may hold
// its slices until the broker acknowledged them, and the garbage
// collector frees a block when no message refers to it any more.
type arena struct{ buf []byte }

const arenaBlock = 64 << 10

func (a *arena) copy(b []byte) []byte {
	if cap(a.buf)-len(a.buf) < len(b) {
		a.buf = make([]byte, 0, max(arenaBlock, len(b)))
	}
	start := len(a.buf)
	a.buf = append(a.buf, b...)
	return a.buf[start:len(a.buf):len(a.buf)]
}

func (a *arena) copyString(s string) []byte {
	if cap(a.buf)-len(a.buf) < len(s) {
		a.buf = make([]byte, 0, max(arenaBlock, len(s)))
	}
	start := len(a.buf)
	a.buf = append(a.buf, s...)
	return a.buf[start:len(a.buf):len(a.buf)]
}

// isKafkaErr reports whether err is (or wraps) the Kafka error code k.
func isKafkaErr(err error, k sarama.KError) bool {
	var ke sarama.KError
	return errors.As(err, &ke) && ke == k
}
