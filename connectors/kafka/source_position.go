package kafka

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// positionVersion starts every encoded source position.
const positionVersion = 1

// noStop is the stop offset of a partition of an unbounded source.
const noStop int64 = -1

// entryFixed is the size of the fixed part of a position entry: partition,
// next offset and stop offset.
const entryFixed = 4 + 8 + 8

// PositionEntry is what a source position holds for one partition.
type PositionEntry struct {
	Topic     string
	Partition int32
	// Next is the offset of the next record to read.
	Next int64
	// Stop is the stopping offset of a bounded source (the partition is done
	// once Next reaches it), or -1.
	Stop int64
}

// EncodePosition encodes the position of a kafka source subtask: a version
// byte (1), the number of entries (uvarint), then per entry the topic
// (uvarint length + bytes), the partition (int32), the next offset (int64)
// and the stop offset (int64, -1 when unbounded), big-endian. The fixed
// width lets the source patch offsets in place.
func EncodePosition(entries []PositionEntry) []byte {
	n := 1 + binary.MaxVarintLen64
	for _, e := range entries {
		n += binary.MaxVarintLen64 + len(e.Topic) + entryFixed
	}
	b, _ := appendPosition(make([]byte, 0, n), entries, nil)
	return b
}

// appendPosition appends the encoding of entries to b; when at is not nil
// it records at at[i] the index in the result of entry i's next offset.
func appendPosition(b []byte, entries []PositionEntry, at []int) ([]byte, []int) {
	b = append(b, positionVersion)
	b = binary.AppendUvarint(b, uint64(len(entries)))
	for _, e := range entries {
		b = binary.AppendUvarint(b, uint64(len(e.Topic)))
		b = append(b, e.Topic...)
		b = binary.BigEndian.AppendUint32(b, uint32(e.Partition))
		if at != nil {
			at = append(at, len(b))
		}
		b = binary.BigEndian.AppendUint64(b, uint64(e.Next))
		b = binary.BigEndian.AppendUint64(b, uint64(e.Stop))
	}
	return b, at
}

// DecodePosition decodes what EncodePosition encoded.
func DecodePosition(b []byte) ([]PositionEntry, error) {
	bad := func(what string) error { return fmt.Errorf("kafka source position is corrupt: %s", what) }
	if len(b) == 0 || b[0] != positionVersion {
		return nil, bad("unknown version")
	}
	b = b[1:]
	count, n := binary.Uvarint(b)
	if n <= 0 || count > uint64(len(b)) {
		return nil, bad("entry count")
	}
	b = b[n:]
	entries := make([]PositionEntry, 0, count)
	for range count {
		l, n := binary.Uvarint(b)
		if n <= 0 || l > uint64(len(b)-n) || uint64(len(b)-n)-l < entryFixed {
			return nil, bad("entry")
		}
		b = b[n:]
		e := PositionEntry{Topic: string(b[:l])}
		b = b[l:]
		e.Partition = int32(binary.BigEndian.Uint32(b))
		e.Next = int64(binary.BigEndian.Uint64(b[4:]))
		e.Stop = int64(binary.BigEndian.Uint64(b[12:]))
		b = b[entryFixed:]
		if e.Partition < 0 || e.Next < 0 || e.Stop < noStop {
			return nil, bad("negative offset")
		}
		entries = append(entries, e)
	}
	if len(b) != 0 {
		return nil, errors.New("kafka source position is corrupt: trailing bytes")
	}
	return entries, nil
}
