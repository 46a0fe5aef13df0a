// Command eddy runs stream-processing pipelines described in YAML files.
package main

import (
	"os"

	// The web dashboard at GET / of the admin endpoint (admin.UI).
	_ "github.com/eddy-stream/eddy/admin/ui"
	"github.com/eddy-stream/eddy/cmd"
)

func main() {
	os.Exit(cmd.Execute())
}
