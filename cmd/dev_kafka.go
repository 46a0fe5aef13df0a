package cmd

import (
	"context"
	"fmt"
	"maps"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"github.com/twmb/franz-go/pkg/kfake"
)

// devKafkaOptions are the flags of `eddy dev kafka`.
type devKafkaOptions struct {
	port    int
	topics  []string
	dataDir string
	// ready, when set (tests), receives the listen address once the broker
	// is up.
	ready func(addr string)
}

// AddFlags adds --port, --topics and --data-dir.
func (o *devKafkaOptions) AddFlags(fs *pflag.FlagSet) {
	fs.IntVar(&o.port, "port", 9092, "port to listen on (127.0.0.1); 0 picks a free one")
	fs.StringSliceVar(&o.topics, "topics", nil, "topics to create, as name:partitions (a name alone has 1 partition), e.g. a:3,b:1")
	fs.StringVar(&o.dataDir, "data-dir", "", "keep the broker's data in this directory across restarts (default: in memory, lost at exit)")
}

func newDevCommand() *cobra.Command {
	c := &cobra.Command{
		Use:   "dev",
		Short: "Development helpers (an embedded Kafka broker)",
	}
	c.AddCommand(newDevKafkaCommand())
	return c
}

func newDevKafkaCommand() *cobra.Command {
	o := &devKafkaOptions{}
	c := &cobra.Command{
		Use:   "kafka",
		Short: "Run an in-process Kafka broker for local experiments",
		Long: `Runs a single Kafka broker inside this process (franz-go's kfake), on
127.0.0.1, until SIGINT or SIGTERM. It speaks the Kafka protocol, including
transactions and read_committed, so pipelines with kafka sources and sinks
(delivery: exactly_once too) run against it with no other setup:

  eddy dev kafka --topics readings:3,stats:1
  eddy run configs/kafka_windows.yaml        # in another shell

It is for trying things out and for tests, not for production: one broker, no
replication, data in memory unless --data-dir is given. Topics that a
client asks for and that do not exist are created with one partition.`,
		Args: exactArgs(0, "no arguments"),
		RunE: func(c *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(c.Context(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			return o.run(ctx, c)
		},
	}
	o.AddFlags(c.Flags())
	return c
}

// devTopic is one --topics entry.
type devTopic struct {
	name       string
	partitions int32
}

func parseDevTopics(specs []string) ([]devTopic, error) {
	var out []devTopic
	for _, s := range specs {
		name, parts, hasParts := strings.Cut(strings.TrimSpace(s), ":")
		t := devTopic{name: name, partitions: 1}
		if name == "" {
			return nil, usageError("--topics %q: a topic needs a name, as name:partitions", s)
		}
		if hasParts {
			n, err := strconv.ParseInt(parts, 10, 32)
			if err != nil || n < 1 {
				return nil, usageError("--topics %q: partitions must be a positive number", s)
			}
			t.partitions = int32(n)
		}
		out = append(out, t)
	}
	return out, nil
}

func (o *devKafkaOptions) run(ctx context.Context, c *cobra.Command) error {
	topics, err := parseDevTopics(o.topics)
	if err != nil {
		return err
	}
	if o.port < 0 || o.port > 65535 {
		return usageError("--port %d: must be 0..65535", o.port)
	}
	opts := []kfake.Opt{kfake.NumBrokers(1), kfake.Ports(o.port), kfake.AllowAutoTopicCreation(), kfake.DefaultNumPartitions(1)}
	if o.dataDir != "" {
		opts = append(opts, kfake.DataDir(o.dataDir))
	}
	// Seed topics grouped by partition count: SeedTopics takes one count.
	byParts := map[int32][]string{}
	for _, t := range topics {
		byParts[t.partitions] = append(byParts[t.partitions], t.name)
	}
	for _, n := range slices.Sorted(maps.Keys(byParts)) {
		opts = append(opts, kfake.SeedTopics(n, byParts[n]...))
	}
	cluster, err := kfake.NewCluster(opts...)
	if err != nil {
		return runtimeFailure(fmt.Errorf("start the broker: %w", err))
	}
	defer cluster.Close()
	addr := cluster.ListenAddrs()[0]
	out := c.OutOrStdout()
	fmt.Fprintf(out, "kafka broker listening on %s (in-process; SIGINT stops it)\n", addr)
	for _, t := range topics {
		fmt.Fprintf(out, "  topic %s: %d partition(s)\n", t.name, t.partitions)
	}
	if o.dataDir == "" {
		fmt.Fprintln(out, "  data is kept in memory and lost at exit (--data-dir keeps it)")
	}
	if o.ready != nil {
		o.ready(addr)
	}
	<-ctx.Done()
	fmt.Fprintln(out, "stopping the broker")
	return nil
}
