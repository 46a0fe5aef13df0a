package cmd

import (
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestImportsNoConnector: cmd knows connectors only through pipeline's
// registry and interfaces; it imports connectors/all for the registrations
// and no connector package (tests included).
func TestImportsNoConnector(t *testing.T) {
	const connectors = "github.com/eddy-stream/eddy/connectors/"
	files, err := filepath.Glob("*.go")
	require.NoError(t, err)
	require.NotEmpty(t, files)
	for _, f := range files {
		ast, err := parser.ParseFile(token.NewFileSet(), f, nil, parser.ImportsOnly)
		require.NoError(t, err)
		for _, imp := range ast.Imports {
			path, err := strconv.Unquote(imp.Path.Value)
			require.NoError(t, err)
			if strings.HasPrefix(path, connectors) {
				require.Equal(t, connectors+"all", path, "%s imports a connector package", f)
			}
		}
	}
}
