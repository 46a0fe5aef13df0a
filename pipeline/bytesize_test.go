package pipeline_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/eddy-stream/eddy/pipeline"
)

func TestParseByteSize(t *testing.T) {
	for in, want := range map[string]pipeline.ByteSize{
		"0": 0, "1048576": 1 << 20, "64KiB": 64 << 10, "128MiB": 128 << 20, "1GiB": 1 << 30,
		"1 gb": 1e9, "2kb": 2000, "1.5MiB": 3 << 19, "10B": 10, "1TiB": 1 << 40,
	} {
		got, err := pipeline.ParseByteSize(in)
		require.NoError(t, err, in)
		require.Equal(t, want, got, in)
	}
	for _, in := range []string{"", "MiB", "-1", "1XB", "1.2.3KB", "1e3", "9999999TiB"} {
		_, err := pipeline.ParseByteSize(in)
		require.Error(t, err, in)
	}
}
