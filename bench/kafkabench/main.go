// Command kafkabench measures Kafka -> set -> Kafka through the eddy binary
// against a running broker, with delivery exactly_once (transactions, 100ms
// checkpoints) and at_least_once, alternately in the same command, and
// reports records/s, the ratio of the two, and end-to-end latency.
//
//	go run ./bench/kafkabench -brokers 127.0.0.1:19092 -eddy ./eddy
//
// Throughput: N records of about -size bytes are produced into a topic
// first; each run reads them all (stop_at: latest) and writes them to a new
// topic; records/s = N / wall time of the run (start-up included, a few ms).
// After -warmup pairs that are not counted (the broker's JIT, which warms
// up its transaction code only in exactly_once runs), -runs pairs run back
// to back, alternating which mode goes first. Reported are the best of
// each mode, the median of the pairs' ratios (steadier on a machine whose
// speed drifts) and their mean with a 95% confidence interval (a pair
// varies by several percent here: it takes many), and the output topic of
// every run is checked to hold N records (read_committed).
//
// Latency: an unbounded run reads what a producer writes at -rate records/s
// for -seconds; a read_committed consumer of the output measures, per
// record, the time from its production (ts field) to its arrival. With
// exactly_once a record becomes visible when the checkpoint after it
// completes, so its latency is about the checkpoint interval plus the
// commit.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/IBM/sarama"

	"github.com/eddy-stream/eddy/bench/internal/stats"
)

var (
	brokers    = flag.String("brokers", os.Getenv("KAFKA_BROKERS"), "bootstrap brokers, comma-separated")
	eddyBin    = flag.String("eddy", "./eddy", "the eddy binary")
	records    = flag.Int("records", 200_000, "records per throughput run")
	size       = flag.Int("size", 1024, "approximate record size in bytes")
	partitions = flag.Int("partitions", 3, "partitions of the topics")
	runs       = flag.Int("runs", 15, "throughput runs per mode (pairs measured)")
	brokerPid  = flag.Int("broker-pid", 0, "the broker's process id, to report its CPU time per run (Linux)")
	warmup     = flag.Int("warmup", 10, "pairs of runs before the measured ones, not counted (the broker's JIT warms up)")
	par        = flag.Int("parallelism", 2, "pipeline parallelism")
	interval   = flag.Duration("checkpoint", 100*time.Millisecond, "checkpoint interval")
	rate       = flag.Int("rate", 5000, "records/s of the latency runs")
	seconds    = flag.Int("seconds", 10, "length of each latency run")
)

var modes = []string{"at_least_once", "exactly_once"}

func main() {
	flag.Parse()
	if *brokers == "" {
		log.Fatal("-brokers (or KAFKA_BROKERS) is required")
	}
	bs := strings.Split(*brokers, ",")
	stamp := time.Now().UnixNano()
	in := fmt.Sprintf("bench-in-%d", stamp)
	createTopic(bs, in)
	start := time.Now()
	produceFixed(bs, in, *records)
	fmt.Printf("produced %d records of ~%d bytes into %s in %s\n", *records, *size, in, time.Since(start).Round(time.Millisecond))

	best := map[string]time.Duration{}
	var ratios []float64
	cpus := map[string][]float64{} // eddy + broker CPU seconds per run
	for r := 1 - *warmup; r <= *runs; r++ {
		// The pair's order alternates, so that a machine that speeds up or
		// slows down during the command favours neither mode.
		order := modes
		if r%2 == 0 {
			order = []string{modes[1], modes[0]}
		}
		took := map[string]time.Duration{}
		for _, mode := range order {
			out := fmt.Sprintf("bench-out-%s-%d-%d", mode, stamp, r+*warmup)
			createTopic(bs, out)
			b0 := brokerCPU()
			d, cpu := runThroughput(in, out, mode, fmt.Sprintf("bench-%d-%d", stamp, r+*warmup))
			bcpu := brokerCPU() - b0
			if n := countCommitted(bs, out); n != *records {
				log.Fatalf("%s run %d: the output topic holds %d records, want %d", mode, r, n, *records)
			}
			label := fmt.Sprintf("run %d", r)
			if r < 1 {
				label = "warm-up"
			}
			fmt.Printf("%-7s %-13s %8d ms  %10.0f records/s  cpu: eddy %5d ms, broker %5d ms\n", label, mode, d.Milliseconds(), float64(*records)/d.Seconds(),
				cpu.Milliseconds(), bcpu.Milliseconds())
			took[mode] = d
			if r >= 1 {
				cpus[mode] = append(cpus[mode], (cpu + bcpu).Seconds())
			}
		}
		if r < 1 {
			continue
		}
		for mode, d := range took {
			if best[mode] == 0 || d < best[mode] {
				best[mode] = d
			}
		}
		ratios = append(ratios, took["at_least_once"].Seconds()/took["exactly_once"].Seconds())
	}
	alo := float64(*records) / best["at_least_once"].Seconds()
	eo := float64(*records) / best["exactly_once"].Seconds()
	mid := median(ratios)
	fmt.Printf("\nthroughput, best of %d runs (after %d warm-up pairs), %d records of ~%d bytes, parallelism %d, checkpoints every %s\n", *runs, *warmup, *records, *size, *par, *interval)
	fmt.Printf("at_least_once  %10.0f records/s\n", alo)
	fmt.Printf("exactly_once   %10.0f records/s\n", eo)
	fmt.Printf("exactly_once / at_least_once = %.3f (overhead %.1f%%), best of each\n", eo/alo, 100*(1-eo/alo))
	fmt.Printf("exactly_once / at_least_once = %.3f (overhead %.1f%%), median of the %d pairs' ratios (each pair ran back to back)\n", mid, 100*(1-mid), len(ratios))
	if len(ratios) > 1 {
		m, h := stats.MeanCI(ratios)
		fmt.Printf("exactly_once / at_least_once = %.3f ± %.3f (overhead %.1f%%, 95%% confidence %.1f%% to %.1f%%), mean of the pairs' ratios\n",
			m, h, 100*(1-m), 100*(1-m-h), 100*(1-m+h))
	}
	what := "eddy"
	if *brokerPid > 0 {
		what = "eddy + broker"
	}
	ca, ce := median(cpus["at_least_once"]), median(cpus["exactly_once"])
	fmt.Printf("CPU per run (%s), median: at_least_once %.2f s, exactly_once %.2f s: exactly_once costs %.1f%% more\n", what, ca, ce, 100*(ce/ca-1))

	if *seconds > 0 {
		fmt.Printf("\nlatency at %d records/s for %ds (produce -> visible to a read_committed consumer)\n", *rate, *seconds)
		for _, mode := range modes {
			lat := runLatency(bs, mode, stamp)
			fmt.Printf("%-13s p50 %6.1f ms  p99 %6.1f ms  max %6.1f ms  (%d records)\n", mode,
				pct(lat, 0.50), pct(lat, 0.99), pct(lat, 1), len(lat))
		}
	}
}

func config() *sarama.Config {
	c := sarama.NewConfig()
	c.Version = sarama.V3_6_0_0
	return c
}

func createTopic(bs []string, name string) {
	admin, err := sarama.NewClusterAdmin(bs, config())
	if err != nil {
		log.Fatal(err)
	}
	defer admin.Close()
	if err := admin.CreateTopic(name, &sarama.TopicDetail{NumPartitions: int32(*partitions), ReplicationFactor: 1}, false); err != nil {
		log.Fatalf("create topic %s: %v", name, err)
	}
}

// record returns record i's JSON value of about -size bytes.
func record(i int, ts int64, pad string) []byte {
	return fmt.Appendf(nil, `{"id":%d,"ts":%d,"pad":%q}`, i, ts, pad)
}

func padding() string { return strings.Repeat("x", max(*size-48, 0)) }

// produceFixed writes n records as fast as the broker takes them.
func produceFixed(bs []string, topic string, n int) {
	c := config()
	c.Producer.Return.Successes = true
	c.Producer.RequiredAcks = sarama.WaitForAll
	c.Producer.Compression = sarama.CompressionNone
	c.Producer.Flush.Bytes = 1 << 20
	c.Producer.Flush.Frequency = 5 * time.Millisecond
	p, err := sarama.NewAsyncProducer(bs, c)
	if err != nil {
		log.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		for range n {
			select {
			case <-p.Successes():
			case e := <-p.Errors():
				log.Fatalf("produce: %v", e)
			}
		}
		close(done)
	}()
	pad := padding()
	now := time.Now().UnixMilli()
	for i := range n {
		p.Input() <- &sarama.ProducerMessage{Topic: topic, Value: sarama.ByteEncoder(record(i, now, pad))}
	}
	<-done
	if err := p.Close(); err != nil {
		log.Fatal(err)
	}
}

const pipelineTmpl = `version: 1
name: %s
parallelism: %d
checkpoint:
  interval: %s
  mode: exactly_once
  timeout: 30s
sources:
  - id: in
    type: kafka
    brokers: %s
    topics: [%s]
    start_from: %s
%s
steps:
  - id: stamp
    set:
      hop: 1
sinks:
  - id: out
    type: kafka
    brokers: %s
    topic: %s
    delivery: %s
    transaction_timeout: 60s
`

func writePipeline(dir, name, in, out, mode, startFrom, extra string) string {
	y := fmt.Sprintf(pipelineTmpl, name, *par, *interval, *brokers, in, startFrom, extra, *brokers, out, mode)
	path := filepath.Join(dir, name+".yaml")
	if err := os.WriteFile(path, []byte(y), 0o644); err != nil {
		log.Fatal(err)
	}
	return path
}

// runThroughput runs one bounded pipeline and returns its wall time and the
// CPU time (user + system) of the eddy process.
func runThroughput(in, out, mode, name string) (wall, cpu time.Duration) {
	dir, err := os.MkdirTemp("", "kafkabench-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	file := writePipeline(dir, name+"-"+mode, in, out, mode, "earliest", "    stop_at: latest")
	cmd := exec.Command(*eddyBin, "run", file)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "EDDY_LOG_LEVEL=warn", "EDDY_STATE_DIR="+filepath.Join(dir, "state"))
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	start := time.Now()
	if err := cmd.Run(); err != nil {
		log.Fatalf("eddy run (%s): %v", mode, err)
	}
	return time.Since(start), cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
}

// brokerCPU returns the CPU time the broker process used so far, read from
// /proc (Linux); 0 without -broker-pid.
func brokerCPU() time.Duration {
	if *brokerPid <= 0 {
		return 0
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", *brokerPid))
	if err != nil {
		log.Fatalf("-broker-pid: %v", err)
	}
	// Fields after the command name, which ends with the last ')':
	// utime and stime are fields 14 and 15, in clock ticks (100 per s).
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * 10 * time.Millisecond
}

func median(xs []float64) float64 {
	xs = slices.Sorted(slices.Values(xs))
	m := xs[len(xs)/2]
	if len(xs)%2 == 0 {
		m = (xs[len(xs)/2-1] + m) / 2
	}
	return m
}

// consumer reads every partition of topic read_committed from the oldest
// offset and calls fn for each value until ctx ends.
func consume(ctx context.Context, bs []string, topic string, fn func([]byte)) {
	c := config()
	c.Consumer.IsolationLevel = sarama.ReadCommitted
	cons, err := sarama.NewConsumer(bs, c)
	if err != nil {
		log.Fatal(err)
	}
	defer cons.Close()
	parts, err := cons.Partitions(topic)
	if err != nil {
		log.Fatal(err)
	}
	msgs := make(chan []byte, 1024)
	for _, p := range parts {
		pc, err := cons.ConsumePartition(topic, p, sarama.OffsetOldest)
		if err != nil {
			log.Fatal(err)
		}
		defer pc.Close()
		go func() {
			for m := range pc.Messages() {
				select {
				case msgs <- m.Value:
				case <-ctx.Done():
					return
				}
			}
		}()
	}
	for {
		select {
		case v := <-msgs:
			fn(v)
		case <-ctx.Done():
			return
		}
	}
}

// countCommitted counts the records of topic visible read_committed: it
// stops once the count reached -records, or after 30s without progress.
func countCommitted(bs []string, topic string) int {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var n atomic.Int64
	go func() {
		last, idle := int64(-1), 0
		for range time.Tick(100 * time.Millisecond) {
			cur := n.Load()
			if cur >= int64(*records) {
				cancel()
				return
			}
			if cur == last {
				if idle++; idle > 300 {
					cancel()
					return
				}
			} else {
				last, idle = cur, 0
			}
		}
	}()
	consume(ctx, bs, topic, func([]byte) { n.Add(1) })
	return int(n.Load())
}

func runLatency(bs []string, mode string, stamp int64) []float64 {
	in := fmt.Sprintf("bench-lat-in-%s-%d", mode, stamp)
	out := fmt.Sprintf("bench-lat-out-%s-%d", mode, stamp)
	createTopic(bs, in)
	createTopic(bs, out)
	dir, err := os.MkdirTemp("", "kafkabench-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	file := writePipeline(dir, fmt.Sprintf("bench-lat-%s-%d", mode, stamp), in, out, mode, "earliest", "")
	cmd := exec.Command(*eddyBin, "run", file)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "EDDY_LOG_FORMAT=json", "EDDY_STATE_DIR="+filepath.Join(dir, "state"))
	stderr, err := cmd.StderrPipe()
	if err != nil {
		log.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		log.Fatal(err)
	}
	// Produce once the pipeline took its first checkpoint: it is running.
	ready := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stderr)
		once := false
		for sc.Scan() {
			var e struct{ Msg string }
			if json.Unmarshal(sc.Bytes(), &e) == nil && e.Msg == "checkpoint complete" && !once {
				once = true
				close(ready)
			}
		}
		_, _ = io.Copy(io.Discard, stderr)
	}()
	select {
	case <-ready:
	case <-time.After(time.Minute):
		log.Fatalf("%s: the latency pipeline completed no checkpoint within a minute", mode)
	}

	total := *rate * *seconds
	var lat []float64
	ctx, cancel := context.WithCancel(context.Background())
	got, consumed := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(consumed)
		consume(ctx, bs, out, func(v []byte) {
			var r struct{ TS int64 }
			if json.Unmarshal(v, &r) == nil {
				lat = append(lat, float64(time.Now().UnixMilli()-r.TS))
			}
			if len(lat) == total {
				close(got)
			}
		})
	}()
	produceRate(bs, in, total)
	select {
	case <-got:
	case <-time.After(time.Minute):
		log.Printf("%s: %d of %d records arrived", mode, len(lat), total)
	}
	cancel()
	<-consumed
	_ = cmd.Process.Signal(syscall.SIGTERM)
	_ = cmd.Wait()
	slices.Sort(lat)
	return lat
}

// produceRate writes n records at -rate records/s, each stamped with its
// production time.
func produceRate(bs []string, topic string, n int) {
	c := config()
	c.Producer.RequiredAcks = sarama.WaitForAll
	c.Producer.Flush.Frequency = time.Millisecond
	p, err := sarama.NewAsyncProducer(bs, c)
	if err != nil {
		log.Fatal(err)
	}
	go func() {
		for e := range p.Errors() {
			log.Fatalf("produce: %v", e)
		}
	}()
	pad := padding()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	per := max(*rate/100, 1)
	for i := 0; i < n; {
		<-tick.C
		for j := 0; j < per && i < n; j++ {
			p.Input() <- &sarama.ProducerMessage{Topic: topic, Value: sarama.ByteEncoder(record(i, time.Now().UnixMilli(), pad))}
			i++
		}
	}
	if err := p.Close(); err != nil {
		log.Fatal(err)
	}
}

func pct(sorted []float64, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(q * float64(len(sorted)-1))
	return sorted[i]
}
