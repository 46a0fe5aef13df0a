//go:build !windows

package e2e_test

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/stretchr/testify/require"
)

// TestJoinTemporal runs the example configs/joins_temporal.yaml, bounded
// (KAFKA_STOP_AT=latest), on topics it fills first: `orders`, the left
// side, and `rates`, a compacted topic keyed by currency with several
// versions per currency (one withdrawn by a tombstone, one that starts
// late, one currency with none). It reads the output topic with a
// read_committed consumer and checks it record by record: every order
// exactly once, with the rate valid at its time (the newest version of its
// currency at or before it, nil after a tombstone or before any version).
//
// The broker is a real one when KAFKA_BROKERS is set, otherwise an
// in-process kfake broker (see kafkaBrokers).
func TestJoinTemporal(t *testing.T) {
	brokers, _ := kafkaBrokers(t)
	run := fmt.Sprintf("%d", time.Now().UnixNano())
	orders, rates, out := "orders-"+run, "rates-"+run, "orders-eur-"+run
	createTopic(t, brokers, orders, 2)
	createCompactedTopic(t, brokers, rates, 2)
	createTopic(t, brokers, out, 2)

	// Event times from an hour ago: a real broker's time retention keeps them.
	base := time.Now().Add(-time.Hour).Truncate(time.Second).UnixMilli()
	ords := temporalOrders(base, 300)
	versions := rateVersions(base, ords)
	produceRates(t, brokers, rates, versions)
	produceOrders(t, brokers, orders, ords)

	work := t.TempDir()
	env := map[string]string{
		"EDDY_LOG_FORMAT": "json", "EDDY_STATE_DIR": filepath.Join(work, "state"),
		"KAFKA_BROKERS": brokers, "KAFKA_STOP_AT": "latest",
		"ORDERS_TOPIC": orders, "RATES_TOPIC": rates, "OUT_TOPIC": out,
	}
	r := eddy(t, work, env, "run", filepath.Join(repoRoot, "configs", "joins_temporal.yaml"))
	require.Equal(t, 0, r.code, r.stderr)
	s := summary(t, r.stderr)
	require.Equal(t, "finished", s.status)
	require.Equal(t, int64(len(ords)), s.written, "records_written")

	want := make([]string, len(ords))
	matched := 0
	for i, o := range ords {
		rec := map[string]any{"id": o.id, "currency": o.currency, "amount": o.amount, "ts": float64(o.ts), "rate": nil, "amount_eur": nil}
		if rate, ok := rateAt(versions, o.currency, o.ts); ok {
			rec["rate"], rec["amount_eur"] = rate, o.amount*rate
			matched++
		}
		b, err := json.Marshal(rec)
		require.NoError(t, err)
		want[i] = string(b)
	}
	// The input covers every case: orders with a rate and without, and
	// orders at the very time of a version of their currency.
	require.Greater(t, matched, len(ords)/2)
	require.Less(t, matched, len(ords))
	exact := 0
	for _, o := range ords {
		for _, v := range versions {
			if v.currency == o.currency && v.ts == o.ts {
				exact++
			}
		}
	}
	require.Positive(t, exact, "orders at a version's time")

	got := readCommitted(t, brokers, out)
	t.Logf("%d orders, %d with a rate, %d at a version's time, %d rate versions; %d records read back", len(ords), matched, exact, len(versions), len(got))
	for i, line := range got {
		var m map[string]any
		require.NoError(t, json.Unmarshal([]byte(line), &m), "%s", line)
		b, err := json.Marshal(m)
		require.NoError(t, err)
		got[i] = string(b)
	}
	requireSameLines(t, want, got, "the enriched orders vs the rates valid at their times")
}

// rateVersion is a record of the rates topic: currency's rate from ts on;
// tombstone: the currency has no rate from ts on.
type rateVersion struct {
	currency  string
	ts        int64
	rate      float64
	tombstone bool
}

// rateVersions returns the versions of the rates topic, in time order:
// USD, GBP and JPY change about every 10s, each version at the time of
// one of the orders of its currency; JPY is withdrawn at base+25s and
// comes back at base+42s; CHF starts at base+20s; SEK, which orders use
// too, has no rate.
func rateVersions(base int64, ords []temporalOrder) []rateVersion {
	var vs []rateVersion
	for ci, c := range []string{"USD", "GBP", "JPY"} {
		for v := range 5 {
			o := ords[50*v+5+ci]
			vs = append(vs, rateVersion{currency: c, ts: o.ts, rate: 1 + float64(ci)/10 + float64(v)/100})
		}
	}
	vs = append(vs,
		rateVersion{currency: "JPY", ts: base + 25_000, tombstone: true},
		rateVersion{currency: "JPY", ts: base + 42_000, rate: 0.0061},
		rateVersion{currency: "CHF", ts: base + 20_000, rate: 1.05},
	)
	sort.SliceStable(vs, func(i, j int) bool { return vs[i].ts < vs[j].ts })
	return vs
}

// rateAt returns currency's rate valid at ts by scanning every version.
func rateAt(vs []rateVersion, currency string, ts int64) (float64, bool) {
	var best *rateVersion
	for i := range vs {
		v := &vs[i]
		if v.currency == currency && v.ts <= ts && (best == nil || v.ts >= best.ts) {
			best = v
		}
	}
	if best == nil || best.tombstone {
		return 0, false
	}
	return best.rate, true
}

// temporalOrder is a record of the orders topic.
type temporalOrder struct {
	id, currency string
	amount       float64
	ts           int64
}

// temporalOrders returns n orders 200ms apart from base - 1s on, each
// moved by up to 200ms (out of order, within the source's 1s), many at
// the very time of a rate version.
func temporalOrders(base int64, n int) []temporalOrder {
	currencies := []string{"USD", "GBP", "JPY", "CHF", "SEK"}
	out := make([]temporalOrder, n)
	for i := range out {
		jitter := int64((i/5*3)%5-2) * 100
		out[i] = temporalOrder{
			id: fmt.Sprintf("o-%d", i), currency: currencies[i%len(currencies)],
			amount: float64(i%40) + 0.5, ts: base - 1000 + int64(i)*200 + jitter,
		}
	}
	return out
}

// createCompactedTopic creates a topic with cleanup.policy=compact, as a
// table's changelog topic is, and checks that the broker says so.
func createCompactedTopic(t *testing.T, brokers, name string, partitions int32) {
	t.Helper()
	admin, err := sarama.NewClusterAdmin(strings.Split(brokers, ","), saramaConfig())
	require.NoError(t, err)
	defer admin.Close()
	compact := "compact"
	require.NoError(t, admin.CreateTopic(name, &sarama.TopicDetail{
		NumPartitions: partitions, ReplicationFactor: 1,
		ConfigEntries: map[string]*string{"cleanup.policy": &compact},
	}, false))
	awaitTopicLeaders(t, brokers, name, partitions)
	entries, err := admin.DescribeConfig(sarama.ConfigResource{Type: sarama.TopicResource, Name: name, ConfigNames: []string{"cleanup.policy"}})
	require.NoError(t, err)
	require.Len(t, entries, 1)
	require.Equal(t, "compact", entries[0].Value)
}

// produceRates writes the versions keyed by currency (so that each
// currency's versions are in one partition, in time order), with their
// time as the record's timestamp; a tombstone has no value.
func produceRates(t *testing.T, brokers, topic string, vs []rateVersion) {
	t.Helper()
	msgs := make([]*sarama.ProducerMessage, len(vs))
	for i, v := range vs {
		m := &sarama.ProducerMessage{Topic: topic, Key: sarama.StringEncoder(v.currency), Timestamp: time.UnixMilli(v.ts)}
		if !v.tombstone {
			m.Value = sarama.StringEncoder(fmt.Sprintf(`{"rate":%v}`, v.rate))
		}
		msgs[i] = m
	}
	produceAll(t, brokers, msgs)
}

// produceOrders writes the orders keyed by id, in their order.
func produceOrders(t *testing.T, brokers, topic string, ords []temporalOrder) {
	t.Helper()
	msgs := make([]*sarama.ProducerMessage, len(ords))
	for i, o := range ords {
		b, err := json.Marshal(map[string]any{"id": o.id, "currency": o.currency, "amount": o.amount, "ts": o.ts})
		require.NoError(t, err)
		msgs[i] = &sarama.ProducerMessage{Topic: topic, Key: sarama.StringEncoder(o.id), Value: sarama.ByteEncoder(b)}
	}
	produceAll(t, brokers, msgs)
}

// produceAll writes msgs one at a time, each acknowledged before the
// next, so that a partition holds them in their order.
func produceAll(t *testing.T, brokers string, msgs []*sarama.ProducerMessage) {
	t.Helper()
	cfg := saramaConfig()
	cfg.Producer.RequiredAcks = sarama.WaitForAll
	cfg.Producer.Return.Successes = true
	p, err := sarama.NewSyncProducer(strings.Split(brokers, ","), cfg)
	require.NoError(t, err)
	defer p.Close()
	for _, m := range msgs {
		_, _, err := p.SendMessage(m)
		require.NoError(t, err)
	}
}
