package kafka

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/eddy-stream/eddy/connectors/internal/conntest"
	"github.com/eddy-stream/eddy/pipeline"
)

// fakeClock is a clock that moves only when the test says.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// The source reports each partition's next offset, lag and idleness
// (pipeline.SplitStatuser): before reading, while reading (offset + lag is
// the partition's end), once read to the end, and after its idle time.
func TestKafkaSourceSplitStatus(t *testing.T) {
	brokers := testBrokers(t)
	topic := testTopic(t, brokers, 2)
	produced := map[int]int64{0: 1500, 1: 7}
	produce(t, brokers, append(jsonMsgs(topic, 0, 0, int(produced[0])), jsonMsgs(topic, 1, 0, int(produced[1]))...)...)
	cfg := loadKafkaSource(t, brokers, fmt.Sprintf("topics: [%s]\nstart_from: earliest", topic))
	clock := &fakeClock{t: time.Unix(1_700_000_000, 0)}
	src := &source{cfg: cfg, now: clock.Now}
	require.NoError(t, src.Open(t.Context(), &pipeline.SourceContext{SubtaskInfo: conntest.Info("src", 0, 1)}))
	t.Cleanup(func() { _ = src.Close(context.Background()) })
	var _ pipeline.SplitStatuser = src

	st := src.SplitStatus()
	require.Len(t, st, 2)
	for i, s := range st {
		require.Equal(t, i, s.Split)
		require.Equal(t, fmt.Sprintf("%s/%d", topic, i), s.Name)
		require.Equal(t, int64(0), s.Offset, "starts at the earliest offset")
		require.Nil(t, s.Lag, "no batch yet: the high watermark is unknown")
		require.False(t, s.Idle)
	}

	sawLag := false
	for read := int64(0); read < produced[0]+produced[1]; {
		b := readBatch(t, src)
		require.NoError(t, b.Err)
		read += int64(len(b.Records))
		for _, s := range src.SplitStatus() {
			if s.Lag != nil {
				require.Equal(t, produced[s.Split], s.Offset+*s.Lag, "partition %d: offset %d + lag is its end", s.Split, s.Offset)
				sawLag = sawLag || *s.Lag > 0
			}
		}
	}
	require.True(t, sawLag, "a batch left records to read (at most %d per batch)", maxBatch)
	for _, s := range src.SplitStatus() {
		require.Equal(t, produced[s.Split], s.Offset, "partition %d read to its end", s.Split)
		require.NotNil(t, s.Lag)
		require.Zero(t, *s.Lag)
		require.False(t, s.Idle, "partition %d delivered just now", s.Split)
	}

	clock.Add(splitIdleAfter)
	for _, s := range src.SplitStatus() {
		require.True(t, s.Idle, "partition %d delivered nothing for %s", s.Split, splitIdleAfter)
	}
	produce(t, brokers, jsonMsgs(topic, 0, int(produced[0]), 5)...)
	readAtLeast(t, src, 5)
	st = src.SplitStatus()
	require.Equal(t, produced[0]+5, st[0].Offset)
	require.False(t, st[0].Idle, "partition 0 delivered again")
	require.True(t, st[1].Idle, "partition 1 still delivers nothing")
}
