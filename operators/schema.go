package operators

import "github.com/eddy-stream/eddy/pipeline"

// JSONSchema describes a window's size, slide, offset or gap for `eddy
// schema`: a duration (an offset may be negative), or a number of records
// for count windows.
func (windowLength) JSONSchema() map[string]any {
	return map[string]any{"type": []string{"string", "integer"},
		"description": "a duration such as 10s (a number of records for count windows)"}
}

// JSONSchema describes a key: one expression or a list of them.
func (KeyList) JSONSchema() map[string]any {
	e := pipeline.ExpressionSchema()
	return map[string]any{"anyOf": []any{e, map[string]any{"type": "array", "items": e, "minItems": 1}},
		"description": "a key expression, or a list of them (a composite key)"}
}
