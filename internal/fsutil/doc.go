// Package fsutil holds the file-system helpers that eddy's durable writers
// share: the checkpoint store and savepoint files (statestore), the
// write-ahead sink's commit markers (connectors/writeahead) and the file sink's part
// files (connectors/file).
//
// Dependencies: the standard library only.
package fsutil
