package operators

import (
	"os"
	"regexp"
	"testing"

	"github.com/eddy-stream/eddy/pipeline"
	"github.com/stretchr/testify/require"
)

var (
	yamlBlock = regexp.MustCompile("(?s)```yaml\n(.*?)```")
	hasSinks  = regexp.MustCompile(`(?m)^sinks:`)
)

// Every example of docs/steps.md loads: each block is a steps: section (and
// maybe sinks:) run after a test source.
func TestDocsExamplesLoad(t *testing.T) {
	requireDocExamplesLoad(t, "steps.md")
}

// requireDocExamplesLoad loads every yaml block of docs/NAME after a test
// source (and before a test sink when the block has no sinks:) and returns
// the page's text.
func requireDocExamplesLoad(t *testing.T, name string) string {
	t.Helper()
	doc, err := os.ReadFile("../docs/" + name)
	require.NoError(t, err)
	blocks := yamlBlock.FindAllStringSubmatch(string(doc), -1)
	require.NotEmpty(t, blocks)
	env := testEnv()
	env.RegisterSink(pipeline.SinkPlugin{Type: "stdout", New: func() pipeline.SinkConfig { return &testSinkConfig{} }})
	for _, b := range blocks {
		text := "version: 1\nname: t\nsources:\n  - id: in\n    type: test\n" + b[1]
		if !hasSinks.MatchString(b[1]) {
			text += "sinks:\n  - id: out\n    type: test\n"
		}
		_, err := pipeline.Load(env, name, []byte(text))
		require.NoError(t, err, "example:\n%s", b[1])
	}
	return string(doc)
}

// The error text quoted in docs/steps.md is what a failing set produces.
func TestDocsErrorText(t *testing.T) {
	h := newHarness(t, stepYAML("set: {temp_c: (temp - 32) * 5 / 9}\n    on_error: dead_letter"))
	_, err := h.process(rec(fields{"temp": "hot"}))
	require.NoError(t, err)
	require.Equal(t, `set field "temp_c": expression "(temp - 32) * 5 / 9": invalid operation: string - int (1:7)`,
		h.dead.records[0].Fields["error"])
}
