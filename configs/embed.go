// Package configs holds the pipeline files of configs/ that the eddy binary
// carries: the Nexmark queries, which `eddy bench nexmark` runs without a
// checkout of the repository.
package configs

import (
	"embed"
	"io/fs"
)

// nexmark holds the query files of configs/nexmark, one per Nexmark query
// (qN.yaml).
//
//go:embed nexmark/q*.yaml
var nexmark embed.FS

// Nexmark returns the Nexmark query files, qN.yaml at its root.
func Nexmark() fs.FS {
	sub, err := fs.Sub(nexmark, "nexmark")
	if err != nil {
		panic(err) // "nexmark" is a valid path: cannot happen
	}
	return sub
}
