package operators

import (
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/eddy-stream/eddy/pipeline"
)

// Every example of docs/windows.md loads, and the keys the page's table
// lists are the keys of the config.
func TestWindowDocs(t *testing.T) {
	doc := requireDocExamplesLoad(t, "windows.md")
	keys := slices.DeleteFunc(pipeline.Keys(&KeyByConfig{}), func(k string) bool { return k == "window" || k == "trigger" })
	for _, key := range append(keys, "window.type", "window.size", "window.slide", "window.offset", "window.gap",
		"trigger.early_every", "trigger.count", "trigger.every") {
		require.Contains(t, doc, "| `"+key+"`", "docs/windows.md lists %s", key)
	}
}
