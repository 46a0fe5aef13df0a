package pipeline

import (
	"errors"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/expr-lang/expr"
	"github.com/expr-lang/expr/ast"
	"github.com/expr-lang/expr/file"
	"github.com/expr-lang/expr/vm"
	"go.yaml.in/yaml/v3"
)

// Expr is an expression of a pipeline file. The loader compiles every Expr of
// a component's config once, after decoding; the compiled program is shared by
// all subtasks, each of which evaluates it with its own VM.
//
// A struct field's `expr` tag sets what the expression must return:
// `expr:"bool"` for a predicate; no tag for any value.
type Expr struct {
	Source  string
	pos     Pos
	style   yaml.Style
	program *vm.Program
	// meta has bit i set when a record expression names metaNames[i]
	// (source metadata: _key, _headers, _partition, _offset, _timestamp).
	meta uint8
}

// Source metadata names: a record expression reads them from Record.Meta.
const (
	MetaKey       = "_key"
	MetaHeaders   = "_headers"
	MetaPartition = "_partition"
	MetaOffset    = "_offset"
	MetaTimestamp = "_timestamp"
)

// metaNames are the metadata names, in the bit order of Expr.meta.
var metaNames = [...]string{MetaKey, MetaHeaders, MetaPartition, MetaOffset, MetaTimestamp}

// metaFinder notes which metadata names an expression uses.
type metaFinder struct{ used uint8 }

func (f *metaFinder) Visit(n *ast.Node) {
	if id, ok := (*n).(*ast.IdentifierNode); ok {
		for i, name := range metaNames {
			if id.Value == name {
				f.used |= 1 << i
			}
		}
	}
}

// metaValue returns the value of metadata name i of m.
func metaValue(m *Meta, i int) any {
	switch metaNames[i] {
	case MetaKey:
		if m.Key != nil {
			return string(m.Key)
		}
	case MetaHeaders:
		if m.Headers != nil {
			return m.Headers
		}
	case MetaPartition:
		return int(m.Partition)
	case MetaOffset:
		return int(m.Offset)
	case MetaTimestamp:
		return int(m.Timestamp)
	}
	return nil
}

// UnmarshalYAML keeps the source text and where it stands in the file.
func (e *Expr) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return fmt.Errorf("an expression must be a string, not %s", describeNode(n))
	}
	if strings.TrimSpace(n.Value) == "" {
		return errors.New("the expression is empty")
	}
	e.Source = n.Value
	e.pos = Pos{Line: n.Line, Col: n.Column}
	e.style = n.Style
	return nil
}

// MustExpr returns a compiled expression over records, for tests and code
// that builds pipelines without a file. It panics on a compile error.
func MustExpr(source string) *Expr {
	e := &Expr{Source: source}
	if err := e.Compile(nil, ""); err != nil {
		panic(err)
	}
	return e
}

// IsSet reports whether the expression was given.
func (e *Expr) IsSet() bool { return e != nil && e.Source != "" }

// Program returns the compiled program; nil before Compile.
func (e *Expr) Program() *vm.Program { return e.program }

// Pos returns where the expression stands in the pipeline file.
func (e *Expr) Pos() Pos { return e.pos }

// ExprEnver is implemented by configs whose expressions run over something
// other than a record (the generator's counter and random helpers). The map's
// values give names and types to the checker; undefined names are errors.
type ExprEnver interface {
	ExprEnv() map[string]any
}

// Compile compiles e. env nil means a record environment: any field name is
// allowed (missing fields are nil). want "bool" requires a boolean result.
func (e *Expr) Compile(env map[string]any, want string) error {
	opts := Builtins()
	var mf metaFinder
	if env == nil {
		opts = append(opts, expr.Env(map[string]any{}), expr.AllowUndefinedVariables(), expr.Patch(&mf))
	} else {
		opts = append(opts, expr.Env(env))
	}
	if want == "bool" {
		opts = append(opts, expr.AsBool())
	}
	p, err := expr.Compile(e.Source, opts...)
	if err != nil {
		return err
	}
	e.program = p
	e.meta = mf.used
	return nil
}

// errorPos returns the file position of a compile error inside e; lines
// are the file's lines, for the indentation of block scalars.
func (e *Expr) errorPos(err error, lines []string) (Pos, string) {
	pos := e.pos
	var fe *file.Error
	if !errors.As(err, &fe) {
		return pos, err.Error()
	}
	switch e.style {
	case yaml.LiteralStyle, yaml.FoldedStyle:
		// The content starts on the line after the indicator, indented.
		// The block's indentation is that of its first content line.
		first := e.pos.Line // 0-based index of the line after the indicator
		pos.Line += fe.Line
		pos.Col = 1 + fe.Column
		if first < len(lines) {
			line := lines[first]
			pos.Col += len(line) - len(strings.TrimLeft(line, " "))
		}
	case yaml.DoubleQuotedStyle, yaml.SingleQuotedStyle:
		pos.Line += fe.Line - 1
		pos.Col += 1 + fe.Column
	default:
		pos.Line += fe.Line - 1
		pos.Col += fe.Column
	}
	return pos, fe.Message
}

// compileExprs compiles every Expr reachable from v (a config struct pointer)
// and reports compile errors at their position within the file.
func (p *problems) compileExprs(v any) {
	var env map[string]any
	if en, ok := v.(ExprEnver); ok {
		env = en.ExprEnv()
	}
	p.walkExprs(reflect.ValueOf(v), env, "")
}

var exprType = reflect.TypeFor[Expr]()

func (p *problems) walkExprs(v reflect.Value, env map[string]any, want string) {
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface:
		if !v.IsNil() {
			p.walkExprs(v.Elem(), env, want)
		}
	case reflect.Struct:
		if v.Type() == exprType {
			e := v.Addr().Interface().(*Expr)
			if e.Source == "" {
				return
			}
			if err := e.Compile(env, want); err != nil {
				pos, msg := e.errorPos(err, p.lines)
				p.atPos(pos, "expression %q: %s", e.Source, msg)
			}
			return
		}
		for i := range v.NumField() {
			f := v.Type().Field(i)
			if f.IsExported() {
				p.walkExprs(v.Field(i), env, f.Tag.Get("expr"))
			}
		}
	case reflect.Slice, reflect.Array:
		for i := range v.Len() {
			p.walkExprs(v.Index(i), env, want)
		}
	case reflect.Map:
		iter := v.MapRange()
		for iter.Next() {
			p.walkExprs(iter.Value(), env, want)
		}
	}
}

// VM evaluates compiled expressions. Each task goroutine owns its VMs.
type VM struct {
	vm vm.VM
}

// Eval runs e over env (a record's fields, or an ExprEnv environment).
func (m *VM) Eval(e *Expr, env any) (any, error) {
	return m.vm.Run(e.program, env)
}

// EvalRecord runs e over a record: its fields, and its source metadata as
// _key (string, nil without a key), _headers (map of strings), _partition,
// _offset and _timestamp (epoch ms) when the expression names them and the
// record has metadata. Metadata is lent to the fields for the call only: a
// field of the same name is shadowed during it and restored after.
//
// A result that is, or holds in its maps and lists, a NaN or an infinite
// float (`a / b` with b = 0) is an error wrapping ErrNotFinite: no record
// field, key or event time is ever computed as one.
func (m *VM) EvalRecord(e *Expr, r *Record) (any, error) {
	out, err := m.evalRecord(e, r)
	if err != nil {
		return nil, err
	}
	if err := CheckFinite(out); err != nil {
		return nil, err
	}
	return out, nil
}

func (m *VM) evalRecord(e *Expr, r *Record) (any, error) {
	if e.meta == 0 || r.Meta == nil {
		return m.vm.Run(e.program, r.Fields)
	}
	if r.Fields == nil {
		r.Fields = map[string]any{}
	}
	// Only the names the expression uses are lent (and a field of the same
	// name put back after).
	var saved [len(metaNames)]any
	var had [len(metaNames)]bool
	for i, n := range metaNames {
		if e.meta&(1<<i) != 0 {
			saved[i], had[i] = r.Fields[n]
			r.Fields[n] = metaValue(r.Meta, i)
		}
	}
	out, err := m.vm.Run(e.program, r.Fields)
	for i, n := range metaNames {
		switch {
		case e.meta&(1<<i) == 0:
		case had[i]:
			r.Fields[n] = saved[i]
		default:
			delete(r.Fields, n)
		}
	}
	return out, err
}

// CheckFinite returns an error wrapping ErrNotFinite when v is a NaN or an
// infinite float, or a map[string]any or []any holding one at any depth; the
// error names the value's path ("a.0.b") inside v. It allocates only when
// it returns an error.
func CheckFinite(v any) error {
	if nf := findNonFinite(v); nf != nil {
		return nf
	}
	return nil
}

// NotFiniteError is the error of CheckFinite.
type NotFiniteError struct {
	Value float64
	// rpath is the path of the value inside the result, innermost first.
	rpath []string
}

// Path returns where the value stands in the result ("" for the result
// itself, "a.0.b" for a nested one).
func (e *NotFiniteError) Path() string {
	p := slices.Clone(e.rpath)
	slices.Reverse(p)
	return strings.Join(p, ".")
}

func (e *NotFiniteError) Error() string {
	if len(e.rpath) == 0 {
		return fmt.Sprintf("the result is %v, %s (a division by zero?)", e.Value, ErrNotFinite)
	}
	return fmt.Sprintf("the result holds %v at %q, %s (a division by zero?)", e.Value, e.Path(), ErrNotFinite)
}

func (e *NotFiniteError) Unwrap() error { return ErrNotFinite }

// findNonFinite is CheckFinite without the interface conversion: a type
// switch for the common results, a walk of maps and lists, no reflection.
func findNonFinite(v any) *NotFiniteError {
	switch x := v.(type) {
	case float64:
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return &NotFiniteError{Value: x}
		}
	case float32:
		if f := float64(x); math.IsNaN(f) || math.IsInf(f, 0) {
			return &NotFiniteError{Value: f}
		}
	case map[string]any:
		for k, e := range x {
			if nf := findNonFinite(e); nf != nil {
				nf.rpath = append(nf.rpath, k)
				return nf
			}
		}
	case []any:
		for i, e := range x {
			if nf := findNonFinite(e); nf != nil {
				nf.rpath = append(nf.rpath, strconv.Itoa(i))
				return nf
			}
		}
	}
	return nil
}

// EvalBool runs a predicate.
func (m *VM) EvalBool(e *Expr, env any) (bool, error) {
	out, err := m.vm.Run(e.program, env)
	if err != nil {
		return false, err
	}
	b, ok := out.(bool)
	if !ok {
		return false, fmt.Errorf("expression %q returned %T, not a bool", e.Source, out)
	}
	return b, nil
}

// NamedExpr is one entry of an ExprMap.
type NamedExpr struct {
	Name string
	Expr Expr
}

// ExprMap is an ordered mapping of names to expressions (set, map, generator
// fields, aggregates). Order is kept: later entries see earlier ones in set.
type ExprMap []NamedExpr

// UnmarshalYAML reads a mapping of name: expression.
func (m *ExprMap) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.MappingNode {
		return fmt.Errorf("must be a mapping of field names to expressions, not %s", describeNode(n))
	}
	var out ExprMap
	for i := 0; i+1 < len(n.Content); i += 2 {
		var e Expr
		if err := e.UnmarshalYAML(n.Content[i+1]); err != nil {
			return fmt.Errorf("%s: %w", n.Content[i].Value, err)
		}
		out = append(out, NamedExpr{Name: n.Content[i].Value, Expr: e})
	}
	if len(out) == 0 {
		return errors.New("needs at least one field")
	}
	*m = out
	return nil
}

// Duration is a duration in a pipeline file: "200ms", "10s", "1h30m", "2d", or 0.
type Duration time.Duration

// UnmarshalYAML parses a duration.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	v, err := ParseDuration(n.Value)
	if err != nil {
		return err
	}
	*d = Duration(v)
	return nil
}

// D returns d as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// Millis returns d in milliseconds.
func (d Duration) Millis() int64 { return time.Duration(d).Milliseconds() }

// ParseDuration parses Go durations plus a "d" (24h) unit and a bare 0.
func ParseDuration(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	if s == "0" {
		return 0, nil
	}
	if days, ok := strings.CutSuffix(s, "d"); ok {
		if n, err := strconv.Atoi(days); err == nil {
			return time.Duration(n) * 24 * time.Hour, nil
		}
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("%q is not a duration (examples: 200ms, 10s, 5m, 1h, 2d)", s)
	}
	if d < 0 {
		return 0, fmt.Errorf("duration %q must not be negative", s)
	}
	return d, nil
}

// StringList is one string or a list of strings.
type StringList []string

// UnmarshalYAML accepts a scalar or a sequence of scalars.
func (l *StringList) UnmarshalYAML(n *yaml.Node) error {
	switch n.Kind {
	case yaml.ScalarNode:
		*l = StringList{n.Value}
		return nil
	case yaml.SequenceNode:
		out := make(StringList, 0, len(n.Content))
		for _, c := range n.Content {
			if c.Kind != yaml.ScalarNode {
				return fmt.Errorf("must be a string or a list of strings")
			}
			out = append(out, c.Value)
		}
		*l = out
		return nil
	}
	return fmt.Errorf("must be a string or a list of strings, not %s", describeNode(n))
}
