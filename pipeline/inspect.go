package pipeline

import (
	"encoding/binary"
	"fmt"
)

// Read-only access to what the runtime writes into a checkpoint, for tools
// that show a checkpoint without running the pipeline (`eddy state
// inspect`). Nothing here opens a component or needs a plan.

// The kinds of checkpoint part: a source subtask's position, a step
// subtask's keyed state (the blob stream of statestore's Snapshot.WriteTo),
// a two-phase-commit sink subtask's committables, and an event-time source
// subtask's watermark.
const (
	PartSource    = "src"
	PartState     = "op"
	PartSink      = "sink"
	PartWatermark = "wm"
)

// DecodeWatermark decodes a PartWatermark blob: the source subtask's
// watermark at the barrier, epoch ms.
func DecodeWatermark(b []byte) (int64, error) {
	if len(b) != 8 {
		return 0, fmt.Errorf("a watermark part has 8 bytes, not %d", len(b))
	}
	return int64(binary.BigEndian.Uint64(b)), nil
}

// ParsePart splits a checkpoint part name, "<kind>/<id>/<subtask>" with kind
// PartSource, PartState or PartSink, into its fields. ok is false for any
// other name (parts that a newer eddy, or another tool, wrote). Called by
// `eddy state inspect`; pure, safe from any goroutine.
func ParsePart(name string) (kind, id string, subtask int, ok bool) {
	kind, id, subtask, ok = parsePart(name)
	if !ok || id == "" || subtask < 0 {
		return "", "", 0, false
	}
	switch kind {
	case PartSource, PartState, PartSink, PartWatermark:
		return kind, id, subtask, true
	}
	return "", "", 0, false
}

// DecodeCommittables splits the blob of a sink part (PartSink) into the
// committables that the sink subtask's PreCommit returned, in order: the
// bytes Commit gets on restore, owned by the sink type. Called by `eddy
// state inspect`, from the command's goroutine; the result points into b.
func DecodeCommittables(b []byte) ([][]byte, error) {
	cs, err := decodeCommittables(b)
	if err != nil {
		return nil, fmt.Errorf("decode the committables of a sink part (%d bytes): %w", len(b), err)
	}
	return cs, nil
}
