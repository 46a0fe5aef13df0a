package pipeline_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/eddy-stream/eddy/pipeline"
	"github.com/eddy-stream/eddy/pipeline/pipelinetest"
	"github.com/stretchr/testify/require"
)

func TestLoadValid(t *testing.T) {
	t.Setenv("EDDY_TEST_COUNT", "7")
	spec, err := pipeline.Load(testEnv(), "ok.yaml", []byte(`
version: 1
name: ok
parallelism: 2
max_parallelism: 64
sources:
  - id: nums
    type: seq
    count: ${EDDY_TEST_COUNT}
    tag: ${EDDY_TEST_UNSET:fallback}
steps:
  - where: n > 2
  - id: k
    keyed: k
    parallelism: 3
sinks:
  - type: collect
`))
	require.NoError(t, err)
	require.Equal(t, "ok", spec.Name)
	require.Equal(t, 64, spec.MaxParallelism)
	require.Equal(t, 7, spec.Sources[0].Config.(*pipelinetest.SeqSourceConfig).Count)
	require.Equal(t, "fallback", spec.Sources[0].Config.(*pipelinetest.SeqSourceConfig).Tag)
	require.Equal(t, "where_1", spec.Steps[0].ID, "default ids are kind_position")
	require.Equal(t, []pipeline.StreamRef{{Node: "nums"}}, spec.Steps[0].Inputs)
	require.Equal(t, []pipeline.StreamRef{{Node: "where_1"}}, spec.Steps[1].Inputs, "from defaults to the previous step")
	require.Equal(t, 3, spec.Steps[1].Parallelism)
	require.Equal(t, 2, spec.Sinks[0].Parallelism)
	require.Equal(t, "sink_1", spec.Sinks[0].ID)
	require.Equal(t, []pipeline.StreamRef{{Node: "k"}}, spec.Sinks[0].Inputs)
}

// Environment variables are substituted into scalar values after parsing:
// never into comments, and a value keeps the YAML structure it stands in.
func TestLoadSubstitution(t *testing.T) {
	tests := []struct {
		name  string
		env   map[string]string
		count string // the text of the source's count value
		tag   string // the text of its tag value
		want  string // the tag loaded
	}{
		{name: "a value with a space and a hash is kept whole", env: map[string]string{"EDDY_TEST_NAME": "run #1"}, tag: "envtest/${EDDY_TEST_NAME}", want: "envtest/run #1"},
		{name: "a value with a colon and a brace stays a string", env: map[string]string{"EDDY_TEST_NAME": "a: {b: c}"}, tag: "${EDDY_TEST_NAME}", want: "a: {b: c}"},
		{name: "a value with a newline stays one scalar", env: map[string]string{"EDDY_TEST_NAME": "a\nsinks: []"}, tag: "${EDDY_TEST_NAME}", want: "a\nsinks: []"},
		{name: "in double quotes", env: map[string]string{"EDDY_TEST_NAME": `say "hi"`}, tag: `"<${EDDY_TEST_NAME}>"`, want: `<say "hi">`},
		{name: "a default", tag: "${EDDY_TEST_UNSET:fall back}", want: "fall back"},
		{name: "an empty default", tag: "x${EDDY_TEST_UNSET:}y", want: "xy"},
		{name: "$${ is a literal ${", tag: "$${EDDY_TEST_UNSET}", want: "${EDDY_TEST_UNSET}"},
		{name: "a number is typed as YAML types it", env: map[string]string{"EDDY_TEST_N": "7"}, count: "${EDDY_TEST_N}", want: ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			src := "{type: seq, count: 3}"
			if tt.tag != "" {
				src = "{type: seq, count: 3, tag: " + tt.tag + "}"
			}
			if tt.count != "" {
				src = "{type: seq, count: " + tt.count + "}"
			}
			text := "version: 1\nname: env  # set ${EDDY_TEST_UNSET} first\n# ${EDDY_TEST_UNSET} is not needed\nsources:\n  - " + src + "\nsinks: [{type: collect}]\n"
			spec, err := pipeline.Load(testEnv(), "env.yaml", []byte(text))
			require.NoError(t, err)
			cfg := spec.Sources[0].Config.(*pipelinetest.SeqSourceConfig)
			require.Equal(t, tt.want, cfg.Tag)
			if tt.count != "" {
				require.Equal(t, 7, cfg.Count)
			}
		})
	}
}

func TestLoadInvalid(t *testing.T) {
	const head = "version: 1\nname: bad\n"
	tests := []struct {
		name string
		text string
		want []string
	}{{
		name: "unknown top-level key with a suggestion",
		text: head + "paralelism: 2\nsources: [{type: seq}]\nsinks: [{type: collect}]\n",
		want: []string{`bad.yaml:3:1: unknown key "paralelism" in pipeline (did you mean "parallelism"?)`},
	}, {
		name: "missing required keys",
		text: "version: 1\nsources: [{type: seq}]\n",
		want: []string{
			`bad.yaml:1:1: pipeline: missing required key "name"`,
			`bad.yaml:1:1: pipeline: missing required key "sinks"`,
		},
	}, {
		name: "unknown source and sink types",
		text: head + "sources:\n  - type: kafkaa\nsinks:\n  - id: out\n    type: nowhere\n",
		want: []string{
			`bad.yaml:4:11: source "source_1": unknown source type "kafkaa" (known: seq)`,
			`bad.yaml:7:11: sink "out": unknown sink type "nowhere" (known: collect, txn)`,
		},
	}, {
		name: "write_ahead with no write-ahead wrapper registered",
		text: head + "checkpoint: {interval: 1s}\nsources: [{type: seq}]\nsinks:\n  - id: out\n    type: collect\n    write_ahead: true\n",
		want: []string{`bad.yaml:8:18: sink "out": write_ahead is not available: no write-ahead sink wrapper is registered in this build (import github.com/eddy-stream/eddy/connectors/writeahead, or remove write_ahead)`},
	}, {
		name: "unknown key of a source type",
		text: head + "sources:\n  - type: seq\n    cout: 3\nsinks: [{type: collect}]\n",
		want: []string{`bad.yaml:5:5: unknown key "cout" in source "source_1" (seq) (did you mean "count"?)`},
	}, {
		name: "step without a kind, and with two",
		text: head + "sources: [{type: seq}]\nsteps:\n  - id: a\n  - id: b\n    where: true\n    pass: 1\nsinks: [{type: collect}]\n",
		want: []string{
			`bad.yaml:5:5: steps[0] does nothing: give it one of count_by, keyed, ops, pass, where, wmlog`,
			`bad.yaml:8:5: steps[1] has both "where" and "pass": a step does one thing, split it into two steps`,
		},
	}, {
		name: "dangling from with a suggestion",
		text: head + "sources: [{id: nums, type: seq}]\nsteps:\n  - where: true\n    from: numz\nsinks:\n  - type: collect\n    from: [where_1, nope]\n",
		want: []string{
			`bad.yaml:6:11: step "where_1": from "numz": no source, step or side stream has that id (did you mean "nums"?)`,
			`bad.yaml:9:21: sink "sink_1": from "nope": no source, step or side stream has that id`,
		},
	}, {
		name: "cycle",
		text: head + "sources: [{type: seq}]\nsteps:\n  - id: a\n    from: [source_1, c]\n    pass:\n  - id: b\n    pass:\n  - id: c\n    pass:\nsinks: [{type: collect}]\n",
		want: []string{`bad.yaml:8:5: step "b": from makes a cycle: a -> b -> c -> a`},
	}, {
		name: "expression syntax error points into the expression",
		text: head + "sources: [{type: seq}]\nsteps:\n  - where: n > > 2\nsinks: [{type: collect}]\n",
		want: []string{`bad.yaml:5:16: expression "n > > 2": unexpected token Operator(">")`},
	}, {
		name: "expression type error",
		text: head + "sources: [{type: seq}]\nsteps:\n  - where: \"1 + 2\"\nsinks: [{type: collect}]\n",
		want: []string{`bad.yaml:5:12: expression "1 + 2": expected bool, but got int`},
	}, {
		name: "mismatched operand types",
		text: head + "sources: [{type: seq}]\nsteps:\n  - where: |\n      n > 1 and\n      \"a\" + 1 > 2\nsinks: [{type: collect}]\n",
		want: []string{`bad.yaml:7:11: expression "n > 1 and\n\"a\" + 1 > 2\n": invalid operation: + (mismatched types string and int)`},
	}, {
		name: "duplicate ids",
		text: head + "sources: [{id: x, type: seq}]\nsteps:\n  - id: x\n    pass:\nsinks: [{type: collect}]\n",
		want: []string{`bad.yaml:5:9: id "x" is already used at line 3`},
	}, {
		name: "environment variable not set",
		text: head + "sources: [{type: seq, count: ${EDDY_TEST_NOT_SET}}]\nsinks: [{type: collect}]\n",
		want: []string{`bad.yaml:3:30: environment variable EDDY_TEST_NOT_SET is not set (set it, or give a default: ${EDDY_TEST_NOT_SET:value})`},
	}, {
		name: "environment variable not set, inside a value",
		text: head + "sources:\n  - type: seq\n    tag: 'run ${EDDY_TEST_NOT_SET}'\nsinks: [{type: collect}]\n",
		want: []string{`bad.yaml:5:15: environment variable EDDY_TEST_NOT_SET is not set (set it, or give a default: ${EDDY_TEST_NOT_SET:value})`},
	}, {
		name: "environment variable not set, in a block scalar",
		text: head + "sources: [{type: seq}]\nsteps:\n  - where: |\n      n > 1 and\n      n < ${EDDY_TEST_NOT_SET}\nsinks: [{type: collect}]\n",
		want: []string{
			`bad.yaml:7:11: environment variable EDDY_TEST_NOT_SET is not set (set it, or give a default: ${EDDY_TEST_NOT_SET:value})`,
			`bad.yaml:7:11: expression "n > 1 and\nn < \n": unexpected token EOF`,
		},
	}, {
		name: "comma inside { } cuts an expression",
		text: head + "sources: [{type: seq}]\nsteps:\n  - ops: { label: sprintf(\"%s-%d\", a, 1), n: n }\nsinks: [{type: collect}]\n",
		want: []string{`bad.yaml:5:19: quote an expression that contains commas inside { }: YAML ends the value of "label" at the comma after "sprintf(\"%s-%d\"" (quote it, or write the mapping in block style)`},
	}, {
		name: "comma inside { } makes a YAML syntax error",
		text: head + "sources: [{type: seq}]\nsteps:\n  - ops: {\n      label: concat(a, \"-\" + b) }\nsinks: [{type: collect}]\n",
		want: []string{`bad.yaml:6:14: YAML syntax: quote an expression that contains commas inside { }: YAML ends a value at a comma inside { } (quote it, or write the mapping in block style)`},
	}, {
		name: "empty file",
		text: "# nothing yet\n",
		want: []string{`bad.yaml:1:1: the file is empty: a pipeline file is a mapping with version, name, sources, steps and sinks (see docs/pipeline.md)`},
	}, {
		name: "wrong value types and ranges",
		text: head + "parallelism: two\nsources: [{type: seq, parallelism: 0}]\nsteps:\n  - where: true\n    on_error: retry\n    limit: -1\nsinks: [{type: collect}]\n",
		want: []string{
			`bad.yaml:3:14: parallelism: cannot use "two" as a whole number`,
			`bad.yaml:4:36: source "source_1": parallelism must be between 1 and max_parallelism (128)`,
			`bad.yaml:7:15: on_error: on_error must be fail, skip or dead_letter, not "retry"`,
			`bad.yaml:8:12: limit: must not be negative`,
		},
	}, {
		name: "unknown checkpoint key",
		text: head + "checkpoint:\n  priority: low\nsources: [{type: seq}]\nsinks: [{type: collect}]\n",
		want: []string{`bad.yaml:4:3: unknown key "priority" in checkpoint`},
	}, {
		name: "validate errors point at their key",
		text: head + "sources: [{type: seq}]\nsteps:\n  - where: true\n    limit: -1\nsinks: [{type: collect}]\n",
		want: []string{`bad.yaml:6:12: limit: must not be negative`},
	}, {
		name: "dead letters nobody reads",
		text: head + "sources: [{type: seq}]\nsteps:\n  - where: true\n    on_error: dead_letter\nsinks: [{type: collect}]\n",
		want: []string{`bad.yaml:6:15: step "where_1": on_error: dead_letter, but no step or sink reads "where_1.errors"; add a sink with from: where_1.errors`},
	}, {
		name: "from is required with several sources",
		text: head + "sources: [{id: a, type: seq}, {id: b, type: seq}]\nsteps:\n  - pass:\nsinks: [{type: collect}]\n",
		want: []string{`bad.yaml:5:5: step "pass_1": say which stream it reads with from: (there is no single previous step or source)`},
	}, {
		name: "YAML syntax error",
		text: head + "sources:\n  - type: seq\n   bad indent: [\n",
		want: []string{`bad.yaml:3:1: YAML syntax: did not find expected '-' indicator`},
	}, {
		name: "not a mapping",
		text: "- just a list\n",
		want: []string{`bad.yaml:1:1: a pipeline file must be a mapping with version, name, sources, steps and sinks`},
	}, {
		name: "wrong version",
		text: "version: 2\nname: bad\nsources: [{type: seq}]\nsinks: [{type: collect}]\n",
		want: []string{`bad.yaml:1:10: version: this eddy reads format version 1, not 2`},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := pipeline.Load(testEnv(), "bad.yaml", []byte(tt.text))
			require.Error(t, err)
			require.True(t, errors.Is(err, pipeline.ErrInvalid))
			require.Equal(t, strings.Join(tt.want, "\n"), err.Error())
		})
	}
}

func FuzzLoad(f *testing.F) {
	f.Add("version: 1\nname: f\nsources: [{type: seq, count: 3}]\nsteps:\n  - where: n > 1\n  - keyed: k\nsinks: [{type: collect}]\n")
	f.Add("version: 1\nname: f\nsources: [{id: a, type: seq}]\nsteps: [{id: b, from: [a, c], pass: 1}, {id: c, from: b, pass: }]\nsinks: [{type: collect, from: b.errors}]\n")
	f.Add("a: &x [*x]\n")
	f.Add("version: ${X:1}\nname: $${y}\n")
	f.Add("version: 1\nname: f # ${UNSET}\nsources: [{type: seq, tag: a${X:b}c}]\nsteps:\n  - ops: { x: f(a, \"b\" + c) }\nsinks: [{type: collect}]\n")
	f.Add("version: 1\nname: f\nsources: [{type: seq}]\nsteps:\n  - where: |\n      n >\n")
	f.Fuzz(func(t *testing.T, text string) {
		spec, err := pipeline.Load(testEnv(), "fuzz.yaml", []byte(text))
		if err != nil {
			var ps pipeline.Problems
			require.ErrorAs(t, err, &ps)
			require.NotEmpty(t, ps)
			for _, p := range ps {
				require.Equal(t, "fuzz.yaml", p.Pos.File)
				require.NotContains(t, p.Msg, "internal error", "the loader panicked")
			}
			return
		}
		_, err = pipeline.Compile(spec)
		require.NoError(t, err)
	})
}

// An unknown step kind is answered with the kind it most likely means: one
// a typo away, or the kind another tool's name stands for.
func TestLoadStepKindSuggestion(t *testing.T) {
	env := pipeline.NewEnv()
	env.RegisterSource(pipeline.SourcePlugin{Type: "seq", New: func() pipeline.SourceConfig { return &pipelinetest.SeqSourceConfig{} }})
	env.RegisterSink(pipeline.SinkPlugin{Type: "collect", New: func() pipeline.SinkConfig { return &collectConfig{} }})
	for _, kind := range []string{"filter", "map", "key_by"} {
		env.RegisterStep(pipeline.StepPlugin{Kind: kind, New: func() pipeline.StepConfig { return &passConfig{} }})
	}
	tests := []struct{ key, want string }{
		{"filtr", `unknown step kind "filtr" (did you mean "filter"?)`},
		{"where", `unknown step kind "where" (did you mean "filter"?)`},
		{"select", `unknown step kind "select" (did you mean "map"?)`},
		{"project", `unknown step kind "project" (did you mean "map"?)`},
		{"group_by", `unknown step kind "group_by" (did you mean "key_by"?)`},
		{"distinct", `does nothing: give it one of filter, key_by, map`}, // dedupe is not in this env
	}
	for _, tt := range tests {
		t.Run(tt.key, func(t *testing.T) {
			text := "version: 1\nname: s\nsources: [{type: seq}]\nsteps:\n  - " + tt.key + ": x\nsinks: [{type: collect}]\n"
			_, err := pipeline.Load(env, "s.yaml", []byte(text))
			require.ErrorContains(t, err, "s.yaml:5:5: steps[0]")
			require.ErrorContains(t, err, tt.want)
		})
	}
}

// An event_time that can never give a time does not load: a constant that
// is not a timestamp, or a result whose static type is not one. Record
// fields have no static type, so a field always loads.
func TestEventTimeThatCannotGiveATime(t *testing.T) {
	const text = "version: 1\nname: et\nsources:\n  - id: in\n    type: seq\n    event_time: %s\nsinks: [{type: collect}]\n"
	for _, tc := range []struct {
		expr string
		want string // "" when it loads
	}{
		{`ts`, ""},
		{`n * 1000`, ""},
		{`'"2024-05-01 11:59:59.414"'`, ""},
		{`ts_parse(ts, "02/01/2006 15:04")`, ""},
		{`'ts == nil ? now() : date(ts)'`, ""},
		{`'"hello"'`, `et.yaml:6:17: source "in": event_time "\"hello\"" can never give a time: "hello" is not an RFC 3339 timestamp, a date or epoch milliseconds (parse other layouts with ts_parse(field, layout))`},
		{`nil`, `et.yaml:6:17: source "in": event_time "nil" can never give a time: the record has no timestamp (the expression returned null)`},
		{`1 / 0`, `et.yaml:6:17: source "in": event_time "1 / 0" can never give a time: the result is +Inf, not a finite number (a division by zero?)`},
		{`ts > 5`, `et.yaml:6:17: source "in": event_time "ts > 5" can never give a time: it returns bool, not a time: return epoch milliseconds, a time or a timestamp string`},
		{`'{"at": ts}'`, `et.yaml:6:17: source "in": event_time "{\"at\": ts}" can never give a time: it returns map[string]interface {}, not a time: return epoch milliseconds, a time or a timestamp string`},
		{`'[ts]'`, `et.yaml:6:17: source "in": event_time "[ts]" can never give a time: it returns []interface {}, not a time: return epoch milliseconds, a time or a timestamp string`},
		{`duration(ts)`, `et.yaml:6:17: source "in": event_time "duration(ts)" can never give a time: it returns time.Duration, not a time: return epoch milliseconds, a time or a timestamp string`},
	} {
		t.Run(tc.expr, func(t *testing.T) {
			_, err := pipeline.Load(testEnv(), "et.yaml", []byte(fmt.Sprintf(text, tc.expr)))
			if tc.want == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, pipeline.ErrInvalid)
			require.EqualError(t, err, tc.want)
		})
	}
}
