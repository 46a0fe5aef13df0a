package pipeline

import (
	"reflect"

	"github.com/eddy-stream/eddy/expr"
)

// ExprEnver is implemented by configs whose expressions run over something
// other than a record (the generator's counter and random helpers). The map's
// values give names and types to the checker; undefined names are errors.
type ExprEnver interface {
	ExprEnv() map[string]any
}

// compileExprs compiles every expr.Expr reachable from v (a config struct
// pointer) and reports compile errors at their position within the file. A
// struct field's `expr` tag sets what its expression must return:
// `expr:"bool"` for a predicate, `expr:"nullsafe"` for expressions whose
// field accesses on a nil name give nil (a join's select); no tag for any
// value. A tag holds for every expression inside the field it is on.
func (p *problems) compileExprs(v any) {
	var env map[string]any
	if en, ok := v.(ExprEnver); ok {
		env = en.ExprEnv()
	}
	p.walkExprs(reflect.ValueOf(v), env, "")
}

var exprType = reflect.TypeFor[expr.Expr]()

func (p *problems) walkExprs(v reflect.Value, env map[string]any, want string) {
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface:
		if !v.IsNil() {
			p.walkExprs(v.Elem(), env, want)
		}
	case reflect.Struct:
		if v.Type() == exprType {
			e := v.Addr().Interface().(*expr.Expr)
			if e.Source == "" {
				return
			}
			if err := e.Compile(env, want); err != nil {
				pos, msg := e.ErrorPos(err, p.lines)
				p.atPos(pos, "expression %q: %s", e.Source, msg)
			}
			return
		}
		for i := range v.NumField() {
			f := v.Type().Field(i)
			if f.IsExported() {
				w := f.Tag.Get("expr")
				if w == "" {
					w = want // a tag holds for the expressions inside the field
				}
				p.walkExprs(v.Field(i), env, w)
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
