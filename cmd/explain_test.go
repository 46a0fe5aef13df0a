package cmd

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestExplainGolden compares `eddy explain` of every testdata/explain/*.yaml
// in each format with NAME.txt, NAME.dot and NAME.json beside it; refresh
// them with go test ./cmd -update.
func TestExplainGolden(t *testing.T) {
	files, err := filepath.Glob("testdata/explain/*.yaml")
	require.NoError(t, err)
	require.NotEmpty(t, files)
	for _, file := range files {
		for format, ext := range map[string]string{"text": ".txt", "dot": ".dot", "json": ".json"} {
			golden := strings.TrimSuffix(file, ".yaml") + ext
			t.Run(filepath.Base(golden), func(t *testing.T) {
				got := execute(t, nil, "explain", "--format", format, file)
				require.Equal(t, 0, got.code, got.stderr)
				require.Empty(t, got.stderr)
				if *update {
					require.NoError(t, os.WriteFile(golden, []byte(got.stdout), 0o644))
				}
				want, err := os.ReadFile(golden)
				require.NoError(t, err)
				require.Equal(t, string(want), got.stdout)
			})
		}
	}
}

// TestExplainJSONStructure checks that the json output is exactly the
// documented planView: no key more, none missing.
func TestExplainJSONStructure(t *testing.T) {
	got := execute(t, nil, "explain", "-f", "json", "testdata/explain/full.yaml")
	require.Equal(t, 0, got.code, got.stderr)
	dec := json.NewDecoder(bytes.NewReader([]byte(got.stdout)))
	dec.DisallowUnknownFields()
	var v planView
	require.NoError(t, dec.Decode(&v))
	require.Equal(t, planViewVersion, v.FormatVersion)
	require.Equal(t, "full-plan", v.Pipeline)
	require.False(t, v.Bounded)

	edges := map[string]edgeView{}
	for _, e := range v.Edges {
		edges[e.stream()+" -> "+e.To] = e
	}
	require.Equal(t, edgeView{From: "big", To: "per_page", Partition: "hash", Key: []string{"page", "lower(user)"}}, edges["big -> per_page"])
	require.Equal(t, edgeView{From: "both", Side: "errors", To: "dead", Partition: "rebalance"}, edges["both.errors -> dead"])
	require.Equal(t, edgeView{From: "per_user", To: "big", Partition: "forward", Chained: true}, edges["per_user -> big"])
	require.Equal(t, "at-most-once", v.Guarantee.Level)
	require.Contains(t, v.Guarantee.Reasons, `source "typed" (stdin) is at-most-once`)

	// Every node is in exactly one task, and the task lists it.
	seen := map[string]int{}
	for _, task := range v.Tasks {
		for _, id := range task.Nodes {
			seen[id]++
		}
	}
	for _, n := range v.Nodes {
		require.Equal(t, 1, seen[n.ID], n.ID)
		require.Contains(t, v.Tasks[n.Task].Nodes, n.ID)
	}
}
