package agg

import "strings"

// JSONSchema describes the aggregate mapping for `eddy schema`: output
// fields (without '.') to a call of one of the aggregate functions.
func (Specs) JSONSchema() map[string]any {
	return map[string]any{
		"type":          "object",
		"minProperties": 1,
		"propertyNames": map[string]any{"pattern": `^[^.]+$`},
		"additionalProperties": map[string]any{
			"type":        "string",
			"pattern":     `^\s*(` + strings.Join(funcNames[FuncCount:], "|") + `)\s*\(`,
			"description": "an aggregate call: " + validFuncs + ", e.g. count() or avg(temp)",
		},
		"description": "output fields to aggregate calls, in order",
	}
}
