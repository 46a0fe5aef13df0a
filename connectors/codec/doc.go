// Package codec holds what eddy's line-oriented connectors share: the record
// formats (json, csv, text) that sources decode and sinks encode, the batch
// decoder that turns lines into records and failed records (left to the
// runtime's on_error), a chunked line reader with byte offsets, and the
// reading loop of non-replayable stream sources (stdin, socket).
//
// codec imports pipeline only; the connector packages (file, stdio, socket)
// import codec and never each other.
package codec
