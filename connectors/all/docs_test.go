package all

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	// Examples of docs/connectors.md have steps between sources and sinks.
	_ "github.com/eddy-stream/eddy/operators"
	"github.com/eddy-stream/eddy/pipeline"
)

func readDoc(t *testing.T) string {
	t.Helper()
	doc, err := os.ReadFile("../../docs/connectors.md")
	require.NoError(t, err)
	return string(doc)
}

// Every example of docs/connectors.md is a pipeline file that loads.
func TestDocsExamplesLoad(t *testing.T) {
	blocks := regexp.MustCompile("(?s)```yaml\n(.*?)```").FindAllStringSubmatch(readDoc(t), -1)
	require.NotEmpty(t, blocks)
	for _, b := range blocks {
		_, err := pipeline.Load(pipeline.Default, "connectors.md", []byte(b[1]))
		require.NoError(t, err, "example:\n%s", b[1])
	}
}

// Every key of every source and sink is in the key table of its section.
func TestDocsListEveryKey(t *testing.T) {
	doc := readDoc(t)
	section := func(title string) string {
		start := strings.Index(doc, title+"\n")
		require.GreaterOrEqual(t, start, 0, "docs/connectors.md has no section %q", title)
		rest := doc[start+len(title):]
		if end := strings.Index(rest, "\n## "); end >= 0 {
			rest = rest[:end]
		}
		return rest
	}
	check := func(title string, cfg any) {
		s := section(title)
		for _, key := range pipeline.Keys(cfg) {
			require.Contains(t, s, "| `"+key+"`", "%s: key %q is not documented", title, key)
		}
	}
	for _, typ := range pipeline.Default.SourceTypes() {
		p, _ := pipeline.Default.Source(typ)
		check("## Source `"+typ+"`", p.New())
	}
	for _, typ := range pipeline.Default.SinkTypes() {
		p, _ := pipeline.Default.Sink(typ)
		check("## Sink `"+typ+"`", p.New())
	}
}
