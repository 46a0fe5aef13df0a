package pipeline

import (
	"fmt"

	"go.yaml.in/yaml/v3"
)

// Changelog rows (Flink's dynamic-table retract stream) carry their kind in
// the field OpField: an insert, the retraction of a key's previous row
// before its update, the update, or a delete.
const (
	OpField      = "_op"
	OpInsert     = "+I"
	OpRetract    = "-U"
	OpUpdate     = "+U"
	OpDelete     = "-D"
	changelogKey = "changelog"
)

// Changelog is how a sink takes a changelog stream.
type Changelog int

const (
	// ChangelogRetract writes every row: -U rows retract what the previous
	// row of the key said (the default).
	ChangelogRetract Changelog = iota
	// ChangelogUpsert writes only the rows that state a key's latest value
	// (+I, +U) and deletes (-D): a reader keeping the last row per key has
	// the current table.
	ChangelogUpsert
)

func (c Changelog) String() string {
	if c == ChangelogUpsert {
		return "upsert"
	}
	return "retract"
}

// UnmarshalYAML parses retract | upsert.
func (c *Changelog) UnmarshalYAML(n *yaml.Node) error {
	switch n.Value {
	case "retract":
		*c = ChangelogRetract
	case "upsert":
		*c = ChangelogUpsert
	default:
		return fmt.Errorf("%s must be retract or upsert, not %q", changelogKey, n.Value)
	}
	return nil
}

// upsertOnly drops the retractions of a changelog batch in place.
func upsertOnly(b []Record) []Record {
	n := 0
	for _, r := range b {
		if op, _ := r.Fields[OpField].(string); op == OpRetract {
			continue
		}
		b[n] = r
		n++
	}
	return b[:n]
}
