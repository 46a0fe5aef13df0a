package agg

import (
	"testing"

	"github.com/eddy-stream/eddy/pipeline"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"
)

// parse decodes an aggregate mapping.
func parse(t testing.TB, text string) (Specs, error) {
	t.Helper()
	var s Specs
	err := yaml.Unmarshal([]byte(text), &s)
	return s, err
}

func mustSpecs(t testing.TB, text string) Specs {
	t.Helper()
	s, err := parse(t, text)
	require.NoError(t, err)
	require.NoError(t, s.Compile())
	return s
}

func TestUnmarshalValid(t *testing.T) {
	type want struct {
		name string
		fn   Func
		args []string
	}
	for _, tc := range []struct {
		text string
		want []want
	}{
		{"n: count()", []want{{"n", FuncCount, nil}}},
		{"n: count( )", []want{{"n", FuncCount, nil}}},
		{"n: ' count ( x ) '", []want{{"n", FuncCount, []string{"x"}}}},
		{"a: avg(temp_c)\nb: max(temp_c * 2)\nc: min(temp)", []want{
			{"a", FuncAvg, []string{"temp_c"}}, {"b", FuncMax, []string{"temp_c * 2"}}, {"c", FuncMin, []string{"temp"}}}},
		{"s: sum(amount)\nf: first(temp)\nl: last(temp)\nids: collect(id)\nd: count_distinct(id)", []want{
			{"s", FuncSum, []string{"amount"}}, {"f", FuncFirst, []string{"temp"}}, {"l", FuncLast, []string{"temp"}},
			{"ids", FuncCollect, []string{"id"}}, {"d", FuncCountDistinct, []string{"id"}}}},
		{"p: reduce(acc * x, 1)", []want{{"p", FuncReduce, []string{"acc * x", "1"}}}},
		{"p: reduce(acc + x, 0, acc + other)", []want{{"p", FuncReduce, []string{"acc + x", "0", "acc + other"}}}},
		// Commas and parentheses inside nested brackets and strings belong to the argument.
		{`p: "reduce(merge(acc, {\"a,)\": [x, 1]}), {}, merge(acc, other))"`, []want{
			{"p", FuncReduce, []string{`merge(acc, {"a,)": [x, 1]})`, "{}", "merge(acc, other)"}}}},
		{"c: collect(sprintf('%s,%s', a, b))", []want{{"c", FuncCollect, []string{"sprintf('%s,%s', a, b)"}}}},
		{"c: 'collect(`a)`)'", []want{{"c", FuncCollect, []string{"`a)`"}}}},
		{"c: collect(\"a\\\")\")", []want{{"c", FuncCollect, []string{`"a\")"`}}}},
		{"m: |\n  max(\n    a +\n    b)\n", []want{{"m", FuncMax, []string{"a +\n  b"}}}},
	} {
		t.Run(tc.text, func(t *testing.T) {
			specs, err := parse(t, tc.text)
			require.NoError(t, err)
			var got []want
			for _, s := range specs {
				var args []string
				for _, a := range s.Args {
					args = append(args, a.Source)
				}
				got = append(got, want{s.Name, s.Func, args})
			}
			require.Equal(t, tc.want, got)
			require.NoError(t, specs.Compile())
		})
	}
}

func TestUnmarshalInvalid(t *testing.T) {
	const funcs = "; the functions are avg, collect, count, count_distinct, first, last, max, min, reduce, sum"
	for _, tc := range []struct{ text, want string }{
		{"[count()]", "must be a mapping of output fields to aggregate calls, e.g. n: count()"},
		{"{}", "needs at least one aggregate, e.g. n: count()"},
		{"n: count()\nn: sum(x)", "n: duplicate output field"},
		{"'': count()", ": an output field name must be a non-empty string"},
		{"a.b: count()", "a.b: an output field is a top-level field, so its name cannot contain '.'"},
		{"n: [count()]", "n: must be an aggregate call such as count() or avg(temp), not a list"},
		{"n:", "n: give an aggregate call, e.g. count() or avg(temp)"},
		{"n: mean(x)", `n: unknown aggregate function "mean" (did you mean avg?)` + funcs},
		{"n: cnt()", `n: unknown aggregate function "cnt" (did you mean count?)` + funcs},
		{"n: COUNT()", `n: unknown aggregate function "COUNT" (did you mean count?)` + funcs},
		{"n: median(x)", `n: unknown aggregate function "median"` + funcs},
		{"n: count", `n: "count" is not a call: write count(...)`},
		{"n: 5", `n: "5" is not an aggregate call: write function(argument), e.g. avg(temp)` + funcs},
		{"n: x + count()", `n: "x + count()" is not an aggregate call: write function(argument), e.g. avg(temp)` + funcs},
		{"n: avg(x) * 2", `n: unexpected "* 2" after avg(x): an aggregate is one call; put the whole expression inside it, e.g. avg(x * 2), or compute with its result in a later step`},
		{"n: avg(x", `n: missing ")" in "avg(x"`},
		{"n: avg((x)", `n: missing ")" in "avg((x)"`},
		{"n: avg(x])", `n: unbalanced ']' in "avg(x])"`},
		{"n: avg([x)]", `n: unbalanced ')' in "avg([x)]"`},
		{`n: avg("x)`, `n: unterminated string in "avg(\"x)"`},
		{"n: avg()", "n: avg takes exactly 1 argument, e.g. avg(temp); got 0"},
		{"n: sum(a, b)", "n: sum takes exactly 1 argument, e.g. sum(temp); got 2"},
		{"n: max(a, )", "n: argument 2 of max is empty"},
		{"n: min(, a)", "n: argument 1 of min is empty"},
		{"n: count(a, b)", "n: count takes no argument or one (count() counts records, count(x) counts records where x is not null), got 2"},
		{"n: reduce(acc)", "n: reduce takes 2 or 3 arguments, reduce(step, init[, merge]), e.g. reduce(acc * x, 1, acc * other); got 1"},
		{"n: reduce(a, b, c, d)", "n: reduce takes 2 or 3 arguments, reduce(step, init[, merge]), e.g. reduce(acc * x, 1, acc * other); got 4"},
	} {
		t.Run(tc.text, func(t *testing.T) {
			_, err := parse(t, tc.text)
			require.EqualError(t, err, tc.want)
		})
	}
}

func TestParseErrorPosition(t *testing.T) {
	_, err := parse(t, "a: count()\nbb:   avg(x, y)\n")
	var pe *ParseError
	require.ErrorAs(t, err, &pe)
	require.Equal(t, "bb", pe.Name)
	require.Equal(t, pipeline.Pos{Line: 2, Col: 7}, pe.Pos)
}

// Each argument's Expr is placed at the argument's column, so the loader
// reports its compile errors there.
func TestArgPositions(t *testing.T) {
	specs, err := parse(t, "a: avg( temp_c)\nb: \"reduce(acc * x, 1)\"\nc: 'max(  y)'\nd: |\n  max(z)\n")
	require.NoError(t, err)
	require.Equal(t, pipeline.Pos{Line: 1, Col: 4}, specs[0].Pos)
	require.Equal(t, pipeline.Pos{Line: 1, Col: 9}, specs[0].Args[0].Pos())
	require.Equal(t, pipeline.Pos{Line: 2, Col: 12}, specs[1].Args[0].Pos())
	require.Equal(t, pipeline.Pos{Line: 2, Col: 21}, specs[1].Args[1].Pos())
	require.Equal(t, pipeline.Pos{Line: 3, Col: 11}, specs[2].Args[0].Pos())
	require.Equal(t, pipeline.Pos{Line: 4, Col: 4}, specs[3].Args[0].Pos(), "block scalars keep the value's position")
}

func TestCompileErrors(t *testing.T) {
	for _, tc := range []struct{ text, want string }{
		{"m: max(temp *)", `aggregate.m: max(temp *): argument 1 "temp *": unexpected token EOF (column 6)`},
		{"p: reduce(acc *, 1)", `aggregate.p: reduce(acc *, 1): step "acc *": unexpected token EOF (column 5)`},
		{"p: reduce(acc * x, x)", `aggregate.p: reduce(acc * x, x): init "x": unknown name x (column 1)`},
		{"p: reduce(acc * x, 1 % 0)", `aggregate.p: reduce(acc * x, 1 % 0): init "1 % 0": integer divide by zero`},
		{"p: reduce(acc * x, 1, acc * x)", `aggregate.p: reduce(acc * x, 1, acc * x): merge "acc * x": unknown name x: ` +
			`the merge expression combines two partial results, acc (the earlier) and other (the later)`},
		{"p: reduce(acc * x, 1, $env.acc)", `aggregate.p: reduce(acc * x, 1, $env.acc): merge "$env.acc": $env is not available: use acc and other`},
	} {
		t.Run(tc.text, func(t *testing.T) {
			specs, err := parse(t, tc.text)
			require.NoError(t, err)
			err = specs.Compile()
			require.Error(t, err)
			require.Contains(t, err.Error(), tc.want)
			var fe *pipeline.FieldError
			require.ErrorAs(t, err, &fe)
			require.False(t, specs.Compiled())
		})
	}
	// Every bad aggregate is reported, each keyed by its name.
	specs, err := parse(t, "a: avg(x +)\nb: count()\nc: min(y -)")
	require.NoError(t, err)
	err = specs.Compile()
	var keys []string
	for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
		var fe *pipeline.FieldError
		require.ErrorAs(t, e, &fe)
		keys = append(keys, fe.Key)
	}
	require.Equal(t, []string{"aggregate.a", "aggregate.c"}, keys)
}

func TestCompileLetAndCalls(t *testing.T) {
	specs := mustSpecs(t, `p: "reduce(let y = x * 2; acc + to_int(y), 0, let s = acc + other; s)"`)
	require.Equal(t, []string{"x"}, specs[0].c.idents)
}

func TestPlainField(t *testing.T) {
	specs := mustSpecs(t, "a: avg(temp)\nb: avg(temp * 1)\nc: avg($env)\nd: count(nil)\ne: max(true)")
	require.Equal(t, "temp", specs[0].c.field)
	for _, s := range specs[1:] {
		require.Empty(t, s.c.field, s.Source)
	}
}

func TestSignatureRetractableMergeable(t *testing.T) {
	specs := mustSpecs(t, "n: count()\na: avg( x )\np: reduce(acc + x,0)\nm: max(x)")
	require.Equal(t, "n=count();a=avg(x);p=reduce(acc + x, 0);m=max(x)", specs.Signature())
	require.Equal(t, []string{"n", "a", "p", "m"}, specs.Names())

	err := specs.Retractable()
	require.EqualError(t, err, "aggregate.p: reduce cannot take a record back out (only count, sum, avg, collect and count_distinct can); it needs an append-only input\n"+
		"aggregate.m: max cannot take a record back out (only count, sum, avg, collect and count_distinct can); it needs an append-only input")
	require.EqualError(t, specs.Mergeable(),
		"aggregate.p: reduce needs a merge expression over acc and other to combine partial results, e.g. reduce(acc * x, 1, acc * other)")

	ok := mustSpecs(t, "n: count()\ns: sum(x)\na: avg(x)\nc: collect(x)\nd: count_distinct(x)")
	require.NoError(t, ok.Retractable())
	require.NoError(t, ok.Mergeable())
	require.NoError(t, mustSpecs(t, "p: reduce(acc + x, 0, acc + other)").Mergeable())
}
