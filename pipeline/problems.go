package pipeline

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/eddy-stream/eddy/expr"
	"go.yaml.in/yaml/v3"
)

// Pos is a position in a pipeline file; Line and Col are 1-based. It is
// expr.Pos, the type expressions give their positions in.
type Pos = expr.Pos

// Problem is one thing wrong with a pipeline file.
type Problem struct {
	Pos Pos
	Msg string
}

func (p Problem) String() string { return p.Pos.String() + ": " + p.Msg }

// Problems is every problem found in a pipeline file. It is an error that
// wraps ErrInvalid.
type Problems []Problem

func (ps Problems) Error() string {
	lines := make([]string, len(ps))
	for i, p := range ps {
		lines[i] = p.String()
	}
	return strings.Join(lines, "\n")
}

// Unwrap makes errors.Is(err, ErrInvalid) true.
func (ps Problems) Unwrap() error { return ErrInvalid }

func (ps Problems) sorted() Problems {
	out := slices.Clone(ps)
	slices.SortStableFunc(out, func(a, b Problem) int {
		return cmp.Or(cmp.Compare(a.Pos.Line, b.Pos.Line), cmp.Compare(a.Pos.Col, b.Pos.Col))
	})
	return slices.Compact(out)
}

// problems collects problems while a file is loaded.
type problems struct {
	file  string
	lines []string
	list  Problems
}

func (p *problems) at(n *yaml.Node, format string, args ...any) {
	pos := Pos{File: p.file}
	if n != nil {
		pos.Line, pos.Col = n.Line, n.Column
	}
	if pos.Line < 1 { // a node made by the loader, not read from the file
		pos.Line, pos.Col = 1, 1
	}
	p.list = append(p.list, Problem{Pos: pos, Msg: fmt.Sprintf(format, args...)})
}

func (p *problems) atPos(pos Pos, format string, args ...any) {
	pos.File = p.file
	p.list = append(p.list, Problem{Pos: pos, Msg: fmt.Sprintf(format, args...)})
}

// FieldError is returned by a component config's Validate to point at one of
// its keys; the loader reports it at that key's position.
type FieldError struct {
	Key string
	Msg string
}

func (e *FieldError) Error() string { return e.Key + ": " + e.Msg }

// FieldErr returns a *FieldError for key.
func FieldErr(key, format string, args ...any) error {
	return &FieldError{Key: key, Msg: fmt.Sprintf(format, args...)}
}

// splitErrors flattens errors.Join trees.
func splitErrors(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var out []error
		for _, e := range j.Unwrap() {
			out = append(out, splitErrors(e)...)
		}
		return out
	}
	return []error{err}
}

// reportValidate reports the errors of a config's Validate, each at the key it
// names when it is a FieldError found in mapping m, else at m.
func (p *problems) reportValidate(m *yaml.Node, err error) {
	for _, e := range splitErrors(err) {
		var fe *FieldError
		if errors.As(e, &fe) {
			if v := pathValue(m, fe.Key); v != nil {
				p.at(v, "%s: %s", fe.Key, fe.Msg)
				continue
			}
		}
		p.at(m, "%s", e.Error())
	}
}

// pathValue follows a dotted path of keys (and list indexes) from n; it
// returns the deepest node found, nil when not even the first key exists.
func pathValue(n *yaml.Node, path string) *yaml.Node {
	var found *yaml.Node
	for part := range strings.SplitSeq(path, ".") {
		n = resolve(n)
		if n == nil {
			break
		}
		var next *yaml.Node
		switch n.Kind {
		case yaml.MappingNode:
			_, next = mappingValue(n, part)
		case yaml.SequenceNode:
			if i, err := strconv.Atoi(part); err == nil && i >= 0 && i < len(n.Content) {
				next = n.Content[i]
			}
		}
		if next == nil {
			break
		}
		found, n = next, next
	}
	return found
}

// mappingValue returns the key and value nodes of key in mapping m, or nils.
func mappingValue(m *yaml.Node, key string) (*yaml.Node, *yaml.Node) {
	if m == nil || m.Kind != yaml.MappingNode {
		return nil, nil
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return m.Content[i], m.Content[i+1]
		}
	}
	return nil, nil
}
