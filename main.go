// Command eddy runs stream-processing pipelines described in YAML files.
package main

import (
	"os"

	"github.com/eddy-stream/eddy/cmd"
)

func main() {
	os.Exit(cmd.Execute())
}
