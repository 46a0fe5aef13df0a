package operators

import (
	"testing"

	"github.com/eddy-stream/eddy/pipeline"
	"github.com/stretchr/testify/require"
)

// opCase is one table test of an operator: the step, a batch in, what comes
// out, and how many records went to on_error (a case with errors gives
// on_error: skip; the default, fail, would fail the batch).
type opCase struct {
	name string
	step string // the step's own line(s) after "- id: s", e.g. "filter: x > 1"
	in   []pipeline.Record
	want []pipeline.Record
	errs int
}

// stepYAML returns a steps section with one step "s".
func stepYAML(body string) string { return "  - id: s\n    " + body + "\n" }

func runCases(t *testing.T, cases []opCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, stepYAML(tc.step))
			out, err := h.process(tc.in...)
			require.NoError(t, err)
			require.Equal(t, tc.want, out.records)
			require.Equal(t, float64(tc.errs), h.errorCount())
			require.Empty(t, h.dead.records)
		})
	}
}
