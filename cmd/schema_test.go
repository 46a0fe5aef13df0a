package cmd

import (
	"bytes"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/eddy-stream/eddy/pipeline"
)

// compileSchema compiles the output of `eddy schema` with a validator of
// its own (which checks it against the draft 2020-12 meta-schema).
func compileSchema(t *testing.T) *jsonschema.Schema {
	t.Helper()
	res := execute(t, nil, "schema")
	require.Equal(t, 0, res.code, res.stderr)
	doc, err := jsonschema.UnmarshalJSON(strings.NewReader(res.stdout))
	require.NoError(t, err)
	require.Equal(t, pipeline.SchemaDialect, doc.(map[string]any)["$schema"])
	c := jsonschema.NewCompiler()
	require.NoError(t, c.AddResource("eddy.schema.json", doc))
	s, err := c.Compile("eddy.schema.json")
	require.NoError(t, err)
	return s
}

// validateYAML validates the YAML text of a pipeline file (as written,
// ${VAR} references included) against s.
func validateYAML(t *testing.T, s *jsonschema.Schema, text []byte) error {
	t.Helper()
	var v any
	require.NoError(t, yaml.Unmarshal(text, &v))
	b, err := json.Marshal(v)
	require.NoError(t, err)
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
	require.NoError(t, err)
	return s.Validate(inst)
}

// TestSchemaAcceptsConfigs: every example pipeline of configs/ validates
// against the schema, as written.
func TestSchemaAcceptsConfigs(t *testing.T) {
	s := compileSchema(t)
	files, err := filepath.Glob(filepath.Join("..", "configs", "*.yaml"))
	require.NoError(t, err)
	require.NotEmpty(t, files)
	for _, f := range files {
		text, err := os.ReadFile(f)
		require.NoError(t, err)
		require.NoError(t, validateYAML(t, s, text), f)
	}
}

// TestSchemaAcceptsWhatTheLoaderAccepts: every pipeline of the repository
// that eddy loads (YAML files, and ```yaml blocks of the docs that are
// whole pipelines) validates against the schema: an editor never flags
// what eddy takes.
func TestSchemaAcceptsWhatTheLoaderAccepts(t *testing.T) {
	s := compileSchema(t)
	loaded := 0
	check := func(name string, text []byte) {
		if _, err := pipeline.Load(pipeline.Default, name, text); err != nil {
			return // not a pipeline, a broken one, or one that needs variables
		}
		loaded++
		require.NoError(t, validateYAML(t, s, text), "%s:\n%s", name, text)
	}
	yamlBlock := regexp.MustCompile("(?s)```yaml\n(.*?)```")
	err := filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && strings.HasPrefix(d.Name(), ".") && path != ".." {
			return filepath.SkipDir
		}
		switch filepath.Ext(path) {
		case ".yaml", ".yml":
			text, err := os.ReadFile(path)
			require.NoError(t, err)
			check(path, text)
		case ".md":
			text, err := os.ReadFile(path)
			require.NoError(t, err)
			for i, m := range yamlBlock.FindAllSubmatch(text, -1) {
				check(path+" block "+strconv.Itoa(i+1), m[1])
			}
		}
		return nil
	})
	require.NoError(t, err)
	t.Logf("%d pipelines loaded", loaded)
	require.Greater(t, loaded, 20, "pipelines found")
}

// TestSchemaRejectsBroken: each file of testdata/schema is invalid for
// eddy validate and for the schema, at the place it is wrong.
func TestSchemaRejectsBroken(t *testing.T) {
	s := compileSchema(t)
	for file, at := range map[string]string{
		"unknown_key.yaml":      "/sources/0",
		"wrong_type.yaml":       "/parallelism",
		"two_kinds.yaml":        "/steps/0",
		"unknown_type.yaml":     "/sources/0/type",
		"bad_enum.yaml":         "/steps/0/on_error",
		"bad_duration.yaml":     "/checkpoint/interval",
		"missing_required.yaml": "/sinks/0",
		"top_level_key.yaml":    "",
		"bad_window_type.yaml":  "/steps/0/window/type",
	} {
		t.Run(file, func(t *testing.T) {
			path := filepath.Join("testdata", "schema", file)
			res := execute(t, nil, "validate", path)
			require.Equal(t, exitInvalid, res.code, "eddy validate takes it:\n%s", res.stderr)
			text, err := os.ReadFile(path)
			require.NoError(t, err)
			err = validateYAML(t, s, text)
			var ve *jsonschema.ValidationError
			require.True(t, errors.As(err, &ve), "the schema takes it")
			require.Contains(t, instanceLocations(ve), at, "%v", err)
		})
	}
}

// instanceLocations lists where the errors of a validation, and their
// causes, are: JSON pointers into the file.
func instanceLocations(e *jsonschema.ValidationError) []string {
	out := []string{""}
	if len(e.InstanceLocation) > 0 {
		out[0] = "/" + strings.Join(e.InstanceLocation, "/")
	}
	for _, c := range e.Causes {
		out = append(out, instanceLocations(c)...)
	}
	return out
}

// enumField is a string field with an enum tag, in a component's config.
type enumField struct {
	path   []int // field indexes from the config struct
	name   string
	values []string
}

// enumFields finds the enum-tagged fields of struct type t, nested and
// inline structs (and pointers to them) included.
func enumFields(t reflect.Type, path []int, name string) []enumField {
	var out []enumField
	for i := range t.NumField() {
		f := t.Field(i)
		p := append(append([]int(nil), path...), i)
		n := strings.TrimPrefix(name+"."+strings.Split(f.Tag.Get("yaml"), ",")[0], ".")
		if enum := f.Tag.Get("enum"); enum != "" {
			out = append(out, enumField{path: p, name: n, values: strings.Split(enum, ",")})
			continue
		}
		ft := f.Type
		if ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		if ft.Kind() == reflect.Struct && f.IsExported() {
			out = append(out, enumFields(ft, p, n)...)
		}
	}
	return out
}

// setField sets the string field at path of the struct v points to,
// allocating the nil pointers on the way.
func setField(v reflect.Value, path []int, s string) {
	v = v.Elem()
	for _, i := range path {
		v = v.Field(i)
		if v.Kind() == reflect.Pointer {
			if v.IsNil() {
				v.Set(reflect.New(v.Type().Elem()))
			}
			v = v.Elem()
		}
	}
	v.SetString(s)
}

// enumBases are what a component's config needs besides the field under
// test for its Validate to look at that field.
var enumBases = map[string]string{
	"step key_by": "key_by: k",
}

// TestSchemaEnumTags: the values an enum tag lists are the ones the
// component's Validate takes: each listed value draws no complaint about
// itself, and a value not listed does.
func TestSchemaEnumTags(t *testing.T) {
	type component struct {
		name string
		new  func() pipeline.Config
	}
	var all []component
	env := pipeline.Default
	for _, typ := range env.SourceTypes() {
		p, _ := env.Source(typ)
		all = append(all, component{"source " + typ, func() pipeline.Config { return p.New() }})
	}
	for _, typ := range env.SinkTypes() {
		p, _ := env.Sink(typ)
		all = append(all, component{"sink " + typ, func() pipeline.Config { return p.New() }})
	}
	for _, kind := range env.StepKinds() {
		p, _ := env.Step(kind)
		all = append(all, component{"step " + kind, func() pipeline.Config { return p.New() }})
	}
	found := 0
	for _, c := range all {
		for _, f := range enumFields(reflect.TypeOf(c.new()).Elem(), nil, "") {
			found++
			for _, value := range append(f.values, "zz_bogus") {
				cfg := c.new()
				require.NoError(t, yaml.Unmarshal([]byte(enumBases[c.name]), cfg))
				setField(reflect.ValueOf(cfg), f.path, value)
				err := cfg.Validate()
				if value == "zz_bogus" {
					require.ErrorContains(t, err, `"zz_bogus"`, "%s %s: a value the enum does not list", c.name, f.name)
				} else if err != nil {
					require.NotContains(t, err.Error(), strconv.Quote(value), "%s %s: a value the enum lists", c.name, f.name)
				}
			}
		}
	}
	require.GreaterOrEqual(t, found, 10, "enum-tagged fields")
}
