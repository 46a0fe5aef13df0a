package operators

import (
	"os"
	"regexp"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/eddy-stream/eddy/pipeline"
)

// Every example of docs/windows.md loads, and the keys the page's table
// lists are the keys of the config.
func TestWindowDocs(t *testing.T) {
	doc, err := os.ReadFile("../docs/windows.md")
	require.NoError(t, err)
	blocks := yamlBlock.FindAllStringSubmatch(string(doc), -1)
	require.NotEmpty(t, blocks)
	env := testEnv()
	env.RegisterSink(pipeline.SinkPlugin{Type: "stdout", New: func() pipeline.SinkConfig { return &testSinkConfig{} }})
	for _, b := range blocks {
		text := "version: 1\nname: t\nsources:\n  - id: in\n    type: test\n" + b[1]
		if !regexp.MustCompile(`(?m)^sinks:`).MatchString(b[1]) {
			text += "sinks:\n  - id: out\n    type: test\n"
		}
		_, err := pipeline.Load(env, "windows.md", []byte(text))
		require.NoError(t, err, "example:\n%s", b[1])
	}
	keys := slices.DeleteFunc(pipeline.Keys(&KeyByConfig{}), func(k string) bool { return k == "window" || k == "trigger" })
	for _, key := range append(keys, "window.type", "window.size", "window.slide", "window.offset", "window.gap",
		"trigger.early_every", "trigger.count", "trigger.every") {
		require.Contains(t, string(doc), "| `"+key+"`", "docs/windows.md lists %s", key)
	}
}
