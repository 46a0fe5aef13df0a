package expr

import (
	"fmt"
	"runtime/debug"
	"sync"
	"testing"
	"time"

	exprlang "github.com/expr-lang/expr"
)

// builtinFuzzPanic records the first panic of a builtin called from a program: expr's
// VM recovers panics into errors, which would hide a builtin's bug.
var builtinFuzzPanic struct {
	sync.Mutex
	msg string
}

// builtinFuzzOptions are Builtins() with every function wrapped to record a panic:
// the same names and signatures, built from the same table.
var builtinFuzzOptions = sync.OnceValue(func() []exprlang.Option {
	opts := make([]exprlang.Option, 0, len(builtinDefs)+2)
	for _, d := range builtinDefs {
		fn := d.fn
		name := d.name
		wrapped := func(args ...any) (out any, err error) {
			defer func() {
				if r := recover(); r != nil {
					builtinFuzzPanic.Lock()
					if builtinFuzzPanic.msg == "" {
						builtinFuzzPanic.msg = fmt.Sprintf("%s(%#v) panicked: %v\n%s", name, args, r, debug.Stack())
					}
					builtinFuzzPanic.Unlock()
					panic(r)
				}
			}()
			return fn(args...)
		}
		opts = append(opts, exprlang.Function(d.name, wrapped, d.types...))
	}
	return append(opts, exprlang.Env(map[string]any{}), exprlang.AllowUndefinedVariables())
})

// FuzzExprCompile compiles arbitrary expressions with eddy's builtins and runs
// those that compile over a small record. Nothing may panic: not the
// compiler, not a builtin inside the VM, and not a builtin called directly
// with values derived from the input.
func FuzzExprCompile(f *testing.F) {
	for _, seed := range []string{
		`a + 1`,
		`s + "y"`,
		`n ?? "default"`,
		`l[0] + l[1]`,
		`now_ms() > 0`,
		`ts_parse("2023-11-14T22:13:20Z")`,
		`ts_parse(s, "2006-01-02", "Europe/Paris")`,
		`ts_format(now_ms(), "RFC1123", "UTC")`,
		`ts_format(a)`,
		`to_ms(now()) - to_ms(duration("1h"))`,
		`contains_any(s, ["x", "y"])`,
		`regex_find(s, "[a-z]+")`,
		`regex_find_all(s, "(")`,
		`regex_capture(s, "(?P<c>.)")?.c`,
		`regex_replace(s, "", "$0$0")`,
		`pad_left(s, 5, "0")`,
		`pad_right(s, a)`,
		`truncate(s, 1, "...")`,
		`sprintf("%v %d %s", a, l, n)`,
		`hash(l) % 10`,
		`uuid_v4()`,
		`to_json($env)`,
		`coalesce(n, missing, s)`,
		`to_int(a)`,
		`to_float(s)`,
		`to_string(l)`,
		`to_bool(n)`,
		`get_path($env, "l.1", 0)`,
		`merge($env, {"b": 2})`,
		`omit($env, "a", "s")`,
		`pick($env, "l")`,
		`map(l, pad_left(string(#), 3, "0"))`,
		`filter(split(s, ""), regex_find(#, "x") != "")`,
	} {
		f.Add(seed)
	}
	opts := builtinFuzzOptions()
	f.Fuzz(func(t *testing.T, src string) {
		if len(src) > 512 {
			t.Skip()
		}
		// A hung worker would stall the fuzzer without a report.
		watchdog := time.AfterFunc(10*time.Second, func() {
			panic(fmt.Sprintf("expression %q ran for over 10s", src))
		})
		defer watchdog.Stop()
		fuzzCallBuiltinsDirectly(t, src)

		p, err := exprlang.Compile(src, opts...)
		if err != nil {
			return
		}
		env := map[string]any{"a": 1.5, "s": "x", "n": nil, "l": []any{1, 2}}
		_, _ = exprlang.Run(p, env)
		builtinFuzzPanic.Lock()
		msg := builtinFuzzPanic.msg
		builtinFuzzPanic.msg = ""
		builtinFuzzPanic.Unlock()
		if msg != "" {
			t.Fatalf("expression %q: %s", src, msg)
		}
	})
}

// fuzzCallBuiltinsDirectly calls every builtin with the input as a string
// argument and with odd values chosen by the input's bytes.
func fuzzCallBuiltinsDirectly(t *testing.T, s string) {
	pool := builtinOddValues(s)
	pick := func(i int) any {
		if len(s) == 0 {
			return pool[i%len(pool)]
		}
		return pool[int(s[i%len(s)])%len(pool)]
	}
	for _, d := range builtinDefs {
		callBuiltinNoPanic(t, d, s)
		callBuiltinNoPanic(t, d, s, s)
		callBuiltinNoPanic(t, d, s, s, s)
		callBuiltinNoPanic(t, d, s, len(s))
		callBuiltinNoPanic(t, d, s, len(s), s)
		callBuiltinNoPanic(t, d, pick(0), s)
		callBuiltinNoPanic(t, d, s, pick(1), pick(2))
		callBuiltinNoPanic(t, d, pick(3), pick(4), pick(5))
	}
}
