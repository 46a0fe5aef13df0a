package operators

import (
	"testing"

	"github.com/eddy-stream/eddy/pipeline"
	"github.com/stretchr/testify/require"
)

func TestKeyBy(t *testing.T) {
	runCases(t, []opCase{
		{
			name: "pass-through keeps the key set by partitioning",
			step: "key_by: id",
			in:   []pipeline.Record{{Fields: fields{"id": "a"}, Key: "sa", Time: 1}, {Fields: fields{"id": 2}, Key: "i2", Time: 2}},
			want: []pipeline.Record{{Fields: fields{"id": "a"}, Key: "sa", Time: 1}, {Fields: fields{"id": 2}, Key: "i2", Time: 2}},
		},
		{
			name: "empty batch",
			step: "key_by: id",
		},
	})
}

func TestKeyByKeyExprs(t *testing.T) {
	for _, tc := range []struct {
		step string
		want []string
	}{
		{"key_by: id", []string{"id"}},
		{"key_by: [region, 'lower(id)']", []string{"region", "lower(id)"}},
		{"key_by:\n      - region\n      - id % 4", []string{"region", "id % 4"}},
	} {
		spec, err := loadSteps(stepYAML(tc.step))
		require.NoError(t, err, tc.step)
		ks, ok := spec.Steps[0].Config.(pipeline.KeyedStep)
		require.True(t, ok)
		var got []string
		for _, e := range ks.KeyExprs(0) {
			require.NotNil(t, e.Program(), "compiled by the loader")
			got = append(got, e.Source)
		}
		require.Equal(t, tc.want, got)
	}
}

// Only key_by and dedupe are keyed.
func TestOnlyKeyByIsKeyed(t *testing.T) {
	for _, p := range plugins {
		_, keyed := p.New().(pipeline.KeyedStep)
		require.Equal(t, p.Kind == "key_by" || p.Kind == "dedupe" || p.Kind == "join", keyed, p.Kind)
	}
}
