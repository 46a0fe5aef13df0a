package agg

import (
	"os"
	"regexp"
	"testing"

	"github.com/eddy-stream/eddy/expr"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"
)

// docSpecs returns the aggregate mappings of the YAML examples of docs/aggregates.md.
func docSpecs(t *testing.T) []Specs {
	doc, err := os.ReadFile("../../docs/aggregates.md")
	require.NoError(t, err)
	blocks := regexp.MustCompile("(?s)```yaml\n(.*?)```").FindAllSubmatch(doc, -1)
	require.Len(t, blocks, 2)
	var out []Specs
	for _, b := range blocks {
		var v struct {
			Aggregate Specs `yaml:"aggregate"`
		}
		require.NoError(t, yaml.Unmarshal(b[1], &v), string(b[1]))
		require.NoError(t, v.Aggregate.Compile())
		require.NoError(t, v.Aggregate.Mergeable())
		out = append(out, v.Aggregate)
	}
	return out
}

// The examples of docs/aggregates.md compile and compute what they say.
func TestDocExamples(t *testing.T) {
	specs := docSpecs(t)[1]
	records := []rec{
		{"x": 2, "temp": 20.5, "id": "a"},
		{"x": 3, "temp": 25.0, "id": "b"},
		{"x": 4, "temp": 22.0, "id": "c"},
	}
	want := map[string]any{"prod": 24, "hottest": map[string]any{"temp": 25.0, "id": "b"}, "id_list": []any{"a", "b", "c"}}
	require.Equal(t, want, fold(t, specs, records...))

	// The same over panes, merged.
	var vm expr.VM
	for split := range len(records) + 1 {
		a, b := NewAccs(specs), NewAccs(specs)
		for i, r := range records {
			row := a
			if i >= split {
				row = b
			}
			require.NoError(t, row.Add(&vm, r))
		}
		require.NoError(t, a.Merge(b))
		got := map[string]any{}
		a.Results(got)
		require.Equal(t, want, got, "split at %d", split)
	}
}
