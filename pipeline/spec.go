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

	"go.yaml.in/yaml/v3"
)

// Spec is a loaded, validated pipeline file (DESIGN.md §1).
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
	EventTime *Expr
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
	// (writeahead.go).
	WriteAhead bool
	Config     SinkConfig
	Pos        Pos
	Inputs     []StreamRef
	node       *yaml.Node
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
		Sources        []yaml.Node     `yaml:"sources" eddy:"required"`
		Steps          []yaml.Node     `yaml:"steps"`
		Sinks          []yaml.Node     `yaml:"sinks" eddy:"required"`
	}
	sourceCommon struct {
		ID          string        `yaml:"id"`
		Type        string        `yaml:"type" eddy:"required"`
		Parallelism int           `yaml:"parallelism"`
		EventTime   Expr          `yaml:"event_time"`
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
	text := p.substitute(string(data))
	p.lines = strings.Split(text, "\n")
	var doc yaml.Node
	if err := yaml.Unmarshal([]byte(text), &doc); err != nil {
		p.yamlSyntax(err)
		return nil, p.list.sorted()
	}
	root := resolve(&doc)
	if root == nil || root.Kind != yaml.MappingNode {
		p.at(root, "a pipeline file must be a mapping with version, name, sources, steps and sinks")
		return nil, p.list.sorted()
	}
	top := topSpec{Parallelism: 1, MaxParallelism: defaultMaxParallelism, Runtime: DefaultRuntime(), State: StateSpec{Backend: "memory"}, Restart: DefaultRestart()}
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
	if len(p.list) > 0 {
		return nil, p.list.sorted()
	}
	return spec, nil
}

var envRef = regexp.MustCompile(`\$\$\{|\$\{([A-Za-z_][A-Za-z0-9_]*)(?::([^}]*))?\}`)

// substitute replaces ${VAR} and ${VAR:default}; $${ stays a literal ${.
// Values are substituted on their own line, so line numbers do not move.
func (p *problems) substitute(text string) string {
	lines := strings.SplitAfter(text, "\n")
	for i, line := range lines {
		if !strings.Contains(line, "${") {
			continue
		}
		lines[i] = envRef.ReplaceAllStringFunc(line, func(m string) string {
			if m == "$${" {
				return "${"
			}
			sub := envRef.FindStringSubmatch(m)
			if v, ok := os.LookupEnv(sub[1]); ok {
				return v
			}
			if strings.Contains(m, ":") {
				return sub[2]
			}
			col := strings.Index(line, m) + 1
			p.atPos(Pos{Line: i + 1, Col: col}, "environment variable %s is not set (set it, or give a default: ${%s:value})", sub[1], sub[1])
			return ""
		})
	}
	return strings.Join(lines, "")
}

var yamlLine = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

func (p *problems) yamlSyntax(err error) {
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
			if kind := Closest(k.Value, env.StepKinds()); kind != "" {
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
	if _, ok := cfg.(KeyedStep); ok && c.Rebalance {
		_, v := mappingValue(n, "rebalance")
		p.at(v, "%s: rebalance cannot be combined with %s, which partitions by key", what, kind)
	}
	return s
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
	if c.WriteAhead {
		p.checkWriteAhead(n, spec, cfg, what, c.Type)
	}
	return &SinkSpec{ID: c.ID, Type: c.Type, From: c.From, Parallelism: c.Parallelism, Changelog: c.Changelog, WriteAhead: c.WriteAhead,
		Config: cfg, Pos: Pos{File: p.file, Line: n.Line, Col: n.Column}, node: n}
}

// checkWriteAhead reports a `write_ahead: true` that cannot work: without
// checkpoints nothing would ever be written, and a two-phase-commit sink
// already writes with each checkpoint. The config is asked for a sink
// (not opened) to tell the latter.
func (p *problems) checkWriteAhead(n *yaml.Node, spec *Spec, cfg SinkConfig, what, typ string) {
	_, v := mappingValue(n, "write_ahead")
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
