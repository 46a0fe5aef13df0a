package cmd

import (
	"errors"
	"fmt"
	"io"

	"github.com/eddy-stream/eddy/pipeline"
)

// loadPlan loads, validates and compiles a pipeline file. The problems of an
// invalid file are written to stderr, one FILE:LINE:COL: message a line, and
// the error exits 2; so does a file that cannot be read.
func loadPlan(stderr io.Writer, file string) (*pipeline.Plan, error) {
	spec, err := pipeline.LoadFile(pipeline.Default, file)
	if err != nil {
		var ps pipeline.Problems
		if errors.As(err, &ps) {
			for _, p := range ps {
				fmt.Fprintln(stderr, p.String())
			}
			return nil, reported(exitInvalid)
		}
		return nil, invalidInput("%w", err)
	}
	plan, err := pipeline.Compile(spec)
	if err != nil {
		return nil, invalidInput("%s: %w", file, err)
	}
	return plan, nil
}
