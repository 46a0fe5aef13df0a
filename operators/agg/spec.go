package agg

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/eddy-stream/eddy/expr"
	"github.com/eddy-stream/eddy/pipeline"
	"go.yaml.in/yaml/v3"
)

// Func is an aggregate function.
type Func uint8

// The aggregate functions. Their numbers are part of the snapshot format:
// never renumber them, only add.
const (
	FuncCount Func = iota + 1
	FuncSum
	FuncAvg
	FuncMin
	FuncMax
	FuncFirst
	FuncLast
	FuncCollect
	FuncCountDistinct
	FuncReduce
	numFuncs
)

var funcNames = [numFuncs]string{
	FuncCount:         "count",
	FuncSum:           "sum",
	FuncAvg:           "avg",
	FuncMin:           "min",
	FuncMax:           "max",
	FuncFirst:         "first",
	FuncLast:          "last",
	FuncCollect:       "collect",
	FuncCountDistinct: "count_distinct",
	FuncReduce:        "reduce",
}

// validFuncs lists the function names in alphabetical order, for messages.
const validFuncs = "avg, collect, count, count_distinct, first, last, max, min, reduce, sum"

// aliases are names users coming from SQL or Flink may try.
var aliases = map[string]string{
	"mean": "avg", "average": "avg", "array_agg": "collect", "list": "collect",
	"listagg": "collect", "distinct_count": "count_distinct", "fold": "reduce",
}

func (f Func) String() string {
	if f > 0 && f < numFuncs {
		return funcNames[f]
	}
	return fmt.Sprintf("Func(%d)", uint8(f))
}

// Retractable reports whether Row.Retract can take a record back out of f.
func (f Func) Retractable() bool {
	switch f {
	case FuncCount, FuncSum, FuncAvg, FuncCollect, FuncCountDistinct:
		return true
	}
	return false
}

// arity returns the least and most number of arguments f takes.
func (f Func) arity() (lo, hi int) {
	switch f {
	case FuncCount:
		return 0, 1
	case FuncReduce:
		return 2, 3
	}
	return 1, 1
}

func lookupFunc(name string) (Func, bool) {
	for f := FuncCount; f < numFuncs; f++ {
		if funcNames[f] == name {
			return f, true
		}
	}
	return 0, false
}

// Spec is one aggregate: an output field and the call that computes it.
type Spec struct {
	// Name is the output field.
	Name string
	// Func is the aggregate function.
	Func Func
	// Args are the call's argument expressions, in order: none or one for
	// count, step, init and optional merge for reduce, one for the others.
	// The loader compiles them over the record as it does every Expr it finds
	// in a config (reporting errors at their exact position); Compile
	// compiles them again with the environment each one really has.
	Args []expr.Expr
	// Source is the call as written, e.g. "avg(temp_c)".
	Source string
	// Pos is where the call stands in the pipeline file (File is empty);
	// zero when the spec was not read from YAML.
	Pos pipeline.Pos

	c *compiled // set by Compile
}

// Specs is an ordered mapping of output fields to aggregate calls:
//
//	aggregate:
//	  n: count()
//	  avg_c: avg(temp_c)
//	  prod: reduce(acc * x, 1, acc * other)
type Specs []Spec

// ParseError is a call that Specs.UnmarshalYAML cannot read.
type ParseError struct {
	// Name is the output field whose call is wrong.
	Name string
	// Pos is where the call stands in the file (File is empty).
	Pos pipeline.Pos
	Msg string
}

func (e *ParseError) Error() string { return e.Name + ": " + e.Msg }

// UnmarshalYAML reads a mapping of output field names to calls, keeping the
// order, and parses every call (function name, arity, argument sources). It
// returns the first problem as a *ParseError. Argument expressions are
// compiled later (Compile, or the loader).
func (s *Specs) UnmarshalYAML(n *yaml.Node) error {
	for n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	if n.Kind != yaml.MappingNode {
		return errors.New("must be a mapping of output fields to aggregate calls, e.g. n: count()")
	}
	if len(n.Content) == 0 {
		return errors.New("needs at least one aggregate, e.g. n: count()")
	}
	out := make(Specs, 0, len(n.Content)/2)
	seen := make(map[string]bool, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		for v.Kind == yaml.AliasNode && v.Alias != nil {
			v = v.Alias
		}
		name := k.Value
		pos := pipeline.Pos{Line: v.Line, Col: v.Column}
		fail := func(format string, args ...any) error {
			return &ParseError{Name: name, Pos: pos, Msg: fmt.Sprintf(format, args...)}
		}
		switch {
		case k.Kind != yaml.ScalarNode || name == "":
			return &ParseError{Name: name, Pos: pipeline.Pos{Line: k.Line, Col: k.Column},
				Msg: "an output field name must be a non-empty string"}
		case strings.Contains(name, "."):
			return &ParseError{Name: name, Pos: pipeline.Pos{Line: k.Line, Col: k.Column},
				Msg: "an output field is a top-level field, so its name cannot contain '.'"}
		case seen[name]:
			return &ParseError{Name: name, Pos: pipeline.Pos{Line: k.Line, Col: k.Column},
				Msg: "duplicate output field"}
		case v.Kind != yaml.ScalarNode:
			return fail("must be an aggregate call such as count() or avg(temp), not a %s", kindName(v.Kind))
		}
		seen[name] = true
		spec, offs, err := parseCall(v.Value)
		if err != nil {
			return fail("%s", err.Error())
		}
		spec.Name, spec.Pos = name, pos
		for j, a := range spec.Args {
			if err := spec.Args[j].UnmarshalYAML(argNode(v, a.Source, offs[j])); err != nil {
				return fail("argument %d: %s", j+1, err.Error())
			}
		}
		out = append(out, spec)
	}
	*s = out
	return nil
}

func kindName(k yaml.Kind) string {
	switch k {
	case yaml.MappingNode:
		return "mapping"
	case yaml.SequenceNode:
		return "list"
	}
	return "value"
}

// argNode returns a scalar node for an argument found at byte offset off of
// the call in value node v, placed where the argument stands in the file when
// that can be told (a one-line plain or quoted scalar without escapes), so that
// the loader reports the argument's compile errors at their column.
func argNode(v *yaml.Node, src string, off int) *yaml.Node {
	n := &yaml.Node{Kind: yaml.ScalarNode, Value: src, Line: v.Line, Column: v.Column}
	if strings.Contains(v.Value, "\n") {
		return n
	}
	cols := utf8.RuneCountInString(v.Value[:off])
	switch v.Style &^ yaml.TaggedStyle {
	case 0, yaml.FlowStyle:
		n.Column += cols
	case yaml.DoubleQuotedStyle:
		if !strings.ContainsAny(v.Value, "\"\\\t") {
			n.Column += 1 + cols
		}
	case yaml.SingleQuotedStyle:
		if !strings.Contains(v.Value, "'") {
			n.Column += 1 + cols
		}
	}
	return n
}

// ParseCall parses one aggregate call, such as "avg(temp_c * 2)", into a
// Spec without Name or Pos. It checks the function name and the number of
// arguments, not the argument expressions: Compile does.
//
// Arguments are split at top-level commas; commas inside parentheses,
// brackets, braces and string literals ("...", '...', `...`) belong to the
// argument.
func ParseCall(call string) (Spec, error) {
	s, _, err := parseCall(call)
	return s, err
}

// parseCall is ParseCall that also returns the byte offset in call of each
// argument.
func parseCall(call string) (Spec, []int, error) {
	start := len(call) - len(strings.TrimLeft(call, " \t\r\n"))
	src := strings.TrimSpace(call)
	if src == "" {
		return Spec{}, nil, errors.New("give an aggregate call, e.g. count() or avg(temp)")
	}
	i := 0
	for i < len(src) && isIdentByte(src[i], i == 0) {
		i++
	}
	name := src[:i]
	j := i
	for j < len(src) && isSpace(src[j]) {
		j++
	}
	if name == "" || j < len(src) && src[j] != '(' {
		return Spec{}, nil, fmt.Errorf("%q is not an aggregate call: write function(argument), e.g. avg(temp); the functions are %s", src, validFuncs)
	}
	f, ok := lookupFunc(name)
	if !ok {
		hint := ""
		if s := suggestFunc(name); s != "" {
			hint = fmt.Sprintf(" (did you mean %s?)", s)
		}
		return Spec{}, nil, fmt.Errorf("unknown aggregate function %q%s; the functions are %s", name, hint, validFuncs)
	}
	if j == len(src) {
		return Spec{}, nil, fmt.Errorf("%q is not a call: write %s(...)", src, name)
	}
	args, offs, end, err := splitArgs(src, name, j+1)
	if err != nil {
		return Spec{}, nil, err
	}
	if rest := strings.TrimSpace(src[end:]); rest != "" {
		return Spec{}, nil, fmt.Errorf("unexpected %q after %s: an aggregate is one call; put the whole expression inside it, e.g. %s(x * 2), or compute with its result in a later step",
			rest, src[:end], name)
	}
	lo, hi := f.arity()
	if len(args) < lo || len(args) > hi {
		return Spec{}, nil, arityError(f, len(args))
	}
	spec := Spec{Func: f, Source: src, Args: make([]expr.Expr, len(args))}
	for k, a := range args {
		spec.Args[k].Source = a
		offs[k] += start
	}
	return spec, offs, nil
}

func arityError(f Func, got int) error {
	switch f {
	case FuncCount:
		return fmt.Errorf("count takes no argument or one (count() counts records, count(x) counts records where x is not null), got %d", got)
	case FuncReduce:
		return fmt.Errorf("reduce takes 2 or 3 arguments, reduce(step, init[, merge]), e.g. reduce(acc * x, 1, acc * other); got %d", got)
	}
	return fmt.Errorf("%s takes exactly 1 argument, e.g. %s(temp); got %d", f, f, got)
}

// splitArgs splits the arguments of call name whose opening parenthesis
// ends at byte i of src. It returns the trimmed argument sources, their byte
// offsets in src, and the offset just past the closing parenthesis.
func splitArgs(src, name string, i int) (args []string, offs []int, end int, err error) {
	var stack []byte // open brackets
	argStart := i
	add := func(to int, last bool) error {
		raw := src[argStart:to]
		a := strings.TrimSpace(raw)
		if a == "" {
			if last && len(args) == 0 {
				return nil // name()
			}
			return fmt.Errorf("argument %d of %s is empty", len(args)+1, name)
		}
		args = append(args, a)
		offs = append(offs, argStart+len(raw)-len(strings.TrimLeft(raw, " \t\r\n")))
		return nil
	}
	for ; i < len(src); i++ {
		switch c := src[i]; c {
		case '"', '\'', '`':
			j := closeQuote(src, i)
			if j < 0 {
				return nil, nil, 0, fmt.Errorf("unterminated string in %q", src)
			}
			i = j
		case '(', '[', '{':
			stack = append(stack, c)
		case ')', ']', '}':
			if len(stack) == 0 {
				if c != ')' {
					return nil, nil, 0, fmt.Errorf("unbalanced %q in %q", c, src)
				}
				if err := add(i, true); err != nil {
					return nil, nil, 0, err
				}
				return args, offs, i + 1, nil
			}
			if open := stack[len(stack)-1]; c != closer(open) {
				return nil, nil, 0, fmt.Errorf("unbalanced %q in %q", c, src)
			}
			stack = stack[:len(stack)-1]
		case ',':
			if len(stack) == 0 {
				if err := add(i, false); err != nil {
					return nil, nil, 0, err
				}
				argStart = i + 1
			}
		}
	}
	return nil, nil, 0, fmt.Errorf("missing %q in %q", ")", src)
}

// closeQuote returns the index of the quote closing the string literal that
// starts at src[i], or -1.
func closeQuote(src string, i int) int {
	q := src[i]
	for j := i + 1; j < len(src); j++ {
		switch src[j] {
		case '\\':
			if q != '`' {
				j++
			}
		case q:
			return j
		}
	}
	return -1
}

func closer(open byte) byte {
	switch open {
	case '(':
		return ')'
	case '[':
		return ']'
	}
	return '}'
}

func isIdentByte(c byte, first bool) bool {
	return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || !first && c >= '0' && c <= '9'
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\r' || c == '\n' }

// suggestFunc returns the function a misspelt or foreign name probably means.
func suggestFunc(name string) string {
	lower := strings.ToLower(name)
	if a, ok := aliases[lower]; ok {
		return a
	}
	return pipeline.Closest(lower, funcNames[FuncCount:numFuncs])
}

// Names returns the output fields in order, for a step to check them
// against the other fields it writes (key, window_start, window_end).
func (s Specs) Names() []string {
	out := make([]string, len(s))
	for i := range s {
		out[i] = s[i].Name
	}
	return out
}

// Signature returns a canonical text of the specs, such as
// "n=count();avg_c=avg(temp_c)". An operator can store it with its state
// and compare it on restore: rows only decode into the specs that wrote them.
func (s Specs) Signature() string {
	var b strings.Builder
	for i, sp := range s {
		if i > 0 {
			b.WriteByte(';')
		}
		b.WriteString(sp.Name)
		b.WriteByte('=')
		b.WriteString(sp.Func.String())
		b.WriteByte('(')
		for j, a := range sp.Args {
			if j > 0 {
				b.WriteString(", ")
			}
			b.WriteString(a.Source)
		}
		b.WriteByte(')')
	}
	return b.String()
}

// Retractable returns nil when every aggregate supports Row.Retract, else a
// *pipeline.FieldError keyed "aggregate.<name>" for each one that does not:
// a step that retracts (a continuous aggregate over a changelog) calls it
// from its Validate.
func (s Specs) Retractable() error {
	var errs []error
	for _, sp := range s {
		if !sp.Func.Retractable() {
			errs = append(errs, pipeline.FieldErr("aggregate."+sp.Name,
				"%s cannot take a record back out (only count, sum, avg, collect and count_distinct can); it needs an append-only input", sp.Func))
		}
	}
	return errors.Join(errs...)
}

// Mergeable returns nil when every aggregate supports Row.Merge, else a
// *pipeline.FieldError keyed "aggregate.<name>" for each reduce without a
// merge expression: sliding windows (shared panes) and session windows need
// merges.
func (s Specs) Mergeable() error {
	var errs []error
	for _, sp := range s {
		if sp.Func == FuncReduce && len(sp.Args) < 3 {
			errs = append(errs, pipeline.FieldErr("aggregate."+sp.Name,
				"reduce needs a merge expression over acc and other to combine partial results, e.g. reduce(acc * x, 1, acc * other)"))
		}
	}
	return errors.Join(errs...)
}
