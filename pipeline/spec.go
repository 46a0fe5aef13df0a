package pipeline

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/eddy-stream/eddy/expr"
	"go.yaml.in/yaml/v3"
)

// Spec is a loaded, validated pipeline file (docs/pipeline.md).
type Spec struct {
	// File is the path the spec was loaded from; Hash the sha256 of its text.
	File string
	Hash string

	Version        int
	Name           string
	Parallelism    int
	MaxParallelism int
	Runtime        RuntimeSpec
	// Checkpoint is nil when the file has no checkpoint block.
	Checkpoint *CheckpointSpec
	State      StateSpec
	Restart    RestartSpec
	// Group is nil when the file has no group block: the pipeline runs in
	// one process (docs/group.md).
	Group *GroupSpec

	Sources []*SourceSpec
	Steps   []*StepSpec
	Sinks   []*SinkSpec
}

// RuntimeSpec holds the `runtime:` block: how tasks exchange data.
type RuntimeSpec struct {
	// BatchSize is the number of records per batch between tasks.
	BatchSize int `yaml:"batch_size"`
	// BufferTimeout is the longest a partly filled batch waits before it is sent.
	BufferTimeout Duration `yaml:"buffer_timeout"`
	// ChannelCapacity is the number of batches a channel between two subtasks
	// holds before the sender blocks (backpressure).
	ChannelCapacity int `yaml:"channel_capacity"`
	// Chaining runs forward-connected steps of equal parallelism in one task.
	Chaining bool `yaml:"chaining"`
}

// DefaultRuntime returns the runtime defaults.
func DefaultRuntime() RuntimeSpec {
	return RuntimeSpec{BatchSize: 1024, BufferTimeout: Duration(5 * time.Millisecond), ChannelCapacity: 8, Chaining: true}
}

// SourceSpec is one entry of `sources:`.
type SourceSpec struct {
	ID          string
	Type        string
	Parallelism int
	// EventTime computes a record's event time; nil: processing time.
	EventTime *expr.Expr
	Watermark WatermarkSpec
	// OnError applies to records whose event time fails.
	OnError OnError
	Config  SourceConfig
	Pos     Pos
	node    *yaml.Node
}

// StepSpec is one entry of `steps:`.
type StepSpec struct {
	ID          string
	Kind        string
	From        []string
	Parallelism int
	OnError     OnError
	Rebalance   bool
	Config      StepConfig
	Pos         Pos
	// Inputs are the resolved streams of From.
	Inputs []StreamRef
	node   *yaml.Node
}

// SinkSpec is one entry of `sinks:`.
type SinkSpec struct {
	ID          string
	Type        string
	From        []string
	Parallelism int
	// Changelog says how the sink takes a changelog stream (rows with _op).
	Changelog Changelog
	// WriteAhead wraps a sink without transactions so that it writes the
	// records of a checkpoint interval once that checkpoint completes
	// (connectors/writeahead).
	WriteAhead bool
	Config     SinkConfig
	Pos        Pos
	Inputs     []StreamRef
	node       *yaml.Node
	// wrap is the Env's write-ahead wrapper when WriteAhead is set.
	wrap SinkWrapper
}

// The keys every source, step and sink has besides its type's own.
type (
	topSpec struct {
		Version        int             `yaml:"version" eddy:"required"`
		Name           string          `yaml:"name" eddy:"required"`
		Parallelism    int             `yaml:"parallelism"`
		MaxParallelism int             `yaml:"max_parallelism"`
		Runtime        RuntimeSpec     `yaml:"runtime"`
		Checkpoint     *CheckpointSpec `yaml:"checkpoint"`
		State          StateSpec       `yaml:"state"`
		Restart        RestartSpec     `yaml:"restart"`
		Group          yaml.Node       `yaml:"group"`
		Sources        []yaml.Node     `yaml:"sources" eddy:"required"`
		Steps          []yaml.Node     `yaml:"steps"`
		Sinks          []yaml.Node     `yaml:"sinks" eddy:"required"`
	}
	sourceCommon struct {
		ID          string        `yaml:"id"`
		Type        string        `yaml:"type" eddy:"required"`
		Parallelism int           `yaml:"parallelism"`
		EventTime   expr.Expr     `yaml:"event_time"`
		Watermark   WatermarkSpec `yaml:"watermark"`
		OnError     OnError       `yaml:"on_error"`
	}
	stepCommon struct {
		ID          string     `yaml:"id"`
		From        StringList `yaml:"from"`
		Parallelism int        `yaml:"parallelism"`
		OnError     OnError    `yaml:"on_error"`
		Rebalance   bool       `yaml:"rebalance"`
		Description string     `yaml:"description"`
	}
	sinkCommon struct {
		ID          string     `yaml:"id"`
		Type        string     `yaml:"type" eddy:"required"`
		From        StringList `yaml:"from"`
		Parallelism int        `yaml:"parallelism"`
		Changelog   Changelog  `yaml:"changelog"`
		WriteAhead  bool       `yaml:"write_ahead"`
	}
)

const (
	// FormatVersion is the pipeline file format this eddy reads.
	FormatVersion         = 1
	defaultMaxParallelism = 128
	maxMaxParallelism     = 32768
)

var idPattern = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_-]*$`)

// LoadFile reads, substitutes, parses and validates a pipeline file. The
// error is Problems (wrapping ErrInvalid) when the file is invalid.
func LoadFile(env *Env, path string) (*Spec, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read pipeline file: %w", err)
	}
	return Load(env, path, data)
}

// Load parses and validates the text of a pipeline file named file.
func Load(env *Env, file string, data []byte) (spec *Spec, err error) {
	p := &problems{file: file}
	defer func() {
		// The loader must never panic on user input; a panic here is a bug,
		// reported as a problem rather than a crash.
		if r := recover(); r != nil {
			spec, err = nil, Problems{{Pos: Pos{File: file, Line: 1, Col: 1}, Msg: fmt.Sprintf("internal error while loading: %v", r)}}
		}
	}()
	sum := sha256.Sum256(data)
	p.lines = strings.Split(string(data), "\n")
	text, refs := protectRefs(string(data))
	var doc yaml.Node
	if err := yaml.Unmarshal([]byte(text), &doc); err != nil {
		p.yamlSyntax(err)
		return nil, p.list.sorted()
	}
	if len(doc.Content) == 0 {
		p.atPos(Pos{Line: 1, Col: 1}, "the file is empty: a pipeline file is a mapping with version, name, sources, steps and sinks (see docs/pipeline.md)")
		return nil, p.list.sorted()
	}
	if p.checkFlowCommas(&doc) {
		// YAML read something other than what was written: what decoding
		// would say about the pieces is noise.
		return nil, p.list.sorted()
	}
	p.substitute(&doc, refs)
	root := resolve(&doc)
	if root.Kind != yaml.MappingNode {
		p.at(root, "a pipeline file must be a mapping with version, name, sources, steps and sinks")
		return nil, p.list.sorted()
	}
	top := defaultTopSpec()
	if _, n := mappingValue(root, "checkpoint"); n != nil {
		c := DefaultCheckpoint()
		top.Checkpoint = &c
	}
	p.decode(root, reflect.ValueOf(&top).Elem(), "pipeline")
	spec = &Spec{
		File: file, Hash: hex.EncodeToString(sum[:]),
		Version: top.Version, Name: top.Name, Parallelism: top.Parallelism,
		MaxParallelism: top.MaxParallelism, Runtime: top.Runtime,
		Checkpoint: top.Checkpoint, State: top.State, Restart: top.Restart,
	}
	p.checkTop(root, spec)
	p.checkCheckpoint(root, spec)
	p.loadGroup(env, root, spec)
	p.checkRestart(root, spec)
	for i := range top.Sources {
		if s := p.loadSource(env, spec, &top.Sources[i], i); s != nil {
			spec.Sources = append(spec.Sources, s)
		}
	}
	for i := range top.Steps {
		if s := p.loadStep(env, spec, &top.Steps[i], i); s != nil {
			spec.Steps = append(spec.Steps, s)
		}
	}
	for i := range top.Sinks {
		if s := p.loadSink(env, spec, &top.Sinks[i], i); s != nil {
			spec.Sinks = append(spec.Sinks, s)
		}
	}
	p.wire(spec, root)
	p.checkGroup(spec)
	if len(p.list) > 0 {
		return nil, p.list.sorted()
	}
	return spec, nil
}

// envRef matches a reference, or an escaped one ($${VAR}, or a bare $${):
// an escape is read as written, less its first $.
var envRef = regexp.MustCompile(`\$\$\{(?:[A-Za-z_][A-Za-z0-9_]*(?::[^}]*)?\})?|\$\{([A-Za-z_][A-Za-z0-9_]*)(?::([^}]*))?\}`)

// Environment variables are substituted into the scalar values of the
// parsed file, never into its text: a value can neither change the file's
// structure nor be cut short by a " #" or ": " in it, and a ${VAR} in a
// comment is not looked at. So that a reference may stand unquoted where
// its braces would be YAML syntax (inside { } or [ ]), each ${...} and $${
// of the text is replaced before parsing by a placeholder of as many
// characters (columns do not move), made of Unicode private-use runes: a
// marker and the reference's index as base-256 digits.
const (
	refMarker = '\uE000'
	refDigit0 = '\uE100' // digit d is refDigit0 + d
)

// envRefAt is a reference of the file (or an escaped one), and where it stands.
type envRefAt struct {
	text string
	pos  Pos
}

// protectRefs returns text with its references replaced by placeholders,
// and the references. A reference whose index does not fit its placeholder
// stays as it is.
func protectRefs(text string) (string, []envRefAt) {
	if !strings.Contains(text, "${") {
		return text, nil
	}
	var refs []envRefAt
	var b strings.Builder
	for li, line := range strings.SplitAfter(text, "\n") {
		last := 0
		for _, m := range envRef.FindAllStringIndex(line, -1) {
			ref := line[m[0]:m[1]]
			n := utf8.RuneCountInString(ref) - 1 // digits
			i := len(refs)
			if n < 8 && i >= 1<<(8*n) {
				continue
			}
			refs = append(refs, envRefAt{text: ref, pos: Pos{Line: li + 1, Col: utf8.RuneCountInString(line[:m[0]]) + 1}})
			b.WriteString(line[last:m[0]])
			ph := make([]rune, n+1)
			ph[0] = refMarker
			for d := n; d >= 1; d-- {
				ph[d] = refDigit0 + rune(i&0xff)
				i >>= 8
			}
			b.WriteString(string(ph))
			last = m[1]
		}
		b.WriteString(line[last:])
	}
	return b.String(), refs
}

// expandRefs replaces the placeholders of s by what expand returns for
// their references.
func expandRefs(s string, refs []envRefAt, expand func(envRefAt) string) string {
	if !strings.ContainsRune(s, refMarker) {
		return s
	}
	var b strings.Builder
	rs := []rune(s)
	for k := 0; k < len(rs); k++ {
		if rs[k] != refMarker {
			b.WriteRune(rs[k])
			continue
		}
		i := 0
		for k+1 < len(rs) && rs[k+1] >= refDigit0 && rs[k+1] <= refDigit0+0xff {
			k++
			i = i<<8 | int(rs[k]-refDigit0)
		}
		if i < len(refs) {
			b.WriteString(expand(refs[i]))
		}
	}
	return b.String()
}

// substitute puts the references back into the parsed file: into the keys
// as written, into the scalar values substituted. $${ stands for a literal
// ${; an unset variable without a default is a problem at its reference.
// A plain scalar is typed by its substituted text, as YAML types it:
// `count: ${N}` with N=7 is a number. An alias is substituted where its
// anchor stands.
func (p *problems) substitute(n *yaml.Node, refs []envRefAt) {
	switch n.Kind {
	case yaml.DocumentNode, yaml.SequenceNode:
		for _, c := range n.Content {
			p.substitute(c, refs)
		}
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			if k := n.Content[i]; k.Kind == yaml.ScalarNode {
				k.Value = expandRefs(k.Value, refs, func(r envRefAt) string { return r.text })
			}
			p.substitute(n.Content[i+1], refs)
		}
	case yaml.ScalarNode:
		v := expandRefs(n.Value, refs, p.expandRef)
		if v == n.Value {
			return
		}
		n.Value = v
		if n.Style&(yaml.TaggedStyle|yaml.DoubleQuotedStyle|yaml.SingleQuotedStyle|yaml.LiteralStyle|yaml.FoldedStyle) == 0 {
			n.Tag = "" // resolved again from the substituted text
		}
	}
}

// expandRef returns the value of a reference.
func (p *problems) expandRef(r envRefAt) string {
	if strings.HasPrefix(r.text, "$$") {
		return r.text[1:]
	}
	sub := envRef.FindStringSubmatch(r.text)
	if v, ok := os.LookupEnv(sub[1]); ok {
		return v
	}
	if strings.Contains(r.text, ":") {
		return sub[2]
	}
	p.atPos(r.pos, "environment variable %s is not set (set it, or give a default: ${%s:value})", sub[1], sub[1])
	return ""
}

var yamlLine = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// yamlSyntax reports a file that YAML could not parse. yaml.v3 says only a
// line, often that of the enclosing collection; an expression that a comma
// cut inside { } is reported instead at the value it cut.
func (p *problems) yamlSyntax(err error) {
	if splits := flowCommaSplits(p.lines); len(splits) > 0 {
		for _, pos := range splits {
			p.atPos(pos, "YAML syntax: %s: YAML ends a value at a comma inside { } (quote it, or write the mapping in block style)", flowCommaHint)
		}
		return
	}
	for _, line := range strings.Split(err.Error(), "\n") {
		line = strings.TrimSpace(line)
		if m := yamlLine.FindStringSubmatch(line); m != nil {
			n, _ := strconv.Atoi(m[1])
			p.atPos(Pos{Line: n, Col: 1}, "YAML syntax: %s", m[2])
			continue
		}
		if line != "" && line != "yaml: unmarshal errors:" {
			p.atPos(Pos{Line: 1, Col: 1}, "YAML syntax: %s", strings.TrimPrefix(line, "yaml: "))
		}
	}
}

func (p *problems) checkTop(root *yaml.Node, s *Spec) {
	at := func(key string) *yaml.Node {
		if _, v := mappingValue(root, key); v != nil {
			return v
		}
		return root
	}
	if s.Version != FormatVersion && s.Version != 0 {
		p.at(at("version"), "version: this eddy reads format version %d, not %d", FormatVersion, s.Version)
	}
	if s.Name != "" && !idPattern.MatchString(s.Name) {
		p.at(at("name"), "name %q: use letters, digits, '_' and '-' (it names the state directory)", s.Name)
	}
	if s.MaxParallelism < 1 || s.MaxParallelism > maxMaxParallelism {
		p.at(at("max_parallelism"), "max_parallelism must be between 1 and %d", maxMaxParallelism)
	}
	if s.Parallelism < 1 || s.Parallelism > s.MaxParallelism {
		p.at(at("parallelism"), "parallelism must be between 1 and max_parallelism (%d)", s.MaxParallelism)
	}
	rt := at("runtime")
	if s.Runtime.BatchSize < 1 {
		p.at(rt, "runtime.batch_size must be at least 1")
	}
	if s.Runtime.ChannelCapacity < 1 {
		p.at(rt, "runtime.channel_capacity must be at least 1")
	}
	if s.Runtime.BufferTimeout <= 0 {
		p.at(rt, "runtime.buffer_timeout must be positive")
	}
}

// split separates the common keys of an entry from its type's own keys.
func split(n *yaml.Node, common []string) (own, rest *yaml.Node) {
	own = &yaml.Node{Kind: yaml.MappingNode, Line: n.Line, Column: n.Column}
	rest = &yaml.Node{Kind: yaml.MappingNode, Line: n.Line, Column: n.Column}
	for i := 0; i+1 < len(n.Content); i += 2 {
		dst := rest
		if slices.Contains(common, n.Content[i].Value) {
			dst = own
		}
		dst.Content = append(dst.Content, n.Content[i], n.Content[i+1])
	}
	return own, rest
}

func (p *problems) checkParallelism(n *yaml.Node, what string, par, maxPar int) {
	if _, v := mappingValue(n, "parallelism"); v != nil && (par < 1 || par > maxPar) {
		p.at(v, "%s: parallelism must be between 1 and max_parallelism (%d)", what, maxPar)
	}
}

func (p *problems) checkID(n *yaml.Node, id string) {
	if _, v := mappingValue(n, "id"); v != nil && !idPattern.MatchString(id) {
		p.at(v, "id %q: use letters, digits, '_' and '-' ('.' separates side streams)", id)
	}
}

func (p *problems) loadSource(env *Env, spec *Spec, n *yaml.Node, i int) *SourceSpec {
	n = resolve(n)
	if n.Kind != yaml.MappingNode {
		p.at(n, "sources[%d] must be a mapping with at least a type", i)
		return nil
	}
	ownNode, rest := split(n, Keys(sourceCommon{}))
	c := sourceCommon{Parallelism: spec.Parallelism, OnError: OnErrorFail, Watermark: WatermarkSpec{Interval: Duration(DefaultWatermarkInterval)}}
	p.decode(ownNode, reflect.ValueOf(&c).Elem(), fmt.Sprintf("sources[%d]", i))
	p.compileExprs(&c)
	if _, v := mappingValue(n, "watermark"); v != nil && !c.EventTime.IsSet() {
		p.at(v, "watermark needs event_time: without it the source runs in processing time")
	}
	if c.ID == "" {
		c.ID = fmt.Sprintf("source_%d", i+1)
	}
	p.checkID(n, c.ID)
	what := fmt.Sprintf("source %q", c.ID)
	p.checkParallelism(n, what, c.Parallelism, spec.MaxParallelism)
	if c.EventTime.Program() != nil {
		if err := checkEventTime(&c.EventTime); err != nil {
			p.atPos(c.EventTime.Pos(), "%s: event_time %q can never give a time: %s", what, c.EventTime.Source, err)
		}
	}
	if c.Type == "" {
		return nil
	}
	plugin, ok := env.Source(c.Type)
	if !ok {
		_, tv := mappingValue(n, "type")
		p.at(tv, "%s: unknown source type %q (known: %s)", what, c.Type, strings.Join(env.SourceTypes(), ", "))
		return nil
	}
	cfg := plugin.New()
	p.loadConfig(rest, cfg, fmt.Sprintf("%s (%s)", what, c.Type))
	if mp, ok := cfg.(MaxParallelismer); ok && c.Parallelism > mp.MaxParallelism() {
		if _, v := mappingValue(n, "parallelism"); v != nil {
			p.at(v, "%s: a %s source runs with parallelism at most %d", what, c.Type, mp.MaxParallelism())
		}
		c.Parallelism = mp.MaxParallelism()
	}
	s := &SourceSpec{ID: c.ID, Type: c.Type, Parallelism: c.Parallelism, Watermark: c.Watermark, OnError: c.OnError,
		Config: cfg, Pos: Pos{File: p.file, Line: n.Line, Col: n.Column}, node: n}
	if c.EventTime.IsSet() {
		s.EventTime = &c.EventTime
	}
	return s
}

// loadConfig decodes a component's own keys, compiles its expressions and validates it.
func (p *problems) loadConfig(n *yaml.Node, cfg Config, what string) {
	before := len(p.list)
	p.decode(n, reflect.ValueOf(cfg).Elem(), what)
	p.compileExprs(cfg)
	if len(p.list) > before {
		return // Validate would repeat what decoding already said
	}
	if err := cfg.Validate(); err != nil {
		p.reportValidate(n, err)
	}
}

func (p *problems) loadStep(env *Env, spec *Spec, n *yaml.Node, i int) *StepSpec {
	n = resolve(n)
	if n.Kind != yaml.MappingNode {
		p.at(n, "steps[%d] must be a mapping", i)
		return nil
	}
	var kinds []*yaml.Node
	for j := 0; j+1 < len(n.Content); j += 2 {
		if _, ok := env.Step(n.Content[j].Value); ok {
			kinds = append(kinds, n.Content[j])
		}
	}
	ownNode, rest := split(n, Keys(stepCommon{}))
	c := stepCommon{Parallelism: spec.Parallelism, OnError: OnErrorFail}
	p.decode(ownNode, reflect.ValueOf(&c).Elem(), fmt.Sprintf("steps[%d]", i))
	switch len(kinds) {
	case 0:
		for j := 0; j+1 < len(n.Content); j += 2 {
			k := n.Content[j]
			if slices.Contains(Keys(stepCommon{}), k.Value) {
				continue
			}
			if kind := closestStepKind(env, k.Value); kind != "" {
				p.at(k, "steps[%d]: unknown step kind %q (did you mean %q?)", i, k.Value, kind)
				return nil
			}
		}
		p.at(n, "steps[%d] does nothing: give it one of %s", i, strings.Join(env.StepKinds(), ", "))
		return nil
	case 1:
	default:
		p.at(kinds[1], "steps[%d] has both %q and %q: a step does one thing, split it into two steps", i, kinds[0].Value, kinds[1].Value)
		return nil
	}
	kind := kinds[0].Value
	if c.ID == "" {
		c.ID = fmt.Sprintf("%s_%d", kind, i+1)
	}
	p.checkID(n, c.ID)
	what := fmt.Sprintf("step %q", c.ID)
	p.checkParallelism(n, what, c.Parallelism, spec.MaxParallelism)
	plugin, _ := env.Step(kind)
	cfg := plugin.New()
	p.loadConfig(rest, cfg, fmt.Sprintf("%s (%s)", what, kind))
	s := &StepSpec{
		ID: c.ID, Kind: kind, From: c.From, Parallelism: c.Parallelism, OnError: c.OnError,
		Rebalance: c.Rebalance, Config: cfg, Pos: Pos{File: p.file, Line: n.Line, Col: n.Column}, node: n,
	}
	if d, ok := cfg.(InputDeclarer); ok && len(c.From) > 0 {
		_, v := mappingValue(n, "from")
		var keys []string
		for _, in := range d.InputStreams() {
			keys = append(keys, strings.Join(in.Path, "."))
		}
		p.at(v, "%s: a %s step names its inputs in %s, not from", what, kind, strings.Join(keys, " and "))
	}
	if _, ok := cfg.(KeyedStep); ok && c.Rebalance {
		_, v := mappingValue(n, "rebalance")
		p.at(v, "%s: rebalance cannot be combined with %s, which partitions by key", what, kind)
	}
	return s
}

// stepSynonyms are the names other tools (SQL, Benthos, Flink, pandas) give
// to eddy's step kinds, for "did you mean".
var stepSynonyms = map[string]string{
	"where":    "filter",
	"select":   "map",
	"project":  "map",
	"group_by": "key_by",
	"groupby":  "key_by",
	"mapping":  "map",
	"mutation": "set",
	"distinct": "dedupe",
}

// closestStepKind returns the step kind that name most likely means: the
// kind of a synonym, else a kind within two edits, else "".
func closestStepKind(env *Env, name string) string {
	if kind, ok := stepSynonyms[strings.ToLower(name)]; ok {
		if _, known := env.Step(kind); known {
			return kind
		}
	}
	return Closest(name, env.StepKinds())
}

func (p *problems) loadSink(env *Env, spec *Spec, n *yaml.Node, i int) *SinkSpec {
	n = resolve(n)
	if n.Kind != yaml.MappingNode {
		p.at(n, "sinks[%d] must be a mapping with at least a type", i)
		return nil
	}
	ownNode, rest := split(n, Keys(sinkCommon{}))
	c := sinkCommon{Parallelism: spec.Parallelism}
	p.decode(ownNode, reflect.ValueOf(&c).Elem(), fmt.Sprintf("sinks[%d]", i))
	if c.ID == "" {
		c.ID = fmt.Sprintf("sink_%d", i+1)
	}
	p.checkID(n, c.ID)
	what := fmt.Sprintf("sink %q", c.ID)
	p.checkParallelism(n, what, c.Parallelism, spec.MaxParallelism)
	if c.Type == "" {
		return nil
	}
	plugin, ok := env.Sink(c.Type)
	if !ok {
		_, tv := mappingValue(n, "type")
		p.at(tv, "%s: unknown sink type %q (known: %s)", what, c.Type, strings.Join(env.SinkTypes(), ", "))
		return nil
	}
	cfg := plugin.New()
	p.loadConfig(rest, cfg, fmt.Sprintf("%s (%s)", what, c.Type))
	if mp, ok := cfg.(MaxParallelismer); ok && c.Parallelism > mp.MaxParallelism() {
		if _, v := mappingValue(n, "parallelism"); v != nil {
			p.at(v, "%s: a %s sink runs with parallelism at most %d", what, c.Type, mp.MaxParallelism())
		}
		c.Parallelism = mp.MaxParallelism()
	}
	var wrap SinkWrapper
	if c.WriteAhead {
		wrap = env.WriteAhead()
		p.checkWriteAhead(n, spec, cfg, wrap, what, c.Type)
	}
	return &SinkSpec{ID: c.ID, Type: c.Type, From: c.From, Parallelism: c.Parallelism, Changelog: c.Changelog, WriteAhead: c.WriteAhead,
		Config: cfg, Pos: Pos{File: p.file, Line: n.Line, Col: n.Column}, node: n, wrap: wrap}
}

// checkWriteAhead reports a `write_ahead: true` that cannot work: the Env
// has no write-ahead wrapper (wrap nil), without checkpoints nothing would
// ever be written, and a two-phase-commit sink already writes with each
// checkpoint. The config is asked for a sink (not opened) to tell the
// latter.
func (p *problems) checkWriteAhead(n *yaml.Node, spec *Spec, cfg SinkConfig, wrap SinkWrapper, what, typ string) {
	_, v := mappingValue(n, "write_ahead")
	if wrap == nil {
		p.at(v, "%s: write_ahead is not available: no write-ahead sink wrapper is registered in this build (import github.com/eddy-stream/eddy/connectors/writeahead, or remove write_ahead)", what)
		return
	}
	if spec.Checkpoint == nil {
		p.at(v, "%s: write_ahead needs a checkpoint block: its records are written when a checkpoint completes (add checkpoint: {interval: 1s}, or remove write_ahead)", what)
	}
	sink, err := cfg.NewSink()
	if err != nil {
		return // the run reports it
	}
	if _, ok := sink.(TwoPhaseCommitSink); ok {
		p.at(v, "%s: write_ahead is for sinks without transactions; a %s sink already commits its output with each checkpoint (remove write_ahead)", what, typ)
	}
}
