package nexmark

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	_ "github.com/eddy-stream/eddy/connectors/file"
	_ "github.com/eddy-stream/eddy/operators"
	"github.com/eddy-stream/eddy/pipeline"
)

// canonical re-encodes a JSON object with sorted keys and integers as
// written, so that the sink's encoding and encoding/json's compare.
func canonical(t *testing.T, b []byte) string {
	t.Helper()
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var m map[string]any
	require.NoError(t, d.Decode(&m))
	out, err := json.Marshal(m)
	require.NoError(t, err)
	return string(out)
}

// TestRunPipeline runs the source at parallelism 3 with event time set
// from date_time into a file sink: the file holds exactly the events 0 to
// count-1, each once, as Event gives them; a bid filter downstream sees
// the nested fields.
func TestRunPipeline(t *testing.T) {
	dir := t.TempDir()
	const count = 3000
	yaml := fmt.Sprintf(`version: 1
name: nexmark-run
parallelism: 3
sources:
  - id: nexmark
    type: nexmark
    count: %d
    event_time: date_time
    watermark:
      max_out_of_orderness: 4s
steps:
  - id: expensive
    from: nexmark
    filter: event_type == 2 && bid.price > 1000000
sinks:
  - id: all
    from: nexmark
    type: file
    path: %s
  - id: bids
    from: expensive
    type: file
    path: %s
`, count, strconv.Quote(filepath.Join(dir, "all")+"/"), strconv.Quote(filepath.Join(dir, "bids")+"/"))
	spec, err := pipeline.Load(pipeline.Default, "nexmark.yaml", []byte(yaml))
	require.NoError(t, err)
	plan, err := pipeline.Compile(spec)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	job, err := pipeline.Start(ctx, plan, pipeline.JobOptions{StateDir: t.TempDir()})
	require.NoError(t, err)
	require.NoError(t, job.Wait())

	g := NewGenerator(NewConfig(), DefaultBaseTime)
	var want, wantBids []string
	for n := range int64(count) {
		e := g.Event(n)
		b, err := json.Marshal(e)
		require.NoError(t, err)
		want = append(want, canonical(t, b))
		if bid, ok := e["bid"].(map[string]any); ok && bid["price"].(int64) > 1_000_000 {
			wantBids = append(wantBids, canonical(t, b))
		}
	}
	slices.Sort(want)
	slices.Sort(wantBids)
	require.NotEmpty(t, wantBids)
	require.Equal(t, want, readLines(t, filepath.Join(dir, "all")))
	require.Equal(t, wantBids, readLines(t, filepath.Join(dir, "bids")))
}

// readLines returns the lines of every file under dir, canonical, sorted.
func readLines(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	files, err := filepath.Glob(filepath.Join(dir, "*"))
	require.NoError(t, err)
	require.NotEmpty(t, files)
	for _, f := range files {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		for _, line := range bytes.Split(bytes.TrimSpace(b), []byte("\n")) {
			if len(line) > 0 {
				out = append(out, canonical(t, line))
			}
		}
	}
	slices.Sort(out)
	return out
}
