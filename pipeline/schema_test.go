package pipeline

import (
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"
)

// TestSchemaDurationPattern: the pattern of a duration matches exactly
// what ParseDuration takes.
func TestSchemaDurationPattern(t *testing.T) {
	re := regexp.MustCompile(durationPattern)
	for _, s := range []string{"0", "10s", "200ms", "1h30m", "2d", "1.5s", ".5s", "3us", "3µs", " 5m ", "1h0m0s",
		"10", "-5s", "s", "1d2h", "1.5d", "5 s", "", "5x", "d", "0s"} {
		_, err := ParseDuration(s)
		require.Equal(t, err == nil, re.MatchString(s), "%q: ParseDuration error %v", s, err)
	}
}

// enumOf returns the enum of a schema made by withEnvRef (or one without).
func enumOf(t *testing.T, s any) []string {
	t.Helper()
	m := s.(map[string]any)
	if alts, ok := m["anyOf"]; ok {
		m = alts.([]any)[0].(map[string]any)
	}
	e, ok := m["enum"].([]string)
	require.True(t, ok, "no enum in %v", s)
	return e
}

// TestSchemaDescribedEnums: the names the pipeline's own enum types list
// are the names their UnmarshalYAML takes, and only those.
func TestSchemaDescribedEnums(t *testing.T) {
	for _, v := range []interface {
		SchemaDescriber
		yaml.Unmarshaler
	}{new(OnError), new(Changelog), new(CheckpointMode), new(SigtermAction)} {
		names := enumOf(t, v.JSONSchema())
		require.NotEmpty(t, names)
		for _, n := range append(names, "zz_bogus") {
			err := v.UnmarshalYAML(&yaml.Node{Kind: yaml.ScalarNode, Value: n})
			require.Equal(t, n == "zz_bogus", err != nil, "%T %q: %v", v, n, err)
		}
	}
}

// TestSchemaTopLevelEnums: the values state.backend and restart.strategy
// list are the ones the loader takes.
func TestSchemaTopLevelEnums(t *testing.T) {
	props := NewEnv().Schema()["properties"].(map[string]any)
	for _, tt := range []struct{ block, key, complaint string }{
		{"state", "backend", "state.backend must be"},
		{"restart", "strategy", "restart.strategy must be"},
	} {
		block := props[tt.block].(map[string]any)["properties"].(map[string]any)
		values := enumOf(t, block[tt.key])
		for _, v := range append(values, "zz_bogus") {
			text := fmt.Sprintf("version: 1\nname: enums\ncheckpoint: {}\n%s: {%s: %s}\nsources: []\nsinks: []\n", tt.block, tt.key, v)
			_, err := Load(NewEnv(), "enums.yaml", []byte(text))
			require.Equal(t, v == "zz_bogus", err != nil && strings.Contains(err.Error(), tt.complaint), "%s.%s: %s: %v", tt.block, tt.key, v, err)
		}
	}
}
