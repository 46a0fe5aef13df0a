package kafka

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"

	_ "github.com/eddy-stream/eddy/connectors/file" // the file sink of the pipeline test
	"github.com/eddy-stream/eddy/connectors/internal/conntest"
	"github.com/eddy-stream/eddy/expr"
	"github.com/eddy-stream/eddy/internal/testkit"
	_ "github.com/eddy-stream/eddy/operators" // the set step of the pipeline test
	"github.com/eddy-stream/eddy/pipeline"
)

// --- producing test data ---

func testSaramaConfig() *sarama.Config {
	cfg := sarama.NewConfig()
	cfg.Version = sarama.V3_6_0_0
	cfg.Producer.Return.Successes = true
	cfg.Producer.RequiredAcks = sarama.WaitForAll
	cfg.Producer.Partitioner = sarama.NewManualPartitioner
	return cfg
}

// msg is a message for partition p of topic.
func msg(topic string, p int32, value string) *sarama.ProducerMessage {
	return &sarama.ProducerMessage{Topic: topic, Partition: p, Value: sarama.StringEncoder(value)}
}

// jsonMsgs returns n messages {"i": from..from+n-1} for partition p.
func jsonMsgs(topic string, p int32, from, n int) []*sarama.ProducerMessage {
	out := make([]*sarama.ProducerMessage, n)
	for i := range out {
		out[i] = msg(topic, p, fmt.Sprintf(`{"i":%d}`, from+i))
	}
	return out
}

// produce writes msgs, each in a request of its own, so that they land in
// record batches of their own.
func produce(t testing.TB, brokers []string, msgs ...*sarama.ProducerMessage) {
	t.Helper()
	p, err := sarama.NewSyncProducer(brokers, testSaramaConfig())
	require.NoError(t, err)
	defer p.Close()
	for _, m := range msgs {
		_, _, err := p.SendMessage(m)
		require.NoError(t, err)
	}
}

// produceTxn writes msgs in one transaction that it commits or aborts.
func produceTxn(t testing.TB, brokers []string, commit bool, msgs ...*sarama.ProducerMessage) {
	t.Helper()
	cfg := testSaramaConfig()
	cfg.Producer.Idempotent = true
	cfg.Producer.Transaction.ID = fmt.Sprintf("eddy-source-test-%d-%d", time.Now().UnixNano(), topicSeq.Add(1))
	cfg.Net.MaxOpenRequests = 1
	p, err := sarama.NewSyncProducer(brokers, cfg)
	require.NoError(t, err)
	defer p.Close()
	require.NoError(t, p.BeginTxn())
	require.NoError(t, p.SendMessages(msgs))
	if commit {
		require.NoError(t, p.CommitTxn())
	} else {
		require.NoError(t, p.AbortTxn())
	}
	// A broker writes the transaction markers after it answered: wait for
	// them, until the last stable offset is the high-water mark again.
	admin := testAdmin(t, brokers)
	parts := map[string]map[int32]int64{}
	for _, m := range msgs {
		if parts[m.Topic] == nil {
			parts[m.Topic] = map[int32]int64{}
		}
		parts[m.Topic][m.Partition] = sarama.OffsetNewest
	}
	require.Eventually(t, func() bool {
		hwm, err1 := admin.ListOffsets(parts, nil)
		lso, err2 := admin.ListOffsets(parts, &sarama.ListOffsetsOptions{IsolationLevel: sarama.ReadCommitted})
		if err1 != nil || err2 != nil {
			return false
		}
		for topic, ps := range parts {
			for p := range ps {
				h, l := hwm[topic][p], lso[topic][p]
				if h == nil || l == nil || !noError(h.Err) || !noError(l.Err) || h.Offset != l.Offset {
					return false
				}
			}
		}
		return true
	}, time.Minute, 10*time.Millisecond, "the transaction markers are written")
}

// noError tells whether a sarama error field holds no error.
func noError(err error) bool { return err == nil || errors.Is(err, sarama.ErrNoError) }

func testAdmin(t testing.TB, brokers []string) sarama.ClusterAdmin {
	t.Helper()
	admin, err := sarama.NewClusterAdmin(brokers, testSaramaConfig())
	require.NoError(t, err)
	t.Cleanup(func() { _ = admin.Close() })
	return admin
}

// --- driving the source ---

func loadKafkaSource(t testing.TB, brokers []string, body string) *SourceConfig {
	t.Helper()
	cfg, err := conntest.LoadSource(t, "kafka", fmt.Sprintf("brokers: [%s]\n%s", strings.Join(brokers, ", "), body))
	require.NoError(t, err)
	return cfg.(*SourceConfig)
}

// openKafkaSource opens subtask k of p, restored from restored (same
// parallelism) or restoredAll (another one), and returns it with the
// position Open set.
func openKafkaSource(t testing.TB, cfg *SourceConfig, k, p int, restored []byte, restoredAll [][]byte) (*source, []byte) {
	t.Helper()
	src, err := cfg.NewSource()
	require.NoError(t, err)
	sc := &pipeline.SourceContext{SubtaskInfo: conntest.Info("src", k, p), Restored: restored, RestoredAll: restoredAll}
	require.NoError(t, src.Open(t.Context(), sc))
	t.Cleanup(func() { _ = src.Close(context.Background()) })
	return src.(*source), sc.Position
}

// readBatch calls Read once; it blocks until the source has something.
func readBatch(t testing.TB, src pipeline.Source) conntest.Batch {
	t.Helper()
	var b pipeline.ReadBatch
	err := src.Read(t.Context(), &b)
	return conntest.Batch{Records: b.Records, Position: b.Position, Split: b.Split, SplitDone: b.SplitDone, Failed: b.Failed, Err: err}
}

// readAtLeast reads until the batches hold at least n records and failed
// records; it fails on an error.
func readAtLeast(t testing.TB, src pipeline.Source, n int) []conntest.Batch {
	t.Helper()
	var out []conntest.Batch
	for got := 0; got < n; {
		b := readBatch(t, src)
		require.NoError(t, b.Err)
		out = append(out, b)
		got += len(b.Records) + len(b.Failed)
	}
	return out
}

// drainKafka reads until io.EOF.
func drainKafka(t testing.TB, src pipeline.Source) []conntest.Batch {
	t.Helper()
	var out []conntest.Batch
	for {
		b := readBatch(t, src)
		if errors.Is(b.Err, io.EOF) {
			return append(out, b)
		}
		require.NoError(t, b.Err)
		out = append(out, b)
	}
}

// po identifies a record by partition and offset.
type po struct {
	P int32
	O int64
}

// offsets returns the (partition, offset) of every record, failing on a
// duplicate, and checks that the batch's metadata is consistent.
func offsets(t testing.TB, batches ...[]conntest.Batch) map[po]map[string]any {
	t.Helper()
	out := map[po]map[string]any{}
	for _, bs := range batches {
		for _, b := range bs {
			for _, r := range b.Records {
				require.NotNil(t, r.Meta)
				k := po{r.Meta.Partition, r.Meta.Offset}
				require.NotContains(t, out, k, "record read twice")
				out[k] = r.Fields
			}
		}
	}
	return out
}

func keys(m map[po]map[string]any) []po {
	ks := make([]po, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.SortFunc(ks, func(a, b po) int {
		if a.P != b.P {
			return int(a.P - b.P)
		}
		return int(a.O - b.O)
	})
	return ks
}

// ints returns the field i of the records, sorted.
func ints(m map[po]map[string]any) []int {
	var out []int
	for _, f := range m {
		out = append(out, int(f["i"].(int64)))
	}
	slices.Sort(out)
	return out
}

func seq(from, to int) []int {
	out := []int{}
	for i := from; i < to; i++ {
		out = append(out, i)
	}
	return out
}

// positionOf decodes a position into next offsets by partition.
func positionOf(t testing.TB, pos []byte) map[po]int64 {
	t.Helper()
	entries, err := DecodePosition(pos)
	require.NoError(t, err)
	out := map[po]int64{}
	for _, e := range entries {
		out[po{e.Partition, 0}] = e.Next
	}
	return out
}

// --- tests ---

func TestKafkaSourceConfig(t *testing.T) {
	brokers := []string{"localhost:9092"}
	cfg := loadKafkaSource(t, brokers, "topics: [a]")
	require.Equal(t, StartEarliest, cfg.StartFrom)
	require.Equal(t, ReadCommitted, cfg.Isolation)
	require.False(t, cfg.Bounded())
	require.True(t, cfg.Rescalable())
	require.Equal(t, pipeline.ExactlyOnce, cfg.Guarantee())
	require.True(t, loadKafkaSource(t, brokers, "topics: a\nstop_at: latest").Bounded())
	ts := loadKafkaSource(t, brokers, "topics: a\nstart_from: timestamp\nstart_timestamp: 2024-05-01T12:00:00Z\nstop_at: 1714570000000")
	require.Equal(t, time.Date(2024, 5, 1, 12, 0, 0, 0, time.UTC).UnixMilli(), ts.startTS)
	require.Equal(t, int64(1714570000000), ts.stopTS)

	bad := map[string]string{
		"":                                                            "topics",
		"topics: [a]\ntopic_pattern: b.*":                             "topic_pattern",
		"topic_pattern: '('":                                          "topic_pattern",
		"topics: [a]\nstart_from: newest":                             "start_from",
		"topics: [a]\nstart_from: committed":                          "group_id",
		"topics: [a]\nstart_from: timestamp":                          "start_timestamp",
		"topics: [a]\nstart_timestamp: 1":                             "start_timestamp",
		"topics: [a]\nstop_at: tomorrow":                              "stop_at",
		"topics: [a]\nisolation: serializable":                        "isolation",
		"topics: [a]\nformat: avro":                                   "format",
		"topics: [a]\nformat: csv":                                    "columns",
		"topics: [a]\ncolumns: [x]":                                   "columns",
		"topics: [a]\ndiscovery_interval: -1s":                        "discovery_interval",
		"topics: [a]\nfetch_min_bytes: 0":                             "fetch_min_bytes",
		"topics: [a]\nfetch_max_wait: 0s":                             "fetch_max_wait",
		"topics: [a]\nformat: csv\ncolumns: [x]\ncsv_delimiter: ';;'": "csv_delimiter",
	}
	for body, key := range bad {
		_, err := conntest.LoadSource(t, "kafka", "brokers: [localhost:9092]\n"+body)
		require.Error(t, err, body)
		require.Contains(t, err.Error(), key, body)
	}
}

func TestKafkaSourcePosition(t *testing.T) {
	entries := []PositionEntry{{Topic: "a", Partition: 0, Next: 5, Stop: -1}, {Topic: "bb", Partition: 7, Next: 1 << 40, Stop: 1<<40 + 3}}
	b := EncodePosition(entries)
	got, err := DecodePosition(b)
	require.NoError(t, err)
	require.Equal(t, entries, got)
	empty, err := DecodePosition(EncodePosition(nil))
	require.NoError(t, err)
	require.Empty(t, empty)
	for i := range len(b) - 1 {
		_, err := DecodePosition(b[:i])
		require.Error(t, err, "truncated at %d", i)
	}
	_, err = DecodePosition(append(slices.Clone(b), 0))
	require.Error(t, err)
}

// DescribePosition shows a position as JSON for eddy state inspect: stop
// only for a bounded source's partitions.
func TestKafkaSourceDescribePosition(t *testing.T) {
	var d pipeline.PositionDescriber = &SourceConfig{}
	v, err := d.DescribePosition(EncodePosition([]PositionEntry{
		{Topic: "a", Partition: 0, Next: 5, Stop: -1}, {Topic: "bb", Partition: 7, Next: 1 << 40, Stop: 1<<40 + 3}}))
	require.NoError(t, err)
	b, err := json.Marshal(v)
	require.NoError(t, err)
	require.JSONEq(t, `[{"topic": "a", "partition": 0, "next": 5}, {"topic": "bb", "partition": 7, "next": 1099511627776, "stop": 1099511627779}]`, string(b))
	_, err = d.DescribePosition([]byte("{}"))
	require.ErrorContains(t, err, "kafka source position is corrupt")
}

// Partitions are spread over the subtasks, and adding partitions moves none.
func TestKafkaSourceOwner(t *testing.T) {
	for par := 1; par <= 4; par++ {
		counts := make([]int, par)
		for p := range int32(8) {
			o := owner("orders", p, par)
			require.GreaterOrEqual(t, o, 0)
			require.Less(t, o, par)
			counts[o]++
			require.Equal(t, (owner("orders", 0, par)+int(p))%par, o, "round robin from the topic's start")
		}
		for _, c := range counts {
			require.InDelta(t, 8/par, c, 1)
		}
	}
}

// Every record of a 3-partition topic is read exactly once, at parallelism
// 1 and 2, with its metadata; each partition is one split that ends once.
func TestKafkaSourceReadsAllPartitions(t *testing.T) {
	brokers := testBrokers(t)
	topic := testTopic(t, brokers, 3)
	var msgs []*sarama.ProducerMessage
	for p := range int32(3) {
		msgs = append(msgs, jsonMsgs(topic, p, int(p)*100, 10)...)
	}
	produce(t, brokers, msgs...)
	cfg := loadKafkaSource(t, brokers, fmt.Sprintf("topics: [%s]\nstop_at: latest", topic))

	for _, par := range []int{1, 2} {
		t.Run(strconv.Itoa(par), func(t *testing.T) {
			var all [][]conntest.Batch
			for k := range par {
				src, _ := openKafkaSource(t, cfg, k, par, nil, nil)
				batches := drainKafka(t, src)
				splits := map[int32]int{}
				done := map[int]int{}
				for _, b := range batches {
					for _, r := range b.Records {
						if s, ok := splits[r.Meta.Partition]; ok {
							require.Equal(t, s, b.Split, "a partition is one split")
						}
						splits[r.Meta.Partition] = b.Split
					}
					if b.SplitDone {
						done[b.Split]++
					}
					if len(b.Records) > 0 {
						require.NotNil(t, b.Position)
					}
				}
				for p, s := range splits {
					require.Equal(t, 1, done[s], "partition %d ends once", p)
				}
				all = append(all, batches)
			}
			got := offsets(t, all...)
			require.Len(t, got, 30)
			want := []int{}
			for p := range 3 {
				want = append(want, seq(p*100, p*100+10)...)
			}
			require.Equal(t, want, ints(got))
			for k, f := range got {
				require.Equal(t, int(k.P)*100+int(k.O), int(f["i"].(int64)), "partition and offset match the value")
			}
		})
	}
}

// TestKafkaSourcePendingRecords: after each batch the pending gauge is
// what the partitions read so far have between their next offset and
// their high watermark, and 0 once everything is read.
func TestKafkaSourcePendingRecords(t *testing.T) {
	brokers := testBrokers(t)
	topic := testTopic(t, brokers, 2)
	const perPartition = 1500
	produce(t, brokers, append(jsonMsgs(topic, 0, 0, perPartition), jsonMsgs(topic, 1, 0, perPartition)...)...)
	cfg := loadKafkaSource(t, brokers, fmt.Sprintf("topics: [%s]\nstart_from: earliest", topic))
	src, _ := openKafkaSource(t, cfg, 0, 1, nil, nil)
	require.NotNil(t, src.pending)
	next := map[int32]int64{}
	sawPending := false
	for read := 0; read < 2*perPartition; {
		b := readBatch(t, src)
		require.NoError(t, b.Err)
		for _, r := range b.Records {
			next[r.Meta.Partition] = r.Meta.Offset + 1
		}
		read += len(b.Records)
		var want int64
		for _, n := range next {
			want += perPartition - n
		}
		var m dto.Metric
		require.NoError(t, src.pending.Write(&m))
		require.Equal(t, float64(want), m.GetGauge().GetValue(), "after %d records", read)
		sawPending = sawPending || want > 0
	}
	require.True(t, sawPending, "a batch left records pending (at most %d per batch)", maxBatch)
}

// Key, headers, partition, offset and broker timestamp are in Meta.
func TestKafkaSourceMetadata(t *testing.T) {
	brokers := testBrokers(t)
	topic := testTopic(t, brokers, 2)
	ts := time.UnixMilli(1700000000123)
	produce(t, brokers,
		&sarama.ProducerMessage{Topic: topic, Partition: 1, Key: sarama.StringEncoder("k1"), Value: sarama.StringEncoder(`{"n":1}`),
			Headers: []sarama.RecordHeader{{Key: []byte("h"), Value: []byte("v")}, {Key: []byte("trace"), Value: []byte("42")}}, Timestamp: ts},
		&sarama.ProducerMessage{Topic: topic, Partition: 1, Value: sarama.StringEncoder(`{"n":2}`), Timestamp: ts.Add(time.Second)},
	)
	cfg := loadKafkaSource(t, brokers, fmt.Sprintf("topics: [%s]\nstop_at: latest", topic))
	src, _ := openKafkaSource(t, cfg, 0, 1, nil, nil)
	var recs []pipeline.Record
	for _, b := range drainKafka(t, src) {
		recs = append(recs, b.Records...)
	}
	require.Len(t, recs, 2)
	require.Equal(t, map[string]any{"n": int64(1)}, recs[0].Fields)
	require.Equal(t, pipeline.NoTime, recs[0].Time)
	require.Equal(t, &expr.Meta{Key: []byte("k1"), Headers: map[string]string{"h": "v", "trace": "42"}, Partition: 1, Offset: 0, Timestamp: ts.UnixMilli()}, recs[0].Meta)
	require.Equal(t, &expr.Meta{Partition: 1, Offset: 1, Timestamp: ts.UnixMilli() + 1000}, recs[1].Meta)
	require.Nil(t, recs[1].Meta.Key)
	require.Nil(t, recs[1].Meta.Headers)
}

func TestKafkaSourceFormats(t *testing.T) {
	tests := []struct {
		name   string
		keys   string
		values []string
		want   []map[string]any
		failed []string // the raw values that did not decode
	}{
		{"json", "", []string{`{"id":1,"t":21.5}`, `{"id":`, ` {"nested":{"a":[1,2]}} `, ``},
			[]map[string]any{{"id": int64(1), "t": 21.5}, {"nested": map[string]any{"a": []any{int64(1), int64(2)}}}, {}}, []string{`{"id":`}},
		{"json not an object", "", []string{`[1,2]`, `{"ok":true}`},
			[]map[string]any{{"ok": true}}, []string{`[1,2]`}},
		{"csv", "format: csv\ncolumns: [id, name]", []string{"1,\"a, b\"", "2,x\n", "3"},
			[]map[string]any{{"id": "1", "name": "a, b"}, {"id": "2", "name": "x"}}, []string{"3"}},
		{"csv delimiter", "format: csv\ncolumns: [a, 'b;c']\ncsv_delimiter: ';'", []string{"1;2"},
			[]map[string]any{{"a": "1", "b;c": "2"}}, nil},
		{"text", "format: text", []string{"one", "", "three\n"},
			[]map[string]any{{"line": "one"}, {"line": ""}, {"line": "three\n"}}, nil},
		{"raw", "format: raw", []string{"\x00\x01bytes", "{not json"},
			[]map[string]any{{"value": "\x00\x01bytes"}, {"value": "{not json"}}, nil},
	}
	brokers := testBrokers(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			topic := testTopic(t, brokers, 1)
			var msgs []*sarama.ProducerMessage
			for _, v := range tt.values {
				msgs = append(msgs, msg(topic, 0, v))
			}
			produce(t, brokers, msgs...)
			cfg := loadKafkaSource(t, brokers, fmt.Sprintf("topics: [%s]\nstop_at: latest\n%s", topic, tt.keys))
			src, _ := openKafkaSource(t, cfg, 0, 1, nil, nil)
			batches := drainKafka(t, src)
			require.Equal(t, tt.want, conntest.Fields(batches))
			var failed []string
			for _, f := range conntest.Failures(batches) {
				failed = append(failed, f.Fields["raw"].(string))
				require.Contains(t, f.Err, fmt.Sprintf("kafka %s[0] offset ", topic))
				require.Regexp(t, `invalid (JSON|CSV)`, f.Err)
			}
			require.Equal(t, tt.failed, failed)
			// A value that does not decode moves the position past it.
			require.Equal(t, int64(len(tt.values)), positionOf(t, conntest.LastPosition(batches))[po{0, 0}])
		})
	}
}

func TestKafkaSourceStartFrom(t *testing.T) {
	brokers := testBrokers(t)

	t.Run("earliest", func(t *testing.T) {
		topic := testTopic(t, brokers, 1)
		produce(t, brokers, jsonMsgs(topic, 0, 0, 5)...)
		cfg := loadKafkaSource(t, brokers, fmt.Sprintf("topics: [%s]\nstop_at: latest\nstart_from: earliest", topic))
		src, pos := openKafkaSource(t, cfg, 0, 1, nil, nil)
		require.Equal(t, int64(0), positionOf(t, pos)[po{0, 0}])
		require.Equal(t, seq(0, 5), ints(offsets(t, drainKafka(t, src))))
	})

	t.Run("latest", func(t *testing.T) {
		topic := testTopic(t, brokers, 1)
		produce(t, brokers, jsonMsgs(topic, 0, 0, 5)...)
		cfg := loadKafkaSource(t, brokers, fmt.Sprintf("topics: [%s]\nstart_from: latest", topic))
		src, pos := openKafkaSource(t, cfg, 0, 1, nil, nil)
		// The resolved start is in the position before any record.
		require.Equal(t, int64(5), positionOf(t, pos)[po{0, 0}])
		produce(t, brokers, jsonMsgs(topic, 0, 5, 3)...)
		require.Equal(t, seq(5, 8), ints(offsets(t, readAtLeast(t, src, 3))))
	})

	t.Run("committed", func(t *testing.T) {
		topic := testTopic(t, brokers, 2)
		produce(t, brokers, append(jsonMsgs(topic, 0, 0, 5), jsonMsgs(topic, 1, 100, 5)...)...)
		group := topic + "-group"
		_, err := testAdmin(t, brokers).AlterConsumerGroupOffsets(group,
			map[string]map[int32]sarama.OffsetAndMetadata{topic: {0: {Offset: 3, LeaderEpoch: -1}}}, nil)
		require.NoError(t, err)
		cfg := loadKafkaSource(t, brokers, fmt.Sprintf("topics: [%s]\nstop_at: latest\nstart_from: committed\ngroup_id: %s", topic, group))
		src, _ := openKafkaSource(t, cfg, 0, 1, nil, nil)
		// Partition 0 from its committed offset, partition 1 (nothing
		// committed) from the earliest.
		require.Equal(t, append(seq(3, 5), seq(100, 105)...), ints(offsets(t, drainKafka(t, src))))
	})

	t.Run("timestamp", func(t *testing.T) {
		topic := testTopic(t, brokers, 2)
		base := time.UnixMilli(1700000000000)
		var msgs []*sarama.ProducerMessage
		for i := range 6 {
			m := msg(topic, int32(i%2), fmt.Sprintf(`{"i":%d}`, i))
			m.Timestamp = base.Add(time.Duration(i) * time.Second)
			msgs = append(msgs, m)
		}
		produce(t, brokers, msgs...)
		start := base.Add(3 * time.Second).UTC().Format(time.RFC3339Nano)
		cfg := loadKafkaSource(t, brokers, fmt.Sprintf("topics: [%s]\nstop_at: latest\nstart_from: timestamp\nstart_timestamp: %s", topic, start))
		src, _ := openKafkaSource(t, cfg, 0, 1, nil, nil)
		require.Equal(t, seq(3, 6), ints(offsets(t, drainKafka(t, src))))
	})
}

// stop_at: latest fixes the end at the first start: what is produced later
// is not read, and the source ends with io.EOF.
func TestKafkaSourceStopAtLatest(t *testing.T) {
	brokers := testBrokers(t)
	topic := testTopic(t, brokers, 2)
	produce(t, brokers, append(jsonMsgs(topic, 0, 0, 4), jsonMsgs(topic, 1, 4, 4)...)...)
	cfg := loadKafkaSource(t, brokers, fmt.Sprintf("topics: [%s]\nstop_at: latest", topic))
	src, pos := openKafkaSource(t, cfg, 0, 1, nil, nil)
	produce(t, brokers, jsonMsgs(topic, 0, 100, 3)...)
	produce(t, brokers, jsonMsgs(topic, 1, 200, 3)...)
	batches := drainKafka(t, src)
	require.Equal(t, seq(0, 8), ints(offsets(t, batches)))
	last := batches[len(batches)-1]
	require.ErrorIs(t, last.Err, io.EOF)

	entries, err := DecodePosition(pos)
	require.NoError(t, err)
	for _, e := range entries {
		require.Equal(t, int64(4), e.Stop, "the stop offsets are in the position from the start")
	}
	// A restore from the end reads nothing more: the stop offsets were kept.
	src2, _ := openKafkaSource(t, cfg, 0, 1, conntest.LastPosition(batches), nil)
	require.Empty(t, offsets(t, drainKafka(t, src2)))
}

func TestKafkaSourceStopAtTimestamp(t *testing.T) {
	brokers := testBrokers(t)
	topic := testTopic(t, brokers, 1)
	base := time.UnixMilli(1700000000000)
	var msgs []*sarama.ProducerMessage
	for i := range 5 {
		m := msg(topic, 0, fmt.Sprintf(`{"i":%d}`, i))
		m.Timestamp = base.Add(time.Duration(i) * time.Second)
		msgs = append(msgs, m)
	}
	produce(t, brokers, msgs...)
	cfg := loadKafkaSource(t, brokers, fmt.Sprintf("topics: [%s]\nstop_at: %d", topic, base.Add(3*time.Second).UnixMilli()))
	src, _ := openKafkaSource(t, cfg, 0, 1, nil, nil)
	require.Equal(t, seq(0, 3), ints(offsets(t, drainKafka(t, src))))
}

// Under read_committed the last offsets before the stop offset can be a
// transaction marker or aborted records, which the consumer never hands
// out: the source still ends.
func TestKafkaSourceStopAtTransactionTail(t *testing.T) {
	brokers := testBrokers(t)
	for _, tc := range []struct {
		name   string
		commit bool
		want   []int
	}{
		{"committed", true, seq(0, 5)},
		{"aborted", false, seq(0, 3)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			topic := testTopic(t, brokers, 1)
			produce(t, brokers, jsonMsgs(topic, 0, 0, 3)...)
			produceTxn(t, brokers, tc.commit, jsonMsgs(topic, 0, 3, 2)...)
			cfg := loadKafkaSource(t, brokers, fmt.Sprintf("topics: [%s]\nstop_at: latest\nfetch_max_wait: 50ms", topic))
			src, pos := openKafkaSource(t, cfg, 0, 1, nil, nil)
			entries, err := DecodePosition(pos)
			require.NoError(t, err)
			require.Equal(t, int64(6), entries[0].Stop, "3 records, 2 transactional ones and the marker")
			batches := drainKafka(t, src)
			require.Equal(t, tc.want, ints(offsets(t, batches)))
			require.Equal(t, int64(6), positionOf(t, conntest.LastPosition(batches))[po{0, 0}], "the position is at the stop offset")
			done := 0
			for _, b := range batches {
				if b.SplitDone {
					done++
				}
			}
			require.Equal(t, 1, done)
		})
	}
}

// read_committed (the default) skips aborted records; read_uncommitted
// reads them.
func TestKafkaSourceIsolation(t *testing.T) {
	brokers := testBrokers(t)
	topic := testTopic(t, brokers, 1)
	produce(t, brokers, jsonMsgs(topic, 0, 0, 2)...)
	produceTxn(t, brokers, false, jsonMsgs(topic, 0, 100, 2)...)
	produceTxn(t, brokers, true, jsonMsgs(topic, 0, 2, 2)...)
	produce(t, brokers, jsonMsgs(topic, 0, 4, 2)...)
	for iso, want := range map[string][]int{
		ReadCommitted:   seq(0, 6),
		ReadUncommitted: append(seq(0, 6), 100, 101),
	} {
		t.Run(iso, func(t *testing.T) {
			cfg := loadKafkaSource(t, brokers, fmt.Sprintf("topics: [%s]\nstop_at: latest\nisolation: %s", topic, iso))
			src, _ := openKafkaSource(t, cfg, 0, 1, nil, nil)
			require.Equal(t, want, ints(offsets(t, drainKafka(t, src))))
		})
	}
}

// A source reopened from a position continues exactly after it.
func TestKafkaSourceRestore(t *testing.T) {
	brokers := testBrokers(t)
	topic := testTopic(t, brokers, 2)
	produce(t, brokers, append(jsonMsgs(topic, 0, 0, 20), jsonMsgs(topic, 1, 100, 20)...)...)
	// Small fetches: the first reads get a part of the records.
	cfg := loadKafkaSource(t, brokers, fmt.Sprintf("topics: [%s]\nstop_at: latest\nfetch_default_bytes: 100", topic))
	src, _ := openKafkaSource(t, cfg, 0, 1, nil, nil)
	first := readAtLeast(t, src, 1)
	pos := conntest.LastPosition(first)
	require.NoError(t, src.Close(context.Background()))

	src2, _ := openKafkaSource(t, cfg, 0, 1, pos, nil)
	rest := drainKafka(t, src2)
	got := offsets(t, first, rest) // fails on a duplicate
	require.Len(t, got, 40)
	next := positionOf(t, pos)
	for k := range offsets(t, rest) {
		require.GreaterOrEqual(t, k.O, next[po{k.P, 0}], "read again after the restore: %v", k)
	}
}

// Positions of 2 subtasks restore at parallelism 3: the new subtasks
// together read everything after the positions, once.
func TestKafkaSourceRescale(t *testing.T) {
	brokers := testBrokers(t)
	topic := testTopic(t, brokers, 4)
	var msgs []*sarama.ProducerMessage
	for p := range int32(4) {
		msgs = append(msgs, jsonMsgs(topic, p, int(p)*100, 10)...)
	}
	produce(t, brokers, msgs...)
	cfg := loadKafkaSource(t, brokers, fmt.Sprintf("topics: [%s]\nstop_at: latest\nfetch_default_bytes: 100", topic))

	var before [][]conntest.Batch
	var positions [][]byte
	next := map[po]int64{}
	for k := range 2 {
		src, _ := openKafkaSource(t, cfg, k, 2, nil, nil)
		bs := readAtLeast(t, src, 1)
		before = append(before, bs)
		pos := conntest.LastPosition(bs)
		positions = append(positions, pos)
		for p, n := range positionOf(t, pos) {
			next[p] = n
		}
		require.NoError(t, src.Close(context.Background()))
	}
	require.Len(t, next, 4, "the positions cover every partition")

	var after [][]conntest.Batch
	for k := range 3 {
		src, _ := openKafkaSource(t, cfg, k, 3, nil, positions)
		after = append(after, drainKafka(t, src))
	}
	got := offsets(t, append(before, after...)...) // fails on a duplicate
	require.Len(t, got, 40)
	for k := range offsets(t, after...) {
		require.GreaterOrEqual(t, k.O, next[po{k.P, 0}], "read again after the rescale: %v", k)
	}
}

// Partitions added to a topic while the source runs are found and read
// from their start.
func TestKafkaSourceDiscovery(t *testing.T) {
	brokers := testBrokers(t)
	topic := testTopic(t, brokers, 1)
	produce(t, brokers, jsonMsgs(topic, 0, 0, 3)...)
	cfg := loadKafkaSource(t, brokers, fmt.Sprintf("topics: [%s]\ndiscovery_interval: 100ms", topic))
	src, _ := openKafkaSource(t, cfg, 0, 1, nil, nil)
	got := readAtLeast(t, src, 3)
	require.NoError(t, testAdmin(t, brokers).CreatePartitions(topic, 3, nil, false))
	produce(t, brokers, append(jsonMsgs(topic, 1, 100, 2), jsonMsgs(topic, 2, 200, 2)...)...)
	got = append(got, readAtLeast(t, src, 4)...)
	require.Equal(t, []int{0, 1, 2, 100, 101, 200, 201}, ints(offsets(t, got)))
	// The new partitions are splits of their own and in the position.
	splits := map[int32]int{}
	for _, b := range got {
		for _, r := range b.Records {
			splits[r.Meta.Partition] = b.Split
		}
	}
	require.Len(t, splits, 3)
	require.Len(t, positionOf(t, conntest.LastPosition(got)), 3)
}

// A topic_pattern source reads the matching topics, also those created
// while it runs.
func TestKafkaSourceTopicPattern(t *testing.T) {
	brokers := testBrokers(t)
	prefix := fmt.Sprintf("eddy-pattern-%d", time.Now().UnixNano())
	admin := testAdmin(t, brokers)
	create := func(name string) {
		require.NoError(t, admin.CreateTopic(name, &sarama.TopicDetail{NumPartitions: 1, ReplicationFactor: 1}, false))
	}
	a, b, other := prefix+".a", prefix+".b", prefix+"-other"
	create(a)
	create(other)
	produce(t, brokers, append(jsonMsgs(a, 0, 0, 2), jsonMsgs(other, 0, 50, 2)...)...)
	cfg := loadKafkaSource(t, brokers, fmt.Sprintf("topic_pattern: '%s[.].*'\ndiscovery_interval: 100ms", prefix))
	src, _ := openKafkaSource(t, cfg, 0, 1, nil, nil)
	got := readAtLeast(t, src, 2)
	create(b)
	produce(t, brokers, jsonMsgs(b, 0, 10, 2)...)
	got = append(got, readAtLeast(t, src, 2)...)
	topics := map[string]bool{}
	entries, err := DecodePosition(conntest.LastPosition(got))
	require.NoError(t, err)
	for _, e := range entries {
		topics[e.Topic] = true
	}
	require.Equal(t, map[string]bool{a: true, b: true}, topics)
	var is []int
	for _, f := range conntest.Fields(got) {
		is = append(is, int(f["i"].(int64)))
	}
	slices.Sort(is)
	require.Equal(t, []int{0, 1, 10, 11}, is)
}

// On a completed checkpoint the offsets of its position are committed to
// group_id.
func TestKafkaSourceCommitsOffsets(t *testing.T) {
	brokers := testBrokers(t)
	topic := testTopic(t, brokers, 2)
	produce(t, brokers, append(jsonMsgs(topic, 0, 0, 3), jsonMsgs(topic, 1, 100, 5)...)...)
	group := topic + "-group"
	cfg := loadKafkaSource(t, brokers, fmt.Sprintf("topics: [%s]\nstop_at: latest\ngroup_id: %s", topic, group))
	src, _ := openKafkaSource(t, cfg, 0, 1, nil, nil)
	batches := drainKafka(t, src)
	pos := conntest.LastPosition(batches)
	require.NoError(t, src.CheckpointComplete(t.Context(), 1, pos))

	resp, err := testAdmin(t, brokers).ListConsumerGroupOffsets(group, map[string][]int32{topic: {0, 1}})
	require.NoError(t, err)
	for p, want := range map[int32]int64{0: 3, 1: 5} {
		blk := resp.GetBlock(topic, p)
		require.NotNil(t, blk)
		require.Equal(t, want, blk.Offset, "partition %d", p)
	}
	// Reading the group back gives the same start.
	cfg2 := loadKafkaSource(t, brokers, fmt.Sprintf("topics: [%s]\nstart_from: committed\ngroup_id: %s", topic, group))
	_, start := openKafkaSource(t, cfg2, 0, 1, nil, nil)
	require.Equal(t, map[po]int64{{0, 0}: 3, {1, 0}: 5}, positionOf(t, start))
}

// A restored offset that the partition no longer has fails Open with a
// message that says what to do.
func TestKafkaSourceRestoredOffsetGone(t *testing.T) {
	brokers := testBrokers(t)
	topic := testTopic(t, brokers, 1)
	produce(t, brokers, jsonMsgs(topic, 0, 0, 3)...)
	cfg := loadKafkaSource(t, brokers, fmt.Sprintf("topics: [%s]", topic))
	src, err := cfg.NewSource()
	require.NoError(t, err)
	pos := EncodePosition([]PositionEntry{{Topic: topic, Partition: 0, Next: 1000, Stop: noStop}})
	err = src.Open(t.Context(), &pipeline.SourceContext{SubtaskInfo: conntest.Info("src", 0, 1), Restored: pos})
	require.Error(t, err)
	require.Contains(t, err.Error(), "offset 1000")
	require.Contains(t, err.Error(), "restore an earlier checkpoint")
}

// A topic that does not exist fails Open with a message that says so.
func TestKafkaSourceMissingTopic(t *testing.T) {
	brokers := testBrokers(t)
	cfg := loadKafkaSource(t, brokers, "topics: [eddy-no-such-topic-"+strconv.FormatInt(time.Now().UnixNano(), 10)+"]")
	src, err := cfg.NewSource()
	require.NoError(t, err)
	err = src.Open(t.Context(), &pipeline.SourceContext{SubtaskInfo: conntest.Info("src", 0, 1)})
	require.Error(t, err)
	require.Contains(t, err.Error(), "does not exist")
}

// Read returns once its context is done, and Close stops everything.
func TestKafkaSourceReadCancel(t *testing.T) {
	brokers := testBrokers(t)
	topic := testTopic(t, brokers, 1)
	cfg := loadKafkaSource(t, brokers, fmt.Sprintf("topics: [%s]", topic))
	src, _ := openKafkaSource(t, cfg, 0, 1, nil, nil)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error)
	go func() { done <- src.Read(ctx, &pipeline.ReadBatch{}) }()
	cancel()
	require.ErrorIs(t, testkit.WaitFor(t, done, "Read to return after its context was cancelled"), context.Canceled)
	require.NoError(t, src.Close(context.Background()))
}

// A whole pipeline: kafka (bounded) -> set from metadata -> file sink; the
// run ends by itself once the stop offsets are reached.
func TestKafkaSourcePipeline(t *testing.T) {
	brokers := testBrokers(t)
	topic := testTopic(t, brokers, 3)
	var msgs []*sarama.ProducerMessage
	for p := range int32(3) {
		for i := range 4 {
			m := msg(topic, p, fmt.Sprintf(`{"i":%d}`, int(p)*10+i))
			m.Key = sarama.StringEncoder(fmt.Sprintf("k%d", p))
			m.Timestamp = time.UnixMilli(1700000000000 + int64(i)*1000)
			msgs = append(msgs, m)
		}
	}
	produce(t, brokers, msgs...)
	out := filepath.Join(t.TempDir(), "out")
	yaml := fmt.Sprintf(`version: 1
name: kafka-source-test
parallelism: 2
checkpoint:
  interval: 50ms
sources:
  - id: in
    type: kafka
    brokers: [%s]
    topics: [%s]
    stop_at: latest
    group_id: %s-group
    event_time: _timestamp
    watermark:
      max_out_of_orderness: 1s
steps:
  - id: meta
    set:
      p: _partition
      o: _offset
      k: _key
sinks:
  - id: out
    type: file
    path: %s/
`, strings.Join(brokers, ", "), topic, topic, out)
	spec, err := pipeline.Load(pipeline.Default, "kafka.yaml", []byte(yaml))
	require.NoError(t, err)
	r, err := pipeline.NewRunner(spec, pipeline.RunnerOptions{StateDir: t.TempDir()})
	require.NoError(t, err)
	require.NoError(t, r.Run(t.Context()))

	files, err := filepath.Glob(filepath.Join(out, "part-*"))
	require.NoError(t, err)
	var lines []string
	for _, f := range files {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		lines = append(lines, strings.Split(strings.TrimSpace(string(b)), "\n")...)
	}
	slices.Sort(lines)
	var want []string
	for p := range 3 {
		for i := range 4 {
			want = append(want, fmt.Sprintf(`{"i":%d,"k":"k%d","o":%d,"p":%d}`, p*10+i, p, i, p))
		}
	}
	slices.Sort(want)
	require.Equal(t, want, lines)

	// The final checkpoint committed the end offsets to the group.
	resp, err := testAdmin(t, brokers).ListConsumerGroupOffsets(topic+"-group", map[string][]int32{topic: {0, 1, 2}})
	require.NoError(t, err)
	for p := range int32(3) {
		blk := resp.GetBlock(topic, p)
		require.NotNil(t, blk)
		require.Equal(t, int64(4), blk.Offset, "partition %d", p)
	}
}

// BenchmarkKafkaSource reads 1M small JSON records from the in-process
// broker and reports records/s.
func BenchmarkKafkaSource(b *testing.B) {
	const n = 1_000_000
	brokers := testBrokers(b)
	topic := testTopic(b, brokers, 4)
	cfg := testSaramaConfig()
	cfg.Producer.Partitioner = sarama.NewRoundRobinPartitioner
	cfg.Producer.Return.Errors = true
	cfg.Producer.Flush.Messages = 10000
	cfg.Producer.Flush.Frequency = 10 * time.Millisecond
	cfg.Producer.Compression = sarama.CompressionNone
	p, err := sarama.NewAsyncProducer(brokers, cfg)
	require.NoError(b, err)
	go func() {
		for i := range n {
			p.Input() <- &sarama.ProducerMessage{Topic: topic, Value: sarama.StringEncoder(`{"id":` + strconv.Itoa(i) + `,"name":"sensor","temp":21.5}`)}
		}
	}()
	for range n {
		select {
		case <-p.Successes():
		case err := <-p.Errors():
			require.NoError(b, err)
		}
	}
	require.NoError(b, p.Close())
	src := loadKafkaSource(b, brokers, fmt.Sprintf("topics: [%s]\nstop_at: latest", topic))
	b.ResetTimer()
	for b.Loop() {
		s, _ := openKafkaSource(b, src, 0, 1, nil, nil)
		got := 0
		for {
			var rb pipeline.ReadBatch
			err := s.Read(b.Context(), &rb)
			got += len(rb.Records)
			if errors.Is(err, io.EOF) {
				break
			}
			require.NoError(b, err)
		}
		require.Equal(b, n, got)
		require.NoError(b, s.Close(context.Background()))
	}
	b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "records/s")
}

// Invalid UTF-8 in a json value's strings becomes U+FFFD, as in the file
// source, and each such message is counted in
// eddy_source_invalid_utf8_total.
func TestKafkaSourceCountsInvalidUTF8(t *testing.T) {
	brokers := testBrokers(t)
	topic := testTopic(t, brokers, 1)
	produce(t, brokers,
		&sarama.ProducerMessage{Topic: topic, Value: sarama.ByteEncoder("{\"s\":\"a\xffb\"}")},
		&sarama.ProducerMessage{Topic: topic, Value: sarama.StringEncoder(`{"s":"ok"}`)},
		&sarama.ProducerMessage{Topic: topic, Value: sarama.ByteEncoder("{\"s\":\"\xc3\"}")},
	)
	cfg := loadKafkaSource(t, brokers, fmt.Sprintf("topics: [%s]\nstop_at: latest", topic))
	src, err := cfg.NewSource()
	require.NoError(t, err)
	metrics := pipeline.NewMetrics()
	info := conntest.Info("src", 0, 1)
	info.Metrics = metrics
	require.NoError(t, src.Open(t.Context(), &pipeline.SourceContext{SubtaskInfo: info}))
	t.Cleanup(func() { _ = src.Close(context.Background()) })
	var got []any
	for _, b := range drainKafka(t, src.(*source)) {
		for _, r := range b.Records {
			got = append(got, r.Fields["s"])
		}
	}
	require.Equal(t, []any{"a\uFFFDb", "ok", "\uFFFD"}, got)
	require.Equal(t, 2.0, pipeline.CounterValue(metrics.InvalidUTF8(info)))
}
