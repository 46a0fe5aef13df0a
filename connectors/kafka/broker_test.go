package kafka

import (
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unicode"

	"github.com/IBM/sarama"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
)

// Tests whose name starts with TestKafka run against a real broker when
// KAFKA_BROKERS is set (scripts/kafka-it.sh) and against an in-process
// kfake broker otherwise: the same assertions on both.

// testBrokers returns the brokers of the cluster a test talks to: the real
// one of KAFKA_BROKERS, or a fresh in-process kfake cluster closed at the
// end of the test.
func testBrokers(t testing.TB) []string {
	t.Helper()
	if env := os.Getenv("KAFKA_BROKERS"); env != "" {
		return strings.Split(env, ",")
	}
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	require.NoError(t, err)
	t.Cleanup(c.Close)
	return c.ListenAddrs()
}

var topicSeq atomic.Int64

// testTopic creates a topic with a name unique to this test run (a real
// broker outlives tests) and returns its name.
func testTopic(t testing.TB, brokers []string, partitions int32) string {
	t.Helper()
	// Kafka allows ASCII letters, digits, '.', '_' and '-' in topic names.
	test := strings.Map(func(r rune) rune {
		if r < 128 && (unicode.IsLetter(r) || unicode.IsDigit(r) || r == '.' || r == '_' || r == '-') {
			return unicode.ToLower(r)
		}
		return '-'
	}, t.Name())
	name := fmt.Sprintf("eddy-%s-%d-%d", test, time.Now().UnixNano(), topicSeq.Add(1))
	if len(name) > 200 {
		name = name[len(name)-200:]
	}
	cfg := sarama.NewConfig()
	cfg.Version = sarama.V3_6_0_0
	admin, err := sarama.NewClusterAdmin(brokers, cfg)
	require.NoError(t, err)
	defer admin.Close()
	require.NoError(t, admin.CreateTopic(name, &sarama.TopicDetail{NumPartitions: partitions, ReplicationFactor: 1}, false))
	return name
}
