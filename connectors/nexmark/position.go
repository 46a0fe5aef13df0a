package nexmark

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"

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
// whether any was given. It is the generator source's rescale: the new
// base is the smallest next number of the old subtasks, and above it the
// runs the old subtasks generated are skipped.
func rescale(all [][]byte, k, p int) (Position, bool, error) {
	old := len(all)
	pos := make([]Position, old)
	var first *Position
	for j, b := range all {
		if b == nil {
			continue
		}
		q, err := DecodePosition(b)
		if err != nil {
			return Position{}, false, err
		}
		if q.Parallelism != old || q.Subtask != j || first != nil && (q.BaseTime != first.BaseTime || q.Base != first.Base || !slices.Equal(q.Produced, first.Produced)) {
			return Position{}, false, fmt.Errorf("the position of subtask %d of %d does not belong with those of %d subtasks", q.Subtask, q.Parallelism, old)
		}
		pos[j] = q
		if first == nil {
			first = &pos[j]
		}
	}
	if first == nil {
		return Position{}, false, nil
	}
	for j := range pos {
		if all[j] == nil { // at its first number
			pos[j] = Position{BaseTime: first.BaseTime, Position: generator.Position{Subtask: j, Parallelism: old, Base: first.Base, Next: firstAtOrAbove(first.Base, j, old)}}
		}
	}
	newBase := pos[0].Next
	for _, q := range pos {
		newBase = min(newBase, q.Next)
	}
	var runs []generator.Run
	for _, r := range first.Produced {
		if r.From = max(r.From, newBase); r.From < r.To {
			runs = append(runs, r)
		}
	}
	for j, q := range pos {
		if q.Next > newBase {
			runs = append(runs, generator.Run{Step: old, Residue: j, From: newBase, To: q.Next})
		}
	}
	return Position{BaseTime: first.BaseTime, Position: generator.Position{
		Subtask: k, Parallelism: p, Base: newBase, Next: firstAtOrAbove(newBase, k, p), Produced: runs,
	}}, true, nil
}

// firstAtOrAbove returns the smallest n >= base with n % p == k.
func firstAtOrAbove(base, k, p int) int {
	n := base - base%p + k
	if n < base {
		n += p
	}
	return n
}
