package pipeline

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"
)

// StreamRef names a stream: the main output of a source or step (Side ""),
// or one of a step's side outputs (Side "errors" for dead letters, or a side
// output the step declares, such as late records).
type StreamRef struct {
	Node string
	Side string
}

func (r StreamRef) String() string {
	if r.Side == "" {
		return r.Node
	}
	return r.Node + "." + r.Side
}

// wire checks ids, resolves every `from` to a stream and rejects cycles.
func (p *problems) wire(spec *Spec, root *yaml.Node) {
	streams := map[string]StreamRef{}
	owner := map[string]*yaml.Node{}
	dups := false
	claim := func(id string, n *yaml.Node, ref StreamRef) {
		if prev, dup := owner[id]; dup {
			p.at(idNode(n), "id %q is already used at line %d", id, prev.Line)
			dups = true
			return
		}
		owner[id] = n
		streams[id] = ref
	}
	for _, s := range spec.Sources {
		claim(s.ID, s.node, StreamRef{Node: s.ID})
		streams[s.ID+"."+ErrorsStream] = StreamRef{Node: s.ID, Side: ErrorsStream}
	}
	for _, s := range spec.Steps {
		claim(s.ID, s.node, StreamRef{Node: s.ID})
		streams[s.ID+"."+ErrorsStream] = StreamRef{Node: s.ID, Side: ErrorsStream}
		if so, ok := s.Config.(SideOutputter); ok {
			for id, side := range so.SideOutputs() {
				claim(id, s.node, StreamRef{Node: s.ID, Side: side})
			}
		}
	}
	for _, s := range spec.Sinks {
		if prev, dup := owner[s.ID]; dup {
			p.at(idNode(s.node), "id %q is already used at line %d", s.ID, prev.Line)
		}
		owner[s.ID] = s.node
	}

	resolveFrom := func(n *yaml.Node, what string, from []string, def string) []StreamRef {
		if len(from) == 0 {
			if def == "" {
				p.at(n, "%s: say which stream it reads with from: (there is no single previous step or source)", what)
				return nil
			}
			from = []string{def}
		}
		_, fromNode := mappingValue(n, "from")
		var refs []StreamRef
		for i, id := range from {
			ref, ok := streams[id]
			if !ok {
				at := fromNode
				if fromNode != nil && fromNode.Kind == yaml.SequenceNode && i < len(fromNode.Content) {
					at = fromNode.Content[i]
				}
				if at == nil {
					at = n
				}
				p.at(at, "%s: from %q: no source, step or side stream has that id%s", what, id, suggestID(id, streams))
				continue
			}
			if slices.Contains(refs, ref) {
				p.at(fromNode, "%s: from lists %q twice", what, id)
				continue
			}
			refs = append(refs, ref)
		}
		return refs
	}

	prev := ""
	if len(spec.Sources) == 1 {
		prev = spec.Sources[0].ID
	}
	for _, s := range spec.Steps {
		what := fmt.Sprintf("step %q", s.ID)
		if d, ok := s.Config.(InputDeclarer); ok {
			s.Inputs = p.resolveDeclared(s.node, what, d.InputStreams(), streams)
		} else {
			s.Inputs = resolveFrom(s.node, what, s.From, prev)
		}
		prev = s.ID
	}
	for _, s := range spec.Sinks {
		s.Inputs = resolveFrom(s.node, fmt.Sprintf("sink %q", s.ID), s.From, prev)
	}
	p.checkDeadLetters(spec)
	if !dups { // with duplicate ids, from cannot be followed unambiguously
		p.checkCycles(spec)
	}
}

// resolveDeclared resolves the input streams a step names in its own keys
// (InputDeclarer); an unknown id is reported at its key. One stream may be
// named twice (a self-join reads one stream as both inputs).
func (p *problems) resolveDeclared(n *yaml.Node, what string, ins []DeclaredInput, streams map[string]StreamRef) []StreamRef {
	refs := make([]StreamRef, 0, len(ins))
	for _, in := range ins {
		at := n
		for _, k := range in.Path {
			if _, v := mappingValue(resolve(at), k); v != nil {
				at = v
			}
		}
		ref, ok := streams[in.Stream]
		if !ok {
			p.at(at, "%s: %s %q: no source, step or side stream has that id%s", what, strings.Join(in.Path, "."), in.Stream, suggestID(in.Stream, streams))
			continue
		}
		refs = append(refs, ref)
	}
	return refs
}

func idNode(n *yaml.Node) *yaml.Node {
	if _, v := mappingValue(n, "id"); v != nil {
		return v
	}
	return n
}

// checkDeadLetters rejects on_error: dead_letter when nothing reads the
// errors stream: the records would be lost.
func (p *problems) checkDeadLetters(spec *Spec) {
	read := map[StreamRef]bool{}
	for _, s := range spec.Steps {
		for _, in := range s.Inputs {
			read[in] = true
		}
	}
	for _, s := range spec.Sinks {
		for _, in := range s.Inputs {
			read[in] = true
		}
	}
	check := func(kind, id string, policy OnError, n *yaml.Node) {
		errs := StreamRef{Node: id, Side: ErrorsStream}
		if policy == OnErrorDeadLetter && !read[errs] {
			_, v := mappingValue(n, "on_error")
			p.at(v, "%s %q: on_error: dead_letter, but no step or sink reads %q; add a sink with from: %s", kind, id, errs, errs)
		}
	}
	for _, s := range spec.Sources {
		check("source", s.ID, s.OnError, s.node)
	}
	for _, s := range spec.Steps {
		check("step", s.ID, s.OnError, s.node)
	}
}

// checkCycles reports a cycle among steps (sources have no inputs, sinks no outputs).
func (p *problems) checkCycles(spec *Spec) {
	steps := map[string]*StepSpec{}
	for _, s := range spec.Steps {
		steps[s.ID] = s
	}
	const (
		unvisited = iota
		onPath
		done
	)
	state := map[string]int{}
	var path []string
	var visit func(s *StepSpec) bool
	visit = func(s *StepSpec) bool {
		state[s.ID] = onPath
		path = append(path, s.ID)
		for _, in := range s.Inputs {
			up, ok := steps[in.Node]
			if !ok {
				continue
			}
			switch state[up.ID] {
			case onPath:
				start := slices.Index(path, up.ID)
				cycle := append(slices.Clone(path[start:]), up.ID)
				slices.Reverse(cycle)
				_, v := mappingValue(s.node, "from")
				if v == nil {
					v = s.node
				}
				p.at(v, "step %q: from makes a cycle: %s", s.ID, strings.Join(cycle, " -> "))
				return true
			case unvisited:
				if visit(up) {
					return true
				}
			}
		}
		path = path[:len(path)-1]
		state[s.ID] = done
		return false
	}
	for _, s := range spec.Steps {
		// One cycle is reported; the states of an aborted walk are stale.
		if state[s.ID] == unvisited && visit(s) {
			return
		}
	}
}

func suggestID(id string, streams map[string]StreamRef) string {
	if best := Closest(id, slices.Collect(maps.Keys(streams))); best != "" {
		return fmt.Sprintf(" (did you mean %q?)", best)
	}
	return ""
}
