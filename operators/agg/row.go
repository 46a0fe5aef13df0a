package agg

import (
	"fmt"
	"slices"

	"github.com/eddy-stream/eddy/expr"
	"github.com/eddy-stream/eddy/internal/prefetch"
)

// Row holds the accumulators of one group of records (one key in one
// window, pane or continuous aggregate), one per Spec, in Specs order.
//
// All accumulators are constant-size except collect (holds every value) and
// count_distinct (holds each distinct value with its multiplicity). A Row is
// owned by one task goroutine; it is not safe for concurrent use.
type Row struct {
	specs Specs
	ok    bool  // specs were compiled when the row was made
	rows  int64 // records added (and merged in) minus those retracted
	accs  []acc
}

// acc is the state of one aggregate: a union over the functions, so a Row
// is two allocations whatever its functions.
type acc struct {
	// n is the number of non-null inputs folded in, minus those retracted
	// (records for count() and reduce); count's result, avg's divisor, and
	// "holds a value" for min, max, first and last.
	n   int64
	sum int128 // sum, avg: the integer inputs, exactly
	fs  kahan  // sum, avg: the float inputs
	nf  int64  // sum, avg: how many of the n inputs were floats
	v   any    // min, max, first, last: the value; reduce: the accumulator
	ext *extra // collect, count_distinct: the list or set
}

type extra struct {
	list []any             // collect: the values in arrival order
	set  map[string]*int64 // count_distinct: multiplicity by value key (appendKey); never 0
	pos  int64             // count_distinct: entries of set with multiplicity > 0
}

// present is the input of count(): a row is there.
type rowMarker struct{}

var present any = rowMarker{}

// NewAccs returns an empty row for specs, which must be compiled (Compile);
// otherwise every method of the row returns ErrNotCompiled. The row keeps
// specs (not a copy of the compiled state), so specs must outlive it.
func NewAccs(specs Specs) *Row {
	_, r := NewAccsWith[struct{}](specs)
	return r
}

// NewAccsWith is NewAccs, with a zero T allocated in the same object as the
// row: keyed state keeps a row per key and window inside a holder of its
// own (a window's box), and reaching the holder, the row and its
// accumulators is then one allocation and one cache miss instead of three,
// for a record's update, a snapshot's encoding, a copy-on-write and the
// garbage collector's marking. The row lives as long as the T does.
func NewAccsWith[T any](specs Specs) (*T, *Row) {
	t, r := allocWith[T](len(specs))
	r.specs, r.ok = specs, specs.Compiled()
	r.Reset()
	return t, r
}

// CloneWith is r.Clone, with a zero T in the same object (NewAccsWith).
func CloneWith[T any](r *Row) (*T, *Row) {
	t, c := allocWith[T](len(r.accs))
	r.cloneInto(c)
	return t, c
}

// with1 to with4 are a T, a Row and the row's accumulators in one object.
type (
	with1[T any] struct {
		t T
		r Row
		a [1]acc
	}
	with2[T any] struct {
		t T
		r Row
		a [2]acc
	}
	with3[T any] struct {
		t T
		r Row
		a [3]acc
	}
	with4[T any] struct {
		t T
		r Row
		a [4]acc
	}
)

// allocWith returns a zero T and a zero Row with n zero accumulators, all
// in one object when n is at most 4 (most aggregations); more accumulators
// are an allocation of their own.
func allocWith[T any](n int) (*T, *Row) {
	switch n {
	case 1:
		p := &with1[T]{}
		p.r.accs = p.a[:]
		return &p.t, &p.r
	case 2:
		p := &with2[T]{}
		p.r.accs = p.a[:]
		return &p.t, &p.r
	case 3:
		p := &with3[T]{}
		p.r.accs = p.a[:]
		return &p.t, &p.r
	case 4:
		p := &with4[T]{}
		p.r.accs = p.a[:]
		return &p.t, &p.r
	}
	p := &struct {
		t T
		r Row
	}{}
	p.r.accs = make([]acc, n)
	return &p.t, &p.r
}

// Clone returns a copy of r that shares nothing it changes with r: the
// accumulators are copied as they are (held values are never changed in
// place), collect's list and count_distinct's set are copied. What Merge
// into an empty row gives, without its work, and for a reduce without a
// merge expression too. The copy-on-write of keyed state calls it for each
// row a snapshot holds and the task then changes.
func (r *Row) Clone() *Row {
	_, c := CloneWith[struct{}](r)
	return c
}

// cloneInto makes c, a zero row with as many accumulators, a Clone of r.
func (r *Row) cloneInto(c *Row) {
	c.specs, c.ok, c.rows = r.specs, r.ok, r.rows
	copy(c.accs, r.accs)
	for i := range c.accs {
		if f := r.specs[i].Func; f != FuncCollect && f != FuncCountDistinct {
			continue
		}
		x := c.accs[i].ext
		if x == nil {
			continue
		}
		nx := &extra{list: slices.Clone(x.list), pos: x.pos}
		if x.set != nil {
			nx.set = make(map[string]*int64, len(x.set))
			for k, m := range x.set {
				n := *m
				nx.set[k] = &n
			}
		}
		c.accs[i].ext = nx
	}
}

// Reset empties r for reuse, keeping the memory collect and count_distinct
// have grown.
func (r *Row) Reset() {
	r.rows = 0
	for i := range r.accs {
		a := &r.accs[i]
		x := a.ext
		*a = acc{}
		switch r.specs[i].Func {
		case FuncReduce:
			if r.ok {
				a.v = r.specs[i].c.init
			}
		case FuncCollect:
			if x != nil {
				clear(x.list)
				x.list = x.list[:0]
				a.ext = x
			} else {
				a.ext = &extra{}
			}
		case FuncCountDistinct:
			if x != nil {
				clear(x.set)
				x.pos = 0
				a.ext = x
			} else {
				a.ext = &extra{set: map[string]*int64{}}
			}
		}
	}
}

// Count returns the number of records the row holds: added and merged in,
// minus those retracted. A continuous aggregate can drop a row at 0.
func (r *Row) Count() int64 { return r.rows }

// maxStack is how many aggregates Add handles without allocating scratch.
const maxStack = 8

// Add folds one record into every accumulator. vm is the caller's (one per
// task goroutine); fields is the record, read and never modified.
//
// Add is atomic: it evaluates every argument and checks every input first,
// so on an error (an expression failing, a string given to sum) the row is
// unchanged. Errors name the aggregate; input type errors wrap ErrBadInput.
func (r *Row) Add(vm *expr.VM, fields map[string]any) error {
	if !r.ok {
		return ErrNotCompiled
	}
	var buf [maxStack]any
	vals := buf[:0]
	if len(r.specs) > maxStack {
		vals = make([]any, 0, len(r.specs))
	}
	for i := range r.specs {
		v, err := r.input(i, vm, fields)
		if err != nil {
			return err
		}
		vals = append(vals, v)
	}
	for i := range r.specs {
		r.accs[i].add(r.specs[i].Func, vals[i])
	}
	r.rows++
	return nil
}

// input evaluates and checks the input of aggregate i for one record: nil
// for a null input, present for count(), reduce's new accumulator.
func (r *Row) input(i int, vm *expr.VM, fields map[string]any) (any, error) {
	s := &r.specs[i]
	c := s.c
	if s.Func == FuncReduce {
		v, err := c.reduceStep(vm, r.accs[i].v, fields)
		if err == nil {
			err = expr.CheckFinite(v)
		}
		if err != nil {
			return nil, fmt.Errorf("aggregate %s: %s: %w", s.Name, s.Source, err)
		}
		return v, nil
	}
	if c.arg == nil {
		return present, nil
	}
	var v any
	if c.field != "" {
		v = fields[c.field]
	} else {
		var err error
		if v, err = vm.Eval(c.arg, fields); err == nil {
			// A NaN or infinite result (a division by zero) would poison
			// the aggregate for the rest of its window or key. A field's
			// value is taken as it is: steps never compute one.
			err = expr.CheckFinite(v)
		}
		if err != nil {
			return nil, fmt.Errorf("aggregate %s: %s: %w", s.Name, s.Source, err)
		}
	}
	if v == nil {
		return nil, nil
	}
	switch s.Func {
	case FuncSum, FuncAvg:
		if k, _, _, _ := number(v); k == notNum {
			return nil, s.badInput(v, "a number (convert with to_float or to_int)")
		}
	case FuncMin, FuncMax:
		if !orderable(v) {
			return nil, s.badInput(v, "a number or a string")
		}
	case FuncCountDistinct:
		if !keyable(v) {
			return nil, s.badInput(v, "a value that can be compared (string, number, bool, time, list or map)")
		}
	}
	return v, nil
}

func (s *Spec) badInput(v any, want string) error {
	return fmt.Errorf("%w: aggregate %s: %s got %s, want %s", ErrBadInput, s.Name, s.Source, describe(v), want)
}

// keyable reports whether appendKey encodes v.
func keyable(v any) bool {
	switch v.(type) {
	case string, bool, float64, int, int64:
		return true
	}
	var buf [64]byte
	_, err := appendKey(buf[:0], v)
	return err == nil
}

// add folds in input v (see input).
func (a *acc) add(f Func, v any) {
	if v == nil && f != FuncReduce {
		return
	}
	switch f {
	case FuncCount:
	case FuncSum, FuncAvg:
		switch k, i, u, x := number(v); k {
		case intNum:
			a.sum.addInt(i)
		case uintNum:
			a.sum.addUint(u)
		default:
			a.fs.add(x)
			a.nf++
		}
	case FuncMin:
		if a.n == 0 || compare(v, a.v) < 0 {
			a.v = v
		}
	case FuncMax:
		if a.n == 0 || compare(v, a.v) > 0 {
			a.v = v
		}
	case FuncFirst:
		if a.n == 0 {
			a.v = v
		}
	case FuncLast:
		a.v = v
	case FuncReduce:
		a.v = v
	case FuncCollect:
		a.ext.list = append(a.ext.list, v)
	case FuncCountDistinct:
		a.ext.addKey(v, 1)
	}
	a.n++
}

// addKey adds d to the multiplicity of v's key. Counters are pointers so
// that a value seen before is counted without allocating.
func (x *extra) addKey(v any, d int64) {
	var buf [64]byte
	key, _ := appendKey(buf[:0], v)
	if p := x.set[string(key)]; p != nil {
		x.count(*p, d)
		if *p += d; *p == 0 {
			delete(x.set, string(key))
		}
		return
	}
	p := new(int64)
	*p = d
	x.set[string(key)] = p
	x.count(0, d)
}

// mergeKey adds d to the multiplicity of key.
func (x *extra) mergeKey(key string, d int64) {
	if d == 0 {
		return
	}
	if p := x.set[key]; p != nil {
		x.count(*p, d)
		if *p += d; *p == 0 {
			delete(x.set, key)
		}
		return
	}
	p := new(int64)
	*p = d
	x.set[key] = p
	x.count(0, d)
}

// count keeps pos when a multiplicity goes from old to old+d.
func (x *extra) count(old, d int64) {
	switch m := old + d; {
	case old <= 0 && m > 0:
		x.pos++
	case old > 0 && m <= 0:
		x.pos--
	}
}

// Retract takes one record back out, the inverse of Add with the same
// fields: count, sum and avg subtract, count_distinct lowers the value's
// multiplicity, collect removes the earliest equal value (ErrRetractMissing
// when it holds none). It returns ErrNotRetractable, changing nothing, when
// any aggregate is min, max, first, last or reduce (see Specs.Retractable).
// Like Add it is atomic.
func (r *Row) Retract(vm *expr.VM, fields map[string]any) error {
	if !r.ok {
		return ErrNotCompiled
	}
	for i := range r.specs {
		if s := &r.specs[i]; !s.Func.Retractable() {
			return fmt.Errorf("%w: aggregate %s: %s", ErrNotRetractable, s.Name, s.Func)
		}
	}
	var buf [maxStack]any
	var ibuf [maxStack]int
	vals, idx := buf[:0], ibuf[:0]
	if len(r.specs) > maxStack {
		vals, idx = make([]any, 0, len(r.specs)), make([]int, 0, len(r.specs))
	}
	for i := range r.specs {
		v, err := r.input(i, vm, fields)
		if err != nil {
			return err
		}
		j := -1
		if s := &r.specs[i]; s.Func == FuncCollect && v != nil {
			if j = indexEqual(r.accs[i].ext.list, v); j < 0 {
				return fmt.Errorf("%w: aggregate %s: %s holds no %s", ErrRetractMissing, s.Name, s.Source, describe(v))
			}
		}
		vals, idx = append(vals, v), append(idx, j)
	}
	for i := range r.specs {
		r.accs[i].retract(r.specs[i].Func, vals[i], idx[i])
	}
	r.rows--
	return nil
}

func (a *acc) retract(f Func, v any, j int) {
	if v == nil {
		return
	}
	switch f {
	case FuncSum, FuncAvg:
		switch k, i, u, x := number(v); k {
		case intNum:
			a.sum.subInt(i)
		case uintNum:
			a.sum.subUint(u)
		default:
			a.fs.add(-x)
			a.nf--
		}
	case FuncCollect:
		a.ext.list = slices.Delete(a.ext.list, j, j+1)
	case FuncCountDistinct:
		a.ext.addKey(v, -1)
	}
	a.n--
	if (f == FuncSum || f == FuncAvg) && a.nf == 0 {
		// Only integers are left: drop the float part's rounding residue.
		a.fs = kahan{}
	}
}

// indexEqual returns the index of the first element of list equal to v (as
// count_distinct compares), or -1.
func indexEqual(list []any, v any) int {
	var kb [64]byte
	key, _ := appendKey(kb[:0], v)
	var eb [64]byte
	for i, e := range list {
		if e == nil {
			continue
		}
		if s, ok := v.(string); ok {
			if es, ok := e.(string); ok && es == s {
				return i
			}
			continue
		}
		ek, err := appendKey(eb[:0], e)
		if err == nil && string(ek) == string(key) {
			return i
		}
	}
	return -1
}

// Merge folds other, a row of the same specs holding later records, into r;
// other is unchanged and shares nothing with r afterwards. Merging is exact
// and associative for every function (floats: see docs/aggregates.md), so
// panes can be merged into windows in any grouping as long as their order
// is kept: first takes r's first unless r is empty, last takes other's last
// unless other is empty, collect appends other's values after r's. reduce
// merges with its merge expression, skipping an empty side, and returns
// ErrNotMergeable without one (see Specs.Mergeable). Merge is atomic.
func (r *Row) Merge(other *Row) error {
	if !r.ok || !other.ok {
		return ErrNotCompiled
	}
	if r == other {
		return fmt.Errorf("%w: a row cannot merge into itself", ErrMismatch)
	}
	if len(r.accs) != len(other.accs) {
		return fmt.Errorf("%w: %d aggregates and %d", ErrMismatch, len(r.accs), len(other.accs))
	}
	var buf [maxStack]any
	vals := buf[:0]
	if len(r.specs) > maxStack {
		vals = make([]any, 0, len(r.specs))
	}
	for i := range r.specs {
		s, o := &r.specs[i], &other.specs[i]
		if s.Func != o.Func {
			return fmt.Errorf("%w: aggregate %d is %s in one row and %s in the other", ErrMismatch, i+1, s.Func, o.Func)
		}
		var v any
		if s.Func == FuncReduce {
			if s.c.merge == nil {
				return fmt.Errorf("%w: aggregate %s: %s has no merge expression", ErrNotMergeable, s.Name, s.Source)
			}
			a, b := &r.accs[i], &other.accs[i]
			switch {
			case b.n == 0:
				v = a.v
			case a.n == 0:
				v = b.v
			default:
				var err error
				if v, err = s.c.reduceMerge(a.v, b.v); err != nil {
					return fmt.Errorf("aggregate %s: merge of %s: %w", s.Name, s.Source, err)
				}
			}
		}
		vals = append(vals, v)
	}
	for i := range r.specs {
		r.accs[i].merge(r.specs[i].Func, &other.accs[i], vals[i])
	}
	r.rows += other.rows
	return nil
}

// merge folds in o; v is reduce's merged accumulator.
func (a *acc) merge(f Func, o *acc, v any) {
	switch f {
	case FuncSum, FuncAvg:
		a.sum.add(o.sum)
		a.fs.merge(o.fs)
		a.nf += o.nf
	case FuncMin:
		if o.n > 0 && (a.n == 0 || compare(o.v, a.v) < 0) {
			a.v = o.v
		}
	case FuncMax:
		if o.n > 0 && (a.n == 0 || compare(o.v, a.v) > 0) {
			a.v = o.v
		}
	case FuncFirst:
		if a.n == 0 && o.n > 0 {
			a.v = o.v
		}
	case FuncLast:
		if o.n > 0 {
			a.v = o.v
		}
	case FuncReduce:
		a.v = v
	case FuncCollect:
		a.ext.list = append(a.ext.list, o.ext.list...)
	case FuncCountDistinct:
		for k, m := range o.ext.set {
			a.ext.mergeKey(k, *m)
		}
	}
	a.n += o.n
}

// Results writes every aggregate's result into dst under its output field:
//
//	count, count_distinct  int64
//	sum                    int64 when every input was an integer (and the
//	                       sum fits), else float64; nil without inputs
//	avg                    float64; nil without inputs
//	min, max, first, last  an input value; nil without inputs
//	collect                []any, a new slice; empty without inputs
//	reduce                 the accumulator; init without records
func (r *Row) Results(dst map[string]any) {
	for i := range r.specs {
		dst[r.specs[i].Name] = r.accs[i].result(r.specs[i].Func)
	}
}

func (a *acc) result(f Func) any {
	switch f {
	case FuncCount:
		return a.n
	case FuncSum:
		if a.n == 0 {
			return nil
		}
		if a.nf == 0 {
			if v, ok := a.sum.int64(); ok {
				return v
			}
		}
		return a.floatSum()
	case FuncAvg:
		if a.n == 0 {
			return nil
		}
		return a.floatSum() / float64(a.n)
	case FuncCollect:
		if len(a.ext.list) == 0 {
			return []any{}
		}
		return slices.Clone(a.ext.list)
	case FuncCountDistinct:
		return a.ext.pos
	}
	return a.v
}

func (a *acc) floatSum() float64 {
	k := a.fs
	k.add(a.sum.float())
	return k.value()
}

// PrefetchHeld asks for the strings that the row's aggregates hold (min,
// max, first, last and reduce of strings), for a snapshot's encoder
// (statestore.HeldPrefetcher): level 0 for their headers, level 1 for their
// bytes. Level 0 reads only the row and its aggregates, level 1 the headers
// too. r may be nil.
func (r *Row) PrefetchHeld(level int) {
	if r == nil {
		return
	}
	for i := range r.accs {
		v := r.accs[i].v
		if _, ok := v.(string); !ok {
			continue
		}
		if level == 0 {
			// An interface holding a string points to the string's
			// header, which this does not read.
			prefetch.Pointee(v, 16)
		} else {
			prefetch.String(v.(string))
		}
	}
}
