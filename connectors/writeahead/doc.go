// Package writeahead owns the write-ahead sink (Flink's
// GenericWriteAheadSink): the decorator that gives a sink without
// transactions checkpoint-driven output, for sinks with `write_ahead:
// true`. It keeps a checkpoint interval's records as the sink's
// committable, writes them to the wrapped sink once the checkpoint
// completes, and keeps a commit marker per sink subtask under the
// pipeline's state dir. Its init() registers Wrap in pipeline.Default;
// connectors/all imports it.
//
// writeahead imports pipeline, statestore (CBOR heads) and internal/fsutil;
// pipeline must not import it.
package writeahead
