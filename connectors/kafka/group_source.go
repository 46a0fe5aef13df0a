package kafka

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/IBM/sarama"

	"github.com/eddy-stream/eddy/pipeline"
)

// groupSourceConfig is a kafka source in a generation of group mode: it
// reads the partitions of its topics that the generation assigned to this
// process, from the claims of the consumer group (which start at the
// group's committed offsets), with the kafka source's decoding.
type groupSourceConfig struct {
	SourceConfig
	gen    *generation
	topics []string
}

func (c *groupSourceConfig) NewSource() (pipeline.Source, error) {
	return &groupSource{source: source{cfg: &c.SourceConfig}, gen: c.gen, topics: c.topics}, nil
}

// Bounded is false: in group mode sources read until the process stops.
func (c *groupSourceConfig) Bounded() bool { return false }

// groupSource is the kafka source with its partitions from the claims.
type groupSource struct {
	source
	gen    *generation
	topics []string
}

// Open waits for the generation's claims and starts reading each.
func (s *groupSource) Open(ctx context.Context, sc *pipeline.SourceContext) error {
	s.id, s.sub, s.par, s.logger = sc.ID, 0, 1, sc.Logger
	if s.logger == nil {
		s.logger = slog.Default()
	}
	s.events = make(chan *event, 16)
	s.now = time.Now
	s.idleAfter = splitIdleAfter
	s.fatal = make(chan error, 1)
	s.stop = make(chan struct{})
	s.free = make(chan *event, 16)
	if sc.Metrics != nil {
		s.pending = sc.Metrics.SourcePending(sc.SubtaskInfo)
		s.invalidUTF8 = sc.Metrics.InvalidUTF8(sc.SubtaskInfo)
	}
	claims, err := s.gen.awaitClaims(ctx, s.topics)
	if err != nil {
		return fmt.Errorf("kafka source %q: %w", s.id, err)
	}
	for _, c := range claims {
		p := &partition{topicPartition: topicPartition{c.Topic(), c.Partition()}, next: c.InitialOffset(), stop: noStop}
		if p.next < 0 {
			p.next = 0
		}
		s.register(p)
	}
	s.encodeTemplate()
	sc.Position = slices.Clone(s.posTmpl)
	for i, c := range claims {
		p := s.parts[i]
		sc.Splits = append(sc.Splits, p.split)
		s.wg.Add(1)
		go s.consume(p, newClaimConsumer(c), p.next, noStop)
	}
	return nil
}

// CheckpointComplete does nothing: in group mode the transactions commit
// the offsets.
func (s *groupSource) CheckpointComplete(context.Context, int64, []byte) error { return nil }

// claimConsumer lets the kafka source's partition goroutine read a
// consumer group claim as it reads a partition consumer: the group's
// consumer reports errors on the group, and the claim ends with the
// session.
type claimConsumer struct {
	claim  sarama.ConsumerGroupClaim
	errs   chan *sarama.ConsumerError
	once   sync.Once
	closed chan struct{}
	msgs   chan *sarama.ConsumerMessage
}

var _ sarama.PartitionConsumer = (*claimConsumer)(nil)

func newClaimConsumer(c sarama.ConsumerGroupClaim) *claimConsumer {
	return &claimConsumer{claim: c, errs: make(chan *sarama.ConsumerError), closed: make(chan struct{}), msgs: make(chan *sarama.ConsumerMessage)}
}

// Messages is the claim's, until AsyncClose; then a closed channel.
func (c *claimConsumer) Messages() <-chan *sarama.ConsumerMessage {
	select {
	case <-c.closed:
		return c.msgs
	default:
		return c.claim.Messages()
	}
}

// Errors delivers nothing, and is closed by AsyncClose.
func (c *claimConsumer) Errors() <-chan *sarama.ConsumerError { return c.errs }

func (c *claimConsumer) AsyncClose() {
	c.once.Do(func() {
		close(c.closed)
		close(c.msgs)
		close(c.errs)
	})
}

func (c *claimConsumer) Close() error               { c.AsyncClose(); return nil }
func (c *claimConsumer) HighWaterMarkOffset() int64 { return c.claim.HighWaterMarkOffset() }
func (c *claimConsumer) Pause()                     {}
func (c *claimConsumer) Resume()                    {}
func (c *claimConsumer) IsPaused() bool             { return false }
