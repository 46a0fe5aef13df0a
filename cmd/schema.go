package cmd

import (
	"encoding/json"

	"github.com/spf13/cobra"

	"github.com/eddy-stream/eddy/pipeline"
)

func newSchemaCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "schema",
		Short: "Print the JSON Schema of pipeline files, for editors",
		Long: `Schema prints a JSON Schema (draft 2020-12) of the pipeline file, generated
from the sources, steps and sinks this eddy has: their keys, types,
defaults and fixed values. Editors that use the YAML language server
complete keys and flag mistakes with it:

  eddy schema > eddy.schema.json

and, first line of a pipeline file:

  # yaml-language-server: $schema=./eddy.schema.json

The schema lets a scalar be a ${VAR} reference anywhere. eddy validate
remains the judge: it also checks what a schema cannot (ids that exist,
expressions that compile, keys that go together).`,
		Args: exactArgs(0, "no arguments"),
		RunE: func(c *cobra.Command, _ []string) error {
			out, err := json.MarshalIndent(pipeline.Default.Schema(), "", "  ")
			if err != nil {
				return runtimeFailure(err)
			}
			if _, err := c.OutOrStdout().Write(append(out, '\n')); err != nil {
				return runtimeFailure(err)
			}
			return nil
		},
	}
}
