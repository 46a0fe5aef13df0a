package generator

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
)

// Position is where a generator subtask is. Subtask Subtask of Parallelism
// p generates the counters i >= Base with i % p == Subtask, in order,
// except those of Produced, which an earlier run at another parallelism
// generated already; Next is the next one it considers. Every counter
// below Base was generated before.
//
// A restore at another parallelism computes the set generated so far from
// the positions of every old subtask: below the smallest of their Next
// (the new Base), and above it each old subtask's own counters up to its
// Next, plus the Produced runs still above the new Base. So the new
// subtasks generate exactly what is left, however far apart the old ones
// were.
type Position struct {
	Subtask     int   `json:"subtask"`
	Parallelism int   `json:"parallelism,omitempty"` // 0: a version-1 position (Next only)
	Base        int   `json:"base,omitempty"`
	Next        int   `json:"next"`
	Produced    []Run `json:"produced,omitempty"`
}

// Run is a set of counters generated before: From <= i < To with
// i % Step == Residue.
type Run struct {
	Step    int `json:"step"`
	Residue int `json:"residue"`
	From    int `json:"from"`
	To      int `json:"to"`
}

func (r Run) contains(i int) bool {
	return i >= r.From && i < r.To && i%r.Step == r.Residue
}

// positionMagic starts a versioned position; a version-1 position is 8
// bytes of Next, big endian, whose first byte is below 0x80.
const (
	positionMagic   = 0xff
	positionVersion = 2
)

// EncodePosition encodes p: the magic byte, the version, then p's fields
// as unsigned varints (Subtask, Parallelism, Base, the runs: their number
// and each one's Step, Residue, From, To) and Next last, so that a subtask
// encodes the rest once (positionPrefix).
func EncodePosition(p Position) []byte {
	return withNext(positionPrefix(p), p.Next)
}

// withNext returns a new encoding: prefix (positionPrefix) then next.
func withNext(prefix []byte, next int) []byte {
	b := make([]byte, 0, len(prefix)+binary.MaxVarintLen64)
	return binary.AppendUvarint(append(b, prefix...), uint64(next))
}

func positionPrefix(p Position) []byte {
	b := []byte{positionMagic, positionVersion}
	for _, v := range []int{p.Subtask, p.Parallelism, p.Base, len(p.Produced)} {
		b = binary.AppendUvarint(b, uint64(v))
	}
	for _, r := range p.Produced {
		for _, v := range []int{r.Step, r.Residue, r.From, r.To} {
			b = binary.AppendUvarint(b, uint64(v))
		}
	}
	return b
}

// DecodePosition decodes what EncodePosition encoded, or a version-1
// position (8 bytes: Next).
func DecodePosition(b []byte) (Position, error) {
	if len(b) == 8 && b[0] != positionMagic {
		v := binary.BigEndian.Uint64(b)
		if v > math.MaxInt64 {
			return Position{}, fmt.Errorf("generator position %d is out of range", v)
		}
		return Position{Next: int(v)}, nil
	}
	if len(b) < 2 || b[0] != positionMagic {
		return Position{}, fmt.Errorf("generator position of %d bytes is not one", len(b))
	}
	if b[1] != positionVersion {
		return Position{}, fmt.Errorf("generator position version %d is unknown", b[1])
	}
	b = b[2:]
	next := func() int {
		v, n := binary.Uvarint(b)
		if n <= 0 || v > math.MaxInt64 {
			b = nil
			return -1
		}
		b = b[n:]
		return int(v)
	}
	p := Position{Subtask: next(), Parallelism: next(), Base: next()}
	runs := next()
	if runs < 0 || runs > len(b) { // each run takes 4 bytes at least
		return Position{}, errors.New("generator position is corrupt")
	}
	for range runs {
		p.Produced = append(p.Produced, Run{Step: next(), Residue: next(), From: next(), To: next()})
	}
	p.Next = next()
	if b == nil || len(b) != 0 || p.Subtask < 0 || p.Parallelism <= 0 || p.Subtask >= p.Parallelism || p.Next < p.Base {
		return Position{}, errors.New("generator position is corrupt")
	}
	for _, r := range p.Produced {
		if r.Step <= 0 || r.Residue < 0 || r.Residue >= r.Step || r.From < p.Base || r.To < r.From {
			return Position{}, errors.New("generator position is corrupt")
		}
	}
	return p, nil
}

// rescale returns the position subtask k of p starts from, given the
// positions of every subtask of a checkpoint taken at another parallelism
// (nil: a subtask that had generated nothing, nor been restored).
func rescale(all [][]byte, k, p int) (Position, error) {
	pos := make([]*Position, len(all))
	for j, b := range all {
		if b == nil {
			continue
		}
		q, err := DecodePosition(b)
		if err != nil {
			return Position{}, err
		}
		if q.Parallelism == 0 {
			return Position{}, errors.New("a position written by an older eddy, which does not record its parallelism: restore at the parallelism the checkpoint was taken with")
		}
		pos[j] = &q
	}
	q, ok, err := Rescale(pos, k, p)
	if err != nil {
		return Position{}, err
	}
	if !ok {
		return Position{Subtask: k, Parallelism: p, Next: k}, nil // nothing was generated
	}
	return q, nil
}

// Rescale returns the position subtask k of p starts from, given the
// decoded positions of every subtask of a checkpoint taken at another
// parallelism (nil: a subtask that had generated nothing, nor been
// restored), and whether any was given. The new base is the smallest next
// counter of the old subtasks; above it, the runs the old subtasks
// generated are skipped. A source that numbers its records as the
// generator does (nexmark) rescales with it too.
func Rescale(pos []*Position, k, p int) (Position, bool, error) {
	old := len(pos)
	var given *Position
	for j, q := range pos {
		if q == nil {
			continue
		}
		if q.Parallelism != old || q.Subtask != j || given != nil && (q.Base != given.Base || !slices.Equal(q.Produced, given.Produced)) {
			return Position{}, false, fmt.Errorf("the position of subtask %d of %d does not belong with those of %d subtasks", q.Subtask, q.Parallelism, old)
		}
		if given == nil {
			given = q
		}
	}
	if given == nil {
		return Position{}, false, nil
	}
	newBase := -1
	for j, q := range pos {
		next := first(given.Base, j, old) // at its first counter
		if q != nil {
			next = q.Next
		}
		if newBase < 0 || next < newBase {
			newBase = next
		}
	}
	var runs []Run
	for _, r := range given.Produced {
		if r.From = max(r.From, newBase); r.From < r.To {
			runs = append(runs, r)
		}
	}
	for j, q := range pos {
		next := first(given.Base, j, old)
		if q != nil {
			next = q.Next
		}
		if next > newBase {
			runs = append(runs, Run{Step: old, Residue: j, From: newBase, To: next})
		}
	}
	return Position{Subtask: k, Parallelism: p, Base: newBase, Next: first(newBase, k, p), Produced: runs}, true, nil
}

// first returns the smallest i >= base with i % p == k.
func first(base, k, p int) int {
	i := base - base%p + k
	if i < base {
		i += p
	}
	return i
}
