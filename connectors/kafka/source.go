package kafka

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/IBM/sarama"

	"github.com/eddy-stream/eddy/connectors/codec"
	"github.com/eddy-stream/eddy/pipeline"
)

func init() {
	pipeline.Default.RegisterSource(pipeline.SourcePlugin{
		Type:    "kafka",
		Summary: "reads JSON, CSV, text or raw values from Kafka topics; offsets live in eddy's checkpoints (exactly-once)",
		New:     func() pipeline.SourceConfig { c := defaultSourceConfig(); return &c },
	})
}

// The values of start_from, stop_at, isolation and format.
const (
	StartEarliest  = "earliest"
	StartLatest    = "latest"
	StartCommitted = "committed"
	StartTimestamp = "timestamp"

	StopLatest = "latest"

	ReadCommitted   = "read_committed"
	ReadUncommitted = "read_uncommitted"

	// FormatRaw makes each value a record {"value": "<the bytes>"}.
	FormatRaw codec.Format = "raw"
)

// SourceConfig is the `kafka` source's configuration.
type SourceConfig struct {
	// brokers, client_id, kafka_version, tls, sasl, dial_timeout.
	ClientConfig `yaml:",inline"`
	// Topics are the topics to read; exactly one of Topics and TopicPattern.
	Topics pipeline.StringList `yaml:"topics"`
	// TopicPattern is a regular expression matched against the whole topic
	// name; the topics it matches are found again at each discovery.
	TopicPattern string `yaml:"topic_pattern"`
	// GroupID is the consumer group the offsets of completed checkpoints
	// are committed to, for lag monitoring, and that start_from: committed
	// reads. eddy never joins the group.
	GroupID string `yaml:"group_id"`
	// StartFrom is where a fresh start (no checkpoint) reads from:
	// earliest, latest, committed (the group's offsets, earliest where it
	// has none) or timestamp (start_timestamp).
	StartFrom string `yaml:"start_from" enum:"earliest,latest,committed,timestamp"`
	// StartTimestamp is the time of start_from: timestamp, epoch ms or RFC
	// 3339: reading starts at the first record at or after it.
	StartTimestamp string `yaml:"start_timestamp"`
	// StopAt makes the source bounded: latest (the end of each partition
	// when the run first starts) or a timestamp (epoch ms or RFC 3339; the
	// records before it). Empty: unbounded.
	StopAt string `yaml:"stop_at"`
	// Isolation is read_committed (records of aborted transactions and of
	// open ones are not read) or read_uncommitted.
	Isolation string `yaml:"isolation" enum:"read_committed,read_uncommitted"`
	// Format is how values decode: json, csv, text or raw.
	Format codec.Format `yaml:"format" enum:"json,csv,text,raw"`
	// CSVDelimiter is the csv field separator.
	CSVDelimiter string `yaml:"csv_delimiter"`
	// Columns name the fields of a csv value, in order (csv has no header
	// row in Kafka).
	Columns []string `yaml:"columns"`
	// DiscoveryInterval is how often new partitions (and topics matching
	// topic_pattern) are looked for; 0 disables discovery. Bounded sources
	// do not discover.
	DiscoveryInterval pipeline.Duration `yaml:"discovery_interval"`
	// FetchMinBytes is the least data the broker waits for before it
	// answers a fetch (up to fetch_max_wait).
	FetchMinBytes int32 `yaml:"fetch_min_bytes"`
	// FetchDefaultBytes is the data asked for per partition and fetch.
	FetchDefaultBytes int32 `yaml:"fetch_default_bytes"`
	// FetchMaxWait is how long the broker may wait for fetch_min_bytes.
	FetchMaxWait pipeline.Duration `yaml:"fetch_max_wait"`
	// ChannelBuffer is the number of messages buffered per partition.
	ChannelBuffer int `yaml:"channel_buffer"`

	// Set by Validate: the compiled topic_pattern, start_timestamp and
	// stop_at in epoch ms, and whether stop_at is a timestamp.
	pattern         *regexp.Regexp
	startTS, stopTS int64
	stopAtTime      bool
}

func defaultSourceConfig() SourceConfig {
	return SourceConfig{
		ClientConfig:      defaultClientConfig(),
		StartFrom:         StartEarliest,
		Isolation:         ReadCommitted,
		Format:            codec.JSON,
		CSVDelimiter:      ",",
		DiscoveryInterval: pipeline.Duration(30 * time.Second),
		FetchMinBytes:     1,
		FetchDefaultBytes: 1 << 20,
		FetchMaxWait:      pipeline.Duration(500 * time.Millisecond),
		ChannelBuffer:     256,
	}
}

// Validate checks the keys and parses the timestamps and the pattern. The
// pipeline loader calls it once, after decoding the source's entry.
func (c *SourceConfig) Validate() error {
	var errs []error
	if err := c.ClientConfig.Validate(); err != nil {
		errs = append(errs, err)
	}
	switch {
	case len(c.Topics) == 0 && c.TopicPattern == "":
		errs = append(errs, pipeline.FieldErr("topics", "name the topics to read (topics: [orders]) or set topic_pattern"))
	case len(c.Topics) > 0 && c.TopicPattern != "":
		errs = append(errs, pipeline.FieldErr("topic_pattern", "set either topics or topic_pattern, not both"))
	case c.TopicPattern != "":
		re, err := regexp.Compile("^(?:" + c.TopicPattern + ")$")
		if err != nil {
			errs = append(errs, pipeline.FieldErr("topic_pattern", "%q is not a regular expression: %v", c.TopicPattern, err))
		}
		c.pattern = re
	}
	for _, t := range c.Topics {
		if t == "" {
			errs = append(errs, pipeline.FieldErr("topics", "a topic name is empty"))
		}
	}
	switch c.StartFrom {
	case StartEarliest, StartLatest:
	case StartCommitted:
		if c.GroupID == "" {
			errs = append(errs, pipeline.FieldErr("group_id", "start_from: committed reads the offsets of a consumer group: set group_id"))
		}
	case StartTimestamp:
		if c.StartTimestamp == "" {
			errs = append(errs, pipeline.FieldErr("start_timestamp", "start_from: timestamp needs start_timestamp (epoch ms or RFC 3339)"))
		}
	default:
		errs = append(errs, pipeline.FieldErr("start_from", "must be earliest, latest, committed or timestamp, not %q", c.StartFrom))
	}
	if c.StartTimestamp != "" {
		ts, err := parseTimestamp(c.StartTimestamp)
		switch {
		case c.StartFrom != StartTimestamp:
			errs = append(errs, pipeline.FieldErr("start_timestamp", "only applies to start_from: timestamp"))
		case err != nil:
			errs = append(errs, pipeline.FieldErr("start_timestamp", "%v", err))
		}
		c.startTS = ts
	}
	c.stopAtTime = false
	if c.StopAt != "" && c.StopAt != StopLatest {
		ts, err := parseTimestamp(c.StopAt)
		if err != nil {
			errs = append(errs, pipeline.FieldErr("stop_at", "must be latest or a timestamp: %v", err))
		}
		c.stopTS, c.stopAtTime = ts, true
	}
	switch c.Isolation {
	case ReadCommitted, ReadUncommitted:
	default:
		errs = append(errs, pipeline.FieldErr("isolation", "must be read_committed or read_uncommitted, not %q", c.Isolation))
	}
	switch c.Format {
	case codec.JSON, codec.Text, FormatRaw:
		if len(c.Columns) > 0 {
			errs = append(errs, pipeline.FieldErr("columns", "only applies to format csv"))
		}
	case codec.CSV:
		if len(c.Columns) == 0 {
			errs = append(errs, pipeline.FieldErr("columns", "format csv needs the names of the fields of a value, in order (columns: [id, name])"))
		}
	default:
		errs = append(errs, pipeline.FieldErr("format", "must be json, csv, text or raw, not %q", c.Format))
	}
	// The codec checks the delimiter.
	if err := (&codec.DecodeOptions{Format: codec.CSV, CSVDelimiter: c.CSVDelimiter}).Validate(); err != nil {
		errs = append(errs, err)
	}
	if c.DiscoveryInterval < 0 {
		errs = append(errs, pipeline.FieldErr("discovery_interval", "must be 0 (no discovery) or positive"))
	}
	if c.FetchMinBytes < 1 {
		errs = append(errs, pipeline.FieldErr("fetch_min_bytes", "must be at least 1"))
	}
	if c.FetchDefaultBytes < 1 {
		errs = append(errs, pipeline.FieldErr("fetch_default_bytes", "must be at least 1"))
	}
	if c.FetchMaxWait < pipeline.Duration(time.Millisecond) {
		errs = append(errs, pipeline.FieldErr("fetch_max_wait", "must be at least 1ms"))
	}
	if c.ChannelBuffer < 0 {
		errs = append(errs, pipeline.FieldErr("channel_buffer", "must be 0 or more"))
	}
	return errors.Join(errs...)
}

// parseTimestamp parses epoch milliseconds or an RFC 3339 time.
func parseTimestamp(s string) (int64, error) {
	if ms, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64); err == nil {
		if ms < 0 {
			return 0, fmt.Errorf("%q is negative: use epoch milliseconds or an RFC 3339 time", s)
		}
		return ms, nil
	}
	t, err := time.Parse(time.RFC3339Nano, strings.TrimSpace(s))
	if err != nil {
		return 0, fmt.Errorf("%q is neither epoch milliseconds nor an RFC 3339 time like 2024-05-01T12:00:00Z", s)
	}
	return t.UnixMilli(), nil
}

// Bounded is true with stop_at: the input ends at the stopping offsets.
// The pipeline compiler asks, to know whether the run ends by itself.
func (c *SourceConfig) Bounded() bool { return c.StopAt != "" }

// Guarantee is exactly-once: offsets are replayed from the checkpoint
// (`eddy explain` and the startup log combine it with the other components').
func (c *SourceConfig) Guarantee() pipeline.Guarantee { return pipeline.ExactlyOnce }

// Rescalable is true: a restore at another parallelism hands every old
// subtask's position to each new subtask (SourceContext.RestoredAll), which
// keeps the partitions it owns now.
func (c *SourceConfig) Rescalable() bool { return true }

// describedEntry is a PositionEntry as DescribePosition shows it.
type describedEntry struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	Next      int64  `json:"next"`
	Stop      *int64 `json:"stop,omitempty"`
}

// DescribePosition decodes a checkpointed position for `eddy state
// inspect` (pipeline.PositionDescriber): per partition of the subtask, the
// offset of the next record to read, and the stopping offset of a bounded
// source (stop_at), as {"topic", "partition", "next", "stop"}.
func (c *SourceConfig) DescribePosition(b []byte) (any, error) {
	entries, err := DecodePosition(b)
	if err != nil {
		return nil, err
	}
	out := make([]describedEntry, len(entries))
	for i, e := range entries {
		out[i] = describedEntry{Topic: e.Topic, Partition: e.Partition, Next: e.Next}
		if e.Stop != noStop {
			out[i].Stop = &e.Stop
		}
	}
	return out, nil
}

// NewSource returns the source of one subtask; the runtime calls it once
// per subtask before the run starts. It connects in Open.
func (c *SourceConfig) NewSource() (pipeline.Source, error) { return &source{cfg: c}, nil }

// isolation returns sarama's isolation level.
func (c *SourceConfig) isolation() sarama.IsolationLevel {
	if c.Isolation == ReadUncommitted {
		return sarama.ReadUncommitted
	}
	return sarama.ReadCommitted
}

// consumerConfig returns the sarama configuration of the source's client.
func (c *SourceConfig) consumerConfig() (*sarama.Config, error) {
	sc, err := c.saramaConfig()
	if err != nil {
		return nil, err
	}
	sc.Metadata.AllowAutoTopicCreation = false
	sc.Metadata.Full = c.TopicPattern != ""
	sc.Consumer.Return.Errors = true
	sc.Consumer.IsolationLevel = c.isolation()
	sc.Consumer.Fetch.Min = c.FetchMinBytes
	sc.Consumer.Fetch.Default = c.FetchDefaultBytes
	sc.Consumer.MaxWaitTime = c.FetchMaxWait.D()
	sc.ChannelBufferSize = c.ChannelBuffer
	sc.Consumer.Offsets.AutoCommit.Enable = false
	if err := sc.Validate(); err != nil {
		return nil, fmt.Errorf("kafka client settings: %w", err)
	}
	return sc, nil
}

// owner returns the subtask that reads partition p of topic at parallelism
// par: Flink's KafkaSourceEnumerator assignment, with FNV-32a as the topic
// hash. Partitions of a topic go round-robin from a topic-dependent start,
// so adding partitions never moves existing ones.
func owner(topic string, p int32, par int) int {
	h := uint32(2166136261)
	for i := 0; i < len(topic); i++ {
		h ^= uint32(topic[i])
		h *= 16777619
	}
	start := int64((h * 31) & 0x7fffffff)
	return int((start + int64(p)) % int64(par))
}
