// Package file provides the `file` source, which reads JSON lines, CSV or
// text from files (a path, a glob or a directory; optionally following
// appended data like tail -f), and the `file` sink, which writes JSON lines
// or CSV.
//
// It imports pipeline and connectors/codec only.
package file
