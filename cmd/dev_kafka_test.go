package cmd

import (
	"bytes"
	"context"
	"testing"

	"github.com/IBM/sarama"
	"github.com/spf13/cobra"
	"github.com/stretchr/testify/require"
)

// eddy dev kafka serves the Kafka protocol with the topics asked for, until
// its context ends.
func TestDevKafkaServesTopics(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	addrs := make(chan string, 1)
	o := &devKafkaOptions{port: 0, topics: []string{"readings:3", "stats"}, ready: func(a string) { addrs <- a }}
	var out bytes.Buffer
	c := &cobra.Command{}
	c.SetOut(&out)
	done := make(chan error, 1)
	go func() { done <- o.run(ctx, c) }()
	addr := <-addrs

	cfg := sarama.NewConfig()
	cfg.Version = sarama.V3_6_0_0
	client, err := sarama.NewClient([]string{addr}, cfg)
	require.NoError(t, err)
	parts, err := client.Partitions("readings")
	require.NoError(t, err)
	require.Len(t, parts, 3)
	parts, err = client.Partitions("stats")
	require.NoError(t, err)
	require.Len(t, parts, 1)
	require.NoError(t, client.Close())

	cancel()
	require.NoError(t, <-done)
	require.Contains(t, out.String(), "kafka broker listening on "+addr)
	require.Contains(t, out.String(), "topic readings: 3 partition(s)")
}

func TestDevKafkaBadTopics(t *testing.T) {
	for _, arg := range []string{"a:0", "a:x", ":3"} {
		var stdout, stderr bytes.Buffer
		root := NewRootCommand()
		root.SetArgs([]string{"dev", "kafka", "--port", "0", "--topics", arg})
		root.SetOut(&stdout)
		root.SetErr(&stderr)
		require.Equal(t, exitInvalid, ExecuteCommand(root), arg)
		require.Contains(t, stderr.String(), "--topics", arg)
	}
}
