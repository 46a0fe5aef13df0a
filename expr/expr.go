package expr

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	exprlang "github.com/expr-lang/expr"
	"github.com/expr-lang/expr/ast"
	"github.com/expr-lang/expr/file"
	"github.com/expr-lang/expr/vm"
	exprruntime "github.com/expr-lang/expr/vm/runtime"
	"go.yaml.in/yaml/v3"
)

// Expr is an expression of a pipeline file. Package pipeline's loader finds
// every Expr of a component's config and compiles it once, after decoding
// (as a predicate when the struct field is tagged `expr:"bool"`); the
// compiled program is shared by all subtasks, each of which evaluates it
// with its own VM.
type Expr struct {
	Source  string
	pos     Pos
	style   yaml.Style
	program *vm.Program
	// meta has bit i set when a record expression names metaNames[i]
	// (source metadata: _key, _headers, _partition, _offset, _timestamp).
	meta uint8
	// path is set when a record expression is a field path and nothing
	// else (`date_time`, `bid.auction`, `bid["auction"]`, `left?.id`):
	// evalRecord and Eval look it up in the record's maps themselves,
	// which gives what the program gives without running it.
	path *fieldPath
}

// Pos is a position in a pipeline file; Line and Col are 1-based. An Expr's
// position has no File: the loader, which knows the file's name, sets it.
type Pos struct {
	File string
	Line int
	Col  int
}

func (p Pos) String() string { return fmt.Sprintf("%s:%d:%d", p.File, p.Line, p.Col) }

// Meta is a record's source metadata (a Kafka record's key, headers,
// partition, offset and timestamp), reachable in record expressions as
// _key, _headers, _partition, _offset and _timestamp.
type Meta struct {
	Key       []byte
	Headers   map[string]string
	Partition int32
	Offset    int64
	Timestamp int64
}

// Source metadata names: a record expression reads them from a Meta.
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

// nullSafe turns every field access on a top-level name (`right.seller`)
// into an optional one (`right?.seller`).
type nullSafe struct{}

func (nullSafe) Visit(n *ast.Node) {
	m, ok := (*n).(*ast.MemberNode)
	if !ok || m.Optional || m.Method {
		return
	}
	if _, ok := m.Node.(*ast.IdentifierNode); !ok {
		return
	}
	ast.Patch(n, &ast.ChainNode{Node: &ast.MemberNode{Node: m.Node, Property: m.Property, Optional: true}})
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

// Compile compiles e. env nil means a record environment: any field name is
// allowed (missing fields are nil). want "bool" requires a boolean result;
// want "nullsafe" makes a field access on a top-level name that is nil give
// nil, as SQL's NULL does (`right.seller` when a join row has no right
// side), where it otherwise fails.
func (e *Expr) Compile(env map[string]any, want string) error {
	opts := Builtins()
	var mf metaFinder
	if env == nil {
		opts = append(opts, exprlang.Env(map[string]any{}), exprlang.AllowUndefinedVariables(), exprlang.Patch(&mf))
	} else {
		opts = append(opts, exprlang.Env(env))
	}
	switch want {
	case "bool":
		opts = append(opts, exprlang.AsBool())
	case "nullsafe":
		opts = append(opts, exprlang.Patch(nullSafe{}))
	}
	p, err := exprlang.Compile(e.Source, opts...)
	if err != nil {
		return err
	}
	e.program = p
	e.meta = mf.used
	e.path = nil
	if env == nil && mf.used == 0 {
		e.path = compilePath(p)
	}
	return nil
}

// fieldPath is a record expression that is a field path and nothing else:
// the names from the record's top level down.
type fieldPath struct {
	names []string
	// nullSafe: the first access is optional (`left?.id`, or `left.id`
	// compiled nullsafe): a nil top-level value gives nil.
	nullSafe bool
}

// The opcodes of an optional first access, after OpLoadFast: jump over
// the fetch if nil, then make any nil (a typed nil too) an untyped one.
var nullSafeCode = []vm.Opcode{vm.OpJumpIfNil, vm.OpPush, vm.OpFetch, vm.OpJumpIfNotNil, vm.OpPop, vm.OpNil}

// compilePath returns the field path that program p is, or nil when it is
// anything else. A field path compiles to the load of a top-level name,
// OpLoadFast (env[name]), then per '.' the fetch of a constant name,
// OpPush name and OpFetch (runtime.Fetch, which indexes a map[string]any
// as Go does: nil for a missing key); an optional first access adds the
// jumps of nullSafeCode around its fetch.
func compilePath(p *vm.Program) *fieldPath {
	code, args := p.Bytecode, p.Arguments
	if len(code) == 0 || code[0] != vm.OpLoadFast {
		return nil
	}
	name := func(i int) (string, bool) {
		if args[i] >= len(p.Constants) {
			return "", false
		}
		s, ok := p.Constants[args[i]].(string)
		return s, ok
	}
	first, ok := name(0)
	if !ok {
		return nil
	}
	f := &fieldPath{names: []string{first}}
	i := 1
	if len(code) >= 1+len(nullSafeCode) && slices.Equal(code[1:1+len(nullSafeCode)], nullSafeCode) && args[1] == 2 && args[4] == 2 {
		n, ok := name(2)
		if !ok {
			return nil
		}
		f.names, f.nullSafe = append(f.names, n), true
		i += len(nullSafeCode)
	}
	for ; i < len(code); i += 2 {
		if i+1 >= len(code) || code[i] != vm.OpPush || code[i+1] != vm.OpFetch {
			return nil
		}
		n, ok := name(i)
		if !ok {
			return nil
		}
		f.names = append(f.names, n)
	}
	return f
}

// lookup returns the value of the path in fields, as its program would,
// and true; false when a value it fetches from is not a map[string]any
// (the program decides then: nil fails, a struct or a list is fetched
// otherwise). An optional access gives an untyped nil where the program's
// nil test (runtime.IsNil, which takes typed nils for nil too) is true.
func (f *fieldPath) lookup(fields map[string]any) (any, bool) {
	v := fields[f.names[0]]
	for i, n := range f.names[1:] {
		optional := f.nullSafe && i == 0
		if optional && exprruntime.IsNil(v) {
			v = nil
			continue
		}
		m, ok := v.(map[string]any)
		if !ok {
			return nil, false
		}
		v = m[n]
		if optional && exprruntime.IsNil(v) {
			v = nil
		}
	}
	return v, true
}

// ErrorPos returns the file position of a compile error of e, and the
// error's message without expr-lang's source snippet; lines are the file's lines,
// for the indentation of block scalars.
func (e *Expr) ErrorPos(err error, lines []string) (Pos, string) {
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

// VM evaluates compiled expressions. Each task goroutine owns its VMs.
type VM struct {
	vm vm.VM
}

// Eval runs e over env (a record's fields, or the environment it was
// compiled with).
func (m *VM) Eval(e *Expr, env any) (any, error) {
	if e.path != nil {
		if fields, ok := env.(map[string]any); ok {
			if v, ok := e.path.lookup(fields); ok {
				return v, nil
			}
		}
	}
	return m.vm.Run(e.program, env)
}

// EvalRecord runs e over a record: its fields, and its source metadata meta
// (nil when it has none) as _key (string, nil without a key), _headers (map
// of strings), _partition, _offset and _timestamp (epoch ms) when the
// expression names them. Metadata is lent to fields for the call only: a
// field of the same name is shadowed during it and restored after.
//
// A result that is, or holds in its maps and lists, a NaN or an infinite
// float (`a / b` with b = 0) is an error wrapping ErrNotFinite: no record
// field, key or event time is ever computed as one.
func (m *VM) EvalRecord(e *Expr, fields map[string]any, meta *Meta) (any, error) {
	out, err := m.evalRecord(e, fields, meta)
	if err != nil {
		return nil, err
	}
	if err := CheckFinite(out); err != nil {
		return nil, err
	}
	return out, nil
}

func (m *VM) evalRecord(e *Expr, fields map[string]any, meta *Meta) (any, error) {
	if e.path != nil {
		if v, ok := e.path.lookup(fields); ok {
			return v, nil
		}
	}
	if e.meta == 0 || meta == nil {
		return m.vm.Run(e.program, fields)
	}
	if fields == nil {
		// Nothing to put back: the metadata goes in a map of its own.
		fields = make(map[string]any, len(metaNames))
		for i, n := range metaNames {
			if e.meta&(1<<i) != 0 {
				fields[n] = metaValue(meta, i)
			}
		}
		return m.vm.Run(e.program, fields)
	}
	// Only the names the expression uses are lent (and a field of the same
	// name put back after).
	var saved [len(metaNames)]any
	var had [len(metaNames)]bool
	for i, n := range metaNames {
		if e.meta&(1<<i) != 0 {
			saved[i], had[i] = fields[n]
			fields[n] = metaValue(meta, i)
		}
	}
	out, err := m.vm.Run(e.program, fields)
	for i, n := range metaNames {
		switch {
		case e.meta&(1<<i) == 0:
		case had[i]:
			fields[n] = saved[i]
		default:
			delete(fields, n)
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

// NamedExpr is one entry of a Map.
type NamedExpr struct {
	Name string
	Expr Expr
}

// Map is an ordered mapping of names to expressions (set, map, generator
// fields, aggregates). Order is kept: later entries see earlier ones in set.
type Map []NamedExpr

// UnmarshalYAML reads a mapping of name: expression.
func (m *Map) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.MappingNode {
		return fmt.Errorf("must be a mapping of field names to expressions, not %s", describeNode(n))
	}
	var out Map
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

// describeNode names what a YAML node holds, for an error message.
func describeNode(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	}
	return fmt.Sprintf("%q", n.Value)
}
