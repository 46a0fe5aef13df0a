package expr

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/cespare/xxhash/v2"
	exprlang "github.com/expr-lang/expr"
)

// Builtins returns the functions eddy adds to expr-lang for every expression.
// They complement expr-lang's own builtins (upper, lower, trim, split, join, replace,
// hasPrefix, int, float, string, type, toJSON, fromJSON, now, date, duration,
// keys, values, get, ...) and never shadow one of them.
//
// Every function has typed signatures, so the checker rejects a wrong number
// of arguments or an argument of a wrong static type at compile time. Record
// fields are untyped, so every function checks its arguments again at run time
// and returns an error (never panics) on a bad value. All functions are safe
// for concurrent use; the only shared state is a copy-on-write cache of
// compiled regular expressions and time zones.
//
// Timestamps are epoch milliseconds (int), like a record's event time.
//
// Time:
//
//	now_ms() int                                   current time in epoch ms
//	ts_parse(s string[, layout string[, tz string]]) int
//	                                               parse a timestamp to epoch ms
//	ts_format(ms number|time[, layout string[, tz string]]) string
//	                                               format epoch ms (RFC 3339, UTC by default)
//	to_ms(v any) int                               time, duration, timestamp string or number to ms
//
// Strings and regular expressions:
//
//	contains_any(s string, subs []string) bool     s contains at least one of subs
//	regex_find(s, re string) string                first match, "" when none
//	regex_find_all(s, re string) []any             all matches
//	regex_capture(s, re string) map[string]any     groups of the first match by number and name; nil when none
//	regex_replace(s, re, repl string) string       replace all matches; repl may use $1, ${name}
//	pad_left(s string, n int[, pad string]) string pad on the left to n characters
//	pad_right(s string, n int[, pad string]) string
//	truncate(s string, n int[, suffix string]) string
//	                                               at most n characters, suffix included
//	sprintf(format string, args ...any) string     fmt.Sprintf
//	hash(v any) int                                non-negative 63-bit xxhash of a canonical encoding
//	uuid_v4() string                               random UUID
//	to_json(v any) string                          compact JSON (toJSON is indented)
//
// Conversion and null handling:
//
//	coalesce(v any, more ...any) any               first non-nil argument
//	to_int(v any) int                              number, numeric string or bool to int
//	to_float(v any) float                          number, numeric string or bool to float
//	to_string(v any) string                        text form; JSON for maps and lists
//	to_bool(v any) bool                            bool, number or "true"/"yes"/"on"/... to bool
//
// Maps:
//
//	get_path(v any, path string[, default any]) any   nested lookup by "a.b.0.c"
//	merge(m map, more ...map) map                  shallow merge into a new map; later keys win
//	omit(m map, keys ...string) map                copy without keys
//	pick(m map, keys ...string) map                copy with only keys
//
// docs/expressions.md describes each function with an example.
func Builtins() []exprlang.Option {
	return slices.Clone(builtinOptions())
}

var builtinOptions = sync.OnceValue(func() []exprlang.Option {
	opts := make([]exprlang.Option, len(builtinDefs))
	for i, d := range builtinDefs {
		opts[i] = exprlang.Function(d.name, d.fn, d.types...)
	}
	return slices.Clip(opts)
})

// builtinDef is one eddy builtin: its name, implementation and signatures.
type builtinDef struct {
	name  string
	fn    func(args ...any) (any, error)
	types []any
}

// builtinDefs lists every eddy builtin. The checker tries the signatures in
// order and takes the first that accepts the arguments (all share one
// implementation); when none does, it reports the last one's error. So the
// signatures go from the most arguments to the fewest: a type error in the
// required arguments then reads "cannot use int as argument (type string)"
// rather than "not enough arguments".
var builtinDefs = []builtinDef{
	// Time.
	{"now_ms", bNowMs, []any{new(func() int)}},
	{"ts_parse", bTsParse, []any{
		new(func(string, string, string) int),
		new(func(string, string) int),
		new(func(string) int),
	}},
	{"ts_format", bTsFormat, []any{
		new(func(time.Time, string, string) string),
		new(func(float64, string, string) string),
		new(func(time.Time, string) string),
		new(func(float64, string) string),
		new(func(time.Time) string),
		new(func(float64) string),
	}},
	{"to_ms", bToMs, []any{new(func(any) int)}},

	// Strings.
	{"contains_any", bContainsAny, []any{
		new(func(string, []string) bool),
		new(func(string, []any) bool),
	}},
	{"regex_find", bRegexFind, []any{new(func(string, string) string)}},
	{"regex_find_all", bRegexFindAll, []any{new(func(string, string) []any)}},
	{"regex_capture", bRegexCapture, []any{new(func(string, string) map[string]any)}},
	{"regex_replace", bRegexReplace, []any{new(func(string, string, string) string)}},
	{"pad_left", bPadLeft, []any{
		new(func(string, int, string) string),
		new(func(string, int) string),
	}},
	{"pad_right", bPadRight, []any{
		new(func(string, int, string) string),
		new(func(string, int) string),
	}},
	{"truncate", bTruncate, []any{
		new(func(string, int, string) string),
		new(func(string, int) string),
	}},
	{"sprintf", bSprintf, []any{new(func(string, ...any) string)}},
	{"hash", bHash, []any{new(func(any) int)}},
	{"uuid_v4", bUUIDv4, []any{new(func() string)}},
	{"to_json", bToJSON, []any{new(func(any) string)}},

	// Conversion and null handling.
	{"coalesce", bCoalesce, []any{new(func(any, ...any) any)}},
	{"to_int", bToInt, []any{new(func(any) int)}},
	{"to_float", bToFloat, []any{new(func(any) float64)}},
	{"to_string", bToString, []any{new(func(any) string)}},
	{"to_bool", bToBool, []any{new(func(any) bool)}},

	// Maps.
	{"get_path", bGetPath, []any{
		new(func(any, string, any) any),
		new(func(any, string) any),
	}},
	{"merge", bMerge, []any{new(func(map[string]any, ...map[string]any) map[string]any)}},
	{"omit", bOmit, []any{new(func(map[string]any, ...string) map[string]any)}},
	{"pick", bPick, []any{new(func(map[string]any, ...string) map[string]any)}},
}

// Limits that keep a single call from allocating without bound (expr's own
// repeat stops at the same size).
const (
	maxBuiltinLen   = 1_000_000
	maxBuiltinDepth = 1000
	maxCacheEntries = 512
	maxCacheKey     = 1024
)

// --- argument helpers -------------------------------------------------------

func biArity(name string, args []any, lo, hi int) error {
	if len(args) < lo || (hi >= 0 && len(args) > hi) {
		switch {
		case lo == hi:
			return fmt.Errorf("%s: expected %d arguments, got %d", name, lo, len(args))
		case hi < 0:
			return fmt.Errorf("%s: expected at least %d arguments, got %d", name, lo, len(args))
		default:
			return fmt.Errorf("%s: expected %d to %d arguments, got %d", name, lo, hi, len(args))
		}
	}
	return nil
}

func biTypeName(v any) string {
	if v == nil {
		return "nil"
	}
	return fmt.Sprintf("%T", v)
}

func biStrArg(name string, args []any, i int) (string, error) {
	s, ok := args[i].(string)
	if !ok {
		return "", fmt.Errorf("%s: argument %d must be a string, got %s", name, i+1, biTypeName(args[i]))
	}
	return s, nil
}

func biIntArg(name string, args []any, i int) (int, error) {
	n, ok := biAsInt(args[i])
	if !ok {
		return 0, fmt.Errorf("%s: argument %d must be an integer, got %s", name, i+1, biDescribe(args[i]))
	}
	return n, nil
}

// describeValue renders a value for an error message: its type, and for
// scalars the value itself.
func biDescribe(v any) string {
	switch x := v.(type) {
	case nil:
		return "nil"
	case string:
		if len(x) > 64 {
			x = x[:64] + "..."
		}
		return "string " + strconv.Quote(x)
	case float64, float32, int, int64, int32, uint64, bool:
		return fmt.Sprintf("%T %v", v, v)
	}
	return biTypeName(v)
}

// asInt returns v as an int when it is an integer, or a float with an integral
// value, in int's range.
func biAsInt(v any) (int, bool) {
	switch x := v.(type) {
	case int:
		return x, true
	case int64:
		return int(x), int64(int(x)) == x
	case float64:
		return biFloatToInt(x)
	case int32:
		return int(x), true
	case int16:
		return int(x), true
	case int8:
		return int(x), true
	case uint8:
		return int(x), true
	case uint16:
		return int(x), true
	case uint32:
		return int(x), uint64(x) <= math.MaxInt
	case uint:
		return int(x), uint64(x) <= math.MaxInt
	case uint64:
		return int(x), x <= math.MaxInt
	case float32:
		return biFloatToInt(float64(x))
	}
	return 0, false
}

func biFloatToInt(f float64) (int, bool) {
	if f != math.Trunc(f) || !biInIntRange(f) {
		return 0, false
	}
	return int(f), true
}

// inIntRange reports whether f (finite or not) converts to int without overflow.
func biInIntRange(f float64) bool {
	return f >= float64(math.MinInt) && f < -float64(math.MinInt)
}

// asFloat returns v as a float64 when it is a number.
func biAsFloat(v any) (float64, bool) {
	switch x := v.(type) {
	case float64:
		return x, true
	case int:
		return float64(x), true
	case int64:
		return float64(x), true
	case float32:
		return float64(x), true
	case int32:
		return float64(x), true
	case int16:
		return float64(x), true
	case int8:
		return float64(x), true
	case uint:
		return float64(x), true
	case uint8:
		return float64(x), true
	case uint16:
		return float64(x), true
	case uint32:
		return float64(x), true
	case uint64:
		return float64(x), true
	}
	return 0, false
}

// biCache is a bounded copy-on-write cache: lock-free, allocation-free reads;
// writes copy the (small) map under a mutex. Once full it stops growing and
// callers build the value on every miss.
type biCache[V any] struct {
	mu sync.Mutex
	m  atomic.Pointer[map[string]V]
}

func (c *biCache[V]) get(key string, build func(string) (V, error)) (V, error) {
	if len(key) > maxCacheKey {
		return build(key)
	}
	if m := c.m.Load(); m != nil {
		if v, ok := (*m)[key]; ok {
			return v, nil
		}
	}
	v, err := build(key)
	if err != nil {
		return v, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	old := c.m.Load()
	if old != nil {
		if cur, ok := (*old)[key]; ok {
			return cur, nil
		}
		if len(*old) >= maxCacheEntries {
			return v, nil
		}
	}
	var next map[string]V
	if old == nil {
		next = map[string]V{key: v}
	} else {
		next = make(map[string]V, len(*old)+1)
		for k, x := range *old {
			next[k] = x
		}
		next[key] = v
	}
	c.m.Store(&next)
	return v, nil
}

var (
	biRegexCache    biCache[*regexp.Regexp]
	biLocationCache biCache[*time.Location]
)

func biRegexArg(name string, args []any, i int) (*regexp.Regexp, error) {
	p, err := biStrArg(name, args, i)
	if err != nil {
		return nil, err
	}
	re, err := biRegexCache.get(p, regexp.Compile)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return re, nil
}

func biLocation(name string) (*time.Location, error) {
	switch name {
	case "", "UTC":
		return time.UTC, nil
	case "Local":
		return time.Local, nil
	}
	return biLocationCache.get(name, time.LoadLocation)
}

// --- time -------------------------------------------------------------------

func bNowMs(args ...any) (any, error) {
	if err := biArity("now_ms", args, 0, 0); err != nil {
		return nil, err
	}
	return int(time.Now().UnixMilli()), nil
}

// biNamedLayouts maps the names of Go's layout constants to the layouts.
var biNamedLayouts = map[string]string{
	"Layout":      time.Layout,
	"ANSIC":       time.ANSIC,
	"UnixDate":    time.UnixDate,
	"RubyDate":    time.RubyDate,
	"RFC822":      time.RFC822,
	"RFC822Z":     time.RFC822Z,
	"RFC850":      time.RFC850,
	"RFC1123":     time.RFC1123,
	"RFC1123Z":    time.RFC1123Z,
	"RFC3339":     time.RFC3339,
	"RFC3339Nano": time.RFC3339Nano,
	"Kitchen":     time.Kitchen,
	"Stamp":       time.Stamp,
	"StampMilli":  time.StampMilli,
	"StampMicro":  time.StampMicro,
	"StampNano":   time.StampNano,
	"DateTime":    time.DateTime,
	"DateOnly":    time.DateOnly,
	"TimeOnly":    time.TimeOnly,
}

func biLayout(s string) string {
	if l, ok := biNamedLayouts[s]; ok {
		return l
	}
	return s
}

func bTsParse(args ...any) (any, error) {
	const name = "ts_parse"
	if err := biArity(name, args, 1, 3); err != nil {
		return nil, err
	}
	s, err := biStrArg(name, args, 0)
	if err != nil {
		return nil, err
	}
	layout := ""
	if len(args) > 1 {
		if layout, err = biStrArg(name, args, 1); err != nil {
			return nil, err
		}
	}
	loc := time.UTC
	if len(args) > 2 {
		tz, err := biStrArg(name, args, 2)
		if err != nil {
			return nil, err
		}
		if loc, err = biLocation(tz); err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
	}
	if layout == "" {
		ms, err := ParseTimestamp(s, loc)
		if err != nil {
			return nil, fmt.Errorf("%s: %w (give a layout as the second argument)", name, err)
		}
		return int(ms), nil
	}
	t, err := time.ParseInLocation(biLayout(layout), s, loc)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return int(t.UnixMilli()), nil
}

// ParseTimestamp parses epoch milliseconds ("1700000000000"), RFC 3339 with
// or without a zone, with 'T' or ' ' between date and time, with optional
// fractional seconds, or a date alone. Times without a zone are in loc.
// ts_parse without a layout, to_ms and a source's event_time share it, so
// they read the same strings.
func ParseTimestamp(s string, loc *time.Location) (int64, error) {
	s = strings.TrimSpace(s)
	if biIsInteger(s) {
		ms, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("epoch milliseconds %q out of range", s)
		}
		return ms, nil
	}
	var layouts [2]string
	switch {
	case len(s) == len(time.DateOnly):
		layouts[0] = time.DateOnly
	case len(s) > len(time.DateOnly) && s[10] == 'T':
		layouts[0], layouts[1] = time.RFC3339, "2006-01-02T15:04:05"
	case len(s) > len(time.DateOnly) && s[10] == ' ':
		layouts[0], layouts[1] = "2006-01-02 15:04:05Z07:00", time.DateTime
	}
	for _, l := range layouts {
		if l == "" {
			break
		}
		if t, err := time.ParseInLocation(l, s, loc); err == nil {
			return t.UnixMilli(), nil
		}
	}
	if len(s) > 64 {
		s = s[:64] + "..."
	}
	return 0, fmt.Errorf("%q is not an RFC 3339 timestamp, a date or epoch milliseconds", s)
}

func biIsInteger(s string) bool {
	if s != "" && (s[0] == '-' || s[0] == '+') {
		s = s[1:]
	}
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// msToTime converts epoch milliseconds (any number) or a time to a time.
func biMsToTime(name string, v any) (time.Time, error) {
	switch x := v.(type) {
	case time.Time:
		return x, nil
	case *time.Time:
		if x != nil {
			return *x, nil
		}
	case int:
		return time.UnixMilli(int64(x)), nil
	case int64:
		return time.UnixMilli(x), nil
	case float64:
		return biFloatMsToTime(name, x)
	default:
		if f, ok := biAsFloat(v); ok {
			if n, ok := biAsInt(v); ok {
				return time.UnixMilli(int64(n)), nil
			}
			return biFloatMsToTime(name, f)
		}
	}
	return time.Time{}, fmt.Errorf("%s: want epoch milliseconds or a time, got %s (use ts_parse or to_ms for strings)", name, biDescribe(v))
}

func biFloatMsToTime(name string, f float64) (time.Time, error) {
	ms := math.Floor(f)
	if !biInIntRange(ms) || math.IsNaN(f) {
		return time.Time{}, fmt.Errorf("%s: %v is not a valid epoch milliseconds value", name, f)
	}
	return time.UnixMilli(int64(ms)).Add(time.Duration((f - ms) * 1e6)), nil
}

func bTsFormat(args ...any) (any, error) {
	const name = "ts_format"
	if err := biArity(name, args, 1, 3); err != nil {
		return nil, err
	}
	t, err := biMsToTime(name, args[0])
	if err != nil {
		return nil, err
	}
	layout := time.RFC3339Nano
	if len(args) > 1 {
		l, err := biStrArg(name, args, 1)
		if err != nil {
			return nil, err
		}
		if l != "" {
			layout = biLayout(l)
		}
	}
	loc := time.UTC
	if len(args) > 2 {
		tz, err := biStrArg(name, args, 2)
		if err != nil {
			return nil, err
		}
		if loc, err = biLocation(tz); err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
	}
	return t.In(loc).Format(layout), nil
}

func bToMs(args ...any) (any, error) {
	const name = "to_ms"
	if err := biArity(name, args, 1, 1); err != nil {
		return nil, err
	}
	switch x := args[0].(type) {
	case time.Time:
		return int(x.UnixMilli()), nil
	case *time.Time:
		if x != nil {
			return int(x.UnixMilli()), nil
		}
	case time.Duration:
		return int(x.Milliseconds()), nil
	case string:
		ms, err := ParseTimestamp(x, time.UTC)
		if err != nil {
			return nil, fmt.Errorf("%s: %w (parse other layouts with ts_parse(s, layout))", name, err)
		}
		return int(ms), nil
	default:
		if n, ok := biAsInt(x); ok {
			return n, nil
		}
		if f, ok := biAsFloat(x); ok {
			f = math.Floor(f)
			if biInIntRange(f) {
				return int(f), nil
			}
			return nil, fmt.Errorf("%s: %v is out of range", name, x)
		}
	}
	return nil, fmt.Errorf("%s: cannot convert %s to epoch milliseconds", name, biDescribe(args[0]))
}

// --- strings ----------------------------------------------------------------

func bContainsAny(args ...any) (any, error) {
	const name = "contains_any"
	if err := biArity(name, args, 2, 2); err != nil {
		return nil, err
	}
	s, err := biStrArg(name, args, 0)
	if err != nil {
		return nil, err
	}
	switch subs := args[1].(type) {
	case []any:
		for i, sub := range subs {
			ss, ok := sub.(string)
			if !ok {
				return nil, fmt.Errorf("%s: element %d of the list must be a string, got %s", name, i, biTypeName(sub))
			}
			if strings.Contains(s, ss) {
				return true, nil
			}
		}
		return false, nil
	case []string:
		for _, sub := range subs {
			if strings.Contains(s, sub) {
				return true, nil
			}
		}
		return false, nil
	case nil:
		return false, nil
	}
	return nil, fmt.Errorf("%s: argument 2 must be a list of strings, got %s", name, biTypeName(args[1]))
}

func biStrRegexArgs(name string, args []any, n int) (string, *regexp.Regexp, error) {
	if err := biArity(name, args, n, n); err != nil {
		return "", nil, err
	}
	s, err := biStrArg(name, args, 0)
	if err != nil {
		return "", nil, err
	}
	re, err := biRegexArg(name, args, 1)
	return s, re, err
}

func bRegexFind(args ...any) (any, error) {
	s, re, err := biStrRegexArgs("regex_find", args, 2)
	if err != nil {
		return nil, err
	}
	return re.FindString(s), nil
}

func bRegexFindAll(args ...any) (any, error) {
	s, re, err := biStrRegexArgs("regex_find_all", args, 2)
	if err != nil {
		return nil, err
	}
	idx := re.FindAllStringIndex(s, -1)
	out := make([]any, len(idx))
	for i, m := range idx {
		out[i] = s[m[0]:m[1]]
	}
	return out, nil
}

func bRegexCapture(args ...any) (any, error) {
	s, re, err := biStrRegexArgs("regex_capture", args, 2)
	if err != nil {
		return nil, err
	}
	m := re.FindStringSubmatchIndex(s)
	if m == nil {
		return nil, nil
	}
	names := re.SubexpNames()
	out := make(map[string]any, len(names)*2)
	for i := range names {
		var v any
		if m[2*i] >= 0 {
			v = s[m[2*i]:m[2*i+1]]
		}
		out[strconv.Itoa(i)] = v
		if names[i] != "" {
			out[names[i]] = v
		}
	}
	return out, nil
}

func bRegexReplace(args ...any) (any, error) {
	const name = "regex_replace"
	s, re, err := biStrRegexArgs(name, args, 3)
	if err != nil {
		return nil, err
	}
	repl, err := biStrArg(name, args, 2)
	if err != nil {
		return nil, err
	}
	matches := re.FindAllStringSubmatchIndex(s, -1)
	if matches == nil {
		return s, nil
	}
	// Expand match by match (what ReplaceAllString does) so that the output
	// can be bounded: a pattern that matches the empty string, or a
	// replacement full of $0, would otherwise multiply the input's size.
	limit := len(s) + 16*maxBuiltinLen
	dst := make([]byte, 0, len(s)+len(repl))
	last := 0
	for _, m := range matches {
		dst = append(dst, s[last:m[0]]...)
		dst = re.ExpandString(dst, repl, s, m)
		last = m[1]
		if len(dst) > limit {
			return nil, fmt.Errorf("%s: result over %d bytes", name, limit)
		}
	}
	dst = append(dst, s[last:]...)
	return string(dst), nil
}

func bPadLeft(args ...any) (any, error)  { return biPad("pad_left", true, args) }
func bPadRight(args ...any) (any, error) { return biPad("pad_right", false, args) }

func biPad(name string, left bool, args []any) (any, error) {
	if err := biArity(name, args, 2, 3); err != nil {
		return nil, err
	}
	s, err := biStrArg(name, args, 0)
	if err != nil {
		return nil, err
	}
	n, err := biIntArg(name, args, 1)
	if err != nil {
		return nil, err
	}
	fill := " "
	if len(args) > 2 {
		if fill, err = biStrArg(name, args, 2); err != nil {
			return nil, err
		}
	}
	if n > maxBuiltinLen {
		return nil, fmt.Errorf("%s: length %d is over the limit of %d", name, n, maxBuiltinLen)
	}
	have := utf8.RuneCountInString(s)
	if n <= have || fill == "" {
		return s, nil
	}
	need := n - have // runes of padding
	var b strings.Builder
	b.Grow(len(s) + need*utf8.UTFMax)
	if !left {
		b.WriteString(s)
	}
	for need > 0 {
		for _, r := range fill {
			if need == 0 {
				break
			}
			b.WriteRune(r)
			need--
		}
	}
	if left {
		b.WriteString(s)
	}
	return b.String(), nil
}

func bTruncate(args ...any) (any, error) {
	const name = "truncate"
	if err := biArity(name, args, 2, 3); err != nil {
		return nil, err
	}
	s, err := biStrArg(name, args, 0)
	if err != nil {
		return nil, err
	}
	n, err := biIntArg(name, args, 1)
	if err != nil {
		return nil, err
	}
	if n < 0 {
		return nil, fmt.Errorf("%s: length must not be negative, got %d", name, n)
	}
	suffix := ""
	if len(args) > 2 {
		if suffix, err = biStrArg(name, args, 2); err != nil {
			return nil, err
		}
	}
	if len(s) <= n || utf8.RuneCountInString(s) <= n {
		return s, nil
	}
	keep := n - utf8.RuneCountInString(suffix)
	if keep < 0 {
		return biPrefixRunes(suffix, n), nil
	}
	return biPrefixRunes(s, keep) + suffix, nil
}

// prefixRunes returns the first n runes of s.
func biPrefixRunes(s string, n int) string {
	i := 0
	for pos := range s {
		if i == n {
			return s[:pos]
		}
		i++
	}
	return s
}

func bSprintf(args ...any) (any, error) {
	const name = "sprintf"
	if err := biArity(name, args, 1, -1); err != nil {
		return nil, err
	}
	format, err := biStrArg(name, args, 0)
	if err != nil {
		return nil, err
	}
	return fmt.Sprintf(format, args[1:]...), nil
}

func bUUIDv4(args ...any) (any, error) {
	if err := biArity("uuid_v4", args, 0, 0); err != nil {
		return nil, err
	}
	var u [16]byte
	_, _ = rand.Read(u[:]) // never fails (crypto/rand crashes the program instead)
	u[6] = u[6]&0x0f | 0x40
	u[8] = u[8]&0x3f | 0x80
	const hexdigits = "0123456789abcdef"
	var out [36]byte
	j := 0
	for i, c := range u {
		if i == 4 || i == 6 || i == 8 || i == 10 {
			out[j] = '-'
			j++
		}
		out[j], out[j+1] = hexdigits[c>>4], hexdigits[c&0x0f]
		j += 2
	}
	return string(out[:]), nil
}

var biJSONBufPool = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// compactJSON returns v as JSON without indentation or HTML escaping.
func biCompactJSON(v any) (_ string, err error) {
	defer func() {
		if r := recover(); r != nil { // a panicking MarshalJSON method
			err = fmt.Errorf("cannot encode %T as JSON: %v", v, r)
		}
	}()
	buf := biJSONBufPool.Get().(*bytes.Buffer)
	buf.Reset()
	defer func() {
		if buf.Cap() <= 64<<10 {
			biJSONBufPool.Put(buf)
		}
	}()
	enc := json.NewEncoder(buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return "", err
	}
	return string(bytes.TrimSuffix(buf.Bytes(), []byte{'\n'})), nil
}

func bToJSON(args ...any) (any, error) {
	if err := biArity("to_json", args, 1, 1); err != nil {
		return nil, err
	}
	s, err := biCompactJSON(args[0])
	if err != nil {
		return nil, fmt.Errorf("to_json: %w", err)
	}
	return s, nil
}

// --- hash -------------------------------------------------------------------

func bHash(args ...any) (any, error) {
	if err := biArity("hash", args, 1, 1); err != nil {
		return nil, err
	}
	h, err := biHashValue(args[0], 0)
	if err != nil {
		return nil, fmt.Errorf("hash: %w", err)
	}
	return int(h & math.MaxInt64), nil
}

// hashValue hashes a canonical encoding of v: integral floats hash like ints
// (JSON numbers decode as float64), map entries are combined independently of
// order.
func biHashValue(v any, depth int) (uint64, error) {
	if depth > maxBuiltinDepth {
		return 0, errors.New("value nested too deeply")
	}
	var d xxhash.Digest
	d.Reset()
	var b [9]byte
	putU64 := func(tag byte, x uint64) {
		b[0] = tag
		binary.LittleEndian.PutUint64(b[1:], x)
		_, _ = d.Write(b[:])
	}
	putStr := func(tag byte, s string) {
		putU64(tag, uint64(len(s)))
		_, _ = d.WriteString(s)
	}
	switch x := v.(type) {
	case nil:
		putU64('n', 0)
	case string:
		putStr('s', x)
	case bool:
		if x {
			putU64('b', 1)
		} else {
			putU64('b', 0)
		}
	case int:
		putU64('i', uint64(x))
	case int64:
		putU64('i', uint64(x))
	case float64:
		if n, ok := biFloatToInt(x); ok {
			putU64('i', uint64(n))
		} else if math.IsNaN(x) {
			putU64('f', 0x7ff8000000000001)
		} else {
			putU64('f', math.Float64bits(x))
		}
	case []any:
		putU64('l', uint64(len(x)))
		for _, e := range x {
			h, err := biHashValue(e, depth+1)
			if err != nil {
				return 0, err
			}
			putU64('e', h)
		}
	case map[string]any:
		var sum uint64
		for k, e := range x {
			h, err := biHashEntry(k, e, depth)
			if err != nil {
				return 0, err
			}
			sum += h
		}
		putU64('m', uint64(len(x)))
		putU64('e', sum)
	case time.Time:
		putU64('t', uint64(x.UnixNano()))
	case []byte:
		putU64('s', uint64(len(x)))
		_, _ = d.Write(x)
	default:
		if n, ok := biAsInt(v); ok {
			putU64('i', uint64(n))
			break
		}
		if f, ok := biAsFloat(v); ok {
			return biHashValue(f, depth)
		}
		rv := reflect.ValueOf(v)
		switch rv.Kind() {
		case reflect.String:
			putStr('s', rv.String())
		case reflect.Slice, reflect.Array:
			putU64('l', uint64(rv.Len()))
			for i := range rv.Len() {
				h, err := biHashValue(rv.Index(i).Interface(), depth+1)
				if err != nil {
					return 0, err
				}
				putU64('e', h)
			}
		case reflect.Map:
			var sum uint64
			it := rv.MapRange()
			for it.Next() {
				k := it.Key()
				var ks string
				if k.Kind() == reflect.String {
					ks = k.String()
				} else {
					ks = fmt.Sprint(k.Interface())
				}
				h, err := biHashEntry(ks, it.Value().Interface(), depth)
				if err != nil {
					return 0, err
				}
				sum += h
			}
			putU64('m', uint64(rv.Len()))
			putU64('e', sum)
		default:
			putStr('?', fmt.Sprintf("%T:%v", v, v))
		}
	}
	return d.Sum64(), nil
}

func biHashEntry(k string, v any, depth int) (uint64, error) {
	h, err := biHashValue(v, depth+1)
	if err != nil {
		return 0, err
	}
	var d xxhash.Digest
	d.Reset()
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], h)
	_, _ = d.Write(b[:])
	_, _ = d.WriteString(k)
	return d.Sum64(), nil
}

// --- conversion -------------------------------------------------------------

func bCoalesce(args ...any) (any, error) {
	for _, a := range args {
		if a != nil {
			return a, nil
		}
	}
	return nil, nil
}

func bToInt(args ...any) (any, error) {
	const name = "to_int"
	if err := biArity(name, args, 1, 1); err != nil {
		return nil, err
	}
	v := args[0]
	if n, ok := biAsInt(v); ok {
		return n, nil
	}
	switch x := v.(type) {
	case bool:
		if x {
			return 1, nil
		}
		return 0, nil
	case string:
		t := strings.TrimSpace(x)
		if n, err := strconv.ParseInt(t, 10, 0); err == nil {
			return int(n), nil
		}
		f, err := strconv.ParseFloat(t, 64)
		if err != nil {
			return nil, fmt.Errorf("%s: %s is not a number", name, biDescribe(v))
		}
		if n, ok := biFloatToInt(f); ok {
			return n, nil
		}
		return nil, fmt.Errorf("%s: %s is not an integer or is out of range", name, biDescribe(v))
	}
	if f, ok := biAsFloat(v); ok {
		return nil, fmt.Errorf("%s: %v is not an integer or is out of range", name, f)
	}
	return nil, fmt.Errorf("%s: cannot convert %s to an integer", name, biDescribe(v))
}

func bToFloat(args ...any) (any, error) {
	const name = "to_float"
	if err := biArity(name, args, 1, 1); err != nil {
		return nil, err
	}
	v := args[0]
	if f, ok := biAsFloat(v); ok {
		return f, nil
	}
	switch x := v.(type) {
	case bool:
		if x {
			return 1.0, nil
		}
		return 0.0, nil
	case string:
		f, err := strconv.ParseFloat(strings.TrimSpace(x), 64)
		if err != nil || math.IsInf(f, 0) || math.IsNaN(f) {
			return nil, fmt.Errorf("%s: %s is not a finite number", name, biDescribe(v))
		}
		return f, nil
	}
	return nil, fmt.Errorf("%s: cannot convert %s to a float", name, biDescribe(v))
}

func bToString(args ...any) (any, error) {
	const name = "to_string"
	if err := biArity(name, args, 1, 1); err != nil {
		return nil, err
	}
	switch x := args[0].(type) {
	case string:
		return x, nil
	case nil:
		return "null", nil
	case bool:
		return strconv.FormatBool(x), nil
	case int:
		return strconv.Itoa(x), nil
	case int64:
		return strconv.FormatInt(x, 10), nil
	case float64:
		return biFormatFloat(x), nil
	case []byte:
		return string(x), nil
	case time.Time:
		return x.Format(time.RFC3339Nano), nil
	case time.Duration:
		return x.String(), nil
	case map[string]any, []any:
		s, err := biCompactJSON(x)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		return s, nil
	case fmt.Stringer, error:
		return fmt.Sprint(x), nil // fmt recovers a panicking String method
	}
	if f, ok := biAsFloat(args[0]); ok {
		if n, ok := biAsInt(args[0]); ok {
			return strconv.Itoa(n), nil
		}
		return biFormatFloat(f), nil
	}
	switch reflect.ValueOf(args[0]).Kind() {
	case reflect.Map, reflect.Slice, reflect.Array, reflect.Struct:
		if s, err := biCompactJSON(args[0]); err == nil {
			return s, nil
		}
	}
	return fmt.Sprint(args[0]), nil
}

// formatFloat formats f the way encoding/json does: no exponent between 1e-6
// and 1e21, shortest representation.
func biFormatFloat(f float64) string {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return strconv.FormatFloat(f, 'g', -1, 64)
	}
	abs := math.Abs(f)
	if abs == 0 || (abs >= 1e-6 && abs < 1e21) {
		return strconv.FormatFloat(f, 'f', -1, 64)
	}
	s := strconv.FormatFloat(f, 'e', -1, 64)
	// Clean up e-09 to e-9, like encoding/json.
	if n := len(s); n >= 4 && s[n-4] == 'e' && s[n-3] == '-' && s[n-2] == '0' {
		s = s[:n-2] + s[n-1:]
	}
	return s
}

func bToBool(args ...any) (any, error) {
	const name = "to_bool"
	if err := biArity(name, args, 1, 1); err != nil {
		return nil, err
	}
	switch x := args[0].(type) {
	case bool:
		return x, nil
	case string:
		t := strings.TrimSpace(x)
		for _, s := range [...]string{"true", "t", "yes", "y", "on", "1"} {
			if strings.EqualFold(t, s) {
				return true, nil
			}
		}
		for _, s := range [...]string{"false", "f", "no", "n", "off", "0"} {
			if strings.EqualFold(t, s) {
				return false, nil
			}
		}
		return nil, fmt.Errorf("%s: %s is not a boolean (true/false, yes/no, on/off, 1/0)", name, biDescribe(x))
	}
	if f, ok := biAsFloat(args[0]); ok {
		if math.IsNaN(f) {
			return nil, fmt.Errorf("%s: NaN is not a boolean", name)
		}
		return f != 0, nil
	}
	return nil, fmt.Errorf("%s: cannot convert %s to a boolean", name, biDescribe(args[0]))
}

// --- maps -------------------------------------------------------------------

func bGetPath(args ...any) (any, error) {
	const name = "get_path"
	if err := biArity(name, args, 2, 3); err != nil {
		return nil, err
	}
	path, err := biStrArg(name, args, 1)
	if err != nil {
		return nil, err
	}
	var def any
	if len(args) > 2 {
		def = args[2]
	}
	v := args[0]
	for path != "" && v != nil {
		var seg string
		seg, path, _ = strings.Cut(path, ".")
		v = biLookup(v, seg)
	}
	if v == nil {
		return def, nil
	}
	return v, nil
}

// lookup returns the value of key in a map, or of index key in a list
// (negative indexes count from the end); nil when there is none.
func biLookup(v any, key string) any {
	switch x := v.(type) {
	case map[string]any:
		return x[key]
	case []any:
		if i, ok := biListIndex(key, len(x)); ok {
			return x[i]
		}
		return nil
	case map[string]string:
		if s, ok := x[key]; ok {
			return s
		}
		return nil
	}
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.Map:
		kt := rv.Type().Key()
		var k reflect.Value
		switch {
		case kt.Kind() == reflect.String:
			k = reflect.ValueOf(key).Convert(kt)
		case kt.Kind() == reflect.Interface && reflect.TypeFor[string]().Implements(kt):
			k = reflect.ValueOf(key)
		default:
			return nil
		}
		if e := rv.MapIndex(k); e.IsValid() && e.CanInterface() {
			return e.Interface()
		}
	case reflect.Slice, reflect.Array:
		if i, ok := biListIndex(key, rv.Len()); ok {
			if e := rv.Index(i); e.CanInterface() {
				return e.Interface()
			}
		}
	}
	return nil
}

func biListIndex(key string, n int) (int, bool) {
	i, err := strconv.Atoi(key)
	if err != nil {
		return 0, false
	}
	if i < 0 {
		i += n
	}
	return i, i >= 0 && i < n
}

// eachEntry calls fn for every entry of a map with string keys; nil is empty.
func biEachEntry(name string, arg int, v any, fn func(k string, v any)) error {
	switch x := v.(type) {
	case nil:
		return nil
	case map[string]any:
		for k, e := range x {
			fn(k, e)
		}
		return nil
	case map[string]string:
		for k, e := range x {
			fn(k, e)
		}
		return nil
	}
	rv := reflect.ValueOf(v)
	if rv.Kind() == reflect.Map && rv.Type().Key().Kind() == reflect.String {
		it := rv.MapRange()
		for it.Next() {
			fn(it.Key().String(), it.Value().Interface())
		}
		return nil
	}
	return fmt.Errorf("%s: argument %d must be a map, got %s", name, arg+1, biTypeName(v))
}

func biMapLen(v any) int {
	switch x := v.(type) {
	case map[string]any:
		return len(x)
	case nil:
		return 0
	}
	if rv := reflect.ValueOf(v); rv.Kind() == reflect.Map {
		return rv.Len()
	}
	return 0
}

func bMerge(args ...any) (any, error) {
	const name = "merge"
	if err := biArity(name, args, 1, -1); err != nil {
		return nil, err
	}
	n := 0
	for _, a := range args {
		n += biMapLen(a)
	}
	out := make(map[string]any, n)
	set := func(k string, v any) { out[k] = v }
	for i, a := range args {
		if err := biEachEntry(name, i, a, set); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func bOmit(args ...any) (any, error) {
	const name = "omit"
	if err := biArity(name, args, 1, -1); err != nil {
		return nil, err
	}
	keys := args[1:]
	for i, k := range keys {
		if _, ok := k.(string); !ok {
			return nil, fmt.Errorf("%s: argument %d must be a string, got %s", name, i+2, biTypeName(k))
		}
	}
	out := make(map[string]any, biMapLen(args[0]))
	err := biEachEntry(name, 0, args[0], func(k string, v any) {
		for _, o := range keys {
			if o.(string) == k {
				return
			}
		}
		out[k] = v
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

func bPick(args ...any) (any, error) {
	const name = "pick"
	if err := biArity(name, args, 1, -1); err != nil {
		return nil, err
	}
	out := make(map[string]any, len(args)-1)
	if m, ok := args[0].(map[string]any); ok {
		for i, k := range args[1:] {
			ks, ok := k.(string)
			if !ok {
				return nil, fmt.Errorf("%s: argument %d must be a string, got %s", name, i+2, biTypeName(k))
			}
			if v, ok := m[ks]; ok {
				out[ks] = v
			}
		}
		return out, nil
	}
	for i, k := range args[1:] {
		if _, ok := k.(string); !ok {
			return nil, fmt.Errorf("%s: argument %d must be a string, got %s", name, i+2, biTypeName(k))
		}
	}
	err := biEachEntry(name, 0, args[0], func(k string, v any) {
		for _, p := range args[1:] {
			if p.(string) == k {
				out[k] = v
				return
			}
		}
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}
