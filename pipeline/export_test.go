package pipeline

import "github.com/eddy-stream/eddy/checkpoint"

// The names the write-ahead sink's tests still use for the store's types.
type (
	PendingCheckpoint = checkpoint.Writer
	CheckpointMeta    = checkpoint.Meta
)
