package nexmark

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/eddy-stream/eddy/connectors/generator"
)

// Position is where a nexmark subtask is: the base time of its timeline
// and, as the generator source's position, which event numbers it
// generates and the next one (generator.Position: subtask k of p
// generates the numbers n >= Base with n % p == k, except the runs an
// earlier run at another parallelism generated). A restore keeps the base
// time, as Flink's nexmark source keeps it in its splits, so that
// `base_time: now` does not move the timeline.
type Position struct {
	BaseTime int64 `json:"base_time"`
	generator.Position
}

const (
	positionMagic   = 0xfe
	positionVersion = 1
)

// EncodePosition encodes p: the magic byte, the version, the base time
// (a signed varint), then p.Position as the generator encodes it, which
// ends with Next (positionPrefix).
func EncodePosition(p Position) []byte {
	b := binary.AppendVarint([]byte{positionMagic, positionVersion}, p.BaseTime)
	return append(b, generator.EncodePosition(p.Position)...)
}

// positionPrefix returns p's encoding without its Next, so that a subtask
// appends only Next per batch (withNext): the generator's encoding ends
// with Next as an unsigned varint, one byte for 0.
func positionPrefix(p Position) []byte {
	p.Next = 0
	b := EncodePosition(p)
	return b[:len(b)-1]
}

// withNext returns a new encoding: prefix (positionPrefix) then next.
func withNext(prefix []byte, next int) []byte {
	b := make([]byte, 0, len(prefix)+binary.MaxVarintLen64)
	return binary.AppendUvarint(append(b, prefix...), uint64(next))
}

// DecodePosition decodes what EncodePosition encoded.
func DecodePosition(b []byte) (Position, error) {
	if len(b) < 2 || b[0] != positionMagic {
		return Position{}, fmt.Errorf("nexmark position of %d bytes is not one", len(b))
	}
	if b[1] != positionVersion {
		return Position{}, fmt.Errorf("nexmark position version %d is unknown", b[1])
	}
	base, n := binary.Varint(b[2:])
	if n <= 0 {
		return Position{}, errors.New("nexmark position is corrupt")
	}
	p, err := generator.DecodePosition(b[2+n:])
	if err != nil {
		return Position{}, fmt.Errorf("nexmark position: %w", err)
	}
	if p.Parallelism == 0 {
		return Position{}, errors.New("nexmark position is corrupt")
	}
	return Position{BaseTime: base, Position: p}, nil
}

// rescale returns the position subtask k of p starts from, given the
// positions of every subtask of a checkpoint taken at another parallelism
// (nil: a subtask that had generated nothing, nor been restored), and
// whether any was given: the generator source's rescale
// (generator.Rescale), with the base time every old subtask must share.
func rescale(all [][]byte, k, p int) (Position, bool, error) {
	pos := make([]*generator.Position, len(all))
	var baseTime int64
	given := false
	for j, b := range all {
		if b == nil {
			continue
		}
		q, err := DecodePosition(b)
		if err != nil {
			return Position{}, false, err
		}
		if given && q.BaseTime != baseTime {
			return Position{}, false, fmt.Errorf("the position of subtask %d of %d does not belong with those of %d subtasks", q.Subtask, q.Parallelism, len(all))
		}
		baseTime, given = q.BaseTime, true
		pos[j] = &q.Position
	}
	g, ok, err := generator.Rescale(pos, k, p)
	if err != nil || !ok {
		return Position{}, false, err
	}
	return Position{BaseTime: baseTime, Position: g}, true, nil
}
