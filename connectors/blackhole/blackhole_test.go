package blackhole

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/eddy-stream/eddy/connectors/internal/conntest"
	"github.com/eddy-stream/eddy/pipeline"
)

func TestBlackhole(t *testing.T) {
	Reset()
	cfg, err := conntest.LoadSink(t, "blackhole", "parallelism: 2")
	require.NoError(t, err)
	require.Equal(t, pipeline.ExactlyOnce, cfg.(*Config).Guarantee())
	ctx := context.Background()

	tests := []struct{ subtask, batches, size int }{{0, 3, 10}, {1, 2, 1}}
	for _, tt := range tests {
		s := conntest.OpenSink(t, cfg, tt.subtask, 2)
		for range tt.batches {
			require.NoError(t, s.Write(ctx, make([]pipeline.Record, tt.size)))
		}
		require.NoError(t, s.Flush(ctx))
		require.NoError(t, s.Close(ctx))
		require.Equal(t, int64(tt.batches*tt.size), s.(*Sink).Count())
	}
	require.Equal(t, int64(32), Count("out"))
	require.Zero(t, Count("other"))
	Reset()
	require.Zero(t, Count("out"))

	_, err = conntest.LoadSink(t, "blackhole", "path: x")
	require.ErrorContains(t, err, `unknown key "path"`)
}
