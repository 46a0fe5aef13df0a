// Package expr owns eddy's expressions: the Expr of a pipeline file (its
// source text and position, read from YAML), its compilation with
// expr-lang/expr and eddy's builtin functions (Builtins, ParseTimestamp),
// the VM a task evaluates compiled expressions on, the record environment
// (a record's fields plus its source metadata, Meta, as _key, _headers,
// _partition, _offset and _timestamp) and the check that a result holds no
// NaN or infinite float (CheckFinite, ErrNotFinite).
//
// Pos, the position of a pipeline file that errors name as FILE:LINE:COL,
// is declared here because expressions carry theirs; package pipeline
// reports problems with it.
//
// expr imports none of eddy's other packages: pipeline imports it (the
// loader finds and compiles every Expr of a config, the runtime evaluates
// event time and keys), and so do the operators and connectors that
// evaluate expressions. It must not import pipeline, operators,
// connectors, statestore, checkpoint or cmd. Inside this package the name
// expr is eddy's; the library is imported as exprlang.
package expr
