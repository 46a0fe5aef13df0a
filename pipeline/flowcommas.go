package pipeline

import (
	"regexp"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Inside { } (and [ ]), YAML ends a plain value at the first comma, so an
// expression with a comma in it, written unquoted in a flow mapping, is cut
// in two: `set: { label: sprintf("%s-%d", a, 1) }` reads as label:
// `sprintf("%s-%d"` plus the keys `a` and `1)` without values, or, when a
// piece starts like a quoted string or a list, as a YAML syntax error that
// yaml.v3 places on the line above. Both are reported as what they are.

const flowCommaHint = "quote an expression that contains commas inside { }"

// checkFlowCommas reports each value of a flow mapping that a comma cut
// short: a plain scalar with an unclosed parenthesis or string, followed by
// a key without a value (the next piece). It reports whether it found one.
func (p *problems) checkFlowCommas(n *yaml.Node) bool {
	found := false
	if n.Kind == yaml.MappingNode && n.Style&yaml.FlowStyle != 0 {
		for i := 2; i+1 < len(n.Content); i += 2 {
			key, cut, next := n.Content[i-2], n.Content[i-1], n.Content[i+1]
			if cut.Kind == yaml.ScalarNode && cut.Style == 0 && unclosed(cut.Value) && isImplicitNull(next) {
				p.at(cut, "%s: YAML ends the value of %q at the comma after %q (quote it, or write the mapping in block style)", flowCommaHint, key.Value, cut.Value)
				found = true
			}
		}
	}
	if n.Kind == yaml.AliasNode {
		return found // checked where its anchor stands
	}
	for _, c := range n.Content {
		found = p.checkFlowCommas(c) || found
	}
	return found
}

// unclosed tells whether an expression opens more parentheses or brackets
// than it closes, or a double-quoted string it does not close.
func unclosed(s string) bool {
	return strings.Count(s, "(") > strings.Count(s, ")") ||
		strings.Count(s, "[") > strings.Count(s, "]") ||
		strings.Count(s, `"`)%2 == 1
}

// isImplicitNull tells whether n is the missing value of a key written
// without one.
func isImplicitNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.Tag == "!!null" && n.Value == "" && n.Style == 0
}

// blockScalarHeader matches a line whose value is a block scalar (| or >):
// the lines indented under it are its text.
var blockScalarHeader = regexp.MustCompile(`(?:^|[:-])\s*[|>][-+1-9]*\s*(?:#.*)?$`)

// flowCommaSplits scans the text of a file that YAML could not parse for a
// comma inside parentheses inside { }: the start of each value cut there.
// It reads just enough YAML to know where flow collections are: block
// scalars, comments and quoted strings are skipped.
func flowCommaSplits(lines []string) []Pos {
	var (
		out     []Pos
		stack   []byte // the open flow collections, '{' or '['
		paren   int    // unclosed parentheses of the current plain value
		start   Pos    // where the current plain value starts
		atStart bool   // the next character starts a value (or key)
		block   = -1   // >= 0: in a block scalar under a line of this indent
	)
	for li, line := range lines {
		indent := len(line) - len(strings.TrimLeft(line, " "))
		if block >= 0 {
			if strings.TrimSpace(line) == "" || indent > block {
				continue
			}
			block = -1
		}
		i := 0
		if len(stack) == 0 {
			if i = flowStart(line); i < 0 {
				if blockScalarHeader.MatchString(line) {
					block = indent
				}
				continue
			}
		}
	scan:
		for ; i < len(line); i++ {
			c := line[i]
			switch {
			case c == '#' && (i == 0 || line[i-1] == ' ' || line[i-1] == '\t'):
				break scan // a comment
			case atStart && (c == '"' || c == '\''):
				i = quotedEnd(line, i)
				atStart = false
			case c == '{' || c == '[':
				stack = append(stack, c)
				atStart, paren = true, 0
			case c == '}' || c == ']':
				if len(stack) > 0 {
					stack = stack[:len(stack)-1]
				}
				atStart, paren = false, 0
				if len(stack) == 0 {
					break scan // back in block context
				}
			case c == ',':
				if paren > 0 && stack[len(stack)-1] == '{' {
					out = append(out, start)
				}
				atStart, paren = true, 0
			case c == ':' && (i+1 == len(line) || strings.IndexByte(" \t,]}", line[i+1]) >= 0):
				atStart, paren = true, 0
			case c == ' ' || c == '\t':
			default:
				if atStart {
					start, atStart = Pos{Line: li + 1, Col: i + 1}, false
				}
				switch {
				case c == '(':
					paren++
				case c == ')' && paren > 0:
					paren--
				}
			}
		}
	}
	return out
}

// flowStart returns the index of the { or [ that starts a flow collection
// on a line in block context (after "- " or "key: "), or -1.
func flowStart(line string) int {
	i := len(line) - len(strings.TrimLeft(line, " "))
	for strings.HasPrefix(line[i:], "- ") {
		i += 2
		for i < len(line) && line[i] == ' ' {
			i++
		}
	}
	if i < len(line) && (line[i] == '{' || line[i] == '[') {
		return i
	}
	if i < len(line) && line[i] == '#' {
		return -1
	}
	sep := strings.Index(line[i:], ": ")
	if sep < 0 {
		return -1
	}
	j := i + sep + 2
	for j < len(line) && line[j] == ' ' {
		j++
	}
	if j < len(line) && (line[j] == '{' || line[j] == '[') {
		return j
	}
	return -1
}

// quotedEnd returns the index of the quote that closes the string opened
// at line[i], or the line's last index when it does not close on the line.
func quotedEnd(line string, i int) int {
	q := line[i]
	for j := i + 1; j < len(line); j++ {
		switch {
		case q == '"' && line[j] == '\\':
			j++
		case line[j] == q && q == '\'' && j+1 < len(line) && line[j+1] == '\'':
			j++ // '' is a quote inside '...'
		case line[j] == q:
			return j
		}
	}
	return len(line) - 1
}
