package agg

import (
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/eddy-stream/eddy/expr"
	"github.com/eddy-stream/eddy/pipeline"
	"github.com/expr-lang/expr/ast"
	"github.com/expr-lang/expr/file"
	"github.com/expr-lang/expr/parser"
)

// The names reduce binds: the accumulator in the step and merge expressions,
// and the later partial accumulator in the merge expression.
const (
	accName   = "acc"
	otherName = "other"
)

// compiled is what Compile derives from a Spec. It is read-only once built
// and shared by every Row and goroutine (the pool is safe for concurrent use).
type compiled struct {
	// arg is the argument of a one-argument function; nil for count() and reduce.
	arg *expr.Expr
	// field is set when arg is a plain field name: Add reads the field
	// directly instead of running the VM.
	field string

	// reduce:
	step, merge *expr.Expr
	init        any      // the value of the init expression
	idents      []string // record fields the step reads (never acc)
	all         bool     // the step reads $env: it sees a copy of every field
	pool        sync.Pool
}

// scratch is a reusable environment for reduce's expressions.
type scratch struct {
	vm  expr.VM
	env map[string]any
}

// Compile compiles every argument expression, once; Rows need compiled
// specs. It returns a *pipeline.FieldError keyed "aggregate.<name>" for each
// aggregate with a bad argument (errors.Join), so a step's Validate can
// return it as is. Compiling again is harmless.
//
// Arguments run over the record: any field name is allowed, a missing field
// is nil. reduce's step runs over the record plus acc; its init may not use
// record fields (it is evaluated here, once); its merge may use only acc and
// other.
func (s Specs) Compile() error {
	var errs []error
	for i := range s {
		if err := s[i].compile(); err != nil {
			errs = append(errs, pipeline.FieldErr("aggregate."+s[i].Name, "%s", err.Error()))
		}
	}
	return errors.Join(errs...)
}

// Compiled reports whether Compile has succeeded for every spec.
func (s Specs) Compiled() bool {
	for i := range s {
		if s[i].c == nil {
			return false
		}
	}
	return true
}

func (s *Spec) compile() error {
	s.c = nil
	lo, hi := s.Func.arity()
	if s.Func == 0 || s.Func >= numFuncs {
		return fmt.Errorf("unknown aggregate function %s; the functions are %s", s.Func, validFuncs)
	}
	if len(s.Args) < lo || len(s.Args) > hi {
		return arityError(s.Func, len(s.Args))
	}
	c := &compiled{}
	if s.Func != FuncReduce {
		if len(s.Args) == 1 {
			c.arg = &s.Args[0]
			if err := c.arg.Compile(nil, ""); err != nil {
				return argError(s, 0, err)
			}
			c.field = plainField(c.arg)
		}
		s.c = c
		return nil
	}

	c.step = &s.Args[0]
	if err := c.step.Compile(nil, ""); err != nil {
		return argError(s, 0, err)
	}
	names, lets, env := identifiers(c.step.Source)
	c.all = env
	for _, n := range names {
		if n != accName && !lets[n] {
			c.idents = append(c.idents, n)
		}
	}

	init := &s.Args[1]
	if err := init.Compile(map[string]any{}, ""); err != nil {
		return argError(s, 1, err)
	}
	var vm expr.VM
	v, err := vm.Eval(init, map[string]any{})
	if err != nil {
		return argError(s, 1, err)
	}
	c.init = v

	if len(s.Args) == 3 {
		c.merge = &s.Args[2]
		if err := c.merge.Compile(nil, ""); err != nil {
			return argError(s, 2, err)
		}
		names, lets, env := identifiers(c.merge.Source)
		if env {
			return argError(s, 2, errors.New("$env is not available: use acc and other"))
		}
		for _, n := range names {
			if n != accName && n != otherName && !lets[n] {
				return argError(s, 2, fmt.Errorf("unknown name %s: the merge expression combines two partial results, acc (the earlier) and other (the later)", n))
			}
		}
	}
	c.pool.New = func() any { return &scratch{env: make(map[string]any, len(c.idents)+2)} }
	s.c = c
	return nil
}

var reduceArgNames = [...]string{"step", "init", "merge"}

// argError describes a compile error of argument i.
func argError(s *Spec, i int, err error) error {
	what := fmt.Sprintf("argument %d", i+1)
	if s.Func == FuncReduce {
		what = reduceArgNames[i]
	}
	msg := err.Error()
	var fe *file.Error
	if errors.As(err, &fe) {
		msg = fmt.Sprintf("%s (column %d)", fe.Message, fe.Column+1)
	}
	return fmt.Errorf("%s: %s %q: %s", s.Source, what, s.Args[i].Source, msg)
}

// plainField returns the field name when e is nothing but a record field
// (`temp_c`), else "". It checks what the compiled program does, so a name
// the compiler resolves otherwise never takes the shortcut.
func plainField(e *expr.Expr) string {
	tree, err := parser.Parse(e.Source)
	if err != nil {
		return ""
	}
	id, ok := tree.Node.(*ast.IdentifierNode)
	if !ok || id.Value == "$env" {
		return ""
	}
	probe := new(int)
	var vm expr.VM
	got, err := vm.Eval(e, map[string]any{id.Value: probe})
	if err != nil || got != any(probe) {
		return ""
	}
	if got, err := vm.Eval(e, map[string]any{}); err != nil || got != nil {
		return ""
	}
	return id.Value
}

// identifiers returns the sorted names src reads from its environment, the
// names it declares with let, and whether it reads $env.
func identifiers(src string) (names []string, lets map[string]bool, env bool) {
	tree, err := parser.Parse(src)
	if err != nil {
		return nil, nil, true
	}
	v := &identVisitor{callees: map[ast.Node]bool{}, lets: map[string]bool{}}
	ast.Walk(&tree.Node, v)
	for _, id := range v.ids {
		switch {
		case v.callees[id]:
		case id.Value == "$env":
			env = true
		default:
			names = append(names, id.Value)
		}
	}
	slices.Sort(names)
	return slices.Compact(names), v.lets, env
}

type identVisitor struct {
	ids     []*ast.IdentifierNode
	callees map[ast.Node]bool
	lets    map[string]bool
}

func (v *identVisitor) Visit(n *ast.Node) {
	switch x := (*n).(type) {
	case *ast.IdentifierNode:
		v.ids = append(v.ids, x)
	case *ast.CallNode:
		v.callees[x.Callee] = true
	case *ast.VariableDeclaratorNode:
		v.lets[x.Name] = true
	}
}

// reduceStep runs reduce's step over the record fields with acc bound to
// acc. The environment is a pooled map holding only the fields the step
// reads (every field when it reads $env) plus acc, so the record is never
// modified, a record field named acc is shadowed, and no allocation happens
// once the pool is warm.
func (c *compiled) reduceStep(vm *expr.VM, acc any, fields map[string]any) (any, error) {
	sc := c.pool.Get().(*scratch)
	env := sc.env
	if c.all {
		for k, v := range fields {
			env[k] = v
		}
	} else {
		for _, k := range c.idents {
			env[k] = fields[k]
		}
	}
	env[accName] = acc
	out, err := vm.Eval(c.step, env)
	clear(env)
	c.pool.Put(sc)
	return out, err
}

// reduceMerge runs reduce's merge with acc and other bound.
func (c *compiled) reduceMerge(acc, other any) (any, error) {
	sc := c.pool.Get().(*scratch)
	sc.env[accName], sc.env[otherName] = acc, other
	out, err := sc.vm.Eval(c.merge, sc.env)
	clear(sc.env)
	c.pool.Put(sc)
	return out, err
}
