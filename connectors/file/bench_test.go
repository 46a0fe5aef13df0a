package file

import (
	"bufio"
	"context"
	stdjson "encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/eddy-stream/eddy/connectors/internal/conntest"
	"github.com/eddy-stream/eddy/expr"
	"github.com/eddy-stream/eddy/pipeline"
)

// benchLines is the size of the benchmark input; EDDY_BENCH_LINES overrides it.
func benchLines() int {
	if n, err := strconv.Atoi(os.Getenv("EDDY_BENCH_LINES")); err == nil && n > 0 {
		return n
	}
	return 200_000
}

var (
	benchOnce sync.Once
	benchPath string
)

// TestMain removes the benchmark input.
func TestMain(m *testing.M) {
	code := m.Run()
	if benchPath != "" {
		_ = os.RemoveAll(filepath.Dir(benchPath))
	}
	os.Exit(code)
}

// benchInput writes the benchmark's JSON lines {id, ts, temp} once.
func benchInput(b *testing.B) string {
	benchOnce.Do(func() {
		dir, err := os.MkdirTemp("", "eddy-file-bench")
		require.NoError(b, err)
		benchPath = filepath.Join(dir, "in.jsonl")
		f, err := os.Create(benchPath)
		require.NoError(b, err)
		w := bufio.NewWriter(f)
		for i := range benchLines() {
			fmt.Fprintf(w, "{\"id\":\"sensor-%d\",\"ts\":%d,\"temp\":%.1f}\n", i%100, 1700000000000+int64(i)*10, 50+float64(i%700)/10)
		}
		require.NoError(b, w.Flush())
		require.NoError(b, f.Close())
	})
	return benchPath
}

func openBenchSource(b *testing.B, path string, workers int) pipeline.Source {
	cfg := &SourceConfig{Path: path, DecodeWorkers: workers}
	cfg.DecodeOptions.Format = "json"
	src, err := cfg.NewSource()
	require.NoError(b, err)
	require.NoError(b, src.Open(context.Background(), &pipeline.SourceContext{SubtaskInfo: conntest.Info("in", 0, 1)}))
	return src
}

// BenchmarkFileSourceJSON reads the whole input with the json lines
// decoded on 1 goroutine or on GOMAXPROCS of them.
func BenchmarkFileSourceJSON(b *testing.B) {
	path := benchInput(b)
	for _, workers := range []int{1, 0} {
		b.Run(fmt.Sprintf("workers=%d", workers), func(b *testing.B) {
			n := 0
			for b.Loop() {
				src := openBenchSource(b, path, workers)
				var batch pipeline.ReadBatch
				for {
					batch.Records = batch.Records[:0]
					err := src.Read(context.Background(), &batch)
					n += len(batch.Records)
					if errors.Is(err, io.EOF) {
						break
					}
					require.NoError(b, err)
				}
				require.NoError(b, src.Close(context.Background()))
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(n), "ns/line")
		})
	}
}

// BenchmarkPipeline compares file -> set -> filter -> file as eddy runs it
// (the source's Read on its own goroutine handing batches to a task
// goroutine that evaluates the expressions and writes to the sink) with a
// single-threaded encoding/json program doing the same.
func BenchmarkPipeline(b *testing.B) {
	path := benchInput(b)
	out := filepath.Join(b.TempDir(), "out.jsonl")
	for _, workers := range []int{1, 0} {
		b.Run(fmt.Sprintf("eddy/workers=%d", workers), func(b *testing.B) {
			n := 0
			for b.Loop() {
				n += runEddy(b, path, out, workers)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(n), "ns/line")
		})
	}
	b.Run("encoding_json", func(b *testing.B) {
		n := 0
		for b.Loop() {
			n += runStdlib(b, path, out)
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(n), "ns/line")
	})
}

func runEddy(b *testing.B, in, out string, workers int) int {
	ctx := context.Background()
	src := openBenchSource(b, in, workers)
	sinkCfg := &SinkConfig{Path: out}
	sinkCfg.EncodeOptions.Format = "json"
	sink, err := sinkCfg.NewSink()
	require.NoError(b, err)
	require.NoError(b, sink.Open(ctx, &pipeline.SinkContext{SubtaskInfo: conntest.Info("out", 0, 1)}))
	set := expr.MustExpr("(temp - 32) * 5 / 9")
	filter := expr.MustExpr("temp_c > 20")

	batches := make(chan []pipeline.Record, 8)
	errc := make(chan error, 1)
	go func() {
		defer close(batches)
		for {
			var batch pipeline.ReadBatch
			batch.Records = make([]pipeline.Record, 0, 1024)
			err := src.Read(ctx, &batch)
			if len(batch.Records) > 0 {
				batches <- batch.Records
			}
			if err != nil {
				if !errors.Is(err, io.EOF) {
					errc <- err
				}
				return
			}
		}
	}()
	var vm expr.VM
	n := 0
	for recs := range batches {
		n += len(recs)
		kept := recs[:0]
		for _, r := range recs {
			v, err := vm.Eval(set, r.Fields)
			if err != nil {
				b.Fatal(err)
			}
			r.Fields["temp_c"] = v
			ok, err := vm.EvalBool(filter, r.Fields)
			if err != nil {
				b.Fatal(err)
			}
			if ok {
				kept = append(kept, r)
			}
		}
		require.NoError(b, sink.Write(ctx, kept))
	}
	select {
	case err := <-errc:
		require.NoError(b, err)
	default:
	}
	require.NoError(b, sink.Close(ctx))
	require.NoError(b, src.Close(ctx))
	return n
}

func runStdlib(b *testing.B, in, out string) int {
	f, err := os.Open(in)
	require.NoError(b, err)
	defer f.Close()
	o, err := os.Create(out)
	require.NoError(b, err)
	w := bufio.NewWriterSize(o, 256<<10)
	sc := bufio.NewScanner(bufio.NewReaderSize(f, 256<<10))
	n := 0
	for sc.Scan() {
		var m map[string]any
		if err := stdjson.Unmarshal(sc.Bytes(), &m); err != nil {
			b.Fatal(err)
		}
		n++
		m["temp_c"] = (m["temp"].(float64) - 32) * 5 / 9
		if m["temp_c"].(float64) > 20 {
			line, err := stdjson.Marshal(m)
			if err != nil {
				b.Fatal(err)
			}
			w.Write(line)
			w.WriteByte('\n')
		}
	}
	require.NoError(b, sc.Err())
	require.NoError(b, w.Flush())
	require.NoError(b, o.Close())
	return n
}
