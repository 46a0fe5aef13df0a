package pipeline

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"
)

// The strict decoder: yaml.v3 decodes values, this file walks structs itself so
// that every unknown key, missing required key and bad value is reported with
// its position, all of them rather than the first.
//
// Struct fields are matched by their yaml tag. `eddy:"required"` marks a key
// that must be present.

var (
	unmarshalerType = reflect.TypeFor[yaml.Unmarshaler]()
	nodeType        = reflect.TypeFor[yaml.Node]()
)

type fieldInfo struct {
	name     string
	index    []int
	required bool
}

// structFields lists the yaml keys of struct type t, following ",inline".
func structFields(t reflect.Type) []fieldInfo {
	var out []fieldInfo
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		tag := f.Tag.Get("yaml")
		if tag == "-" {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		if strings.Contains(opts, "inline") && f.Type.Kind() == reflect.Struct {
			for _, sub := range structFields(f.Type) {
				sub.index = append([]int{i}, sub.index...)
				out = append(out, sub)
			}
			continue
		}
		if name == "" {
			continue
		}
		out = append(out, fieldInfo{name: name, index: []int{i}, required: f.Tag.Get("eddy") == "required"})
	}
	return out
}

// Keys returns the yaml keys of a config struct (or pointer to one).
func Keys(v any) []string {
	t := reflect.TypeOf(v)
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	var keys []string
	for _, f := range structFields(t) {
		keys = append(keys, f.name)
	}
	return keys
}

func resolve(n *yaml.Node) *yaml.Node {
	for n != nil && n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	if n != nil && n.Kind == yaml.DocumentNode && len(n.Content) == 1 {
		return resolve(n.Content[0])
	}
	return n
}

// decode decodes n into the value v points to. what names the thing for messages.
func (p *problems) decode(n *yaml.Node, v reflect.Value, what string) {
	n = resolve(n)
	if n == nil {
		return
	}
	if v.Type() == nodeType {
		v.Set(reflect.ValueOf(*n))
		return
	}
	if v.Kind() != reflect.Pointer && v.CanAddr() && v.Addr().Type().Implements(unmarshalerType) {
		p.decodeValue(n, v.Addr(), what)
		return
	}
	switch v.Kind() {
	case reflect.Pointer:
		if n.Tag == "!!null" {
			return
		}
		if v.IsNil() {
			v.Set(reflect.New(v.Type().Elem()))
		}
		p.decode(n, v.Elem(), what)
	case reflect.Struct:
		p.decodeStruct(n, v, what)
	case reflect.Slice:
		if !hasStructs(v.Type().Elem()) {
			p.decodeValue(n, v.Addr(), what)
			return
		}
		if n.Kind != yaml.SequenceNode {
			p.at(n, "%s must be a list", what)
			return
		}
		s := reflect.MakeSlice(v.Type(), len(n.Content), len(n.Content))
		for i, item := range n.Content {
			p.decode(item, s.Index(i), fmt.Sprintf("%s[%d]", what, i))
		}
		v.Set(s)
	default:
		p.decodeValue(n, v.Addr(), what)
	}
}

func hasStructs(t reflect.Type) bool {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t.Kind() == reflect.Struct && t != nodeType && !reflect.PointerTo(t).Implements(unmarshalerType)
}

func (p *problems) decodeStruct(n *yaml.Node, v reflect.Value, what string) {
	if n.Kind != yaml.MappingNode {
		p.at(n, "%s must be a mapping of keys to values", what)
		return
	}
	fields := structFields(v.Type())
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, val := n.Content[i], n.Content[i+1]
		if seen[k.Value] {
			p.at(k, "duplicate key %q in %s", k.Value, what)
			continue
		}
		seen[k.Value] = true
		idx := slices.IndexFunc(fields, func(f fieldInfo) bool { return f.name == k.Value })
		if idx < 0 {
			p.at(k, "unknown key %q in %s%s", k.Value, what, suggest(k.Value, fields))
			continue
		}
		p.decode(val, v.FieldByIndex(fields[idx].index), k.Value)
	}
	for _, f := range fields {
		if f.required && !seen[f.name] {
			p.at(n, "%s: missing required key %q", what, f.name)
		}
	}
}

// decodeValue decodes a leaf value (scalar, list of scalars, custom type).
func (p *problems) decodeValue(n *yaml.Node, ptr reflect.Value, what string) {
	err := n.Decode(ptr.Interface())
	if err == nil {
		return
	}
	var te *yaml.TypeError
	if errors.As(err, &te) {
		p.at(n, "%s: cannot use %s as %s", what, describeNode(n), describeType(ptr.Type().Elem()))
		return
	}
	p.at(n, "%s: %s", what, strings.TrimPrefix(err.Error(), "yaml: "))
}

func describeNode(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	}
	return fmt.Sprintf("%q", n.Value)
}

func describeType(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "a whole number"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Bool:
		return "true or false"
	case reflect.String:
		return "a string"
	case reflect.Slice:
		return "a list"
	case reflect.Map:
		return "a mapping"
	}
	return t.String()
}

func suggest(key string, fields []fieldInfo) string {
	names := make([]string, len(fields))
	for i, f := range fields {
		names[i] = f.name
	}
	if best := Closest(key, names); best != "" {
		return fmt.Sprintf(" (did you mean %q?)", best)
	}
	return ""
}

// Closest returns the candidate nearest to name by edit distance, if one is
// within two edits (ties: the first in sorted order), else "". It serves
// every "did you mean" of eddy's messages.
func Closest(name string, candidates []string) string {
	best, bestD := "", 3
	for _, c := range candidates {
		if d := editDistance(name, c); d < bestD || (d == bestD && c < best) {
			best, bestD = c, d
		}
	}
	return best
}

func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
