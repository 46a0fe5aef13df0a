package operators

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/eddy-stream/eddy/expr"
	"github.com/eddy-stream/eddy/pipeline"
)

// exprOp is the per-subtask state that every expression operator shares: its
// own VM and the step's error handler. Embed it and implement Process.
type exprOp struct {
	vm     expr.VM
	errors *pipeline.ErrorHandler
}

// Open keeps the error handler. Without one (a caller that builds an
// OperatorContext by hand), a failed record fails the task: errors are never
// dropped silently.
func (o *exprOp) Open(_ context.Context, oc *pipeline.OperatorContext) error {
	o.errors = oc.Errors
	if o.errors == nil {
		o.errors = pipeline.NewErrorHandler(oc.SubtaskInfo, pipeline.OnErrorFail, nil)
	}
	return nil
}

// Close has nothing to release.
func (o *exprOp) Close() error { return nil }

// emit sends batch unless it is empty: an operator emits at most once per
// input batch.
func emit(out pipeline.Emitter, batch []pipeline.Record) error {
	if len(batch) == 0 {
		return nil
	}
	return out.Emit(batch)
}

// failAfter emits done, the records a batch produced before a record
// failed under on_error: fail, and returns err: what a step processed
// before the failure reaches its sinks, as in a Unix filter. An error of
// the emit wins.
func failAfter(out pipeline.Emitter, done []pipeline.Record, err error) error {
	if eerr := emit(out, done); eerr != nil {
		return eerr
	}
	return err
}

// evalError is the error of a record whose expression failed at run time. Its
// text is one line (expr's message with its line:col inside the expression,
// without the source snippet), since it ends up in logs and dead letters.
type evalError struct {
	kind  string // step kind
	field string // set/map field name, or ""
	src   string // expression source
	err   error
}

func (e *evalError) Error() string {
	msg, _, _ := strings.Cut(e.err.Error(), "\n")
	if e.field != "" {
		return fmt.Sprintf("%s field %q: expression %q: %s", e.kind, e.field, e.src, msg)
	}
	return fmt.Sprintf("%s expression %q: %s", e.kind, e.src, msg)
}

func (e *evalError) Unwrap() error { return e.err }

// checkFieldNames validates the field names under a step's key: not empty, no
// '.', no duplicates. set, map and drop work on top-level fields only: nested
// values are shared between fanned-out records (Record.Clone), so changing
// one in place would change it in other branches too, and copying the maps on
// the path would cost allocations per record.
func checkFieldNames(key string, names []string) error {
	var errs []error
	seen := make(map[string]bool, len(names))
	for _, n := range names {
		switch {
		case n == "":
			errs = append(errs, pipeline.FieldErr(key, "a field name is empty"))
		case strings.Contains(n, "."):
			errs = append(errs, pipeline.FieldErr(key, "field %q: %s works on top-level fields, so a name cannot contain '.'%s",
				n, key, nestedHint(n)))
		case seen[n]:
			errs = append(errs, pipeline.FieldErr(key, "field %q is listed twice", n))
		}
		seen[n] = true
	}
	return errors.Join(errs...)
}

// nestedHint shows how to change a nested field with a top-level one.
func nestedHint(path string) string {
	parent, child, _ := strings.Cut(path, ".")
	if parent == "" || child == "" || strings.Contains(child, ".") {
		return ""
	}
	return fmt.Sprintf(`; to change a nested field, rebuild its parent with set, e.g. %s: '{"%s": ..., "other": %s.other}'`, parent, child, parent)
}

// exprNames returns the names of an expr.Map.
func exprNames(m expr.Map) []string {
	names := make([]string, len(m))
	for i := range m {
		names[i] = m[i].Name
	}
	return names
}
