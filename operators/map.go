package operators

import (
	"github.com/eddy-stream/eddy/expr"
	"github.com/eddy-stream/eddy/pipeline"
)

func init() {
	register(pipeline.StepPlugin{
		Kind:    "map",
		Summary: "replace each record by a new one made of the listed field: expression pairs",
		New:     func() pipeline.StepConfig { return &MapConfig{} },
	})
}

// MapConfig is a `map:` step.
//
//	steps:
//	  - id: slim
//	    map:
//	      id: sensor_id
//	      temp_c: (temp - 32) * 5 / 9
type MapConfig struct {
	// Map lists the fields of the new record; every expression sees the
	// input record.
	Map expr.Map `yaml:"map"`
}

// Validate requires at least one field; names are top-level, without '.'.
func (c *MapConfig) Validate() error {
	if len(c.Map) == 0 {
		return pipeline.FieldErr("map", "give at least one field: expression, e.g. map: {id: sensor_id}")
	}
	return checkFieldNames("map", exprNames(c.Map))
}

// NewOperator returns the map operator of one subtask.
func (c *MapConfig) NewOperator() (pipeline.Operator, error) {
	return &mapOp{fields: c.Map}, nil
}

type mapOp struct {
	exprOp
	fields expr.Map
}

// Process gives each record a new map holding just the listed fields, each
// computed over the input record; Time, Key and Meta are kept. A record whose
// expression fails goes to on_error unchanged.
func (o *mapOp) Process(in []pipeline.Record, out pipeline.Emitter) error {
	kept := 0
	for i := range in {
		nf := make(map[string]any, len(o.fields))
		var err error
		for j := range o.fields {
			e := &o.fields[j]
			v, eerr := o.vm.EvalRecord(&e.Expr, in[i].Fields, in[i].Meta)
			if eerr != nil {
				err = &evalError{kind: "map", field: e.Name, src: e.Expr.Source, err: eerr}
				break
			}
			nf[e.Name] = v
		}
		if err != nil {
			if herr := o.errors.Handle(in[i], err); herr != nil {
				clear(in[kept:])
				return failAfter(out, in[:kept], herr)
			}
			continue
		}
		in[kept] = in[i]
		in[kept].Fields = nf
		kept++
	}
	clear(in[kept:])
	return emit(out, in[:kept])
}
