// Package checkpoint is eddy's checkpoint storage: the durable half of a
// checkpoint. Store keeps the checkpoints of one pipeline in one bbolt
// file, DIR/checkpoints.db: the parts each task writes (small ones as
// bbolt values with Put, large ones streamed to files of their own with
// Create, whole or as a delta on an older checkpoint's part), the
// metadata record whose atomic write marks a checkpoint complete, every
// part's CRC32-C, verification with fallback to an older checkpoint,
// retention, and savepoint files (ExportSavepoint, OpenSavepoint). File
// and InspectedCheckpoint read stores and savepoints read-only for
// `eddy state inspect`; Guard turns a fault of bbolt on a damaged file
// into ErrCorrupt. docs/checkpoints.md specifies the API and the on-disk
// format.
//
// The runtime's checkpoint coordinator (package pipeline) uses *Store as
// its checkpoint store as it is: Begin returns the Writer of a checkpoint,
// whose parts come in through Put and Create (PartWriter, the one
// interface of a streamed part), and a restore reads a *Checkpoint.
//
// Dependencies: checkpoint imports the standard library, go.etcd.io/bbolt,
// github.com/fxamacker/cbor/v2, internal/fsutil and statestore, only for
// what a delta part needs of keyed state (MergeChain) and for OpenMapped.
// It must not import pipeline, operators, connectors or cmd: the runtime
// and the commands import checkpoint, never the other way round.
package checkpoint
